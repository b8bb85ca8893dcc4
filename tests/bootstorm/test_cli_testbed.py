"""``bootstorm testbed run --workload``: its refusals, and what it hands the storm.

No storm runs here: ``run_storm`` is replaced by a stub that records the
options it was given and returns a made-up trace of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_runner import run_main

from bootstorm.traces import (
    Arrival,
    PoolTake,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceHeader,
    VmStops,
)
from bootstorm.traces.workload import Workload, format_workload

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")


run = run_main


def write_workload(path: Path, starts: list[float]) -> Path:
    workload = Workload(
        starts=np.asarray(starts, dtype=np.float64),
        function=np.zeros(len(starts), dtype=np.int32),
        functions=("f",) if starts else (),
        source="test",
        duration_s=max(starts, default=0.0),
    )
    path.write_text(format_workload(workload))
    return path


@pytest.fixture
def storms(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The options each storm was asked for; each storm a made-up success,
    its sandbox 1 finding the netns pool empty."""
    import bootstorm.validation.testbed
    from bootstorm.validation.testbed import StormResult

    asked: list[Any] = []

    def fake_run_storm(options: Any, *, admission: Any = None) -> StormResult:
        asked.append(options)
        origin = 500.0
        times = options.arrival_s or (0.0,) * options.sandboxes
        spans = [
            StageSpan(
                sandbox=i, stage=s, start_s=origin + t + j * 0.1, end_s=origin + t + (j + 1) * 0.1
            )
            for i, t in enumerate(times)
            for j, s in enumerate(STAGES)
        ]
        trace = Trace(
            header=TraceHeader(
                source="testbed",
                origin_s=origin,
                scenario=ScenarioFacts(sandboxes=options.sandboxes, cni=options.variant),
                notes=("scheduled starts: a note",),
                busy_core_s=0.4 * options.sandboxes,
                vm_stops=VmStops(vms=2, busy_core_s=0.011, wall_s=0.066),
            ),
            spans=tuple(spans),
            arrivals=tuple(Arrival(sandbox=i, t_s=origin + t) for i, t in enumerate(times)),
            pool_takes=(PoolTake(sandbox=1, kind="netns", t_s=origin + times[1], taken=False),),
        )
        return StormResult(trace=trace, failures=(), run="ab12")

    monkeypatch.setattr(bootstorm.validation.testbed, "run_storm", fake_run_storm)
    return asked


def test_a_workload_sets_the_sandboxes_their_arrivals_and_the_lifetime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], storms: list[Any]
) -> None:
    path = write_workload(tmp_path / "node.csv", [0.0, 0.5, 0.5, 2.25])
    code, out, err = run(
        ["testbed", "run", "--runtime", "threads", "--workload", str(path), "--lifetime-s", "30"],
        capsys,
    )
    assert code == 0, err
    (options,) = storms
    assert options.sandboxes == 4
    assert options.arrival_s == (0.0, 0.5, 0.5, 2.25) and options.lifetime_s == 30.0
    assert "schedule span" in out and "2.250 s" in out
    assert "empty-pool starts" in out and "1 / 4" in out
    assert "note: scheduled starts: a note" in out
    assert "host CPU per start" in out and "400.0 ms" in out
    # The stops timed after the storm: CPU and wall time each, how many.
    assert "VM stop, timed after" in out and "5.5 ms CPU, 33.0 ms each (2)" in out


def test_sandboxes_equal_to_the_workloads_starts_is_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], storms: list[Any]
) -> None:
    path = write_workload(tmp_path / "node.csv", [0.0, 1.0, 2.0])
    code, out, _ = run(
        ["testbed", "run", "--sandboxes", "3", "--workload", str(path), "--json"], capsys
    )
    assert code == 0 and storms[0].sandboxes == 3
    record = json.loads(out)
    assert record["schedule_span_s"] == 2.0 and record["empty_pool_starts"] == 1


def test_without_a_workload_the_storm_starts_at_once(
    capsys: pytest.CaptureFixture[str], storms: list[Any]
) -> None:
    assert run(["testbed", "run", "--runtime", "threads"], capsys)[0] == 0
    assert run(["testbed", "run", "--sandboxes", "3", "--lifetime-s", "0"], capsys)[0] == 0
    assert [(o.sandboxes, o.arrival_s, o.lifetime_s) for o in storms] == [
        (8, None, None),
        (3, None, 0.0),
    ]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, _, err = run(["testbed", "run", *argv], capsys)
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0].removeprefix("error: ")


