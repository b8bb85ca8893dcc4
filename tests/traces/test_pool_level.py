"""The ``pool_level`` record: round trips, grouping, refusals naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bootstorm.traces import (
    Arrival,
    PoolLevelSample,
    PoolTake,
    ScenarioFacts,
    Trace,
    TraceFormatError,
    TraceHeader,
    read_trace,
    write_trace,
)


def _trace() -> Trace:
    header = TraceHeader(
        source="testbed",
        origin_s=50.0,
        scenario=ScenarioFacts(sandboxes=2, cni="veth-peer-in-netns"),
    )
    return Trace(
        header=header,
        arrivals=(Arrival(sandbox=0, t_s=50.0), Arrival(sandbox=1, t_s=50.5)),
        pool_takes=(PoolTake(sandbox=0, kind="netns", t_s=50.01, taken=True, ready=1, target=2),),
        pool_levels=(
            PoolLevelSample(kind="netns", t_s=49.99, ready=2, making=0, target=2),
            PoolLevelSample(kind="netns", t_s=50.19, ready=1, making=1, target=2),
            # An agent that does not say what it is making or keeping: none written.
            PoolLevelSample(kind="tap", t_s=50.19, ready=3),
        ),
    )


@pytest.mark.parametrize("name", ["storm.jsonl", "storm.jsonl.gz"])
def test_pool_levels_round_trip(tmp_path: Path, name: str) -> None:
    trace = _trace()
    path = tmp_path / name
    write_trace(trace, path)
    back = read_trace(path)
    assert back == trace
    assert back.pool_levels == trace.pool_levels and len(back.pool_levels) == 3
    assert back.pool_levels[2].making is None and back.pool_levels[2].target is None


def test_a_level_writes_its_record_kind_and_no_unknown_fields(tmp_path: Path) -> None:
    path = tmp_path / "storm.jsonl"
    write_trace(_trace(), path)
    records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    levels = [r for r in records if r["record"] == "pool_level"]
    assert levels[1] == {
        "record": "pool_level",
        "kind": "netns",
        "t_s": 50.19,
        "ready": 1,
        "making": 1,
        "target": 2,
    }
    assert levels[2] == {"record": "pool_level", "kind": "tap", "t_s": 50.19, "ready": 3}


def test_trace_of_groups_pool_levels() -> None:
    trace = _trace()
    regrouped = Trace.of(trace.header, reversed(list(trace.records())))
    assert regrouped.pool_levels == tuple(reversed(trace.pool_levels))
    assert regrouped.pool_takes == trace.pool_takes


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ready": -1}, r":3: pool_level\.ready: Input should be greater than or equal to 0"),
        ({"making": -2}, r":3: pool_level\.making: Input should be greater than or equal to 0"),
        ({"kind": ""}, r":3: pool_level\.kind: String should have at least 1 character"),
        ({"t_s": float("nan")}, r":3: pool_level\.t_s: Input should be a finite number"),
        ({"sandbox": 0}, r":3: pool_level\.sandbox: unknown field"),
    ],
)
def test_a_bad_pool_level_is_refused_naming_line_and_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    header = _trace().header.model_dump_json()
    level = {"record": "pool_level", "kind": "netns", "t_s": 50.0, "ready": 1}
    arrival = Arrival(sandbox=0, t_s=50.0).model_dump_json()
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([header, arrival, json.dumps({**level, **change})]) + "\n")
    with pytest.raises(TraceFormatError, match=message):
        read_trace(path)


def test_pool_level_is_frozen_and_needs_its_ready_level() -> None:
    level = PoolLevelSample(kind="tap", t_s=1.0, ready=3, target=4)
    with pytest.raises(ValidationError):
        level.ready = 2
    with pytest.raises(ValidationError, match="ready"):
        PoolLevelSample(kind="tap", t_s=1.0)
