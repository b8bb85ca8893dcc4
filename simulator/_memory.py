"""How much memory a program takes to build and run, and whether this machine has it.

A storm of millions of sandboxes is a few GiB of ops. Finding that out by
running out of memory takes minutes and ends in the kernel's OOM killer;
:func:`compile_program` instead sizes the program from its templates before
it allocates anything per sandbox, and refuses one that would not fit with a
single line that says how much it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from ._errors import ProgramError

__all__ = [
    "SPARE_SLOTS",
    "MemoryEstimate",
    "ProgramTooLargeError",
    "available_memory_bytes",
    "check_fits",
    "check_run_fits",
    "size_program",
]

MIB = 1 << 20

# Bytes per task slot of the compiled kernel's state (see
# ``_fast_nb.run_kernel``): the event queue and four job heaps (5 rows of a
# float, an int and an int, 120), the FIFO of resumes (24), the job's start
# and slot (16), the slot's task, pc, stage, spin depth and stack depth (40),
# the free list (8), the waiter record (17), the lock-queue link (8), the
# spinner record (26) and the spin-deadline list (32). Per lock, per gate and
# per stage-stack level come on top; each task's finish time (8) apart.
_KERNEL_BYTES_PER_SLOT = 120 + 24 + 16 + 40 + 8 + 17 + 8 + 26 + 32

#: Task slots the compiled loop starts with beyond those its time-0 starts
#: need (``_fast_nb.run_kernel``): a sandbox holds one from its arrival to
#: its end, a branch from its spawn to its end, so a day of a million starts
#: needs a few hundred at once. A run that needs more starts again with four
#: times as many (the same result: slots never decide an order).
SPARE_SLOTS = 1 << 16
# What the result keeps and sorts: finish and startup times, their sorted
# copies for the percentiles, and each stage's durations (copied out by stage).
_RESULT_BYTES_PER_SANDBOX = 48
_RESULT_BYTES_PER_STAGE_END = 24
# A pool event in the log (time, pool, event, ready, being made, task: 8 + 4
# + 1 + 4 + 4 + 8), and the result's per-pool copy of it.
_POOL_LOG_BYTES = 2 * 29


_UNCHECKED_BYTES = 64 * MIB
"""Programs smaller than this are not checked against the machine: any
machine that runs the interpreter has it, and the 400-sandbox storm (3 MiB)
compiles in about the time reading ``/proc/meminfo`` takes."""


class ProgramTooLargeError(ProgramError):
    """A program would not fit in this machine's available memory."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """Bytes a program takes: its arrays, and the compiled run's state and result.

    The build's own temporaries (a few arrays per task and fixed-size slices
    of ops) are freed before the run starts and are smaller than it, so the
    peak is the program plus the run.
    """

    sandboxes: int
    ops: int
    program_bytes: int
    run_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.program_bytes + self.run_bytes

    @classmethod
    def of(
        cls,
        *,
        sandboxes: int,
        branches: int,
        ops: int,
        locks: int,
        gates: int,
        stages: int,
        stage_ends: int,
        max_depth: int,
        pool_ops: int = 0,
        own_amounts: int | None = None,
        template_ops: int = 0,
        templates: int = 0,
        at_zero: int | None = None,
    ) -> MemoryEstimate:
        """The estimate for a program of these sizes (``stage_ends``: STAGE_END
        ops run in all; ``max_depth``: the deepest nesting of stages;
        ``pool_ops``: pool ops, each of which logs one event at most;
        ``own_amounts``: the amounts tasks hold of their own, beside the
        ``template_ops`` of ``templates`` they share (:class:`~.program.SharedOps`; None: one
        per op); ``at_zero``: sandboxes that start at time 0, whose tasks all
        hold a kernel slot at once (None: all of them)."""
        tasks = sandboxes + branches
        own = ops if own_amounts is None else own_amounts
        program = (
            own * 8  # own_amount float64
            + template_ops * (1 + 4 + 8 + 4)  # kind, arg, amount, slot
            + (templates + 1) * 8  # the templates' offsets
            + (tasks + 1) * 8  # own_offsets
            + tasks * 4  # task_part
            + sandboxes * (8 + 8)  # arrival_s, spawn_base
            + branches * (8 + 4)  # branch_parent, branch_kind
        )
        starting = sandboxes if at_zero is None else at_zero
        slots = min(tasks, -(-starting * tasks // max(sandboxes, 1)) + SPARE_SLOTS)
        per_slot = _KERNEL_BYTES_PER_SLOT + 16 * max(max_depth, 1) + 8 * locks + 16 * gates
        run = (
            slots * per_slot
            + tasks * 8  # finish times
            + sandboxes * (8 * stages + _RESULT_BYTES_PER_SANDBOX)
            + stage_ends * (16 + _RESULT_BYTES_PER_STAGE_END)
            + pool_ops * _POOL_LOG_BYTES
        )
        return cls(sandboxes=sandboxes, ops=ops, program_bytes=program, run_bytes=run)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def available_memory_bytes() -> int | None:
    """Memory this process can still take: the kernel's ``MemAvailable``, capped
    by the cgroup's limit less its usage (a container); ``None`` where neither
    can be read (not Linux)."""
    found: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except OSError:
        pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # cgroup v1
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        limit, usage = _read_int(Path(limit_file)), _read_int(Path(usage_file))
        if limit is not None and usage is not None and limit < 1 << 60:  # v1: "no limit"
            found.append(max(limit - usage, 0))
            break
    return min(found) if found else None


# What the SimPy executor holds per op while it runs (the ops as Python
# objects, its events and processes): measured at 5 000 and 20 000
# sandboxes of the 400 storm (7.4 and 6.4 KiB a sandbox of 97 ops), with a
# margin. The compiled executor's share (interpreted or not: the same
# arrays) is in MemoryEstimate.
_RUN_BYTES_PER_OP = {"simpy": 88}


def check_run_fits(
    *, sandboxes: int, ops: int, executor: str, available_bytes: int | None = None
) -> None:
    """Raise :class:`ProgramTooLargeError` (one line) if running a compiled
    program of ``ops`` ops on the SimPy ``executor`` would exceed the memory
    available; the compiled one passes, interpreted or not (its share was
    checked when the program was built)."""
    per_op = _RUN_BYTES_PER_OP.get(executor)
    if per_op is None:
        return
    need = ops * per_op
    if available_bytes is None and need < _UNCHECKED_BYTES:
        return
    available = available_memory_bytes() if available_bytes is None else available_bytes
    if available is None or need <= available:
        return
    raise ProgramTooLargeError(
        f"sandboxes: {sandboxes} sandboxes would need about {need / MIB:,.0f} MiB to run on "
        f"the {executor} executor ({ops:,} ops), but this machine has "
        f"{available / MIB:,.0f} MiB available; the compiled executor needs far less "
        "(executor='compiled', --executor compiled)"
    )


class _Sized(Exception):  # noqa: N818 - control flow, not an error
    """Ends a build at its size check (see :func:`size_program`)."""

    def __init__(self, estimate: MemoryEstimate) -> None:
        super().__init__(estimate)
        self.estimate = estimate


_SIZING_ONLY: ContextVar[bool] = ContextVar("bootstorm_sizing_only", default=False)


def size_program(build: Callable[[], object]) -> MemoryEstimate:
    """What the program ``build`` compiles would take, without building it.

    ``build`` runs until :func:`~.steps.compile_program` has sized the
    program from its templates, and stops there: nothing per sandbox is
    made, so a storm of any size is sized in the time its plans take.
    """
    token = _SIZING_ONLY.set(True)
    try:
        build()
    except _Sized as sized:
        return sized.estimate
    finally:
        _SIZING_ONLY.reset(token)
    raise ProgramError("size_program: the build compiled no program")


def check_fits(estimate: MemoryEstimate, *, available_bytes: int | None = None) -> None:
    """Raise :class:`ProgramTooLargeError` (one line) if ``estimate`` exceeds the
    memory available (default: :func:`available_memory_bytes`; unknown: pass)."""
    if _SIZING_ONLY.get():
        raise _Sized(estimate)
    if available_bytes is None and estimate.total_bytes < _UNCHECKED_BYTES:
        return  # reading /proc costs more than compiling a small storm
    available = available_memory_bytes() if available_bytes is None else available_bytes
    if available is None or estimate.total_bytes <= available:
        return
    raise ProgramTooLargeError(
        f"sandboxes: {estimate.sandboxes} sandboxes would need about "
        f"{estimate.total_bytes / MIB:,.0f} MiB to compile and run "
        f"({estimate.ops:,} ops: {estimate.program_bytes / MIB:,.0f} MiB of program, "
        f"{estimate.run_bytes / MIB:,.0f} MiB to run it), but this machine has "
        f"{available / MIB:,.0f} MiB available"
    )
