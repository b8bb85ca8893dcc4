"""The kernel collector on the real tracefs (root): its own instance, always removed."""

from __future__ import annotations

import os

import pytest

from bootstorm.traces.kernel import KernelCollector, sweep_instances

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tracefs)"),
]


def test_instance_is_set_up_and_removed_on_error() -> None:
    kc = KernelCollector(softirqs=True, buffer_size_kb=1024)
    with pytest.raises(RuntimeError, match="boom"), kc:
        assert kc.instance.name == f"bootstorm-{os.getpid()}"
        assert "[mono]" in (kc.instance / "trace_clock").read_text()
        assert (kc.instance / "options" / "stacktrace").read_text().strip() == "1"
        assert (kc.instance / "events/lock/contention_begin/enable").read_text().strip() == "1"
        assert (kc.instance / "events/irq/softirq_entry/enable").read_text().strip() == "1"
        raise RuntimeError("boom")
    assert not kc.instance.exists()
    assert kc.capture is None


def test_capture_and_sweep_spares_live_instances() -> None:
    with KernelCollector(buffer_size_kb=1024) as kc:
        assert f"bootstorm-{os.getpid()}" not in sweep_instances()  # we are alive
        sum(range(10_000))
    assert kc.capture is not None and kc.capture.overrun == 0
    assert kc.capture.event_names == ("lock:contention_begin", "lock:contention_end")
    assert not kc.instance.exists()
