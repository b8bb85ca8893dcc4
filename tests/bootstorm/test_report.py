"""The HTML report: self-contained (opens offline) and rendered by a real browser."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import pytest

from bootstorm import simulate
from bootstorm.calibration import caveats
from bootstorm.models import Scenario
from bootstorm.report import report_html
from bootstorm.traces import read_trace
from bootstorm.validation.recording import to_recording

FASTIOV_20 = Scenario(cni="fastiov", sandboxes=20, profile="paper-001")
TRACE = Path(__file__).resolve().parents[2] / "traces" / "data" / "testbed-veth-qemu-25.jsonl.gz"


@pytest.fixture(scope="module")
def fastiov_html() -> str:
    r = simulate(Scenario(cni="fastiov", sandboxes=40, profile="paper-001"), record=True)
    return report_html(title="40 × fastiov", recording=r.recording, result=r)


def test_the_report_is_self_contained(fastiov_html: str) -> None:
    # plotly.js is embedded once; nothing is fetched from the network.
    assert fastiov_html.count("plotly.js v") >= 1
    # No tag loads anything from elsewhere (plotly.js itself mentions URLs it never uses).
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", fastiov_html)
    for heading in ("Timeline", "Stage breakdown", "Locks", "CPU"):
        assert f"<h2>{heading}</h2>" in fastiov_html
    assert "vf-driver (background)" in fastiov_html  # FastIOV's NIC comes up in a branch
    assert "(40 locks)" in fastiov_html  # one row for the per-VF mutexes


def test_a_measured_storm_reports_its_kernel_waits() -> None:
    page = report_html(title="measured", recording=to_recording(read_trace(TRACE)))
    assert "longest wait s" in page and "rtnl" in page
    assert "<h2>CPU</h2>" not in page  # the testbed records no CPU timeline


def test_the_report_lists_the_known_misses_it_is_given(fastiov_html: str) -> None:
    r = simulate(FASTIOV_20, record=True)
    page = report_html(title="t", recording=r.recording, result=r, caveats=caveats(FASTIOV_20))
    assert "<h2>Caution: the papers measured otherwise</h2>" in page
    assert "<b>S1-4</b>: p99 startup over no-network" in page
    assert "Caution" not in fastiov_html  # none given, none shown


def test_a_report_needs_something_to_report() -> None:
    with pytest.raises(ValueError, match="needs a recorded storm, a study, candidates"):
        report_html(title="nothing")


def _png_is_not_blank(path: Path) -> bool:
    """Whether the PNG has more than one colour (decoded with zlib, no imaging library)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width = struct.unpack(">I", body[:4])[0]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = 1 + 4 * width  # RGBA rows with a filter byte
    rows = {raw[i + 1 : i + stride] for i in range(0, min(len(raw), stride * 400), stride)}
    return len(rows) > 10


# Run in the page once Plotly has drawn: what a reader sees, as data. The
# rows of the locks table that take room on the page, and each figure's
# axis titles as Plotly drew them (SVG text, not the figure's JSON).
_PROBE = """
<script>
window.addEventListener("load", () => setTimeout(() => {
  const table = document.querySelector("table.locks");
  const rows = table ? [...table.querySelectorAll("tbody tr")] : [];
  const probe = {
    lock_rows: rows.filter((r) => r.getBoundingClientRect().height >= 10).length,
    lock_cells: rows.map((r) => r.cells[0].textContent),
    axes: [...document.querySelectorAll(".plotly-graph-div")].map((div) =>
      [...div.querySelectorAll(".xtitle, .ytitle, .x2title, .y2title")].map((t) => t.textContent)
    ),
  };
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(probe);
  document.body.appendChild(out);
}, 200));
</script>
"""


def _chromium(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,1600",
            "--virtual-time-budget=20000",
            *args,
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _probe(tmp_path: Path, page_html: str) -> dict:  # type: ignore[type-arg]
    """The page as headless Chromium draws it (:data:`_PROBE`)."""
    page = tmp_path / "probed.html"
    page.write_text(page_html.replace("</body>", _PROBE + "</body>"))
    dom = _chromium(page, "--dump-dom").stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found is not None, "the page's scripts did not run"
    return json.loads(html.unescape(found.group(1)))  # type: ignore[no-any-return]


needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium (.ci/run)"
)


@pytest.mark.slow
@needs_chromium
def test_headless_chromium_renders_the_report(tmp_path: Path, fastiov_html: str) -> None:
    page = tmp_path / "report.html"
    page.write_text(fastiov_html)
    shot = tmp_path / "report.png"
    _chromium(page, f"--screenshot={shot}")
    assert shot.stat().st_size > 20_000
    assert _png_is_not_blank(shot)


