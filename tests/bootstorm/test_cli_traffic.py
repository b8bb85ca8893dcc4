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
    # On a schedule the span is the schedule's, and no decision flips on its noise.
    assert "last start up" in out and "makespan" not in out.split("before / after")[1][:400]
    assert "but -0.0% with" not in out and "but +0.0% with" not in out


def test_optimize_workload_refuses_sizes(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["optimize", "--workload", str(workload), "--sandboxes", "10,20", "--storage", "memory"],
        capsys,
    )
    assert code == 2 and "sandboxes: one size with --workload" in err


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


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "slo-p99: --workload needs the p99 startup to meet"),
        (["--slo-p99", "0"], "slo_p99"),
        (["--slo-p99", "fast"], "slo_p99"),
        (["--slo-p99", "2s", "--sandboxes", "7"], "sandboxes: 7 given with --workload"),
        (["--slo-p99", "2s", "--lifetime-s", "-1"], "lifetime_s"),
        (["--slo-p99", "2s", "--window-s", "0"], "window_s"),
        (["--slo-p99", "2s", "--trials", "0"], "trials"),
    ],
)
def test_tune_workload_bad_options_are_one_line_before_any_storm(
    workload: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    """Refused before the node is calibrated (the first real storm), as root or not."""
    code, _, err = run(["tune", "--workload", str(workload), *extra], capsys)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--slo-p99", "2s"], "slo-p99: goes with --workload"),
        (["--window-s", "5"], "window-s: goes with --workload"),
        (["--lifetime-s", "5"], "lifetime-s: goes with --workload"),
    ],
)
def test_tune_traffic_options_without_a_workload_are_refused(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code, _, err = run(["tune", *extra], capsys)
    assert code == 2 and message in err


def test_tune_workload_table_reads_whole_at_80_columns() -> None:
    """Every config's predicted and measured figures, no cell cut."""
    import io

    from rich.console import Console

    from bootstorm._render_node import traffic_tune_table
    from bootstorm.models import PoolRefill
    from bootstorm.workflows import TrafficRow, TrafficTuneOutcome
    from bootstorm.workflows.tuning_traffic import TrafficFigures

    def figures(p99: float, mib: float | None) -> TrafficFigures:
        return TrafficFigures(p99_s=p99, p99_window_median_s=p99, empty_starts=12, memory_mib=mib)

    config = TunedConfig(
        pools={"netns": 17, "netns-veth": 23},
        limits={"AddCNI": 3, "AttachIf": 2},
        pool_refill=PoolRefill(concurrency=4),
    )
    rows = tuple(
        TrafficRow(
            name=name,
            config=c,
            predicted=figures(1.234, 10.5),
            measured=figures(12.345, None if c is None else 123.4),
            run_p99_s=(1.0, 2.0, 3.0),
            slo_p99_s=2.5,
        )
        for name, c in (("baseline", None), ("peak-burst", config), ("candidate-1", config))
    )
    outcome = TrafficTuneOutcome(
        rows=rows,
        chosen="candidate-1",
        why="",
        slo_p99_s=2.5,
        rounds=3,
        profile=None,  # type: ignore[arg-type]
    )
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(traffic_tune_table(outcome))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for cell in ("1.234 / 12.345", "10.5 / 123.4", "10.5 / —", "2 of 3", "netns-veth=23"):
        assert cell in text, text


CNI_PROFILE = (
    Path(__file__).resolve().parents[2] / "traces" / "data" / "cni" / "plan" / "local.yaml"
)


def test_simulate_stops_each_vm_a_lifetime_after_it_came_up(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The testbed's catalog on a workload with ``--lifetime-s``: the row says
    the VMs stop, the JSON's scenario carries it, and a profile fitted before
    the testbed timed its stops says the stops cost only their RTNL hold."""
    argv = ["simulate", "--workload", str(workload), "--cni", "testbed-cni-bridge",
            "--profile", str(CNI_PROFILE), "--lifetime-s", "5"]  # fmt: skip
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "VMs stopped" in out and "5 s after each came up" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    record = json.loads(out)
    assert record["scenario"]["lifetime_s"] == 5.0
    assert any("no measured stop" in c for c in record["cautions"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--lifetime-s", "5"], "lifetime_s: only the testbed's catalog (testbed-*)"),
        (["--cni", "testbed-cni-bridge", "--lifetime-s", "-1"], "lifetime-s: must be a number"),
    ],
)
def test_a_lifetime_the_model_has_no_stop_for_is_one_line(
    workload: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code, _, err = run(["simulate", "--workload", str(workload), *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    code, _, err = run(
        ["optimize", "--workload", str(workload), "--storage", "memory", *extra], capsys
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_optimize_on_a_node_profile_says_how_far_the_tail_was_held_out(
    workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The search's answer on the testbed's catalog is a traffic what-if too:
    it prints the held-out tail's caution that ``simulate --workload`` prints
    (before, only ``simulate`` did, and a planner who searched saw none)."""
    from bootstorm.models import Profile
    from bootstorm.models.testbed import TRAFFIC_TAIL_CAUTION, TRAFFIC_TAIL_CAUTION_SLICED

    argv = ["optimize", "--workload", str(workload), "--slo-p99", "60s", "--trials", "4",
            "--cni", "testbed-cni-bridge", "--profile", str(CNI_PROFILE), "--lifetime-s", "5",
            "--storage", "memory", "--output", str(tmp_path / "tuned.yaml")]  # fmt: skip
    code, out, err = run(argv, capsys)
    assert code == 0, err
    testbed = Profile.from_yaml(CNI_PROFILE).testbed
    assert testbed is not None
    sliced = testbed.kernel_holders_pinned is False
    tail = TRAFFIC_TAIL_CAUTION_SLICED if sliced else TRAFFIC_TAIL_CAUTION
    flat = " ".join(out.split())
    assert f"caution: {tail}" in flat
    assert flat.count("read the tail as a lower bound") == 1


def test_simulate_window_without_a_workload_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """It was read and ignored: a storm released at once has no windows."""
    code, _, err = run(["simulate", "--window-s", "5"], capsys)
    assert (
        code == 2
        and err
        == "error: window-s: goes with --workload (a storm at once has no windows), but got 5\n"
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["optimize", "--slo-p99", "99999999999h"],
            "p99_slo_s: must be a finite number > 0 and <= 86400 s",
        ),
        (
            ["optimize", "--memory-budget", "99999999999999TiB"],
            "memory_budget_mib: must be a finite number > 0 and <= ",
        ),
    ],
)
def test_a_goal_no_node_reaches_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """A unit typed wrong (5h for 5s) constrained nothing and passed as met."""
    code, _, err = run([*argv, "--trials", "2", "--storage", "memory"], capsys)
    assert code == 2 and needle in err and err.count("\n") == 1
