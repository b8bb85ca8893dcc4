"""The compiled executor: :mod:`._fast_nb`'s event loop, compiled by numba or interpreted.

:class:`FastExecutor` runs the same :class:`Program` as the reference
:class:`~.simpy_executor.SimPyExecutor` and returns the same :class:`Result` (no
recording). The reference's semantics are the spec, down to the order of
simultaneous events: a lock grant, a gate hand-over or a finished CPU job
decides *who* goes next, so two events at one time must be processed in the
order SimPy would process them, or FIFO queues fill in another order and the
runs diverge. The loop therefore mirrors SimPy's event queue exactly:
events order by ``(time, priority, seq)`` where ``priority`` is 0 for a
task's start (SimPy's ``Initialize``, URGENT) and 1 for everything else
(NORMAL), and ``seq`` is taken at the moment SimPy would schedule the event.
Events SimPy schedules that nobody waits for (a finished process) are left
out; they only shift later sequence numbers and never change their relative
order. The processor-sharing maths (share clocks, finish tags, the 1e-12
completion slack and the one-ulp tick) is :mod:`.cpu`'s and the lock policy
:mod:`.locks`', operation for operation, so that results agree to the bit
(``tests/simulator/test_fast_equivalence.py``).

One source, two ways to run it:

``FastExecutor()`` (``jit=True``, executor ``"compiled"``)
    numba's compilation of :mod:`._fast_nb`: about 20–30x SimPy, ≈ 3 ms for
    the 400-sandbox ipvtap storm end to end, ≈ 70 ms for 10 000 sandboxes.
    It compiles once per machine (``cache=True``, ≈ 20 s; ≈ 0.5 s to load).
``FastExecutor(jit=False)`` (executor ``"python"``)
    the very same functions run by the Python interpreter (the module loaded
    a second time with its decorators turned off): slow (≈ 100x the
    compiled loop), but a breakpoint in ``_fast_nb.py`` stops there, coverage
    sees its lines, numba is not needed, and its :class:`Result` is the
    compiled one's to the bit.

Both hand their counters to :func:`._build.build_result`, which builds the
:class:`Result` as it does for the reference. A search reads only the
startup figures (:meth:`FastExecutor.summarise`), which skips the rest.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ._build import (
    PoolLog,
    RunCounts,
    StartupSummary,
    build_result,
    lock_priority_table,
    startup_summary,
)
from ._memory import SPARE_SLOTS
from .program import Program
from .result import Result

__all__ = [
    "FastExecutor",
    "KernelCall",
    "StartupSummary",
    "run_program_fast",
    "summarise_concurrently",
    "summarise_fast",
]


class FastExecutor:
    """Runs a :class:`Program` on :mod:`._fast_nb`'s loop (no recording).

    Parameters
    ----------
    jit:
        True: the loop compiled by numba (the first run on a machine
        compiles it, ≈ 20 s; cached on disk after that, ≈ 0.5 s to load in a
        new process). False: the same source interpreted, for a debugger or
        coverage (same result, much slower; numba not needed).
    """

    def __init__(self, *, jit: bool = True) -> None:
        self.jit = jit

    def run(self, program: Program) -> Result:
        out = KernelCall(program, jit=self.jit).outputs
        finish, cpu_acc, lock_spin, cnt, cnf, by_stage, dur_stage, dur_val, stage_time = out[:9]
        zeroed, events = out[9:11]
        n_stages = len(program.stage_names)
        return build_result(
            program,
            RunCounts(
                finish=finish,
                cpu_acc=cpu_acc.tolist(),
                lock_spin=lock_spin.tolist(),
                counts=cnt.tolist(),
                sums=cnf[:, :3].tolist(),
                acquisitions_by_stage=by_stage.tolist(),
                wait_s_by_stage=out[_WAIT_BY_STAGE].tolist(),
                pool_log=pool_log(out),
                durations=by_stage_durations(dur_stage, dur_val, n_stages),
                stage_time=stage_time,
                zeroed_bytes=float(zeroed),
                events=int(events),
            ),
        )

    def summarise(self, program: Program) -> StartupSummary:
        """What :meth:`run` returns, cut to :class:`StartupSummary`'s figures."""
        out = KernelCall(program, jit=self.jit).outputs
        return startup_summary(program, out[0], pool_log(out))


