"""bootstorm.traces — the trace schema, its JSON Lines files and the kernel collector.

One versioned schema holds a boot storm, measured on a testbed or simulated:
a :class:`TraceHeader` then typed records (stage spans, lock spans, softirq
spans, admission waits, arrivals, pool takes, pool levels). :func:`read_trace`
refuses a malformed file naming line and field; :func:`write_trace` writes
whole files or none.
This is the bottom layer: it imports nothing else of bootstorm. A trace's
bridge to the simulator's recording and the side-by-side Chrome export
(measured and simulated) are :mod:`bootstorm.validation.recording`.
"""

# Names load on first use (PEP 562): importing the package, or one light name
# of it, does not load every module (and NumPy, pydantic, YAML) with it.
from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._errors import (
        TraceFormatError,
    )
    from .schema import (
        TRACE_SCHEMA_VERSION,
        AdmitSpan,
        Arrival,
        ExecSpan,
        HostFacts,
        KernelTraceFacts,
        LockSpan,
        PoolLevelSample,
        PoolTake,
        Record,
        ScenarioFacts,
        SoftirqSpan,
        StageSpan,
        TraceHeader,
    )
    from .trace import (
        Trace,
        read_trace,
        write_trace,
    )

__all__ = [
    "TRACE_SCHEMA_VERSION",
    "AdmitSpan",
    "Arrival",
    "ExecSpan",
    "HostFacts",
    "KernelTraceFacts",
    "LockSpan",
    "PoolLevelSample",
    "PoolTake",
    "Record",
    "ScenarioFacts",
    "SoftirqSpan",
    "StageSpan",
    "Trace",
    "TraceFormatError",
    "TraceHeader",
    "VmStops",
    "read_trace",
    "write_trace",
]

_SOURCES: dict[str, str] = {
    "TRACE_SCHEMA_VERSION": ".schema",
    "AdmitSpan": ".schema",
    "Arrival": ".schema",
    "ExecSpan": ".schema",
    "HostFacts": ".schema",
    "KernelTraceFacts": ".schema",
    "LockSpan": ".schema",
    "PoolLevelSample": ".schema",
    "PoolTake": ".schema",
    "Record": ".schema",
    "ScenarioFacts": ".schema",
    "SoftirqSpan": ".schema",
    "StageSpan": ".schema",
    "TraceHeader": ".schema",
    "VmStops": ".schema",
    "Trace": ".trace",
    "TraceFormatError": "._errors",
    "read_trace": ".trace",
    "write_trace": ".trace",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _SOURCES)
