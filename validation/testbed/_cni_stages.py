"""The testbed's ``cni`` runtime: a sandbox's stages as containerd and Kata run them.

The driver keeps one thread per sandbox (containerd's goroutine per pod),
but here that thread does next to no work itself: it execs real processes
and waits for them.

- **NetNS**: the driver's, unchanged (a named namespace, or a pooled one);
- **AddCNI**: the network's plugins exec'd through the CNI protocol
  (:mod:`.cni`): ADD through the chain, CHECK on request; a sandbox that
  took a ``netns-veth`` namespace finds its ADD done before the storm;
- **Cgroup**: the driver's, unchanged;
- **AttachIf**: a shim process (:mod:`.shim`, one per sandbox, as Kata's
  containerd-shim-kata-v2) started; it enters the namespace, makes the tap
  and runs ``tc`` (Kata's tcfilter mode); the span runs from the shim's
  start to its ``attach_done``;
- **StartVM**: from ``attach_done`` (or, when StartVM is gated, from the
  driver's ``go`` once admitted) until the shim reports ``vm_up``.

Every process a sandbox runs is an :class:`~bootstorm.traces.ExecSpan`;
kernel waits join to them by pid (:func:`exec_owners`). After the storm the
shims are stopped and every sandbox that ADDed is DELeted (the chain in
reverse), before the driver removes the namespaces.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ...traces import ExecSpan, StageSpan
from .._netns import NETNS_RUN_DIR, create_netns_here
from ._leftovers import SHIM_SCRIPT, RunNames
from ._vm import BOOT_TIMEOUT_S, MARKER, VmRunner
from .admission import CniPooledNetns, PluginAgentEndpoint
from .cni import (
    IPAM_PLUGIN,
    CniError,
    CniNetwork,
    CniResult,
    CniSetupError,
    ExecRecord,
    add,
    build_network,
    check,
    delete_logged,
    discover_bin_dir,
    parse_result,
)
from .networks import CNI_STATE_DIR, IFNAME, claim_network, make_bridge
from .options import StormOptions

__all__ = [
    "SHIM_FLAGS",
    "WRAPPER",
    "CniHost",
    "CniRuntime",
    "CniSandbox",
    "ShimError",
    "WrapperSplit",
    "cni_host",
    "exec_owners",
    "raise_fd_limit",
    "wrapper_overhead",
    "wrapper_split",
]

log = logging.getLogger(__name__)

#: The shim's interpreter flags: isolated (no environment, no user site) and
#: no ``site`` (the editable install's import hook would cost ~20 ms a start):
#: a bare interpreter, as cheap as Python starts.
SHIM_FLAGS = ("-I", "-S")
TAP = "tap0"
#: A shim told to stop (stdin closed) gets this long before SIGTERM, then SIGKILL.
SHIM_STOP_WAIT_S = 5.0
#: DELs (and pooled ADDs) run this many at once: the host has few cores.
WORKERS = 4
#: Descriptors the driver holds per sandbox at the peak: its namespace, the
#: shim's stdin and stdout, a plugin's three pipes.
FDS_PER_SANDBOX = 6

Owner = tuple[float, float, int, str]


class ShimError(RuntimeError):
    """A sandbox's shim reported an error, or ended before it reported."""


#: The plugin a node's conflist puts in its startup path (``--cni-wrapper``).
WRAPPER = "bootstorm-cni"
#: Its agent calls' bound (each), and how long it waits for AddCNI's permit:
#: a storm's sandboxes queue behind a limit for as long as the storm lasts.
WRAPPER_TIMEOUT_S = 10.0
WRAPPER_WAIT_S = 600.0


