"""bootstorm.traces.kernel — lock contention and softirqs from a dedicated tracefs instance."""

from ._join import join_contention, softirq_spans
from ._parse import (
    CGROUP_MUTEX,
    CSS_SET_LOCK,
    RTNL,
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
    DEFAULT_BUFFER_SIZE_KB,
    KernelCapture,
    KernelCollector,
    TracefsError,
    sweep_instances,
)

__all__ = [
    "CGROUP_MUTEX",
    "CSS_SET_LOCK",
    "DEFAULT_BUFFER_SIZE_KB",
    "RTNL",
    "Contention",
    "KernelCapture",
    "KernelCollector",
    "KernelEvent",
    "LockNamer",
    "SoftirqRun",
    "TracefsError",
    "join_contention",
    "pair_contention",
    "pair_softirqs",
    "parse_events",
    "read_kallsyms",
    "softirq_spans",
    "sweep_instances",
]
