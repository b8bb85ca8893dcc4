"""The ``cni`` runtime: a sandbox's stages as containerd and Kata run them.

The sandbox's thread (containerd's goroutine per pod) does next to no work
itself: NetNS and Cgroup as the ``threads`` runtime makes them, AddCNI execs
the network's real CNI plugins, AttachIf and StartVM are a shim process per
sandbox (:class:`._cni_stages.CniRuntime` has the details). Its pools are
``netns`` and ``netns-veth``: namespaces whose CNI ADD was done before the
storm, the run's own or an agent's started with ``--cni``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...traces import ExecSpan, StageSpan
from ._cni_stages import (
    CniRuntime,
    CniSandbox,
    cni_host,
    exec_owners,
    raise_fd_limit,
    wrapper_overhead,
)
from ._namespaced import NamespacedRuntime, NamespacedSandbox
from .admission import Admission, CniPooledNetns, LocalAdmission, PluginAgent
from .options import StormOptions
from .runtime import Owner, Stamps, StormContext, register_runtime

__all__ = ["CniStormRuntime", "CniStormSandbox"]


@dataclass(kw_only=True)
class CniStormSandbox(NamespacedSandbox):
    """A sandbox's namespace and cgroup, and its CNI and shim state."""

    cni: CniSandbox


@register_runtime
class CniStormRuntime(NamespacedRuntime[CniStormSandbox]):
    """Real CNI plugins and a shim per sandbox (module doc)."""

    name = "cni"

    @classmethod
    def check_host(cls, *, options: StormOptions) -> None:
        """The plugins and ``tc`` (:func:`._cni_stages.cni_host`)."""
        cni_host(options)

    def __init__(self, *, context: StormContext) -> None:
        super().__init__(context=context)
        opts = self.options
        self.cni = CniRuntime(
            options=opts, host=cni_host(opts), names=self.names, runner=self.runner
        )
        # The cni runtime's netns-veth: namespaces with their CNI ADD done.
        self.pool_cni_netns: list[str] = []
        pools = opts.config.pools if opts.config else None
        if context.own_admission:
            # The run's own pool of them, if the config asks for one.
            self._wants_netns_veth = bool(pools and pools.get("netns-veth", 0) > 0)
        else:
            # An agent's (asked before the storm whether it ADDs them: prepare).
            self._wants_netns_veth = pools is None or pools.get("netns-veth", 0) > 0
        if short := raise_fd_limit(opts.sandboxes):
            self.notes.append(short)

    def new_sandbox(self, *, index: int) -> CniStormSandbox:
        return CniStormSandbox(index=index, cni=CniSandbox(index=index, name=self.names.vm(index)))

    def prepare(self, *, admission: Admission, cgroup_run: Path) -> Admission:
        """The run's CNI network, and its pools: namespaces, and namespaces
        with their ADD done (``netns-veth``)."""
        self.admission, self.cgroup_run = admission, cgroup_run
        opts = self.options
        if opts.cni_wrapper == "bootstorm-cni":
            # The plugin takes AddCNI's permit from the storm's agent, in each
            # ADD's own process: the driver must not take it too.
            if isinstance(admission, PluginAgent):
                self.cni.plugin_agent = admission.plugin_agent()
            holders = (
                None
                if opts.cni_wrapper_every == 1
                else frozenset(
                    self.holder_of(i) for i in range(opts.sandboxes) if self.cni.wrapped(i)
                )
            )
            self.admission = admission = _PluginAdmitted(admission, stage="AddCNI", holders=holders)
        self.cni.prepare()
        self.notes.extend(self.cni.notes)
        pools = opts.config.pools if opts.config else {}
        n_netns = min(pools.get("netns", 0), opts.sandboxes)
        n_nv = min(pools.get("netns-veth", 0), opts.sandboxes)
        if (n_netns or n_nv) and self.context.own_admission:
            self.make_netns_pool(n_netns)
            netns_veth = [self.names.pool_netns_veth(k)[0] for k in range(n_nv)]
            # Listed before they are made: cleanup removes whichever exist.
            self.pool_cni_netns = list(netns_veth)
            self.admission = LocalAdmission(
                limits=opts.config.limits if opts.config else {},
                pools={"netns": self.pool_netns},
                cni_netns=self.cni.fill_pool(netns_veth),
            )
        if self._wants_netns_veth and not self.context.own_admission:
            # An agent's netns-veth pairs are usable only if a CNI ADD made
            # them (an agent started with --cni): asked once, before the storm.
            self._wants_netns_veth = self.admission.offers_cni_netns()
            if not self._wants_netns_veth:
                self.notes.append(
                    "runtime cni with an agent whose netns-veth pool is not CNI-plumbed "
                    "(start it with --cni): only its netns pool is used"
                )
        # A gated StartVM: the shim waits for the driver's go once admitted.
        self.cni.wait_go = self.admission.gated("StartVM")
        return self.admission

    # -- the stages: the netns name handed over, the rest exec'd ----------------

    def netns(self, sb: CniStormSandbox, /) -> None:
        assert self.admission is not None
        if self._wants_netns_veth:
            plumbed = self.took(sb, "netns-veth", self.admission.take_cni_netns(self.holder(sb)))
            if plumbed is not None:
                self.cni.take_pooled(sb.cni, plumbed)
                self.open_netns(sb, plumbed.netns)
                return
        self.pooled_or_new_netns(sb)

    def add_cni(self, sb: CniStormSandbox, /) -> None:
        sb.cni.netns = sb.netns
        self.cni.add_cni(sb.cni)

    def cgroup(self, sb: CniStormSandbox, /) -> None:
        self.make_cgroup(sb)

    def attach_if(self, sb: CniStormSandbox, /) -> Stamps:
        return self.cni.attach_if(sb.cni, sb.cgroup)

    def start_vm(self, sb: CniStormSandbox, /) -> Stamps:
        return self.cni.start_vm(sb.cni)

    def stop_vm(self, *, sandbox: CniStormSandbox) -> None:
        """Its shim stopped (stdin closed: it stops its VMM and exits, as
        containerd stops a sandbox's shim), recorded as at the end of the
        storm; its CNI DEL and namespace wait for teardown."""
        with contextlib.suppress(Exception):
            self.cni.stop_shims([sandbox.cni])

    # -- after the storm --------------------------------------------------------

    def interrupt(self, *, sandboxes: Sequence[CniStormSandbox]) -> None:
        self.cni.interrupt(sb.cni for sb in sandboxes)  # a shim's reader gets EOF

    def finish(self, *, sandboxes: Sequence[CniStormSandbox]) -> tuple[ExecSpan, ...]:
        # Shims stopped and every ADD DELeted now, so their processes are in the trace.
        cnis = [sb.cni for sb in sandboxes]
        self.cni.teardown(cnis)
        execs = tuple(self.cni.execs(cnis))
        if self.options.cni_wrapper != "none" and (note := wrapper_overhead(execs)):
            self.notes.append(note)
        return execs

    def kernel_owners(
        self,
        *,
        sandboxes: Sequence[CniStormSandbox],
        spans: Iterable[StageSpan],
        execs: Iterable[ExecSpan],
    ) -> Mapping[int, list[Owner]]:
        """The runtime's processes (plugins, shims, tc, VMMs), by pid."""
        return exec_owners(spans, execs)

    def pools_made(self) -> dict[str, int]:
        made = {"netns": len(self.pool_netns), "netns-veth": len(self.pool_cni_netns)}
        return {kind: n for kind, n in made.items() if n}

    def teardown(self, *, sandboxes: Sequence[CniStormSandbox]) -> None:
        # Shims (and their VMMs) stopped, then DEL before the namespaces go.
        with contextlib.suppress(Exception):
            self.cni.teardown([sb.cni for sb in sandboxes])
        self.remove_namespaces(sandboxes, pooled=[*self.pool_netns, *self.pool_cni_netns])
        self.cni.remove()  # the bridge and the state, once nothing uses them