def by_stage_durations(
    dur_stage: np.ndarray, dur_val: np.ndarray, n_stages: int
) -> list[np.ndarray]:
    """Per stage, its durations in the order they were logged: what
    ``dur_val[dur_stage == s]`` gives for each ``s``, from one stable sort
    by stage (a radix sort of 16-bit codes) instead of a scan per stage."""
    if n_stages >= 1 << 15 or dur_stage.size < 1 << 12:
        return [dur_val[dur_stage == s] for s in range(n_stages)]
    order = np.argsort(dur_stage.astype(np.int16), kind="stable")
    grouped = dur_val.take(order)
    ends = np.cumsum(np.bincount(dur_stage, minlength=n_stages))
    return np.split(grouped, ends[:-1])


def run_program_fast(program: Program, *, jit: bool = True) -> Result:
    """Run ``program`` on the compiled executor (``jit=False``: interpreted)."""
    return FastExecutor(jit=jit).run(program)


def summarise_fast(program: Program, *, jit: bool = True) -> StartupSummary:
    """Run ``program`` on the compiled executor, keeping only the startup figures."""
    return FastExecutor(jit=jit).summarise(program)


_INTERPRETED = "bootstorm.simulator._fast_nb_interpreted"


def kernel_module(*, jit: bool) -> ModuleType:
    """:mod:`._fast_nb` compiled (``jit``), or its interpreted twin: the same
    file executed a second time under another name, where its decorators
    return the plain functions (see the flag at the top of that module)."""
    if jit:
        try:
            from . import _fast_nb
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("FastExecutor(jit=True) needs numba: pip install numba") from exc
        global _codes_checked
        if not _codes_checked:
            _check_codes(_fast_nb)
            _codes_checked = True
        return _fast_nb
    module = sys.modules.get(_INTERPRETED)
    if module is None:
        source = Path(__file__).with_name("_fast_nb.py")
        twin = importlib.util.spec_from_file_location(_INTERPRETED, source)
        assert twin is not None and twin.loader is not None
        module = importlib.util.module_from_spec(twin)
        sys.modules[_INTERPRETED] = module
        try:
            twin.loader.exec_module(module)
        except BaseException:
            del sys.modules[_INTERPRETED]
            raise
    return module


_codes_checked = False


def _check_codes(module: ModuleType) -> None:
    """numba's cache keeps the constants a function was compiled with, and
    it notices only changes to ``_fast_nb.py`` itself: after an edit of the
    codes in :mod:`.program` alone, recompile instead of running stale ones."""
    want = (*module.OP_CODES.values(), *module.LOCK_CODES.values())
    if tuple(module.compiled_codes()) == want:
        return
    for value in vars(module).values():  # pragma: no cover - after such an edit only
        if hasattr(value, "recompile") and getattr(value, "signatures", None):
            value.recompile()


