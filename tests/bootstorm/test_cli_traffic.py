"""``simulate --workload`` and ``optimize --workload``: the traffic question
from the command line, its tables at 80 columns, its JSON and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_main

from bootstorm.models import TunedConfig

run = run_main


@pytest.fixture
def workload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Five minutes of the seeded MMPP (845 starts; a burst that takes the p99
    startup from about 2.4 s to 8 s without pools, 3.5 s with full ones)."""
    path = tmp_path / "w.csv"
    code, _, err = run(["workload", "--duration", "5min", "--seed", "1", "-o", str(path)], capsys)
    assert code == 0, err
    return path


def test_simulate_workload_tables_fit_80_columns(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        ["simulate", "--workload", str(workload), "--pool", "netns=4", "--pool", "ipvtap=4",
         "--refill-workers", "2"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    for heading in ("p99 per 60-s window", "starts that found a pool empty", "refills", "MiB·h"):
        assert heading in out
    assert "…" not in out  # no cell cut


def test_simulate_workload_json_has_every_window(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        ["simulate", "--workload", str(workload), "--pool", "netns=3", "--window-s", "30",
         "--follow-window-s", "20", "--follow-cover-s", "5", "--json"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    record = json.loads(out)
    assert record["scenario"]["pool_refill"]["follow_rate"]["cover_s"] == 5.0
    assert record["scenario"]["pool_refill"]["concurrency"] == 1  # the default with --follow-*
    assert len(record["windows"]) == 10
    assert sum(w["starts"] for w in record["windows"]) == record["starts"]
    assert record["pools"]["netns"]["made"] > 0
    assert record["memory"]["mib_h"] >= 0.0


def test_without_refill_options_the_pools_are_made_before(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        ["simulate", "--workload", str(workload), "--pool", "netns=3", "--json"], capsys
    )
    assert code == 0, err
    record = json.loads(out)
    assert record["pools"]["netns"]["made"] == 0
    assert record["scenario"]["pool_refill"] is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sandboxes", "7"], "sandboxes: 7 given with a workload"),
        (["--window-s", "0"], "window-s: must be a number in"),
        (["--refill-workers", "0"], "refill-workers: must be in 1..64 (got 0)"),
        (["--follow-cover-s", "-1"], "follow-cover-s: must be a number in 0..3600 (got -1"),
        (["--follow-window-s", "nan"], "follow-window-s: must be a number"),
        (["--trace", "t.json"], "trace: not with --workload"),
    ],
)
def test_simulate_workload_bad_options_are_one_line(
    workload: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code, _, err = run(["simulate", "--workload", str(workload), *extra], capsys)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_simulate_workload_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.csv"
    code, _, err = run(["simulate", "--workload", str(missing)], capsys)
    assert code == 2 and "workload:" in err and len(err.strip().splitlines()) == 1
    not_one = tmp_path / "x.csv"
    not_one.write_text("a,b\n1,2\n")
    code, _, err = run(["simulate", "--workload", str(not_one)], capsys)
    assert code == 2 and "workload:" in err and len(err.strip().splitlines()) == 1


def test_optimize_workload_writes_a_refilling_config(
    workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "tuned.yaml"
    code, out, err = run(
        ["optimize", "--workload", str(workload), "--slo-p99", "5s", "--trials", "24",
         "--storage", "memory", "--output", str(out_file)],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    config = TunedConfig.from_yaml(out_file)
    assert config.origin is not None and config.origin.predicted["p99_s"] <= 5.0
    assert config.pool_refill is not None if config.pools else config.limits
    assert "Pareto front" in out and "memory held (mean)" in out


def test_optimize_workload_refuses_sizes(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["optimize", "--workload", str(workload), "--sizes", "10,20", "--storage", "memory"],
        capsys,
    )
    assert code == 2 and "sizes: not with --workload" in err


def test_report_draws_the_traffic_of_a_workload_and_of_a_study_on_one(
    workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "traffic.html"
    code, _, err = run(["report", "--workload", str(workload), "-o", str(page)], capsys)
    assert code == 0, err
    text = page.read_text()
    assert "<h2>Traffic</h2>" in text and "ready devices" in text
    journal = tmp_path / "studies.log"
    code, _, err = run(
        ["optimize", "--workload", str(workload), "--slo-p99", "30s", "--trials", "8",
         "--storage", str(journal), "--study-name", "w", "--output", str(tmp_path / "t.yaml")],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    study_page = tmp_path / "study.html"
    code, _, err = run(["report", str(journal), "--study-name", "w", "-o", str(study_page)], capsys)
    assert code == 0, err
    text = study_page.read_text()
    assert "<h2>Traffic</h2>" in text and "<h2>Pareto front</h2>" in text
    assert "least memory that is feasible" in text


def test_report_workload_refuses_a_study_source(
    workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        [
            "report",
            str(tmp_path / "s.log"),
            "--workload",
            str(workload),
            "-o",
            str(tmp_path / "r.html"),
        ],
        capsys,
    )
    assert code == 2 and "workload: for a scenario only" in err