@pytest.mark.slow
@needs_chromium
def test_chromium_shows_every_lock_row_and_every_axis_title(tmp_path: Path) -> None:
    """The locks table once rendered empty (a 210-px Plotly box with no room
    for rows); every figure's axes are labelled, with their units."""
    storm = Scenario(cni="ipvtap", sandboxes=60, profile="paper-000")
    r = simulate(storm, record=True)
    seen = _probe(tmp_path, report_html(title="t", recording=r.recording, result=r))
    taken = [name for name, lock in r.locks.items() if lock.acquisitions]
    assert seen["lock_rows"] == len(taken) > 0
    assert set(seen["lock_cells"]) == set(taken)
    axes = seen["axes"]
    assert len(axes) == 3  # timeline, stage breakdown, CPU
    assert all(len(titles) >= 2 and all(titles) for titles in axes), axes
    assert "time since the burst, s" in axes[0] and "cores" in axes[2]


def _study_with_a_bad_trial() -> object:
    """Two objectives, nine trials near 10 s and one at 800 s (a limit of 1)."""
    import optuna

    study = optuna.create_study(directions=["minimize", "minimize"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["makespan", "memory"])
    for k in range(10):
        bad = k == 7
        study.add_trial(
            optuna.trial.create_trial(
                params={"limit_Cgroup": 1 if bad else 10 + k, "pool_netns": 40 * k},
                distributions={
                    "limit_Cgroup": optuna.distributions.IntDistribution(1, 400, log=True),
                    "pool_netns": optuna.distributions.IntDistribution(0, 400),
                },
                values=[800.0 if bad else 10.0 + 0.1 * k, 19.0 * k],
            )
        )
    return study


def test_a_bad_trial_does_not_flatten_the_study_plots() -> None:
    from bootstorm.report import study_figures

    figures = study_figures(_study_with_a_bad_trial())
    front, history = figures[0], figures[1]
    for fig in (front, history):
        low, high = fig.layout.yaxis.range if fig is history else fig.layout.xaxis.range
        assert low < 10.0 and 10.9 < high < 100.0  # the good trials fill the plot
        assert "1 trial off the chart" in fig.layout.title.text


@pytest.mark.slow
@needs_chromium
def test_chromium_labels_the_study_axes_with_units(tmp_path: Path) -> None:
    seen = _probe(tmp_path, report_html(title="study", study=_study_with_a_bad_trial()))
    front, makespan, memory = seen["axes"][:3]
    assert front == ["makespan, s", "memory, MiB"]
    assert makespan == ["trial number", "makespan, s"]
    assert memory == ["trial number", "memory, MiB"]


def test_stage_shares_and_waits_at_limits_add_up_to_the_startup() -> None:
    """With per-stage limits, the shares once added up to 78% of the mean:
    the waits at the limits were in no row."""
    from bootstorm.report import LIMIT_WAIT_LABEL, breakdown_figure

    storm = Scenario(cni="ipvtap", sandboxes=80, profile="paper-000", limits={"AddCNI": 4})
    r = simulate(storm, record=True)
    bars = breakdown_figure(r.recording, r).data[0]
    assert LIMIT_WAIT_LABEL in bars.x
    shares = [float(t.split("%")[0]) / 100 for t in bars.text if t]
    tails = [float(t.split(", ")[1].split("%")[0]) / 100 for t in bars.text if t]
    assert sum(shares) == pytest.approx(1.0, abs=0.002)
    assert sum(tails) == pytest.approx(1.0, abs=0.002)
    waited = sum(g.wait_s for g in r.gates.values()) / r.n_sandboxes
    assert bars.y[list(bars.x).index(LIMIT_WAIT_LABEL)] == pytest.approx(waited)


def _run_report(source: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``bootstorm report SOURCE -o r.html ARGS`` in a child process."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from bootstorm.cli import main; main()",
            "report",
            source,
            "-o",
            str(tmp_path / "r.html"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _report_cli(source: str, tmp_path: Path, *args: str) -> str:
    """``bootstorm report SOURCE`` in a child process; the page it wrote."""
    done = _run_report(source, tmp_path, *args)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "r.html").read_text()


def test_cli_writes_a_report(tmp_path: Path) -> None:
    assert _report_cli(str(TRACE), tmp_path).startswith("<!DOCTYPE html>")


def test_a_study_report_has_the_front_histories_and_importances() -> None:
    from bootstorm.models import load_profile
    from bootstorm.optimizers import SearchSpace, StudySpec, optimize

    storm = Scenario(cni="ipvtap", sandboxes=60, profile="paper-000")
    space = SearchSpace.default(
        cni="ipvtap",
        sandboxes=60,
        profile=load_profile("paper-000"),
        pool_kinds_searched=("netns",),
    )
    spec = StudySpec(
        scenario=storm, space=space, objectives=("makespan", "memory"), trials=8, storage=None
    )
    result = optimize(spec)
    page = report_html(title="study", study=result.study)
    for heading in ("Pareto front", "History: makespan", "History: memory"):
        assert f"<h2>{heading}</h2>" in page


def test_a_study_report_from_the_cli_names_the_known_misses(tmp_path: Path) -> None:
    """Limits searched on a storm that still makes devices rest on S0-8."""
    from bootstorm.optimizers import StudySpec, optimize, searched_scenario

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    storm = Scenario(cni="ipvtap", sandboxes=30, profile="paper-000")
    result = optimize(StudySpec(scenario=storm, trials=4, storage=storage, study_name="s"))
    assert result.study is not None
    searched = searched_scenario(result.study)
    assert searched is not None and searched.limits == result.best[0].config.limits
    assert "<b>S0-8</b>: per-stage limits" in _report_cli(storage, tmp_path)


def test_a_study_report_reads_optimizes_default_journal_file(tmp_path: Path) -> None:
    """``optimize`` keeps its studies in one journal file by default
    (``studies.log``); ``report`` must read it as a study, not as a scenario
    file, and, when it holds several, name them rather than guess."""
    from bootstorm.optimizers import StudySpec, optimize

    journal = str(tmp_path / "studies.log")
    storm = Scenario(cni="ipvtap", sandboxes=30, profile="paper-000")
    optimize(StudySpec(scenario=storm, trials=3, storage=journal, study_name="s"))
    assert "History: makespan" in _report_cli(journal, tmp_path)
    optimize(StudySpec(scenario=storm, trials=2, storage=journal, study_name="t"))
    which = _run_report(journal, tmp_path)
    assert which.returncode == 2
    assert which.stderr.strip() == (
        f"error: study_name: {journal} holds 2 studies; name one with --study-name (s, t)"
    )
    assert "History: makespan" in _report_cli(journal, tmp_path, "--study-name", "t")


def test_a_report_compares_scenarios_and_a_config_before_and_after(tmp_path: Path) -> None:
    """Several scenarios (installed examples here) side by side, the change
    of each against the first and their stages stacked; one scenario and
    --config: before and after. The report showed one storm only."""
    page = _report_cli("storm-400-ipvtap", tmp_path, "storm-400-ipvtap-tuned", "--sandboxes", "40")
    assert "What-ifs compared (change against the first)" in page
    # The tuned one's pools and limits are in its line, and it is faster.
    assert "40 × ipvtap on paper-000, pools ipvtap=400 netns=400 vport=1, limits AddCNI=2" in page
    assert "Mean startup by stage" in page
    config = tmp_path / "tuned.yaml"
    config.write_text("limits:\n  AddCNI: 2\n")
    page = _report_cli("storm-400-ipvtap", tmp_path, "--sandboxes", "40", "--config", str(config))
    assert "<td>before</td>" in page and "<td>after tuned</td>" in page
    refused = _run_report(str(TRACE), tmp_path, "storm-400-ipvtap")
    assert refused.returncode == 2 and "several sources" in refused.stderr


def test_a_stage_has_one_colour_in_every_figure() -> None:
    """Coloured by position, a stage changed colour when another dropped out
    (a pooled storm has no NetNS): now by name, the same in every figure."""
    from bootstorm.report import stage_colour, stage_comparison_figure, timeline_figure

    plain = simulate(Scenario(cni="ipvtap", sandboxes=10), record=True)
    pooled = simulate(
        Scenario(cni="ipvtap", sandboxes=10, pools={"netns": 10, "ipvtap": 10, "vport": 1}),
        record=True,
    )
    for result in (plain, pooled):
        assert result.recording is not None
        for bar in timeline_figure(result.recording).data:
            assert bar.marker.color == stage_colour(bar.name)
    for bar in stage_comparison_figure({"plain": plain, "pooled": pooled}).data:
        assert bar.marker.color == stage_colour(bar.name)
    assert len({stage_colour(s) for s in ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")}) == 5
