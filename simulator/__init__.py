"""bootstorm.simulator — a small discrete-event kernel on SimPy.

It knows nothing about networks: a :class:`Program` of ops per sandbox runs on
processor-sharing cores, sleeping locks, spinlocks, reader-writer locks,
admission gates and device pools, and gives a frozen :class:`Result`.

Two executors run a program: the SimPy reference (:class:`SimPyExecutor`)
and the compiled loop (:class:`FastExecutor`, whose source also runs
interpreted). :mod:`.reference_problems` holds programs with known answers
and :mod:`.testing` the contract every executor passes.
"""

# Names load on first use (PEP 562): `import bootstorm.simulator` stays cheap for
# the CLI and for importers that need one name (SimPy, NumPy and numba load
# with the executors that use them).
from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._memory import (
        MemoryEstimate,
        ProgramTooLargeError,
        available_memory_bytes,
        size_program,
    )
    from .executors import (
        EXECUTOR_NAMES,
        Executor,
        ExecutorName,
        check_executor,
        make_executor,
        run_with,
        summarise_with,
    )
    from .fast import (
        FastExecutor,
        KernelCall,
        StartupSummary,
        run_program_fast,
        summarise_concurrently,
    )
    from .program import (
        GateSpec,
        LockKind,
        LockSpec,
        MachineSpec,
        OpKind,
        PoolSpec,
        Program,
        ProgramError,
        SharedOps,
    )
    from .recorder import (
        Recording,
    )
    from .result import (
        CpuStats,
        GateStats,
        HeadlineInterval,
        LockStats,
        PoolEvent,
        PoolStats,
        PoolTimeline,
        Result,
        StageStats,
        StartupStats,
    )
    from .simpy_executor import (
        DeadlockError,
        SimPyExecutor,
        run_program,
    )
    from .steps import (
        SERVICE_FAMILIES,
        Async,
        Cpu,
        CyclicPlans,
        Hold,
        Once,
        Pooled,
        RcuSync,
        Refill,
        Retarget,
        SandboxPlan,
        Signal,
        Sleep,
        Stage,
        Step,
        Wait,
        Zero,
        compile_program,
        compile_programs,
    )
    from .trace_export import (
        chrome_trace,
        write_chrome_trace,
    )

__all__ = [
    "EXECUTOR_NAMES",
    "SERVICE_FAMILIES",
    "Async",
    "Cpu",
    "CpuStats",
    "CyclicPlans",
    "DeadlockError",
    "Executor",
    "ExecutorName",
    "FastExecutor",
    "GateSpec",
    "GateStats",
    "HeadlineInterval",
    "Hold",
    "KernelCall",
    "LockKind",
    "LockSpec",
    "LockStats",
    "MachineSpec",
    "MemoryEstimate",
    "Once",
    "OpKind",
    "PoolEvent",
    "PoolSpec",
    "PoolStats",
    "PoolTimeline",
    "Pooled",
    "Program",
    "ProgramError",
    "ProgramTooLargeError",
    "RcuSync",
    "Recording",
    "Refill",
    "Result",
    "Retarget",
    "SandboxPlan",
    "SharedOps",
    "Signal",
    "SimPyExecutor",
    "Sleep",
    "Stage",
    "StageStats",
    "StartupStats",
    "StartupSummary",
    "Step",
    "Wait",
    "Zero",
    "available_memory_bytes",
    "check_executor",
    "chrome_trace",
    "compile_program",
    "compile_programs",
    "make_executor",
    "run_program",
    "run_program_fast",
    "run_with",
    "size_program",
    "summarise_concurrently",
    "summarise_with",
    "write_chrome_trace",
]

_SOURCES: dict[str, str] = {
    "MemoryEstimate": "._memory",
    "ProgramTooLargeError": "._memory",
    "available_memory_bytes": "._memory",
    "size_program": "._memory",
    "DeadlockError": "._errors",
    "SimPyExecutor": ".simpy_executor",
    "run_program": ".simpy_executor",
    "EXECUTOR_NAMES": "._names",
    "Executor": ".executors",
    "ExecutorName": "._names",
    "check_executor": ".executors",
    "make_executor": ".executors",
    "run_with": ".executors",
    "summarise_with": ".executors",
    "FastExecutor": ".fast",
    "KernelCall": ".fast",
    "summarise_concurrently": ".fast",
    "StartupSummary": ".fast",
    "run_program_fast": ".fast",
    "GateSpec": ".program",
    "LockKind": ".program",
    "LockSpec": ".program",
    "MachineSpec": ".program",
    "OpKind": ".program",
    "PoolSpec": ".program",
    "Program": ".program",
    "SharedOps": ".program",
    "ProgramError": "._errors",
    "Recording": ".recorder",
    "CpuStats": ".result",
    "GateStats": ".result",
    "LockStats": ".result",
    "PoolStats": ".result",
    "PoolEvent": ".result",
    "PoolTimeline": ".result",
    "Refill": ".steps",
    "Retarget": ".steps",
    "RcuSync": ".steps",
    "Result": ".result",
    "StageStats": ".result",
    "HeadlineInterval": ".result",
    "StartupStats": ".result",
    "SERVICE_FAMILIES": ".steps",
    "Async": ".steps",
    "Cpu": ".steps",
    "CyclicPlans": ".steps",
    "Hold": ".steps",
    "Once": ".steps",
    "Pooled": ".steps",
    "SandboxPlan": ".steps",
    "Signal": ".steps",
    "Sleep": ".steps",
    "Stage": ".steps",
    "Step": ".steps",
    "Wait": ".steps",
    "Zero": ".steps",
    "compile_program": ".steps",
    "compile_programs": ".steps",
    "chrome_trace": ".trace_export",
    "write_chrome_trace": ".trace_export",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _SOURCES)