def test_bad_workloads_are_refused_in_one_line_before_any_storm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], storms: list[Any]
) -> None:
    missing = tmp_path / "missing.csv"
    assert _refused(["--workload", str(missing)], capsys).startswith(
        f"workload: {missing}: cannot read"
    )
    assert _refused(["--workload", str(tmp_path)], capsys).startswith(
        f"workload: {tmp_path}: a directory"
    )
    plain = tmp_path / "plain.csv"
    plain.write_text("start_s\n0.0\n1.0\n")  # start times, but not a workload file
    assert _refused(["--workload", str(plain)], capsys) == (
        f"workload: {plain}: line 1: format: must be '# bootstorm workload 1' (got another line)"
    )
    empty = write_workload(tmp_path / "empty.csv", [])
    assert _refused(["--workload", str(empty)], capsys) == (
        f"workload: {empty}: holds no sandbox start"
    )
    many = write_workload(tmp_path / "many.csv", [i * 0.001 for i in range(10_000)])
    assert _refused(["--workload", str(many)], capsys) == (
        f"workload: {many}: holds 10,000 starts, more than the 9,999 sandboxes a storm starts"
    )
    late = write_workload(tmp_path / "late.csv", [0.0, 1e9])
    # Past the trace clock the readers take (the simulator's own 115 days).
    assert _refused(["--workload", str(late)], capsys) == (
        f"workload: {late}: line 2: duration_s: must be within 0..1e+07 s (got 1000000000.0)"
    )
    assert storms == []


def test_sandboxes_that_disagree_with_the_workload_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], storms: list[Any]
) -> None:
    path = write_workload(tmp_path / "node.csv", [0.0, 1.0, 2.0])
    assert _refused(["--sandboxes", "5", "--workload", str(path)], capsys) == (
        "sandboxes: must be left out or equal the workload's 3 starts (got 5)"
    )
    assert storms == []


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e308"])
def test_a_bad_lifetime_is_refused_in_one_line(
    value: str, capsys: pytest.CaptureFixture[str], storms: list[Any]
) -> None:
    assert _refused(["--lifetime-s", value], capsys).startswith(
        "lifetime_s: must be a number in 0..3.16224e+07"
    )
    assert storms == []


def test_the_help_names_the_new_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["testbed", "run", "--help"], capsys)
    assert code == 0
    assert "--workload" in out and "--lifetime-s" in out


def test_an_agents_admission_says_the_level_of_this_threads_last_take() -> None:
    """``--agent``: the client's level of the take just made (per thread) is
    the take's; another kind's, none, or a pool kept at nothing is not."""
    from types import SimpleNamespace

    from bootstorm.validation.agent import AgentAdmission
    from bootstorm.validation.testbed.admission import (
        PoolLevel,
        PoolLevels,
        level_after_take,
    )

    client = SimpleNamespace(last_pool_level=None)
    admission = AgentAdmission(client)  # type: ignore[arg-type]
    assert isinstance(admission, PoolLevels)
    assert level_after_take(admission, "netns", "r/0") == PoolLevel()  # an old agent
    client.last_pool_level = SimpleNamespace(kind="netns", ready=3, target=8)
    assert level_after_take(admission, "netns", "r/0") == PoolLevel(ready=3, target=8)
    assert level_after_take(admission, "tap", "r/0") == PoolLevel()  # not this take's
    client.last_pool_level = SimpleNamespace(kind="veth", ready=0, target=0)
    assert level_after_take(admission, "veth", "r/0") is None  # no pool: not recorded


@pytest.mark.parametrize("command", [["testbed", "run"], ["validate"]])
def test_the_cni_wrapper_needs_an_agent_and_a_known_name(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """bootstorm-cni takes AddCNI's permit from a node agent: without one, or
    with a name it is not, one line before any storm (both commands)."""
    code, _, err = run([*command, "--runtime", "cni", "--cni-wrapper", "bootstorm-cni"], capsys)
    assert code == 2
    assert err.strip() == (
        "error: cni_wrapper: 'bootstorm-cni' takes AddCNI's permit from a node agent: "
        "give one with --agent URL"
    )
    code, _, err = run([*command, "--cni-wrapper", "cni-shim"], capsys)
    assert code == 2
    assert "cni_wrapper" in err and "'cni-shim'" in err and len(err.strip().splitlines()) == 1


def test_measure_ops_defaults_are_the_testbeds_own() -> None:
    """The command keeps its imports lazy, so its defaults are literals: each
    must be the testbed's constant, or `measure-ops` and the plan's own
    measurement (which takes the constants) would time different things."""
    import inspect

    from bootstorm._cli_testbed import measure_ops_cmd
    from bootstorm.validation.testbed import hold_stretch, ops

    defaults = {
        name: p.default for name, p in inspect.signature(measure_ops_cmd).parameters.items()
    }
    assert {k: defaults[k] for k in _MEASURE_OPS_CONSTANTS} == {
        k: getattr(hold_stretch if k == "stretch_rounds" else ops, constant)
        for k, constant in _MEASURE_OPS_CONSTANTS.items()
    }


_MEASURE_OPS_CONSTANTS = {
    "repeats": "DEFAULT_REPEATS",
    "warmup": "DEFAULT_WARMUP",
    "settle_s": "SETTLE_MAX_S",
    "pool_devices": "POOL_MEMORY_DEVICES",
    "pool_rounds": "POOL_MEMORY_ROUNDS",
    "flood_links": "FLOOD_NEW_LINKS",
    "stretch_rounds": "STRETCH_ROUNDS",
}