class KernelCall:
    """One run of the compiled loop on a program, with its arguments ready.

    :meth:`run` calls the loop and nothing else: compiled, it holds no Python
    object and lets go of the GIL, so a thread can run it while the caller's
    thread does Python work (a search's sampler choosing the next point).
    Everything that needs the interpreter (the arguments before, the summary
    after) happens on the thread that builds the call and reads :meth:`summary`.

    ``spare_slots``: task slots the loop starts with beyond what its time-0
    starts need (default :data:`._memory.SPARE_SLOTS`); tests give
    fewer, so that the loop runs out and starts again.
    """

    __slots__ = ("_args", "_out", "_run_kernel", "pool_left", "program")

    def __init__(
        self, program: Program, *, jit: bool = True, spare_slots: int | None = None
    ) -> None:
        p, m = program, program.machine
        kernel = kernel_module(jit=jit)
        self.program = program
        self._run_kernel = kernel.run_kernel
        self.pool_left = np.array([pool.capacity for pool in p.pools], dtype=np.int64)
        ops = p.ops
        self._args = (
            ops.kind,
            ops.arg,
            ops.amount,
            ops.offsets,
            ops.slot,
            ops.task_part,
            ops.own_offsets,
            ops.own_amount,
            p.arrival_s,
            p.branch_parent,
            p.spawn_base,
            len(p.stage_names),
            np.array([int(spec.kind) for spec in p.locks], dtype=np.int64),
            lock_priority_table(p),
            np.array([spec.spin_s for spec in p.locks], dtype=np.float64),
            np.array([spec.wake_s for spec in p.locks], dtype=np.float64),
            np.array([spec.dispatch_s for spec in p.locks], dtype=np.float64),
            np.array([spec.pins_holder for spec in p.locks], dtype=np.bool_),
            np.array([gate.permits for gate in p.gates], dtype=np.int64),
            self.pool_left,
            np.array(
                [
                    float(m.cores - m.reserved_cores if m.reserved_cores else m.cores),
                    m.guest_cpu_quota,
                    m.background_jobs,
                    m.zero_bytes_per_core_s,
                    m.memory_bandwidth_bytes_s,
                ]
            ),
            # Tests give fewer to run out of them (the run starts again).
            SPARE_SLOTS if spare_slots is None else spare_slots,
        )
        self._out: tuple[Any, ...] | None = None

    def run(self) -> None:
        """Run the loop (once); safe on any thread."""
        if self._out is None:
            self._out = self._run_kernel(*self._args)

    @property
    def outputs(self) -> tuple[Any, ...]:
        """The loop's raw outputs (it runs first if it has not)."""
        self.run()
        assert self._out is not None
        return self._out

    def summary(self) -> StartupSummary:
        """The run cut to :class:`StartupSummary`'s figures (as :meth:`FastExecutor.summarise`)."""
        return startup_summary(self.program, self.outputs[0], pool_log(self.outputs))


#: Where :func:`._fast_nb.run_kernel`'s outputs hold the pool log (its six
#: arrays) and each lock's waits by stage.
_POOL_LOG = slice(11, 17)
_WAIT_BY_STAGE = 17


def pool_log(outputs: tuple[Any, ...]) -> PoolLog:
    """The pool log among the kernel's raw outputs."""
    t_s, pool, event, ready, making, task = outputs[_POOL_LOG]
    return PoolLog(t_s=t_s, pool=pool, event=event, ready=ready, making=making, task=task)


def summarise_concurrently(
    programs: Iterable[Program], *, threads: int | None = None
) -> list[StartupSummary]:
    """:meth:`FastExecutor.summarise` of each of ``programs`` (in order), the
    compiled loops running on ``threads`` threads (default: one per core, at
    most 8) while this thread builds the next program: ``programs`` may be a
    generator that compiles them. Each summary is the one a lone run gives,
    to the bit (runs share nothing)."""
    workers = max(1, threads if threads is not None else min(os.cpu_count() or 1, 8))
    summaries: list[StartupSummary] = []
    # At most ``workers`` runs held at once, each let go once summarised: a
    # what-if's 38 caution storms of 100 000 sandboxes held every program and
    # its outputs to the end (1.8 GiB, where one storm takes 80 MiB).
    pending: deque[tuple[KernelCall, Future[None]]] = deque()

    def summarise_oldest() -> None:
        call, run = pending.popleft()
        run.result()
        summaries.append(call.summary())

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for program in programs:
            call = KernelCall(program)
            pending.append((call, pool.submit(call.run)))
            while len(pending) > workers:
                summarise_oldest()
        while pending:
            summarise_oldest()
    return summaries
