"""bootstorm.traces.kernel — lock contention and softirqs from a dedicated tracefs instance."""

from ._join import join_contention, softirq_spans
from ._parse import (
    CGROUP_MUTEX,
    CSS_SET_LOCK,
    RTNL,
    TRACE_LINE,
    Contention,
    KernelEvent,
    LockNamer,
    SoftirqRun,
    pair_contention,
    pair_softirqs,
    parse_events,
    read_kallsyms,
)
from .collector import (
    KernelCapture,
    KernelCollector,
    TracefsError,
    default_buffer_size_kb,
    sweep_instances,
)

__all__ = [
    "CGROUP_MUTEX",
    "CSS_SET_LOCK",
    "RTNL",
    "TRACE_LINE",
    "Contention",
    "KernelCapture",
    "KernelCollector",
    "KernelEvent",
    "LockNamer",
    "SoftirqRun",
    "TracefsError",
    "default_buffer_size_kb",
    "join_contention",
    "pair_contention",
    "pair_softirqs",
    "parse_events",
    "read_kallsyms",
    "softirq_spans",
    "sweep_instances",
]
