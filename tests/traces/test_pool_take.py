"""The ``pool_take`` record: round trips, old files, refusals naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bootstorm.traces import (
    Arrival,
    PoolTake,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceFormatError,
    TraceHeader,
    read_trace,
    write_trace,
)

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"


def _trace() -> Trace:
    header = TraceHeader(
        source="testbed",
        origin_s=50.0,
        scenario=ScenarioFacts(sandboxes=3, cni="veth-peer-in-netns", pools={"netns": 2}),
    )
    return Trace(
        header=header,
        spans=(StageSpan(sandbox=0, stage="NetNS", start_s=50.0, end_s=50.01),),
        arrivals=tuple(Arrival(sandbox=i, t_s=50.0 + i) for i in range(3)),
        pool_takes=(
            PoolTake(sandbox=0, kind="netns", t_s=50.001, taken=True, ready=1, target=2),
            PoolTake(sandbox=1, kind="netns", t_s=51.001, taken=True, ready=0, target=2),
            # An agent that reports no level: none written, none read back.
            PoolTake(sandbox=2, kind="netns-veth", t_s=52.001, taken=False),
        ),
    )


@pytest.mark.parametrize("name", ["storm.jsonl", "storm.jsonl.gz"])
def test_pool_takes_round_trip(tmp_path: Path, name: str) -> None:
    trace = _trace()
    path = tmp_path / name
    write_trace(trace, path)
    back = read_trace(path)
    assert back == trace
    assert back.pool_takes[2].ready is None and back.pool_takes[2].target is None


def test_a_take_with_no_level_writes_no_level_fields(tmp_path: Path) -> None:
    path = tmp_path / "storm.jsonl"
    write_trace(_trace(), path)
    takes = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    takes = [t for t in takes if t["record"] == "pool_take"]
    assert takes[2] == {
        "record": "pool_take",
        "sandbox": 2,
        "kind": "netns-veth",
        "t_s": 52.001,
        "taken": False,
    }


def test_trace_of_groups_pool_takes() -> None:
    trace = _trace()
    assert Trace.of(trace.header, reversed(list(trace.records()))).pool_takes == tuple(
        reversed(trace.pool_takes)
    )


def test_a_recorded_trace_of_before_pool_takes_still_reads() -> None:
    recorded = read_trace(DATA / "testbed-veth-qemu-25.jsonl.gz")
    assert recorded.pool_takes == () and len(recorded.arrivals) == 25
    assert recorded.header.schema_version == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"ready": -1},
            r":3: pool_take\.ready: Input should be greater than or equal to 0 \(got -1\)",
        ),
        ({"taken": "maybe"}, r":3: pool_take\.taken: Input should be a valid boolean"),
        ({"sandbox": 7}, r":3: sandbox: must be below the header's scenario\.sandboxes \(3\)"),
        ({"kind": ""}, r":3: pool_take\.kind: String should have at least 1 character"),
        ({"t_s": 1e13}, r":3: pool_take\.t_s: Input should be less than or equal to"),
        ({"extra": 1}, r":3: pool_take\.extra: unknown field"),
    ],
)
def test_a_bad_pool_take_is_refused_naming_line_and_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    header = _trace().header.model_dump_json()
    take = {"record": "pool_take", "sandbox": 0, "kind": "netns", "t_s": 50.0, "taken": True}
    arrival = Arrival(sandbox=0, t_s=50.0).model_dump_json()
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([header, arrival, json.dumps({**take, **change})]) + "\n")
    with pytest.raises(TraceFormatError, match=message):
        read_trace(path)


def test_pool_take_is_frozen_and_strict() -> None:
    take = PoolTake(sandbox=0, kind="tap", t_s=1.0, taken=True, ready=3, target=4)
    with pytest.raises(ValidationError):
        take.ready = 2  # type: ignore[misc]
    with pytest.raises(ValidationError, match="target"):
        PoolTake(sandbox=0, kind="tap", t_s=1.0, taken=True, target=-1)