@dataclass(frozen=True, kw_only=True)
class CniHost:
    """What the ``cni`` runtime needs of this host, found before a run starts."""

    bin_dir: Path
    tc: Path
    #: The directory holding ``bootstorm-cni`` (``--cni-wrapper``), else None.
    wrapper_dir: Path | None = None

    @property
    def plugin_dirs(self) -> tuple[Path, ...]:
        """``CNI_PATH``: the plugins' directory, then the wrapper's."""
        return (self.bin_dir,) if self.wrapper_dir is None else (self.bin_dir, self.wrapper_dir)


def find_wrapper() -> Path:
    """``bootstorm-cni``: beside this interpreter (its venv or prefix), else on PATH."""
    here = Path(sys.executable).parent / WRAPPER
    if here.is_file() and os.access(here, os.X_OK):
        return here
    found = shutil.which(WRAPPER)
    if found is None:
        raise CniSetupError(
            f"cni_wrapper: {WRAPPER!r} is not installed beside {sys.executable} nor on PATH "
            "(pip install bootstorm installs it)"
        )
    return Path(found)


def cni_host(options: StormOptions) -> CniHost:
    """The plugin directory (:func:`.cni.discover_bin_dir`) and ``tc``;
    :class:`.cni.CniSetupError` (one line) if either is missing."""
    plugins = [options.cni_plugin, *options.cni_chain, IPAM_PLUGIN]
    bin_dir = discover_bin_dir(options.cni_bin_dir, plugins)
    tc = shutil.which("tc") or next(
        (p for p in ("/usr/sbin/tc", "/sbin/tc") if os.access(p, os.X_OK)), None
    )
    if tc is None:
        raise CniSetupError(
            "runtime: 'cni' needs the tc binary (iproute2) for the shim's filters; "
            "not found on PATH or in /usr/sbin"
        )
    wrapper = find_wrapper().parent if options.cni_wrapper == WRAPPER else None
    return CniHost(bin_dir=bin_dir, tc=Path(tc), wrapper_dir=wrapper)


def raise_fd_limit(sandboxes: int) -> str | None:
    """Raise the soft open-files limit to what ``sandboxes`` shims and
    plugins need, up to the hard limit; a note if even that is short."""
    need = FDS_PER_SANDBOX * sandboxes + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < need:
        return f"open-files limit {target} (hard) is short of the ~{need} this storm may need"
    return None


@dataclass
class CniSandbox:
    """One sandbox's CNI and shim state, for its stages and for teardown."""

    index: int
    #: ``bst-<run>-<i>``: the VMM's ``-name`` and the shim's tag (for the sweep).
    name: str
    netns: str | None = None
    container_id: str | None = None
    result: CniResult | None = None
    #: An ADD was started (a DEL is owed, whatever came of it).
    add_started: bool = False
    #: Took a ``netns-veth`` namespace whose ADD was done before the storm.
    pooled: bool = False
    #: The network an agent ADDed that namespace on; None: the run's own.
    network: CniNetwork | None = None
    deleted: bool = False
    shim: subprocess.Popen[bytes] | None = None
    shim_start_s: float | None = None
    attach_done_s: float | None = None
    vmm_pid: int | None = None
    shim_stopped: bool = False
    execs: list[ExecSpan] = field(default_factory=list)

    @property
    def netns_path(self) -> str:
        assert self.netns is not None
        return str(NETNS_RUN_DIR / self.netns)


def _span(record: ExecRecord, *, sandbox: int | None, stage: str) -> ExecSpan:
    return ExecSpan(
        sandbox=sandbox,
        stage=stage,
        program=record.program,
        command=record.command,
        pid=record.pid,
        rc=record.rc,
        start_s=record.start_s,
        end_s=record.end_s,
    )


