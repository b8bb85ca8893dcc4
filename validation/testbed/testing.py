"""The contract every testbed runtime meets, as tests: :class:`StormRuntimeContract`.

A runtime's test module subclasses it (``class TestThreadsRuntime(StormRuntimeContract)``)
and sets :attr:`~StormRuntimeContract.runtime`; the inherited tests run small
real storms (a few sandboxes, the StartVM fallback process, no kernel trace)
and check what :class:`~.runtime.StormRuntime` promises:

- **record**: one stage span per stage per completed sandbox, in
  :data:`~.options.STAGES` order; admit spans only at a gated stage; exec
  spans where the runtime runs processes;
- **clean up**: nothing named after the run left on the host (namespaces,
  links, cgroups, the work directory, the registry entry, CNI state, shims
  and VMs) after a storm that succeeded, one with a failed sandbox, and one
  interrupted mid-stage;
- **report**: a sandbox whose stage raised is one line of
  ``StormResult.failures``, and the others complete; the pools made are the
  header's.

They need root (namespaces, cgroups): the subclass's module marks them
``root`` and skips them elsewhere, as ``tests/validation/test_testbed_root.py`` does.
"""

from __future__ import annotations

import _thread
import os
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from .._names import CGROUP_PARENT
from ._leftovers import CNI_STATE_DIR, REGISTRY_DIR, SHIM_SCRIPT, WORKDIR_PREFIX, process_argvs
from .driver import run_storm
from .options import STAGES, StormOptions
from .runtime import Sandbox, StormRuntime, runtime_class

__all__ = ["StormRuntimeContract", "leftovers_of"]


def leftovers_of(run: str) -> list[str]:
    """Every object on this host named after run ``run``, one line each
    (empty when the run left nothing). Names only this run's: another storm
    may run beside it."""
    from pyroute2 import IPRoute

    from ._cgroup import cgroup2_root

    netns_dir = Path("/run/netns")
    names = sorted(os.listdir(netns_dir)) if netns_dir.is_dir() else []
    left = [f"netns {n}" for n in names if n.startswith(f"bst-{run}-")]
    with IPRoute() as ipr:
        left += [
            f"link {n}"
            for link in ipr.get_links()
            if (n := link.get_attr("IFLA_IFNAME")) and n.startswith(f"bst{run}")
        ]
    cgroup = cgroup2_root() / CGROUP_PARENT / run
    if cgroup.exists():
        left.append(f"cgroup {cgroup}")
    workdirs = Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}{run}-*")
    left += [f"workdir {p}" for p in workdirs]
    if (REGISTRY_DIR / run).exists():
        left.append(f"registry {run}")
    if (CNI_STATE_DIR / run).exists():
        left.append(f"cni state {CNI_STATE_DIR / run}")
    tag = f"bst-{run}-".encode()
    script = str(SHIM_SCRIPT).encode()
    for pid, argv in process_argvs():
        if pid != os.getpid() and any(a.startswith(tag) for a in argv):
            what = "shim" if script in argv else "process"
            left.append(f"{what} {pid} {b' '.join(argv)[:80]!r}")
    return left


