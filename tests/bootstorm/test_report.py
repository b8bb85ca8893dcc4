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


def test_a_notebook_builds_the_report_the_command_writes(tmp_path: Path) -> None:
    """bootstorm.workflows.reports: what `report` writes, as typed sections a
    notebook can read, change and draw (no typer, no rich)."""
    from bootstorm.cli import main
    from bootstorm.report import ReportSections, write_report
    from bootstorm.workflows.reports import scenario_report

    scenario = Scenario(cni="ipvtap", sandboxes=12, profile="paper-000")
    built = scenario_report(scenario)
    assert isinstance(built.sections, ReportSections)
    assert built.title == "12 × ipvtap on paper-000"
    assert built.sections.result is not None and built.sections.recording is not None
    assert built.sections.sensitivity is not None  # the tornado, from the cautions' storms
    ours = write_report(tmp_path / "ours.html", title=built.title, sections=built.sections)
    main(["report", "--cni", "ipvtap", "--sandboxes", "12", "-o", str(tmp_path / "cli.html")])
    # The same sections (plotly's element ids aside).
    strip = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
    assert strip.sub("", ours.read_text()) == strip.sub("", (tmp_path / "cli.html").read_text())
    with pytest.raises(TypeError, match="sections or its fields, not both"):
        report_html(title="t", sections=built.sections, result=built.sections.result)


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
    from bootstorm.calibration.tornado import tornado

    storm = Scenario(cni="ipvtap", sandboxes=60, profile="paper-000")
    r = simulate(storm, record=True)
    page = report_html(
        title="t", recording=r.recording, result=r, sensitivity=tornado(storm, base=r)
    )
    seen = _probe(tmp_path, page)
    taken = [name for name, lock in r.locks.items() if lock.acquisitions]
    assert seen["lock_rows"] == len(taken) > 0
    assert set(seen["lock_cells"]) == set(taken)
    axes = seen["axes"]
    assert len(axes) == 5  # timeline, stage breakdown, lock waits, CPU, tornado
    assert all(len(titles) >= 2 and all(titles) for titles in axes), axes
    assert "time since the burst, s" in axes[0] and "cores" in axes[3]
    assert axes[2][0] == "time since the burst, s" and axes[2][1].startswith("tasks waiting")
    assert {"makespan, s", "p99 startup, s", "unidentified cost (its range)"} <= set(axes[4])


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


def test_the_lock_waits_over_time_add_up_to_each_lock_s_wait() -> None:
    """Issue 37: each lock's waiters over the storm, derived from the
    recorded waits; their integral is the lock's summed wait, exactly."""
    from bootstorm.report import lock_waiters, lock_waits_figure

    r = simulate(Scenario(cni="veth", sandboxes=60, profile="paper-000"), record=True)
    assert r.recording is not None
    mid, waiters = lock_waiters(r.recording, bins=200)
    slice_s = float(mid[1] - mid[0])
    assert set(waiters) == {name for name, lk in r.locks.items() if lk.wait_s > 0}
    for name, line in waiters.items():
        assert float(line.sum()) * slice_s == pytest.approx(r.locks[name].wait_s, rel=1e-9)
        assert line.max() <= r.locks[name].max_waiters + 1e-9  # a mean over each slice
    assert next(iter(waiters)) == max(waiters, key=lambda n: r.locks[n].wait_s)
    fig = lock_waits_figure(r.recording)
    assert [t.name for t in fig.data] == list(waiters)
    assert len({t.line.color for t in fig.data}) == len(fig.data)  # one colour per lock
    assert fig.layout.xaxis.title.text == "time since the burst, s"
    assert fig.layout.yaxis.title.text.startswith("tasks waiting (mean over")
    page = report_html(title="t", recording=r.recording, result=r)
    assert "<h2>Lock waits over time</h2>" in page
    assert "Lock waits over time: tasks waiting for each lock" in page


def test_a_storm_nobody_waited_in_has_no_lock_waits_figure() -> None:
    from bootstorm.report import lock_waits_figure

    r = simulate(Scenario(cni="no-network", sandboxes=1, profile="paper-000"), record=True)
    assert r.recording is not None
    assert all(lk.wait_s == 0 for lk in r.locks.values())
    assert lock_waits_figure(r.recording) is None
    assert "Lock waits over time" not in report_html(title="t", recording=r.recording, result=r)