class CniRuntime:
    """The run's CNI network and the ``cni`` stage bodies (see module doc)."""

    def __init__(
        self, *, options: StormOptions, host: CniHost, names: RunNames, runner: VmRunner
    ) -> None:
        self.options = options
        self.host = host
        self.names = names
        self.runner = runner
        self.state_dir = names.cni_dir()
        self.network: CniNetwork | None = None
        #: The network the sandboxes' ADD, CHECK and DEL go through: ``network``,
        #: or it with its main plugin wrapped in ``bootstorm-cni``.
        self.call_network: CniNetwork | None = None
        #: The agent ``bootstorm-cni`` asks (set before :meth:`prepare`).
        self.plugin_agent: PluginAgentEndpoint | None = None
        self.subnet: ipaddress.IPv4Network | None = None
        #: Whether the shim waits for ``go`` before StartVM (the stage may be gated).
        self.wait_go = True
        #: Pre-ADDed ``netns-veth`` namespaces: container id → its result.
        self.pool: dict[str, CniResult] = {}
        self._pool_execs: dict[str, list[ExecSpan]] = {}
        self._pool_taken: dict[str, int] = {}
        self._pool_deleted: set[str] = set()
        self.notes: list[str] = []

    # -- before the storm -----------------------------------------------------

    def prepare(self) -> None:
        """The run's state directory, subnet, network and host links."""
        opts = self.options
        parent = self.names.vport() if opts.cni_plugin in ("macvlan", "ipvlan") else None

        def network_on(subnet: ipaddress.IPv4Network) -> CniNetwork:
            return build_network(
                name=self.names.cni_network(),
                plugin=opts.cni_plugin,
                chain=opts.cni_chain,
                subnet=subnet,
                ipam_dir=self.state_dir / "ipam",
                bridge=self.names.bridge() if opts.cni_plugin == "bridge" else None,
                parent=parent,
                tuning_dir=self.state_dir / "tuning",
            )

        self.subnet, self.network = claim_network(
            self.state_dir, network_on, bin_dir=self.host.bin_dir
        )
        with IPRoute() as ipr:
            if opts.cni_plugin == "bridge":
                make_bridge(ipr, self.names.bridge(), self.subnet)
            elif parent is not None:
                # The master link: a veth pair of the run's own, both ends up.
                peer = {"ifname": self.names.vport_peer()}
                ipr.link("add", ifname=parent, kind="veth", peer=peer)
                for name in (parent, self.names.vport_peer()):
                    (idx,) = ipr.link_lookup(ifname=name)
                    ipr.link("set", index=idx, state="up")
                if opts.cni_plugin == "ipvlan":
                    self._probe_ipvlan(ipr, parent)
        if self.host.wrapper_dir is not None:
            # The production front end (`bootstorm agent install-cni`: ADD
            # compiled, the rest Python), built into the run's own directory
            # (removed with it at cleanup), so the storm measures what a node runs.
            self.host = replace(self.host, wrapper_dir=self._install_wrapper())
        self.call_network = self._wrapped(self.network)
        if self.call_network is not self.network:
            agent = self.plugin_agent.url if self.plugin_agent else "?"
            every = opts.cni_wrapper_every
            which = (
                ""
                if every == 1
                else f" for one sandbox in {every} (the others exec it themselves, the "
                "driver taking their permit)"
            )
            self.notes.append(
                f"runtime cni: {WRAPPER} ({self.host.wrapper_dir}) wraps {opts.cni_plugin}"
                f"{which}: it takes AddCNI's permit from the agent {agent} (the driver does "
                "not); the trace's AddCNI execs are the plugin and its delegate"
            )
        self.notes.append(
            f"runtime cni: plugins {' → '.join(self.network.types)} from {self.host.bin_dir} "
            f"(network {self.network.name}, subnet {self.subnet}); one shim process per "
            f"sandbox ({sys.executable} {' '.join(SHIM_FLAGS)} shim.py), tc from {self.host.tc}"
        )

    def _install_wrapper(self) -> Path:
        """``bootstorm-cni`` as ``bootstorm agent install-cni`` installs it, in
        ``<state_dir>/wrapper``; :class:`.cni.CniSetupError` if the compiler fails."""
        from ..cni_plugin.install import BuildError, install

        wrapper_dir = self.state_dir / "wrapper"
        wrapper_dir.mkdir(parents=True, exist_ok=True)
        try:
            installed = install(wrapper_dir)
        except BuildError as exc:
            raise CniSetupError(f"cni_wrapper: {exc}") from None
        self.notes.append(f"runtime cni: {WRAPPER} installed for this run: {installed.detail}")
        return wrapper_dir

    def wrapped(self, index: int) -> bool:
        """Whether sandbox ``index``'s ADD goes through ``bootstorm-cni``
        (``--cni-wrapper``, every ``cni_wrapper_every``-th sandbox)."""
        return self.host.wrapper_dir is not None and index % self.options.cni_wrapper_every == 0

    def network_of(self, cs: CniSandbox) -> CniNetwork | None:
        """The network ``cs``'s ADD, CHECK and DEL go through (its own, if it
        took an agent's pooled namespace)."""
        if cs.network is not None:
            return cs.network
        if cs.pooled:
            return None  # the run's own pool: ADDed on the plain network
        return self.call_network if self.wrapped(cs.index) else self.network

    @property
    def plugin_log(self) -> Path:
        """Where ``bootstorm-cni`` writes one JSON line per call (its own times)."""
        return self.state_dir / "plugin.log"

    def _wrapped(self, network: CniNetwork) -> CniNetwork:
        """``network`` with its main plugin as ``bootstorm-cni``'s delegate, as a
        node's conflist has it; ``network`` itself without ``--cni-wrapper``."""
        if self.host.wrapper_dir is None:
            return network
        agent = self.plugin_agent
        if agent is None:
            raise CniSetupError(
                f"cni_wrapper: {WRAPPER!r} asks a node agent for AddCNI's permit: "
                "give the storm one (testbed run --agent URL)"
            )
        token_file = self.state_dir / "agent.token"
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(agent.token + "\n")
        agent_conf: dict[str, Any] = {
            "url": agent.url,
            "token_file": str(token_file),
            "timeout_s": WRAPPER_TIMEOUT_S,
            "wait_s": WRAPPER_WAIT_S,
        }
        if agent.ca_file is not None:
            agent_conf["ca_file"] = agent.ca_file
        main, *chain = network.plugins
        wrapper = {
            "type": WRAPPER,
            "agent": agent_conf,
            "stage": "AddCNI",
            "failure_policy": "closed",
            "log_file": str(self.plugin_log),
            "state_dir": str(self.state_dir / "plugin"),
            "delegate": json.loads(main),
        }
        return CniNetwork(
            name=network.name,
            cni_version=network.cni_version,
            plugins=(json.dumps(wrapper, sort_keys=True), *chain),
        )

    def plugin_spans(self, sandboxes: Iterable[CniSandbox]) -> list[ExecSpan]:
        """The delegates ``bootstorm-cni`` exec'd, from its log: each inside the
        plugin's own exec span (which :func:`.cni.exec_plugin` recorded)."""
        sandboxes = list(sandboxes)
        # An ADD's line is written by the child that releases its permit, a
        # moment after the plugin exited (bounded by the agent's timeout_s).
        calls = sum(1 for cs in sandboxes for e in cs.execs if e.program == WRAPPER)
        deadline = time.monotonic() + WRAPPER_TIMEOUT_S
        while True:
            try:
                lines = self.plugin_log.read_text().splitlines()
            except OSError:
                lines = []
            if len(lines) >= calls or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if not lines:
            return []
        by_container = {cs.container_id: cs.index for cs in sandboxes if cs.container_id}
        spans: list[ExecSpan] = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            sandbox = by_container.get(record.get("container_id"))
            stage = "AddCNI" if record.get("command") in ("ADD", "CHECK") else "teardown"
            for d in record.get("delegates", ()):
                spans.append(
                    ExecSpan(
                        sandbox=sandbox,
                        stage=stage,
                        program=str(d["program"]),
                        command=str(d["command"]),
                        pid=int(d["pid"]),
                        rc=d.get("rc"),
                        start_s=float(d["start_s"]),
                        end_s=float(d["end_s"]),
                    )
                )
        return spans

    def _probe_ipvlan(self, ipr: Any, parent: str) -> None:
        (pidx,) = ipr.link_lookup(ifname=parent)
        probe = self.names.ipvlan_probe()
        try:
            ipr.link("add", ifname=probe, kind="ipvlan", link=pidx, ipvlan_mode=0)
        except NetlinkError as exc:
            raise CniSetupError(
                f"cni_plugin: 'ipvlan' needs the kernel's ipvlan module, which this kernel "
                f"does not have (making an ipvlan link failed: {exc.args[-1]})"
            ) from None
        for idx in ipr.link_lookup(ifname=probe):
            ipr.link("del", index=idx)

    def fill_pool(self, netns_names: Sequence[str]) -> list[CniPooledNetns]:
        """ADD each of ``netns_names`` (namespaces made here) before the storm,
        on the run's network; the pool's entries (the container id is the name)."""

        def one(netns: str) -> CniPooledNetns:
            os.close(create_netns_here(netns))
            execs = self._pool_execs.setdefault(netns, [])

            def record(r: ExecRecord) -> None:
                execs.append(_span(r, sandbox=None, stage="pool"))

            try:
                self.pool[netns] = self._add(netns, str(NETNS_RUN_DIR / netns), record)
            except CniError as exc:
                raise CniSetupError(f"pools.netns-veth: {netns}: {exc}") from None
            return CniPooledNetns(netns=netns, container_id=netns)

        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            return list(pool.map(one, netns_names))

    def _add(
        self,
        container_id: str,
        netns_path: str,
        on_exec: Any,
        *,
        network: CniNetwork | None = None,
    ) -> CniResult:
        assert self.network is not None
        return add(
            network or self.network,
            bin_dir=self.host.plugin_dirs,
            container_id=container_id,
            netns=netns_path,
            ifname=IFNAME,
            on_exec=on_exec,
        )

    # -- the stages -------------------------------------------------------------

    def take_pooled(self, cs: CniSandbox, pooled: CniPooledNetns) -> None:
        """``cs`` took a pre-ADDed namespace: its AddCNI has nothing to ADD.
        One of an agent's is on the agent's network, which its DEL goes through."""
        cs.netns = pooled.netns
        cs.container_id = pooled.container_id
        cs.pooled = True
        cs.add_started = True  # its DEL is owed at teardown
        if pooled.conflist is None:
            cs.result = self.pool.get(pooled.container_id)
            self._pool_taken[pooled.container_id] = cs.index
            return
        try:
            cs.network = CniNetwork.from_conflist(pooled.conflist)
            plugin = cs.network.types[-1]
            cs.result = (
                None if pooled.result is None else parse_result(pooled.result, plugin=plugin)
            )
        except (CniError, ValueError, KeyError, TypeError) as exc:
            raise CniError(
                f"pools.netns-veth: {pooled.netns}: the agent's network: {exc}"
            ) from None

    def add_cni(self, cs: CniSandbox) -> None:
        assert self.network is not None and cs.netns is not None

        def record(r: ExecRecord) -> None:
            cs.execs.append(_span(r, sandbox=cs.index, stage="AddCNI"))

        if not cs.pooled:
            cs.container_id = cs.netns  # unique in the run, and what a sweep DELs by
            cs.add_started = True
            cs.result = self._add(
                cs.container_id, cs.netns_path, record, network=self.network_of(cs)
            )
        if self.options.cni_check and cs.result is not None:
            assert cs.container_id is not None
            check(
                self.network_of(cs) or self.network,
                cs.result,
                bin_dir=self.host.plugin_dirs,
                container_id=cs.container_id,
                netns=cs.netns_path,
                ifname=IFNAME,
                on_exec=record,
            )

    def attach_if(self, cs: CniSandbox, cgroup: Path | None) -> tuple[float, float]:
        """Start the shim; (its start, its ``attach_done``)."""
        assert cs.netns is not None
        job = {
            "netns": cs.netns_path,
            "inner_if": IFNAME,
            "tap": TAP,
            "tc": str(self.host.tc),
            "cgroup": str(cgroup) if cgroup is not None else None,
            "vm_mode": self.runner.mode,
            "vm_argv": self.runner.argv(name=cs.name, netns=cs.netns, tap_fd="{tap_fd}"),
            "marker": MARKER,
            "boot_timeout_s": BOOT_TIMEOUT_S,
            "wait_go": self.wait_go,
        }
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, *SHIM_FLAGS, str(SHIM_SCRIPT), cs.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            close_fds=True,
            # Its own session: a Ctrl-C at the terminal reaches the driver,
            # which stops the shims in order (as containerd's shims are daemons).
            start_new_session=True,
        )
        cs.shim, cs.shim_start_s = proc, start
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(job).encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died at once: reading its output says why
        cs.attach_done_s = float(self._until(cs, "attach_done")["t"])
        return start, cs.attach_done_s

    def start_vm(self, cs: CniSandbox) -> tuple[float, float]:
        """Until the shim's ``vm_up``; (the StartVM span's start, ``vm_up``)."""
        assert cs.shim is not None and cs.shim.stdin is not None and cs.attach_done_s is not None
        if self.wait_go:
            start = time.monotonic()
            try:
                cs.shim.stdin.write(b"go\n")
                cs.shim.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
        else:
            start = cs.attach_done_s
        event = self._until(cs, "vm_up")
        cs.vmm_pid = int(event["vmm_pid"])
        return start, float(event["t"])

    def _until(self, cs: CniSandbox, want: str) -> dict[str, Any]:
        """Read the shim's events until ``want``; exec events recorded on the way."""
        assert cs.shim is not None and cs.shim.stdout is not None
        other: list[str] = []
        for line in cs.shim.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                other = [*other, line.decode(errors="replace").strip()][-5:]
                continue
            if not isinstance(event, dict):
                continue
            kind = event.get("event")
            if kind == "exec":
                self._record(cs, event)
            elif kind == "error":
                raise ShimError(f"shim: {event.get('msg')}")
            elif kind == want:
                return event
        rc = cs.shim.poll()
        said = f": {' | '.join(other)}" if other else ""
        raise ShimError(f"shim ended (rc {rc}) before {want}{said}")

    @staticmethod
    def _record(cs: CniSandbox, event: Mapping[str, Any]) -> None:
        command = str(event.get("command", ""))
        cs.execs.append(
            ExecSpan(
                sandbox=cs.index,
                stage="StartVM" if command == "vmm" else "AttachIf",
                program=str(event.get("program") or "?"),
                command=command or "?",
                pid=int(event["pid"]),
                rc=event.get("rc"),
                start_s=float(event["start"]),
                end_s=float(event["end"]),
            )
        )

    # -- after the storm --------------------------------------------------------

    def interrupt(self, sandboxes: Iterable[CniSandbox]) -> None:
        """SIGTERM every shim: sandbox threads reading them get EOF at once."""
        for cs in sandboxes:
            if cs.shim is not None and cs.shim.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    cs.shim.send_signal(signal.SIGTERM)

    def stop_shims(self, sandboxes: Sequence[CniSandbox]) -> None:
        """Close every shim's stdin (it stops its VMM and exits), wait, record it."""
        live = [cs for cs in sandboxes if cs.shim is not None and not cs.shim_stopped]
        for cs in live:
            assert cs.shim is not None
            if cs.shim.stdin is not None:
                with contextlib.suppress(OSError, ValueError):
                    cs.shim.stdin.close()
        deadline = time.monotonic() + SHIM_STOP_WAIT_S
        for cs in live:
            proc = cs.shim
            assert proc is not None and cs.shim_start_s is not None
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            end = time.monotonic()
            if proc.stdout is not None:
                # Events after vm_up (a VMM reaped at stop), unless the
                # sandbox's thread is still reading (an interrupted storm).
                with contextlib.suppress(Exception):
                    for line in proc.stdout.read().splitlines():
                        event = json.loads(line)
                        if isinstance(event, dict) and event.get("event") == "exec":
                            self._record(cs, event)
                with contextlib.suppress(OSError):
                    proc.stdout.close()
            cs.execs.append(
                ExecSpan(
                    sandbox=cs.index,
                    stage="AttachIf",
                    program=SHIM_SCRIPT.name,
                    command="shim",
                    pid=proc.pid,
                    rc=proc.returncode,
                    start_s=cs.shim_start_s,
                    end_s=max(end, cs.shim_start_s),
                )
            )
            cs.shim_stopped = True

    def teardown(self, sandboxes: Sequence[CniSandbox]) -> None:
        """Stop the shims, then DEL every sandbox that ADDed and every pooled
        namespace none took (the chain in reverse), before namespaces go."""
        self.stop_shims(sandboxes)
        if self.network is None:
            return
        owed = [cs for cs in sandboxes if cs.add_started and not cs.deleted]
        untaken = [
            c for c in self.pool if c not in self._pool_taken and c not in self._pool_deleted
        ]
        for cs in owed:
            cs.deleted = True
        self._pool_deleted.update(untaken)

        def del_sandbox(cs: CniSandbox) -> None:
            if cs.container_id is None or cs.netns is None:
                return
            self._delete(
                cs.container_id,
                cs.netns_path,
                cs.result,
                lambda r: cs.execs.append(_span(r, sandbox=cs.index, stage="teardown")),
                # An agent's pooled namespace: its network; else the one it was ADDed on.
                network=self.network_of(cs),
            )

        def del_pooled(container: str) -> None:
            execs = self._pool_execs.setdefault(container, [])
            self._delete(
                container,
                str(NETNS_RUN_DIR / container),
                self.pool.get(container),
                lambda r: execs.append(_span(r, sandbox=None, stage="teardown")),
            )

        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            list(pool.map(del_sandbox, owed))
            list(pool.map(del_pooled, untaken))

    def _delete(
        self,
        container: str,
        netns_path: str,
        result: CniResult | None,
        on_exec: Any,
        *,
        network: CniNetwork | None = None,
    ) -> None:
        assert self.network is not None
        delete_logged(
            network or self.network,
            result,
            bin_dir=self.host.plugin_dirs,
            container_id=container,
            netns=netns_path,
            ifname=IFNAME,
            on_exec=on_exec,
        )

    def remove(self) -> None:
        """The run's links (bridge, master pair, probe) and state directory."""
        with IPRoute() as ipr:
            for name in (
                self.names.ipvlan_probe(),
                self.names.vport(),
                self.names.vport_peer(),
                self.names.bridge(),
            ):
                with contextlib.suppress(Exception):
                    for idx in ipr.link_lookup(ifname=name):
                        ipr.link("del", index=idx)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            CNI_STATE_DIR.rmdir()  # only when no other run uses it

    def execs(self, sandboxes: Iterable[CniSandbox]) -> list[ExecSpan]:
        """Every process the run ran, in start order; a pooled ADD names the
        sandbox that took its namespace; ``bootstorm-cni``'s delegates from its log."""
        sandboxes = list(sandboxes)
        out = [e for cs in sandboxes for e in cs.execs]
        for container, spans in self._pool_execs.items():
            taker = self._pool_taken.get(container)
            for e in spans:
                out.append(e.model_copy(update={"sandbox": taker}) if e.stage == "pool" else e)
        if self.host.wrapper_dir is not None:
            out.extend(self.plugin_spans(sandboxes))
        return sorted(out, key=lambda e: e.start_s)


