"""bootstorm.simulator — a small discrete-event kernel on SimPy.

It knows nothing about networks: a :class:`Program` of ops per sandbox runs on
processor-sharing cores, sleeping locks, spinlocks, reader-writer locks,
admission gates and device pools, and gives a frozen :class:`Result`.
"""

from .executor import DeadlockError, SimPyExecutor, run_program
from .executors import (
    EXECUTOR_NAMES,
    Executor,
    ExecutorName,
    check_executor,
    make_executor,
    run_with,
    summarise_with,
)
from .fast import FastExecutor, StartupSummary, run_program_fast
from .program import (
    GateSpec,
    LockKind,
    LockSpec,
    MachineSpec,
    OpKind,
    PoolSpec,
    Program,
    ProgramError,
)
from .recorder import Recording
from .result import (
    CpuStats,
    GateStats,
    LockStats,
    PoolStats,
    Result,
    StageStats,
    StartupStats,
)
from .steps import (
    SERVICE_FAMILIES,
    Async,
    Cpu,
    Hold,
    Once,
    Pooled,
    SandboxPlan,
    Signal,
    Sleep,
    Stage,
    Step,
    Wait,
    Zero,
    compile_program,
)
from .trace_export import chrome_trace, write_chrome_trace

__all__ = [
    "EXECUTOR_NAMES",
    "SERVICE_FAMILIES",
    "Async",
    "Cpu",
    "CpuStats",
    "DeadlockError",
    "Executor",
    "ExecutorName",
    "FastExecutor",
    "GateSpec",
    "GateStats",
    "Hold",
    "LockKind",
    "LockSpec",
    "LockStats",
    "MachineSpec",
    "Once",
    "OpKind",
    "PoolSpec",
    "PoolStats",
    "Pooled",
    "Program",
    "ProgramError",
    "Recording",
    "Result",
    "SandboxPlan",
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
    "check_executor",
    "chrome_trace",
    "compile_program",
    "make_executor",
    "run_program",
    "run_program_fast",
    "run_with",
    "summarise_with",
    "write_chrome_trace",
]