def test_a_measured_storm_s_lock_waits_show_the_locks_waited_on_longest() -> None:
    from bootstorm.report import MAX_WAIT_LINES, lock_waits_figure

    fig = lock_waits_figure(to_recording(read_trace(TRACE)))
    assert fig.data[0].name == "rtnl"  # the kernel's longest waits in a veth storm
    assert len(fig.data) == MAX_WAIT_LINES and "more in the table" in fig.layout.title.text


def test_a_measured_storm_s_report_has_its_headline(tmp_path: Path) -> None:
    """Issue 37: a testbed run's report opens with its makespan, mean/p50/p99
    startup, sandboxes, runtime and host, as a simulated storm's does."""
    from bootstorm.validation.testbed import summarize

    summary = summarize(read_trace(TRACE))
    page = _report_cli(str(TRACE), tmp_path)
    facts = dict(re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", page))
    assert facts["makespan (last sandbox up)"] == f"{summary.makespan_s:.2f} s"
    assert facts["startup mean / p50 / p99"] == (
        f"{summary.startup_mean_s:.2f} / {summary.startup_p50_s:.2f} / "
        f"{summary.startup_p99_s:.2f} s"
    )
    assert facts["sandboxes"] == "25"
    assert facts["runtime"] == "threads (veth-peer-in-netns), VM qemu-microvm"
    assert facts["host"] == "vm: 2 CPUs, 24,105 MiB, kernel 6.18.44-fc-v595"
    assert facts["pools and limits"] == "none"
    assert "<h2>Lock waits over time</h2>" in page
    # A pooled run names its pools in the title and the headline.
    from bootstorm.report import trace_facts, trace_title

    pooled = read_trace(TRACE.with_name("testbed-veth-qemu-25-netns-pool.jsonl.gz"))
    assert trace_title(pooled) == "25 × veth-peer-in-netns (testbed), pools netns=25"
    assert ("pools and limits", "pools netns=25") in trace_facts(pooled)


def test_a_scenario_s_report_has_the_tornado_of_its_unidentified_costs(tmp_path: Path) -> None:
    """Issue 37: the report of a what-if draws each unidentified cost's two
    ends as a tornado, the longest bar on top."""
    from bootstorm.calibration.tornado import tornado
    from bootstorm.report import tornado_figure

    storm = Scenario(cni="ipvtap", sandboxes=40, profile="paper-000")
    found = tornado(storm)
    assert len(found.bars) >= 3
    swings = [found.swing_s(b) for b in found.bars]
    assert swings == sorted(swings, reverse=True)
    fig = tornado_figure(found)
    low = fig.data[0]
    assert list(low.y) == [f"{b.costs} (×/÷2)" for b in found.bars]
    assert low.base == found.makespan_s  # each bar starts at the storm as profiled
    assert [x + found.makespan_s for x in low.x] == pytest.approx(
        [b.makespan_s[0] for b in found.bars]
    )
    assert fig.layout.xaxis.title.text == "makespan, s"
    assert fig.layout.xaxis2.title.text == "p99 startup, s"
    page = _report_cli("storm-400-ipvtap", tmp_path, "--sandboxes", "40")
    assert "<h2>Sensitivity to the unidentified costs</h2>" in page
    assert found.bars[0].costs in page
    quiet = found.__class__(makespan_s=1.0, mean_s=1.0, p99_s=1.0, bars=(), error_rel=0.1)
    r = simulate(storm, record=True)
    assert "No cost the profile never identified moves" in report_html(
        title="t", recording=r.recording, result=r, sensitivity=quiet
    )


def _single_objective_study() -> object:
    import optuna

    study = optuna.create_study(direction="minimize")
    for k, (limit, value, met) in enumerate(((2, 9.0, True), (4, 8.0, False), (8, 8.5, True))):
        study.add_trial(
            optuna.trial.create_trial(
                params={"limit_AddCNI": limit},
                distributions={"limit_AddCNI": optuna.distributions.IntDistribution(1, 400)},
                value=value,
                system_attrs={"constraints": [-1.0 if met else 1.0]},
            )
        )
        assert study.trials[k].number == k
    return study


def _two_objective_study() -> object:
    """Makespan against memory: trials 0, 1 and 3 trade one for the other."""
    import optuna

    study = optuna.create_study(directions=["minimize", "minimize"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["makespan", "memory"])
    points = ((10.0, 100.0, True), (11.0, 50.0, True), (12.0, 60.0, True), (13.0, 0.0, True))
    for makespan, memory, met in (*points, (9.0, 0.0, False)):
        study.add_trial(
            optuna.trial.create_trial(
                params={"pool_netns": int(memory)},
                distributions={"pool_netns": optuna.distributions.IntDistribution(0, 400)},
                values=[makespan, memory],
                system_attrs={"constraints": [-1.0 if met else 1.0]},
            )
        )
    return study


def test_a_study_report_shows_its_best_config_and_its_front() -> None:
    """Issue 37: the best feasible trial's config (one objective) or every
    config of the Pareto front (two), each with its objectives and units."""
    from bootstorm.report import best_trials

    single = _single_objective_study()
    (best,) = best_trials(single)
    assert best.number == 2  # trial 1 is faster but broke a constraint
    page = report_html(title="study", study=single)
    assert "<h2>Best config: trial 2</h2>" in page
    assert "<th>limit AddCNI</th>" in page and "<td>8</td>" in page
    two = _two_objective_study()
    # Trial 2 is dominated by trial 1, trial 4 broke a constraint.
    assert [t.number for t in best_trials(two)] == [0, 1, 3]
    page = report_html(title="study", study=two)
    assert "<h2>Pareto front: the 3 best configs, by makespan</h2>" in page
    assert "<th>trial</th><th>makespan, s</th><th>memory, MiB</th><th>pool netns</th>" in page
    assert "<td>3</td><td>13.000</td><td>0.000</td><td>0</td>" in page
    assert "<h2>Pareto front</h2>" in page  # and Optuna's figure of it


_SWEEP_HEADER = (
    "sandboxes,cni,memory_mib,pools,seed,makespan_s,mean_s,p50_s,p99_s,busy_core_s,"
    "spin_core_s,pool_memory_mib,caveats\n"
)


def test_a_sweeps_table_is_a_report_of_its_points(tmp_path: Path) -> None:
    """``report SWEEP.csv`` (issue 37): the points drawn against the
    sandboxes, one line per CNI, the median over seeds, every point listed."""
    table = tmp_path / "sweep.csv"
    table.write_text(
        _SWEEP_HEADER
        + "50,ipvtap,512,none,0,4.0,3.5,3.49,3.96,73.9,0.01,0.0,\n"
        + "50,ipvtap,512,none,1,4.2,3.6,3.59,4.10,73.9,0.01,0.0,\n"
        + "100,ipvtap,512,none,0,7.5,6.1,6.0,7.4,147.8,0.02,0.0,\n"
        + "50,veth,512,none,0,3.26,2.62,2.60,3.14,73.2,0.13,0.0,S0-5\n"
    )
    done = _run_report(str(table), tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text()
    assert "sweep of 4 points (sweep.csv)" in page
    assert "The sweep" in page and "Every point" in page
    assert "ipvtap, 512 MiB, pools none" in page and "veth, 512 MiB, pools none" in page
    assert "<td>7.500</td>" in page  # the 100-sandbox point, listed


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("a,b\n1,2\n", "not a sweep's table (no column 'sandboxes')"),
        (_SWEEP_HEADER, "a sweep's table without a point"),
        (_SWEEP_HEADER + "50,ipvtap,512,none,0,-1,3.5,3.49,3.96,1,0,0,\n", "row 1: makespan_s"),
        # Each of these was drawn as a point.
        (_SWEEP_HEADER + "50,ipvtap,512,none,0,inf,3.5,3.49,3.96,1,0,0,\n", "makespan_s must be"),
        (_SWEEP_HEADER + "-5,ipvtap,512,none,0,4,3.5,3.49,3.96,1,0,0,\n", "sandboxes must be"),
        (_SWEEP_HEADER + "abc,ipvtap,512,none,0,4,3.5,3.49,3.96,1,0,0,\n", "sandboxes must be"),
        (_SWEEP_HEADER + "50,bogus,512,none,0,4,3.5,3.49,3.96,1,0,0,\n", "row 1: cni must be"),
        (
            _SWEEP_HEADER.rstrip("\n")
            + ",sandboxes\n50,ipvtap,512,none,0,4,3.5,3.49,3.96,1,0,0,,50\n",
            "column 'sandboxes' twice",
        ),
    ],
)
def test_a_bad_sweep_table_is_one_line_exit_2(tmp_path: Path, body: str, says: str) -> None:
    table = tmp_path / "sweep.csv"
    table.write_text(body)
    result = _run_report(str(table), tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert says in line
    assert not (tmp_path / "r.html").exists()
