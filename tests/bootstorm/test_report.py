"""The HTML report: self-contained (opens offline) and rendered by a real browser."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from bootstorm import simulate
from bootstorm.calibration import caveats
from bootstorm.models import Scenario
from bootstorm.report import report_html
from bootstorm.traces import read_trace, to_recording

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


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (.ci/run)")
def test_headless_chromium_renders_the_report(tmp_path: Path, fastiov_html: str) -> None:
    page = tmp_path / "report.html"
    page.write_text(fastiov_html)
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,1600",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    assert shot.stat().st_size > 20_000
    assert _png_is_not_blank(shot)


def _report_cli(source: str, tmp_path: Path) -> str:
    """``bootstorm report SOURCE`` in a child process; the page it wrote."""
    out = tmp_path / "r.html"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from bootstorm.cli import main; main()",
            "report",
            source,
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out.read_text()


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
    """``optimize`` writes ``study.log`` (a journal file) by default; ``report``
    must read it as a study, not as a scenario file."""
    from bootstorm.optimizers import StudySpec, optimize

    journal = str(tmp_path / "study.log")
    storm = Scenario(cni="ipvtap", sandboxes=30, profile="paper-000")
    optimize(StudySpec(scenario=storm, trials=3, storage=journal, study_name="s"))
    assert "History: makespan" in _report_cli(journal, tmp_path)