class _PluginAdmitted:
    """An admission whose ``stage`` is admitted by the CNI plugin itself
    (``bootstorm-cni`` takes its permit in each ADD): the driver passes it
    ungated for the ``holders`` whose ADD goes through the plugin (None: all);
    every other stage, holder, pool and optional protocol goes to ``inner``."""

    def __init__(self, inner: Admission, *, stage: str, holders: frozenset[str] | None) -> None:
        self._inner = inner
        self._stage = stage
        self._holders = holders

    def _plugin_admits(self, holder: str) -> bool:
        return self._holders is None or holder in self._holders

    def gated(self, name: str) -> bool:
        if name == self._stage and self._holders is None:
            return False
        return self._inner.gated(name)

    def stage(self, name: str, holder: str) -> contextlib.AbstractContextManager[None]:
        if name == self._stage and self._plugin_admits(holder):
            return contextlib.nullcontext()
        return self._inner.stage(name, holder)

    def take(self, kind: str, holder: str) -> str | None:
        return self._inner.take(kind, holder)

    def take_pair(self, kind: str, holder: str) -> tuple[str, str] | None:
        return self._inner.take_pair(kind, holder)

    def take_netns_veth(self, holder: str) -> tuple[str, str] | None:
        return self._inner.take_netns_veth(holder)

    def offers_cni_netns(self) -> bool:
        return self._inner.offers_cni_netns()

    def take_cni_netns(self, holder: str) -> CniPooledNetns | None:
        return self._inner.take_cni_netns(holder)

    def __getattr__(self, name: str) -> Any:
        # The optional protocols (PoolLevels, PoolSampling, PluginAgent) where
        # ``inner`` has them: ``isinstance`` on a runtime protocol asks here.
        return getattr(self._inner, name)
