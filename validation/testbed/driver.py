"""The testbed driver: a real boot storm of seed 000's pipeline on this host.

Each sandbox is one thread. All at once (the default), every thread waits
at a barrier and they start together; on a schedule
(``StormOptions.arrival_s``, a workload's starts), the driver's thread
starts sandbox ``i``'s thread just before ``arrival_s[i]`` past the origin
(:class:`StartSchedule`), so that only the sandboxes under way hold a
thread. Each runs the five stages (seed 000 §4.1.1), each entered through
admission (a stage limit, a pool) and timed on CLOCK_MONOTONIC with the
thread id.
What a stage does is the runtime's (:class:`~.runtime.StormRuntime`, picked
once by ``StormOptions.runtime``): ``threads`` makes the kernel objects a
Kata sandbox's network start makes through in-process netlink
(:mod:`.threads_runtime`); ``cni`` runs them as containerd and Kata do, real
CNI plugins exec'd in AddCNI and one shim process per sandbox for AttachIf
and StartVM (:mod:`.cni_runtime`). The driver knows no runtime by name.

With ``StormOptions.lifetime_s`` one reaper thread stops each sandbox's VM
that long after it came up (:meth:`.runtime.StormRuntime.stop_vm`), so that
a long schedule holds a bounded number of VMs.

Through an admission whose pools refill during the storm (a node agent's:
:class:`~.admission.PoolSampling`), one sampler thread
(:class:`PoolSampler`) asks every pool's level each
``StormOptions.pool_sample_s`` from just before the first sandbox starts
until the last is done: the trace's ``pool_level`` records.

Everything created is removed on success, failure and interrupt; a killed
run's leftovers are swept by the next run (see :mod:`._leftovers`).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from ...traces import (
    AdmitSpan,
    Arrival,
    ExecSpan,
    KernelTraceFacts,
    LockSpan,
    PoolLevelSample,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceHeader,
    VmStops,
)
from ...traces.host import current_host
from .._names import CGROUP_PARENT
from . import cni_runtime as _cni_runtime  # noqa: F401  (registers "cni")
from . import threads_runtime as _threads_runtime  # noqa: F401  (registers "threads")
from ._cgroup import cgroup2_root, remove_tree
from ._errors import TestbedError
from ._host import CpuMeter, busy_core_s_now, settle, signals_deferred
from ._leftovers import (
    WORKDIR_PREFIX,
    RunNames,
    new_run_id,
    register_run,
    sweep_leftovers,
    unregister_run,
)
from ._vm import VmRunner, build_stub, vm_available
from .admission import Admission, LocalAdmission, PoolSampling
from .options import STAGES, StormOptions, StormResult
from .runtime import (
    Sandbox,
    StageBody,
    StormContext,
    StormRuntime,
    admission_holder,
    runtime_class,
)

__all__ = [
    "STAGES",
    "PoolSampler",
    "StartSchedule",
    "StormOptions",
    "StormResult",
    "TestbedError",
    "run_storm",
]

log = logging.getLogger(__name__)

#: Locks named in the file in full when kernel spans are sampled.
KEY_LOCKS = ("rtnl", "cgroup_mutex", "css_set_lock")
#: On a schedule, a sandbox's thread is started this long before its start
#: time: the thread's own start and its setup (a netlink socket opened) are
#: done by then, and its first stage is asked for on time. The origin is as
#: far past the schedule's beginning, so the first start is on time too.
SETUP_LEAD_S = 0.05
#: A sandbox that began its first stage more than this after its arrival
#: is counted late in the trace's note (a thread woken a scheduler tick
#: late is not the host falling behind).
LATE_S = 0.01
#: How long the storm's end waits for the reaper's stop under way (a shim
#: gets 5 s, then SIGTERM and SIGKILL: see ``_cni_stages.SHIM_STOP_WAIT_S``).
REAPER_JOIN_S = 30.0
#: How long the storm's end waits for the pool sampler's ask under way (an
#: agent's HTTP call times out after 10 s: ``AgentClient(timeout_s=...)``).
SAMPLER_JOIN_S = 30.0


class _Stop(Protocol):
    """What :class:`StartSchedule` waits on: a :class:`threading.Event`, or a test's fake."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class StartSchedule:
    """When each sandbox of a schedule is started: sandbox ``i`` at
    ``origin_s + arrival_s[i] - lead_s`` on ``clock``, in index order.

    :meth:`due` yields each index at its time, waiting on ``stop`` until
    then; once ``stop`` is set it yields no more (the storm is being
    stopped: those not yielded were never started). A start it reaches late
    (the host, or the caller's work on the last one, ran past it) is
    yielded at once, never skipped or moved: its arrival stays its
    scheduled time, and :attr:`behind_s` says how late the latest was at
    worst. ``clock`` and ``stop`` are the monotonic clock and an event,
    or a test's fakes.
    """

    def __init__(
        self,
        *,
        arrival_s: Sequence[float],
        stop: _Stop,
        lead_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if any(b < a for a, b in itertools.pairwise(arrival_s)):
            raise ValueError("arrival_s: must be sorted")
        self.arrival_s = tuple(arrival_s)
        self.lead_s = lead_s
        self._clock = clock
        self._stop = stop
        #: Most seconds a start was yielded after its time (0: none late).
        self.behind_s = 0.0
        #: Starts yielded so far.
        self.started = 0

    def due(self, *, origin_s: float) -> Iterator[int]:
        """Each sandbox's index at its start time (see the class)."""
        for i, arrival in enumerate(self.arrival_s):
            at = origin_s + arrival - self.lead_s
            while True:
                if self._stop.is_set():
                    return
                left = at - self._clock()
                if left <= 0.0:
                    break
                if self._stop.wait(left):
                    return
            self.behind_s = max(self.behind_s, self._clock() - at)
            self.started += 1
            yield i


class _Reaper:
    """Stops each sandbox's VM ``lifetime_s`` after it came up, on one thread
    (one sleeping thread per live VM would be thousands on a long schedule),
    in the order their lifetimes end."""

    def __init__(self, *, lifetime_s: float, stop_vm: Callable[[Sandbox], None]) -> None:
        self.lifetime_s = lifetime_s
        self._stop_vm = stop_vm
        self._due: list[tuple[float, int, Sandbox]] = []
        self._cond = threading.Condition()
        self._closed = False
        #: VMs stopped at the end of their lifetime, during the storm.
        self.stopped = 0
        #: The sandboxes whose stop began (the driver stops the others).
        self.stopped_indices: set[int] = set()
        #: Most VMs up and not yet stopped at once, during the storm.
        self.peak = 0
        self._held = 0
        self._thread = threading.Thread(target=self._run, name="lifetime-reaper", daemon=True)
        self._thread.start()

    def add(self, sb: Sandbox, *, up_s: float) -> None:
        """``sb``'s VM came up at ``up_s`` (CLOCK_MONOTONIC): stop it a lifetime later."""
        with self._cond:
            if self._closed:
                return  # the storm is ending: teardown stops it
            heapq.heappush(self._due, (up_s + self.lifetime_s, sb.index, sb))
            self._held += 1
            self.peak = max(self.peak, self._held)
            self._cond.notify()

    def _next(self) -> Sandbox | None:
        """The next sandbox whose lifetime is over, once it is; None once closed."""
        with self._cond:
            while not self._closed:
                if self._due:
                    left = self._due[0][0] - time.monotonic()
                    if left <= 0.0:
                        return heapq.heappop(self._due)[2]
                    self._cond.wait(left)
                else:
                    self._cond.wait()
            return None

    def _run(self) -> None:
        while (sb := self._next()) is not None:
            with self._cond:  # before the stop: one under way is never stopped again
                self.stopped_indices.add(sb.index)
            self._stop_vm(sb)  # outside the lock: a shim's stop may take seconds
            with self._cond:
                self.stopped += 1
                self._held -= 1

    def close(self) -> None:
        """No more stops (the rest are teardown's); waits for one under way."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=REAPER_JOIN_S)
        if self._thread.is_alive():
            log.warning("a VM's stop at the end of its lifetime outlasted %.0f s", REAPER_JOIN_S)

    def note(self) -> str:
        left = len(self._due)
        return (
            f"lifetime {self.lifetime_s:g} s: each VM stopped that long after it came up "
            f"({self.stopped} during the storm, {left} at its end; at most {self.peak} "
            "up at once); network devices stay until the end of the run"
        )


#: VMs still up at a storm's end that the driver stops one at a time after
#: it, with the host's busy CPU timed over them (the trace header's
#: ``vm_stops``: a stop's CPU, which a model of sandboxes that stop during a
#: storm needs). /proc/stat counts in 10-ms ticks: 30 stops of ~5 ms each
#: are 15 ticks (±1 at each end; a plan's median over its runs reads them
#: to a few percent), and add about a second to a storm.
TIMED_STOPS = 30
#: After the last stop, the kernel's deferred work of it (QEMU's io_uring
#: torn down after an RCU grace period, the tap's filters freed by a
#: kworker) is given this long to run inside the timed window; the host's
#: own background over it is ~1 ms here (0.005 cores idle).
STOPS_SETTLE_S = 0.2


def timed_stops(
    stop_vm: Callable[[Sandbox], None], sandboxes: Sequence[Sandbox], *, skip: Collection[int]
) -> VmStops | None:
    """Stop the VMs of up to :data:`TIMED_STOPS` of ``sandboxes`` whose five
    stages ran (in index order, those in ``skip`` aside: stopped already),
    one at a time, and time the host's busy CPU over them; None if none is up."""
    up = [
        sb
        for sb in sandboxes
        if sb.error is None and len(sb.spans) == len(STAGES) and sb.index not in skip
    ][:TIMED_STOPS]
    if not up:
        return None
    busy0, t0 = busy_core_s_now(), time.monotonic()
    for sb in up:
        stop_vm(sb)
    t1 = time.monotonic()
    time.sleep(STOPS_SETTLE_S)
    busy1 = busy_core_s_now()
    return VmStops(vms=len(up), busy_core_s=max(0.0, busy1 - busy0), wall_s=t1 - t0)


class PoolSampler:
    """Samples ``source``'s pool levels (:class:`~.admission.PoolSampling`)
    every ``interval_s`` on one thread, from :meth:`start` (which takes the
    first sample on the caller's thread, before the storm's origin) until
    :meth:`stop` (which takes a last one).

    Each sample is a :class:`~bootstorm.traces.PoolLevelSample` per pool
    kept at a target above 0 or holding a device, stamped with ``clock``
    (CLOCK_MONOTONIC, the trace's clock) when the answer came, as a pool
    take is. A sample whose ask failed (the agent did not answer) is
    skipped and counted (:meth:`note`): it never fails the storm. A tick
    missed (an ask slower than ``interval_s``) is skipped, not caught up.
    """

    def __init__(
        self,
        source: PoolSampling,
        *,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_s > 0.0:
            raise ValueError(f"interval_s: must be above 0, but got {interval_s!r}")
        self.source = source
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: list[PoolLevelSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        #: Asks made, and those that failed (skipped).
        self.asked = 0
        self.failed = 0
        self._last_error: str | None = None

    @property
    def samples(self) -> tuple[PoolLevelSample, ...]:
        """The samples so far, in time order."""
        with self._lock:
            return tuple(self._samples)

    def sample(self) -> None:
        """Ask the levels once and record them (a failure: counted, skipped)."""
        try:
            levels = list(self.source.pool_levels())
        except Exception as exc:  # an HTTP error, a malformed answer: skip this one
            with self._lock:
                self.asked += 1
                self.failed += 1
                self._last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return
        t_s = self._clock()
        with self._lock:
            self.asked += 1
            for level in levels:
                if level.ready > 0 or (level.target or 0) > 0:
                    self._samples.append(
                        PoolLevelSample(
                            kind=level.kind,
                            t_s=t_s,
                            ready=level.ready,
                            making=level.making,
                            target=level.target,
                        )
                    )

    def start(self) -> None:
        """Take the first sample now, then one every ``interval_s`` on a thread."""
        if self._thread is not None or self._stopped:
            raise RuntimeError("pool sampler: started already")
        self.sample()
        self._thread = threading.Thread(target=self._run, name="pool-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = self._clock() + self.interval_s
        while not self._stop.wait(max(0.0, next_at - self._clock())):
            self.sample()
            next_at += self.interval_s
            now = self._clock()
            if next_at < now:  # fell behind (a slow ask): the next tick from now
                next_at = now + self.interval_s

    def stop(self, *, last: bool = True) -> None:
        """No more samples after a ``last`` one (the levels at the storm's
        end); waits for an ask under way. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return
        thread.join(timeout=SAMPLER_JOIN_S)
        if thread.is_alive():
            log.warning("the pool sampler's ask outlasted %.0f s", SAMPLER_JOIN_S)
            return
        if last:
            self.sample()

    def note(self) -> str | None:
        """The trace's note on failed samples, or None if none failed."""
        with self._lock:
            if not self.failed:
                return None
            return (
                f"pool levels: {self.failed} of {self.asked} samples failed and were skipped "
                f"(the levels held from the sample before; latest: {self._last_error})"
            )


class _Storm:
    """One run: its names, its runtime and sandboxes, and their cleanup."""

    def __init__(self, options: StormOptions, admission: Admission | None, run: str) -> None:
        self.options = options
        self.run = run  # registered already: a sweep elsewhere spares what we make
        self.names = RunNames(self.run)
        self.notes: list[str] = []
        self.stop = threading.Event()
        self.cgroup_run: Path | None = None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{self.run}-"))
        self.runner = self._runner()
        limits = options.config.limits if options.config else {}
        self.own_admission = admission is None
        self.admission: Admission = admission or LocalAdmission(limits=limits)
        context = StormContext(
            options=options,
            run=run,
            names=self.names,
            runner=self.runner,
            notes=self.notes,
            stop=self.stop,
            own_admission=self.own_admission,
        )
        try:
            self.runtime: StormRuntime[Sandbox] = runtime_class(options.runtime)(context=context)
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self.sandboxes = [self.runtime.new_sandbox(index=i) for i in range(options.sandboxes)]
        #: Stops VMs at the end of their lifetime (``lifetime_s``); None: at the storm's end.
        self.reaper: _Reaper | None = None

    def _runner(self) -> VmRunner:
        opts = self.options
        ok, why = vm_available()
        if opts.vm and ok:
            try:
                stub = build_stub(self.workdir)
            except BaseException:
                shutil.rmtree(self.workdir, ignore_errors=True)
                raise
            return VmRunner(
                mode="qemu-microvm",
                stub=stub,
                memory_mib=opts.vm_memory_mib,
                mem_prealloc=opts.mem_prealloc,
            )
        reason = "--no-vm" if not opts.vm else why
        self.notes.append(
            f"StartVM fallback ({reason}): a process spawned into the sandbox's netns "
            "(nsenter --net) prints the marker; no VMM, no guest memory"
        )
        return VmRunner(mode="process")

    def prepare(self) -> None:
        """The run's cgroup directory, then the runtime's network and pools."""
        try:
            root = cgroup2_root()
        except Exception as exc:
            raise TestbedError(str(exc)) from None
        self.cgroup_run = root / CGROUP_PARENT / self.run
        os.makedirs(self.cgroup_run, exist_ok=False)
        self.admission = self.runtime.prepare(admission=self.admission, cgroup_run=self.cgroup_run)

    # -- the stages ----------------------------------------------------------

    def _stage(self, sb: Sandbox, name: str, body: StageBody[Sandbox]) -> None:
        """Run ``body`` inside stage ``name``'s gate and record its span: from
        entry to return, or the (start, end) the body returns (a shim's stamps)."""
        if self.stop.is_set():
            raise InterruptedError("storm stopped")
        holder = admission_holder(self.run, sb.index)
        asked = time.monotonic()
        with self.admission.stage(name, holder):
            start = time.monotonic()
            # A stage without a limit has no admission to wait for: a pause
            # there is the host's (the GIL, a busy core), not a queue at a gate.
            if start - asked > 1e-4 and self.admission.gated(name):
                sb.admits.append(
                    AdmitSpan(sandbox=sb.index, stage=name, start_s=asked, end_s=start)
                )
            stamps = body(sb)
            end = time.monotonic()
            if stamps is not None:
                start, end = stamps
        sb.spans.append(
            StageSpan(
                sandbox=sb.index,
                stage=name,
                start_s=start,
                end_s=end,
                tid=threading.get_native_id(),
            )
        )

    def _stages(self, sb: Sandbox) -> None:
        """The five stages; then, with a lifetime, its VM's stop is due."""
        sb.began_s = time.monotonic()
        try:
            for name, body in zip(STAGES, self.runtime.stage_bodies(), strict=True):
                self._stage(sb, name, body)
        except Exception as exc:
            sb.error = f"{type(exc).__name__}: {exc}"
            log.debug("sandbox %d failed", sb.index, exc_info=True)
            return
        if self.reaper is not None:
            self.reaper.add(sb, up_s=sb.spans[-1].end_s)

    def sandbox_thread(self, sb: Sandbox, barrier: threading.Barrier) -> None:
        """All at once: set up, wait at the barrier with every other, run."""
        try:
            self.runtime.setup_sandbox(sandbox=sb)
        except Exception as exc:
            sb.error = f"setup: {type(exc).__name__}: {exc}"
        try:
            barrier.wait()  # even after a failed setup: the others must not wait forever
            if sb.error is None:
                self._stages(sb)
        except threading.BrokenBarrierError:
            sb.error = "storm aborted before it started"
        finally:
            self.runtime.end_sandbox(sandbox=sb)

    def scheduled_thread(self, sb: Sandbox, at_s: float) -> None:
        """On a schedule: started :data:`SETUP_LEAD_S` early, set up, wait
        until ``at_s`` (its arrival), run; late, it runs at once."""
        try:
            try:
                self.runtime.setup_sandbox(sandbox=sb)
            except Exception as exc:
                sb.error = f"setup: {type(exc).__name__}: {exc}"
                return
            left = at_s - time.monotonic()
            stopped = self.stop.wait(left) if left > 0.0 else self.stop.is_set()
            if stopped:
                sb.error = "storm stopped before it started"
                return
            self._stages(sb)
        finally:
            self.runtime.end_sandbox(sandbox=sb)

    # -- cleanup -------------------------------------------------------------

    def cleanup(self) -> None:
        with signals_deferred():
            try:
                self.runtime.teardown(sandboxes=self.sandboxes)
            finally:
                if self.cgroup_run is not None:
                    remove_tree(self.cgroup_run)
                    with contextlib.suppress(OSError):
                        self.cgroup_run.parent.rmdir()  # our parent, if no other run uses it
                shutil.rmtree(self.workdir, ignore_errors=True)
                unregister_run(self.run)


def _sample(locks: list[LockSpan], cap: int | None) -> tuple[list[LockSpan], str | None]:
    """At most ``cap`` of ``locks``: the sandboxes' waits on the key locks
    first, then the longest others; and the trace's note saying what went.

    Where the key waits alone are more than ``cap``, every k-th in time is
    kept (evenly over the storm: the earliest alone would drop its tail), and
    the note gives the counts, so that a reader scales their sums.
    """
    if cap is None or len(locks) <= cap:
        return locks, None
    key = [lk for lk in locks if lk.lock in KEY_LOCKS and lk.sandbox is not None]
    rest = sorted(
        (lk for lk in locks if not (lk.lock in KEY_LOCKS and lk.sandbox is not None)),
        key=lambda lk: lk.end_s - lk.start_s,
        reverse=True,
    )
    names = ", ".join(KEY_LOCKS)
    if len(key) <= cap:
        kept = key + rest[: cap - len(key)]
        why = f"all {len(key)} {names} waits of sandboxes, then the longest others"
    else:
        key.sort(key=lambda lk: lk.start_s)
        kept = [key[i * len(key) // cap] for i in range(cap)]
        why = (
            f"{cap} of the {len(key)} {names} waits of sandboxes, evenly over the storm "
            f"(their sums short by that ratio), none of the others"
        )
    note = f"kernel lock spans sampled: {len(kept)} of {len(locks)} kept ({why})"
    return sorted(kept, key=lambda lk: lk.start_s), note


def _arrival(options: StormOptions, index: int) -> float:
    """Sandbox ``index``'s start, seconds after the origin (0: all at once)."""
    return 0.0 if options.arrival_s is None else options.arrival_s[index]


def _schedule_note(
    schedule: StartSchedule, sandboxes: Sequence[Sandbox], options: StormOptions, origin_s: float
) -> str:
    """The trace's note on a schedule: its span, and how far behind it the
    host ran (arrivals stay the scheduled times, late or not)."""
    times = options.arrival_s or (0.0,)
    late = [
        sb.began_s - (origin_s + _arrival(options, sb.index))
        for sb in sandboxes
        if sb.began_s is not None
    ]
    worst = max(late, default=0.0)
    over = sum(1 for x in late if x > LATE_S)
    return (
        f"scheduled starts: {schedule.started} of {len(times)} over {times[-1] - times[0]:.3f} s "
        f"(arrival_s); sandboxes began their first stage up to {max(worst, 0.0) * 1e3:.1f} ms "
        f"after their arrival ({over} more than {LATE_S * 1e3:.0f} ms late); the scheduler "
        f"ran up to {schedule.behind_s * 1e3:.1f} ms behind (it starts each sandbox's thread "
        f"{SETUP_LEAD_S * 1e3:.0f} ms ahead); each arrival is the scheduled time, startup "
        "counts from it"
    )


def run_storm(options: StormOptions, *, admission: Admission | None = None) -> StormResult:
    """Run one storm and return its trace; everything made is removed before returning.

    ``admission`` replaces the local semaphores and pools (e.g. a node
    agent's, :class:`bootstorm.validation.agent.AgentAdmission`); then pools
    are the agent's business.
    """
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (network namespaces, cgroups, tracefs)")
    from ...traces.kernel import (
        KernelCollector,
        LockNamer,
        join_contention,
        read_kallsyms,
        softirq_spans,
    )

    # Before anything is made: a missing plugin is one line, not a half-made run.
    runtime_class(options.runtime).check_host(options=options)
    run = new_run_id()
    register_run(run)
    try:
        storm = _Storm(options, admission, run)
    except BaseException:
        unregister_run(run)
        raise
    runtime = storm.runtime
    collector: KernelCollector | None = None
    sampler: PoolSampler | None = None
    try:
        sweep_leftovers(keep={storm.run})
        load = os.getloadavg()
        # The host may be shared: a busy one stretches every stage. The load
        # average lags (an earlier storm still shows in it); the CPU time
        # other work takes right now is measured over a short window.
        storm.notes.append(
            f"load average before the storm: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
            f"on {os.cpu_count()} cores"
        )
        busy = settle(options.settle_s)
        storm.notes.append(f"cores busy before the storm: {busy:.2f}")
        storm.prepare()
        meter = CpuMeter()  # the storm's CPU work: origin to the last sandbox
        barrier: threading.Barrier | None = None
        schedule: StartSchedule | None = None
        threads: list[threading.Thread] = []
        if options.arrival_s is None:
            barrier = threading.Barrier(options.sandboxes + 1)
            threads = [
                threading.Thread(
                    target=storm.sandbox_thread,
                    args=(sb, barrier),
                    name=f"sandbox-{sb.index}",
                    daemon=True,
                )
                for sb in storm.sandboxes
            ]
        else:
            schedule = StartSchedule(
                arrival_s=options.arrival_s, stop=storm.stop, lead_s=SETUP_LEAD_S
            )
        if options.lifetime_s is not None:
            storm.reaper = _Reaper(
                lifetime_s=options.lifetime_s, stop_vm=lambda sb: runtime.stop_vm(sandbox=sb)
            )
        try:
            for t in threads:
                t.start()
            if options.kernel_trace:
                collector = KernelCollector(
                    softirqs=options.softirqs, buffer_size_kb=options.buffer_size_kb
                )
                collector.start()
            meter.start()
            if not storm.own_admission and isinstance(storm.admission, PoolSampling):
                # An agent's pools refill during the storm: their levels are
                # sampled from here (its first, before the origin) to its end.
                sampler = PoolSampler(storm.admission, interval_s=options.pool_sample_s)
                sampler.start()
            if schedule is None:
                assert barrier is not None
                origin_s = time.monotonic()
                barrier.wait()
            else:
                # Sandboxes start on this thread's schedule, each thread made
                # when its time comes: only those under way hold one.
                origin_s = time.monotonic() + SETUP_LEAD_S
                for i in schedule.due(origin_s=origin_s):
                    sb = storm.sandboxes[i]
                    t = threading.Thread(
                        target=storm.scheduled_thread,
                        args=(sb, origin_s + _arrival(options, i)),
                        name=f"sandbox-{sb.index}",
                        daemon=True,
                    )
                    threads.append(t)
                    t.start()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.2)
            meter.stop()
            if sampler is not None:
                sampler.stop()  # with the levels at the storm's end
        except BaseException:
            meter.stop()
            storm.stop.set()
            if barrier is not None:
                barrier.abort()
            runtime.interrupt(sandboxes=storm.sandboxes)
            deadline = time.monotonic() + 10.0
            for t in threads:
                if t.is_alive():
                    t.join(timeout=max(0.0, deadline - time.monotonic()))
            raise
        if storm.reaper is not None:
            storm.reaper.close()  # before finish: the VMs left are the runtime's to stop
            storm.notes.append(storm.reaper.note())
        if schedule is not None:
            storm.notes.append(_schedule_note(schedule, storm.sandboxes, options, origin_s))
        if sampler is not None and (failed := sampler.note()) is not None:
            storm.notes.append(failed)
        capture = collector.stop() if collector is not None else None
        # After the kernel trace: the stops are not the storm's.
        vm_stops = timed_stops(
            lambda sb: runtime.stop_vm(sandbox=sb),
            storm.sandboxes,
            skip=storm.reaper.stopped_indices if storm.reaper is not None else (),
        )
        execs: tuple[ExecSpan, ...] = runtime.finish(sandboxes=storm.sandboxes)
        spans = sorted((s for sb in storm.sandboxes for s in sb.spans), key=lambda s: s.start_s)
        busy_core_s = meter.busy_core_s(origin_s, max(s.end_s for s in spans)) if spans else None
        locks: list[LockSpan] = []
        softirqs = []
        kernel_facts = None
        if capture is not None:
            # The runtime's processes (VMMs, plugins, shims, tc), by pid.
            extra = dict(runtime.kernel_owners(sandboxes=storm.sandboxes, spans=spans, execs=execs))
            all_locks = join_contention(
                capture.contentions, spans, namer=LockNamer(read_kallsyms()), extra=extra
            )
            locks, sampled = _sample(all_locks, options.max_lock_spans)
            softirqs = softirq_spans(capture.softirqs)
            kernel_facts = KernelTraceFacts(
                events=capture.event_names,
                buffer_size_kb=capture.buffer_size_kb,
                overrun=capture.overrun,
                lock_spans_seen=len(all_locks),
                lock_spans_written=len(locks),
                softirq_spans_seen=len(softirqs),
                softirq_spans_written=len(softirqs),
                record_tgid=capture.record_tgid,
            )
            if sampled is not None:
                storm.notes.append(sampled)
        in_force = options.config
        if in_force is not None and in_force.pool_refill is not None and storm.own_admission:
            # The testbed's own pools are made before the storm and never
            # refilled: the config's refill policy was not in force (a node
            # agent's pools refill: --agent).
            in_force = in_force.model_copy(update={"pool_refill": None})
            storm.notes.append(
                "pool_refill: not in force (the testbed's own pools are made before the "
                "storm; a node agent refills them: --agent)"
            )
        header = TraceHeader(
            source="testbed",
            clock="monotonic",
            origin_s=origin_s,
            stages=STAGES,
            host=current_host(),
            busy_core_s=busy_core_s,
            config=in_force,
            scenario=ScenarioFacts(
                sandboxes=options.sandboxes,
                cni=options.variant,
                runtime=options.runtime,
                vm="qemu-microvm" if storm.runner.mode == "qemu-microvm" else "process",
                vm_memory_mib=options.vm_memory_mib
                if storm.runner.mode == "qemu-microvm"
                else None,
                mem_prealloc=options.mem_prealloc and storm.runner.mode == "qemu-microvm",
                netprio_ifpriomap=options.netprio_ifpriomap,
                pools=runtime.pools_made(),
                through_agent=not storm.own_admission,
                lifetime_s=options.lifetime_s,
            ),
            kernel_trace=kernel_facts,
            vm_stops=vm_stops,
            created_at=datetime.now(UTC),
            notes=tuple(storm.notes),
        )
        trace = Trace(
            header=header,
            spans=tuple(spans),
            locks=tuple(locks),
            softirqs=tuple(softirqs),
            admits=tuple(
                sorted((a for sb in storm.sandboxes for a in sb.admits), key=lambda a: a.start_s)
            ),
            arrivals=tuple(
                Arrival(sandbox=sb.index, t_s=origin_s + _arrival(options, sb.index))
                for sb in storm.sandboxes
            ),
            execs=execs,
            pool_takes=tuple(
                sorted((p for sb in storm.sandboxes for p in sb.takes), key=lambda p: p.t_s)
            ),
            pool_levels=sampler.samples if sampler is not None else (),
        )
        failures = tuple(f"{sb.index}: {sb.error}" for sb in storm.sandboxes if sb.error)
        return StormResult(trace=trace, failures=failures, run=storm.run)
    finally:
        try:
            if sampler is not None:
                sampler.stop(last=False)  # stopped already, unless the storm failed
            if storm.reaper is not None:
                storm.reaper.close()  # no stop of its may race the teardown
            if collector is not None:
                collector.close()
        finally:
            storm.cleanup()
