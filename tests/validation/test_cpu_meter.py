"""The testbed's meter of the host's busy CPU time over a storm."""

from __future__ import annotations

import pytest

from bootstorm.validation.testbed._host import CpuMeter


def test_busy_core_seconds_interpolate_between_samples() -> None:
    meter = CpuMeter()
    # (monotonic s, busy core-s so far): 2 cores busy from t=10 to t=11, then 1.
    meter._samples = [(10.0, 100.0), (11.0, 102.0), (12.0, 103.0)]
    assert meter.busy_core_s(10.0, 12.0) == pytest.approx(3.0)
    assert meter.busy_core_s(10.5, 11.5) == pytest.approx(1.0 + 0.5)
    assert meter.busy_core_s(11.0, 11.0) == 0.0
    # A window the samples do not cover has no answer.
    assert meter.busy_core_s(9.0, 11.0) is None
    assert meter.busy_core_s(10.0, 12.5) is None


def test_the_meter_samples_the_host_until_stopped() -> None:
    import time

    meter = CpuMeter(interval_s=0.01)
    meter.start()
    start = time.monotonic()
    deadline = start + 0.1
    while time.monotonic() < deadline:  # this thread keeps a core busy
        pass
    end = time.monotonic()
    meter.stop()
    meter.stop()  # again: nothing more
    busy = meter.busy_core_s(start, end)
    # A core busy for 0.1 s (10 ms clock ticks, so only roughly).
    assert busy is not None and busy >= 0.03
    assert meter.busy_core_s(start, end + 60) is None