class StormRuntimeContract:
    """Subclass as ``Test...`` and set :attr:`runtime`.

    ``runs_processes``: the runtime execs processes a trace records (its
    stages' exec spans); ``extra_options``: what its storms need beyond the
    small defaults (a plugin, say).
    """

    runtime: ClassVar[str]
    runs_processes: ClassVar[bool] = False
    sandboxes: ClassVar[int] = 3
    extra_options: ClassVar[dict[str, Any]] = {}

    def options(self, **overrides: Any) -> StormOptions:
        """A small, quick storm of this runtime: no VM, no kernel trace, no settling."""
        fields: dict[str, Any] = {
            "runtime": self.runtime,
            "sandboxes": self.sandboxes,
            "vm": False,
            "kernel_trace": False,
            "settle_s": 0.0,
            **self.extra_options,
            **overrides,
        }
        return StormOptions(**fields)

    def runtime_class(self) -> type[StormRuntime[Sandbox]]:
        return runtime_class(self.runtime)

    def patch_stage(
        self,
        monkeypatch: pytest.MonkeyPatch,
        stage: str,
        body: Callable[[StormRuntime[Sandbox], Sandbox, Callable[[Sandbox], Any]], Any],
    ) -> None:
        """Replace stage ``stage``'s body by ``body(runtime, sandbox, original)``."""
        method = {
            "NetNS": "netns",
            "AddCNI": "add_cni",
            "Cgroup": "cgroup",
            "AttachIf": "attach_if",
            "StartVM": "start_vm",
        }[stage]
        cls = self.runtime_class()
        original = getattr(cls, method)

        def patched(rt: StormRuntime[Sandbox], sb: Sandbox, /) -> Any:
            return body(rt, sb, lambda s: original(rt, s))

        monkeypatch.setattr(cls, method, patched)

    # -- record ---------------------------------------------------------------------

    def test_records_each_stage_of_each_sandbox_in_order(self) -> None:
        result = run_storm(self.options())
        assert result.failures == ()
        trace = result.trace
        assert trace.header.scenario is not None
        assert trace.header.scenario.runtime == self.runtime
        assert trace.header.stages == STAGES
        for i in range(self.sandboxes):
            mine = sorted((s for s in trace.spans if s.sandbox == i), key=lambda s: s.start_s)
            assert tuple(s.stage for s in mine) == STAGES, f"sandbox {i}"
            assert all(s.end_s >= s.start_s for s in mine)
        assert sorted(a.sandbox for a in trace.arrivals) == list(range(self.sandboxes))
        assert trace.admits == (), "no stage is gated, so no wait is an admission wait"
        assert leftovers_of(result.run) == []

    def test_records_admits_only_at_a_gated_stage(self) -> None:
        from ...models import TunedConfig

        config = TunedConfig(limits={"StartVM": 1})
        result = run_storm(self.options(config=config))
        assert result.failures == ()
        trace = result.trace
        assert {a.stage for a in trace.admits} <= {"StartVM"}
        for admit in trace.admits:
            (span,) = (s for s in trace.spans if (s.sandbox, s.stage) == (admit.sandbox, "StartVM"))
            assert admit.end_s <= span.end_s
        assert leftovers_of(result.run) == []

    def test_records_the_processes_it_runs(self) -> None:
        result = run_storm(self.options())
        assert result.failures == ()
        execs = result.trace.execs
        if not self.runs_processes:
            assert execs == ()
            return
        for i in range(self.sandboxes):
            stages = {e.stage for e in execs if e.sandbox == i}
            assert {"AddCNI", "AttachIf"} <= stages, f"sandbox {i}: {sorted(stages)}"
        assert list(execs) == sorted(execs, key=lambda e: e.start_s)
        assert all(e.end_s >= e.start_s and e.pid > 0 for e in execs)

    # -- report ---------------------------------------------------------------------

    def test_reports_a_failed_sandbox_and_completes_the_others(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def failing(rt: StormRuntime[Sandbox], sb: Sandbox, original: Callable[..., Any]) -> Any:
            if sb.index == 1:
                raise RuntimeError("no cgroup for sandbox 1")
            return original(sb)

        self.patch_stage(monkeypatch, "Cgroup", failing)
        result = run_storm(self.options())
        assert result.failures == ("1: RuntimeError: no cgroup for sandbox 1",)
        spans = result.trace.spans
        assert sorted(s.stage for s in spans if s.sandbox == 1) == sorted(("NetNS", "AddCNI"))
        for i in set(range(self.sandboxes)) - {1}:
            assert sorted(s.stage for s in spans if s.sandbox == i) == sorted(STAGES)
        assert leftovers_of(result.run) == []

    def test_reports_the_pools_it_made(self) -> None:
        from ...models import TunedConfig

        result = run_storm(self.options(config=TunedConfig(pools={"netns": 2})))
        assert result.failures == ()
        assert result.trace.header.scenario is not None
        assert result.trace.header.scenario.pools == {"netns": 2}
        assert leftovers_of(result.run) == []

    # -- clean up -------------------------------------------------------------------

    def test_cleans_up_after_an_interrupt_mid_stage(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Ctrl-C while sandboxes are inside Cgroup (their namespaces and
        endpoints made): the storm raises, and nothing of it is left."""
        if threading.current_thread() is not threading.main_thread():
            pytest.skip("a KeyboardInterrupt reaches the main thread only")
        inside, done = threading.Event(), threading.Event()
        runs: list[str] = []

        def blocked(rt: StormRuntime[Sandbox], sb: Sandbox, original: Callable[..., Any]) -> Any:
            runs.append(rt.context.run)
            inside.set()
            rt.context.stop.wait(30.0)  # the driver sets it on an interrupt
            raise InterruptedError("storm stopped")

        def interrupt_when_inside() -> None:
            if inside.wait(60.0) and not done.is_set():
                _thread.interrupt_main()

        self.patch_stage(monkeypatch, "Cgroup", blocked)
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupter = threading.Thread(target=interrupt_when_inside, daemon=True)
        try:
            interrupter.start()
            with pytest.raises(KeyboardInterrupt):
                run_storm(self.options())
        finally:
            done.set()
            inside.set()
            signal.signal(signal.SIGINT, previous)
            interrupter.join(timeout=5.0)
        assert runs, "no sandbox reached Cgroup"
        assert leftovers_of(runs[0]) == []
