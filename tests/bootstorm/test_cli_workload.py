"""``bootstorm workload``: the command, its file and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_main

from bootstorm.traces.workload import AZURE_2019_INVOCATION_COLUMNS, read_workload

run = run_main


def write_2019(path: Path) -> Path:
    minutes = ["0"] * 1440
    minutes[0], minutes[30], minutes[60] = "2", "1", "3"
    path.write_text(
        ",".join(AZURE_2019_INVOCATION_COLUMNS)
        + "\n"
        + ",".join(["o" * 64, "a" * 64, "f" * 64, "http", *minutes])
        + "\n"
    )
    return path


def test_azure_2019_fixed_policy_json_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_2019(tmp_path / "invocations_per_function_md.anon.d01.csv")
    out_file = tmp_path / "w.csv"
    code, out, err = run(
        [
            "workload",
            str(trace),
            "--policy",
            "fixed",
            "--keep-alive",
            "10min",
            "--window",
            "0:2h",
            "--compress",
            "2",
            "-o",
            str(out_file),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    record = json.loads(out)
    # minute 1 (2 invocations) cold then warm; minute 31 and 61: 30 min later, cold.
    assert record["invocations"] == 6 and record["starts"] == 3
    w = read_workload(out_file)
    assert len(w) == 3 and w.parameters["compress"] == 2.0
    assert w.starts[-1] < 3600


def test_mmpp_table_fits_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["workload", "--duration", "10min", "--seed", "3"], capsys)
    assert code == 0, err
    assert "starts in the peak second" in out
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--compress", "0.5"], "compress: must be in 1..1e+06 (got 0.5)"),
        (["--node-share", "0"], "node_share: must be a fraction in (0, 1] (got 0.0)"),
        (["--window", "2h:1h"], "window: must end after it starts"),
        (["--window", "2h:3h", "--duration", "1h"], "window: starts past the trace's end"),
        (["--policy", "lru"], "policy: must be one of none, fixed, hybrid (got 'lru')"),
        (["--keep-alive", "soon"], "keep_alive: expected a duration"),
    ],
)
def test_bad_options_are_one_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["workload", *argv], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err


def test_bad_trace_is_one_line_naming_file_field_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "times.csv"
    trace.write_text("start_s\n5\n3\n")
    code, _, err = run(["workload", str(trace)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert str(trace) in err and "start_s" in err and "(got 3.0)" in err


def test_a_workload_with_no_start_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header-only trace made a file of no start, which every command
    that reads a workload then refused: it is refused here, nothing written."""
    trace = tmp_path / "times.csv"
    trace.write_text("start_s\n")
    out = tmp_path / "w.csv"
    code, _, err = run(["workload", str(trace), "-o", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "output: not written: no sandbox start on this node" in err
    assert not out.exists()


def test_a_keep_alive_without_a_policy_that_keeps_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "times.csv"
    trace.write_text("start_s\n1\n2\n")
    code, _, err = run(["workload", str(trace), "--keep-alive", "10min"], capsys)
    assert code == 2 and "keep_alive: goes with --policy fixed or hybrid" in err


def test_the_output_is_neither_an_input_nor_another_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-o`` onto the trace replaced the trace with its own starts; ``-o
    w.parquet`` wrote CSV text under that name."""
    trace = tmp_path / "times.csv"
    trace.write_text("start_s\n1\n2\n")
    code, _, err = run(["workload", str(trace), "-o", str(trace)], capsys)
    assert code == 2 and "is also the trace read; write elsewhere" in err
    assert trace.read_text() == "start_s\n1\n2\n"
    code, _, err = run(["workload", str(trace), "-o", str(tmp_path / "w.parquet")], capsys)
    assert code == 2 and "output: a workload file is CSV text: name it .csv" in err


def test_a_report_or_chrome_trace_is_not_written_over_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    trace = tmp_path / "t.jsonl.gz"
    shutil.copy(
        Path(__file__).resolve().parents[2] / "traces/data/testbed-veth-qemu-25.jsonl.gz", trace
    )
    before = trace.read_bytes()
    for argv in (
        ["testbed", "chrome", str(trace), "-o", str(trace)],
        ["report", str(trace), "-o", str(trace)],
    ):
        code, _, err = run(argv, capsys)
        assert code == 2 and "is also the" in err and err.count("\n") == 1
    assert trace.read_bytes() == before