@dataclass(frozen=True)
class WrapperSplit:
    """``bootstorm-cni``'s ADDs in one storm, medians over sandboxes (seconds):
    the whole ADD as the runtime saw it, its delegate's exec inside it and the
    plugin's own time (their difference, per sandbox); and, where the storm
    also had sandboxes that exec'd the main plugin themselves
    (``cni_wrapper_every`` > 1), their ADD: the like-for-like anchor."""

    wrapped_add_s: float
    delegate_s: float
    own_s: float
    wrapped: int
    program: str
    plain_add_s: float | None
    plain: int

    @property
    def ratio(self) -> float | None:
        """The wrapped ADD over the plain one in the same storm; None without plain ones."""
        return None if not self.plain_add_s else self.wrapped_add_s / self.plain_add_s


def wrapper_split(execs: Iterable[ExecSpan]) -> WrapperSplit | None:
    """The storm's :class:`WrapperSplit` from its exec spans; None if no
    sandbox's ADD went through ``bootstorm-cni`` (or none had its delegate)."""
    outer: dict[int, ExecSpan] = {}
    inner: dict[int, ExecSpan] = {}
    for e in execs:
        if e.sandbox is None or e.stage != "AddCNI" or e.command != "ADD":
            continue
        (outer if e.program == WRAPPER else inner).setdefault(e.sandbox, e)
    pairs = [
        (o.end_s - o.start_s, inner[k].end_s - inner[k].start_s)
        for k, o in outer.items()
        if k in inner
    ]
    if not pairs:
        return None
    # A sandbox with no plugin exec of its own ran the main plugin directly.
    plain = [e.end_s - e.start_s for k, e in inner.items() if k not in outer]
    return WrapperSplit(
        wrapped_add_s=statistics.median(p[0] for p in pairs),
        delegate_s=statistics.median(p[1] for p in pairs),
        own_s=statistics.median(p[0] - p[1] for p in pairs),
        wrapped=len(pairs),
        program=next(inner[k] for k in outer if k in inner).program,
        plain_add_s=statistics.median(plain) if plain else None,
        plain=len(plain),
    )


