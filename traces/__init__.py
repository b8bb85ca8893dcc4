"""bootstorm.traces — the trace schema, its JSON Lines files, exports and kernel collector.

One versioned schema holds a boot storm, measured on a testbed or simulated:
a :class:`TraceHeader` then typed records (stage spans, lock spans, softirq
spans, admission waits, arrivals). :func:`read_trace` refuses a malformed
file naming line and field; :func:`write_trace` writes whole files or none.
:func:`chrome_trace` opens a measured and a simulated storm side by side in
ui.perfetto.dev.
"""

from .export import chrome_trace, from_recording, to_recording, write_chrome_trace
from .schema import (
    TRACE_SCHEMA_VERSION,
    AdmitSpan,
    Arrival,
    HostFacts,
    KernelTraceFacts,
    LockSpan,
    Record,
    ScenarioFacts,
    SoftirqSpan,
    StageSpan,
    TraceHeader,
)
from .trace import Trace, TraceFormatError, read_trace, write_trace

__all__ = [
    "TRACE_SCHEMA_VERSION",
    "AdmitSpan",
    "Arrival",
    "HostFacts",
    "KernelTraceFacts",
    "LockSpan",
    "Record",
    "ScenarioFacts",
    "SoftirqSpan",
    "StageSpan",
    "Trace",
    "TraceFormatError",
    "TraceHeader",
    "chrome_trace",
    "from_recording",
    "read_trace",
    "to_recording",
    "write_chrome_trace",
    "write_trace",
]
