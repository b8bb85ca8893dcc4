"""The testbed driver: a real boot storm of seed 000's pipeline on this host.

Each sandbox is one thread; all threads wait at a barrier and start at once.
Each runs the five stages (seed 000 §4.1.1), each entered through admission
(a stage limit, a pool) and timed on CLOCK_MONOTONIC with the thread id.
What a stage does is the runtime's (:class:`~.runtime.StormRuntime`, picked
once by ``StormOptions.runtime``): ``threads`` makes the kernel objects a
Kata sandbox's network start makes through in-process netlink
(:mod:`.threads_runtime`); ``cni`` runs them as containerd and Kata do, real
CNI plugins exec'd in AddCNI and one shim process per sandbox for AttachIf
and StartVM (:mod:`.cni_runtime`). The driver knows no runtime by name.

Everything created is removed on success, failure and interrupt; a killed
run's leftovers are swept by the next run (see :mod:`._leftovers`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from ...traces import (
    AdmitSpan,
    Arrival,
    ExecSpan,
    KernelTraceFacts,
    LockSpan,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceHeader,
)
from .._names import CGROUP_PARENT
from . import cni_runtime as _cni_runtime  # noqa: F401  (registers "cni")
from . import threads_runtime as _threads_runtime  # noqa: F401  (registers "threads")
from ._cgroup import cgroup2_root, remove_tree
from ._errors import TestbedError
from ._host import CpuMeter, host_facts, settle, signals_deferred
from ._leftovers import (
    WORKDIR_PREFIX,
    RunNames,
    new_run_id,
    register_run,
    sweep_leftovers,
    unregister_run,
)
from ._vm import VmRunner, build_stub, vm_available
from .admission import Admission, LocalAdmission
from .options import STAGES, StormOptions, StormResult
from .runtime import Sandbox, StageBody, StormContext, StormRuntime, runtime_class

__all__ = ["STAGES", "StormOptions", "StormResult", "TestbedError", "run_storm"]

log = logging.getLogger(__name__)

#: Locks named in the file in full when kernel spans are sampled.
KEY_LOCKS = ("rtnl", "cgroup_mutex", "css_set_lock")


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
        self._own_admission = admission is None
        self.admission: Admission = admission or LocalAdmission(limits=limits)
        context = StormContext(
            options=options,
            run=run,
            names=self.names,
            runner=self.runner,
            notes=self.notes,
            stop=self.stop,
            own_admission=self._own_admission,
        )
        try:
            self.runtime: StormRuntime[Sandbox] = runtime_class(options.runtime)(context=context)
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self.sandboxes = [self.runtime.new_sandbox(index=i) for i in range(options.sandboxes)]

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
        holder = f"{self.run}/{sb.index}"
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

    def sandbox_thread(self, sb: Sandbox, barrier: threading.Barrier) -> None:
        try:
            self.runtime.setup_sandbox(sandbox=sb)
        except Exception as exc:
            sb.error = f"setup: {type(exc).__name__}: {exc}"
        try:
            barrier.wait()  # even after a failed setup: the others must not wait forever
            if sb.error is not None:
                return
            for name, body in zip(STAGES, self.runtime.stage_bodies(), strict=True):
                self._stage(sb, name, body)
        except threading.BrokenBarrierError:
            sb.error = "storm aborted before it started"
        except Exception as exc:
            sb.error = f"{type(exc).__name__}: {exc}"
            log.debug("sandbox %d failed", sb.index, exc_info=True)
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
        barrier = threading.Barrier(options.sandboxes + 1)
        meter = CpuMeter()  # the storm's CPU work: barrier to the last sandbox
        threads = [
            threading.Thread(
                target=storm.sandbox_thread,
                args=(sb, barrier),
                name=f"sandbox-{sb.index}",
                daemon=True,
            )
            for sb in storm.sandboxes
        ]
        try:
            for t in threads:
                t.start()
            if options.kernel_trace:
                collector = KernelCollector(
                    softirqs=options.softirqs, buffer_size_kb=options.buffer_size_kb
                )
                collector.start()
            meter.start()
            origin_s = time.monotonic()
            barrier.wait()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.2)
            meter.stop()
        except BaseException:
            meter.stop()
            storm.stop.set()
            barrier.abort()
            runtime.interrupt(sandboxes=storm.sandboxes)
            deadline = time.monotonic() + 10.0
            for t in threads:
                if t.is_alive():
                    t.join(timeout=max(0.0, deadline - time.monotonic()))
            raise
        capture = collector.stop() if collector is not None else None
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
        header = TraceHeader(
            source="testbed",
            clock="monotonic",
            origin_s=origin_s,
            stages=STAGES,
            host=host_facts(),
            busy_core_s=busy_core_s,
            config=options.config,
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
            ),
            kernel_trace=kernel_facts,
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
            arrivals=tuple(Arrival(sandbox=sb.index, t_s=origin_s) for sb in storm.sandboxes),
            execs=execs,
        )
        failures = tuple(f"{sb.index}: {sb.error}" for sb in storm.sandboxes if sb.error)
        return StormResult(trace=trace, failures=failures, run=storm.run)
    finally:
        try:
            if collector is not None:
                collector.close()
        finally:
            storm.cleanup()
