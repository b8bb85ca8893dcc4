"""A ``measure-ops`` result built by hand for the calibration tests: the
given samples of each operation, on a 2-core host, at a fixed time."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from bootstorm.traces.operations import OperationTimes, OperationTiming
from bootstorm.traces.schema import HostFacts


def operation_times(samples: Mapping[str, tuple[float, ...]], **fields: Any) -> OperationTimes:
    """``samples`` (seconds) by operation, the same count each; ``fields``
    the rest of the file (``agent_calls``, ``held_leases`` ...)."""
    (repeats,) = {len(s) for s in samples.values()}
    return OperationTimes(
        timings=tuple(OperationTiming(name=n, samples_s=s) for n, s in samples.items()),
        host=HostFacts(kernel="6.18", cores=2, memory_mib=24_000, hostname="node"),
        vm_mode="process",
        created_at=datetime(2026, 11, 28, 12, 0, tzinfo=UTC),
        repeats=repeats,
        **fields,
    )


def assert_rounds_checked(times: OperationTimes, section: str, figure: str, good: float) -> None:
    """``times``' file with ``section.figure`` (a figure per round, 3 rounds)
    cut to one entry, then with a negative second entry: each refused in one
    line naming the field (and the value)."""
    import json

    import pytest

    data = json.loads(times.to_json())
    data[section][figure] = [good]
    with pytest.raises(ValueError, match=rf"{figure}: must hold one entry per round \(3"):
        OperationTimes.from_json(json.dumps(data))
    data[section][figure] = [good, -1.0, good]
    with pytest.raises(ValueError, match=rf"{section}\.{figure}\[1\].*-1\.0") as err:
        OperationTimes.from_json(json.dumps(data))
    assert "\n" not in str(err.value)