def wrapper_overhead(execs: Iterable[ExecSpan]) -> str | None:
    """A note of ``bootstorm-cni``'s own time per ADD (:func:`wrapper_split`),
    and its ADD against the plain plugin's where the same storm had both;
    None if the storm had none."""
    split = wrapper_split(execs)
    if split is None:
        return None
    note = (
        f"{WRAPPER}: median ADD {split.wrapped_add_s * 1e3:.1f} ms, of which its delegate "
        f"{split.program} {split.delegate_s * 1e3:.1f} ms and its own "
        f"{split.own_s * 1e3:.1f} ms (start, agent calls; {split.wrapped} sandboxes)"
    )
    ratio = split.ratio
    if ratio is not None:  # plain sandboxes in the same storm: their ADD, and the ratio
        assert split.plain_add_s is not None
        note += (
            f"; {split.program} alone in the same storm {split.plain_add_s * 1e3:.1f} ms "
            f"({split.plain} sandboxes): {ratio:.2f}x"
        )
    return note


def exec_owners(spans: Iterable[StageSpan], execs: Iterable[ExecSpan]) -> dict[int, list[Owner]]:
    """Owners by pid for :func:`~bootstorm.traces.kernel.join_contention`:
    each process of a sandbox owns that sandbox's stage spans while it ran."""
    by_sandbox: dict[int, list[StageSpan]] = {}
    for s in spans:
        by_sandbox.setdefault(s.sandbox, []).append(s)
    owners: dict[int, list[Owner]] = {}
    for e in execs:
        if e.sandbox is None:
            continue
        for s in by_sandbox.get(e.sandbox, ()):
            lo, hi = max(s.start_s, e.start_s), min(s.end_s, e.end_s)
            if lo <= hi:
                owners.setdefault(e.pid, []).append((lo, hi, e.sandbox, s.stage))
    return owners
