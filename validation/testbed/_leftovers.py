"""Names of a run's objects, the run registry, and the sweep of killed runs' leftovers.

Every object a run creates carries its run id (4 characters), and a run
registers ``/run/bootstorm-testbed/<run>`` holding its pid while it lives.
The sweep removes only objects with the testbed's prefixes (from
:mod:`bootstorm.validation._names`) whose run has no live owner, so two
runs side by side (two pytest workers) never sweep each other.

A sweep and a registration exclude each other (an ``flock`` on
:data:`SWEEP_LOCK`): a run that registers while a sweep is under way waits
for it, so the sweep's list of live runs cannot miss a run that is already
creating objects.

The ``cni`` runtime adds a state directory per run,
``/run/bootstorm-cni/<run>`` (:data:`CNI_STATE_DIR`: host-local's IPAM
state, tuning's backups, and ``run.json``: the network and the plugin
directory), a bridge ``bst<run>br``, and one shim process per sandbox
(``shim.py bst-<run>-<i>``). A dead run's shims are killed, its sandboxes
DELeted through the plugins it used (the IPAM state names them: that
removes what plugins made on the host, e.g. bandwidth's ifb devices), then
its directory and links are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import string
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyroute2 import IPRoute

from .._names import CGROUP_PARENT, LINK_PREFIX, NETNS_PREFIX
from .._netns import list_netns, remove_netns
from ._cgroup import CgroupError, cgroup2_root, kill_and_remove

if TYPE_CHECKING:
    from .cni import CniNetwork

__all__ = [
    "CNI_STATE_DIR",
    "REGISTRY_DIR",
    "SWEEP_LOCK",
    "WORKDIR_PREFIX",
    "RunNames",
    "SweepLock",
    "SweepReport",
    "new_run_id",
    "register_run",
    "sweep_leftovers",
    "sweep_lock",
    "unregister_run",
]

log = logging.getLogger(__name__)

REGISTRY_DIR = Path("/run/bootstorm-testbed")
#: Outside REGISTRY_DIR, which the last run to leave removes.
SWEEP_LOCK = Path("/run/bootstorm-testbed.lock")
#: A run's work directory (its built guest stub): ``$TMPDIR/bootstorm-testbed-<run>-*``.
WORKDIR_PREFIX = "bootstorm-testbed-"
#: The ``cni`` runtime's state, one directory per run (see module doc).
CNI_STATE_DIR = Path("/run/bootstorm-cni")
#: The shim script of the ``cni`` runtime; its processes carry the sandbox name after it.
SHIM_SCRIPT = Path(__file__).with_name("shim.py")
_RUN_ALPHABET = string.ascii_lowercase + string.digits
_RUN_LEN = 4


def new_run_id() -> str:
    return "".join(secrets.choice(_RUN_ALPHABET) for _ in range(_RUN_LEN))


@dataclass(frozen=True)
class RunNames:
    """The names one run gives its objects (links fit IFNAMSIZ: <= 15 bytes)."""

    run: str

    def netns(self, i: int) -> str:
        return f"{NETNS_PREFIX}{self.run}-{i}"

    def pool_netns(self, k: int) -> str:
        return f"{NETNS_PREFIX}{self.run}-p{k}"

    def host_link(self, i: int) -> str:
        name = f"{LINK_PREFIX}{self.run}h{i}"
        if len(name.encode()) > 15:
            raise ValueError(f"sandbox index {i} makes link name {name!r} longer than 15 bytes")
        return name

    def moved_peer(self, i: int) -> str:
        return f"{LINK_PREFIX}{self.run}m{i}"

    def endpoint(self, i: int) -> str:
        """A macvtap endpoint while it is still on the host."""
        return f"{LINK_PREFIX}{self.run}e{i}"

    def pool_tap(self, k: int) -> str:
        """A persistent tap made before the storm for a tap-endpoint pool."""
        return f"{LINK_PREFIX}{self.run}t{k}"

    def pool_veth(self, k: int) -> tuple[str, str]:
        """A veth pair made before the storm for a veth pool: (host end, peer)."""
        return f"{LINK_PREFIX}{self.run}a{k}", f"{LINK_PREFIX}{self.run}b{k}"

    def pool_netns_veth(self, k: int) -> tuple[str, str]:
        """A ``netns-veth`` made before the storm: (namespace, host end of the
        veth pair whose peer is inside the namespace)."""
        return f"{NETNS_PREFIX}{self.run}-v{k}", f"{LINK_PREFIX}{self.run}n{k}"

    def vport(self) -> str:
        """The run's shared parent of macvtap endpoints (a veth pair: this end)."""
        return f"{LINK_PREFIX}{self.run}vp"

    def vport_peer(self) -> str:
        return f"{LINK_PREFIX}{self.run}vq"

    def vm(self, i: int) -> str:
        return f"{NETNS_PREFIX}{self.run}-{i}"

    def held_bridge(self) -> str:
        """measure-ops' bridge of held ports (:meth:`held_port`)."""
        return f"{LINK_PREFIX}{self.run}bh"

    def held_port(self, k: int) -> tuple[str, str]:
        """measure-ops' held port ``k``: its namespace and its host end."""
        return f"{NETNS_PREFIX}{self.run}-q{k}", f"{LINK_PREFIX}{self.run}q{k}"

    def bridge(self) -> str:
        """The ``cni`` runtime's bridge (the bridge plugin's ``bridge``)."""
        return f"{LINK_PREFIX}{self.run}br"

    def ipvlan_probe(self) -> str:
        """A link made and removed at once to learn whether the kernel has ipvlan."""
        return f"{LINK_PREFIX}{self.run}ip"

    def cni_network(self) -> str:
        """The ``cni`` runtime's network name (and so host-local's state directory)."""
        return f"{NETNS_PREFIX}{self.run}"

    def cni_dir(self) -> Path:
        return CNI_STATE_DIR / self.run


@dataclass(frozen=True)
class SweepLock:
    """Proof that the caller holds :data:`SWEEP_LOCK` (from :func:`sweep_lock`)."""

    fd: int


@contextlib.contextmanager
def sweep_lock() -> Iterator[SweepLock]:
    """Hold the lock that sweeps and registrations take, for the ``with`` block."""
    fd = os.open(SWEEP_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the fd closes, even on a kill
        yield SweepLock(fd)
    finally:
        os.close(fd)


def register_run(run: str) -> None:
    with sweep_lock():
        _register(run)


def _register(run: str) -> None:
    for attempt in range(3):  # another run may remove the empty directory in between
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        try:
            (REGISTRY_DIR / run).write_text(f"{os.getpid()}\n")
            return
        except FileNotFoundError:
            if attempt == 2:
                raise


def unregister_run(run: str) -> None:
    (REGISTRY_DIR / run).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        REGISTRY_DIR.rmdir()  # only when no other run is registered


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _live_runs() -> set[str]:
    live = set()
    with contextlib.suppress(FileNotFoundError):
        for entry in REGISTRY_DIR.iterdir():
            try:
                pid = int(entry.read_text().strip())
            except (OSError, ValueError):
                continue
            if _alive(pid):
                live.add(entry.name)
    return live


def _run_of_netns(name: str) -> str | None:
    if not name.startswith(NETNS_PREFIX):
        return None
    run, sep, _ = name[len(NETNS_PREFIX) :].partition("-")
    return run if sep and len(run) == _RUN_LEN else None


def _run_of_link(name: str) -> str | None:
    rest = name[len(LINK_PREFIX) :]
    if not name.startswith(LINK_PREFIX) or len(rest) < _RUN_LEN + 2:
        return None
    # RunNames' links: h<i>, m<i>, e<i> per sandbox; t<k>, a<k>/b<k>, n<k>
    # (a netns-veth's host end) pooled; vp, vq the shared parent; br the cni
    # runtime's bridge, ip its ipvlan probe; bh and q<k> measure-ops' bridge
    # of held ports and their host ends.
    tail = rest[_RUN_LEN:]
    if tail in ("vp", "vq", "br", "bh", "ip") or (tail[0] in "hmetabnq" and tail[1:].isdigit()):
        return rest[:_RUN_LEN]
    return None


@dataclass
class SweepReport:
    """What a sweep removed."""

    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    registry: list[str] = field(default_factory=list)
    tracefs: list[str] = field(default_factory=list)
    workdirs: list[str] = field(default_factory=list)
    #: State directories of the ``cni`` runtime (their sandboxes DELeted first).
    cni: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(
            len(x)
            for x in (
                self.netns,
                self.links,
                self.cgroups,
                self.processes,
                self.registry,
                self.tracefs,
                self.workdirs,
                self.cni,
            )
        )


def process_argvs() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every process that is still there when read."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(entry.name), argv


def _our_vm_processes(dead: set[str] | None, live: set[str]) -> list[tuple[int, str]]:
    """(pid, run) of QEMU processes named ``bst-<run>-<i>`` whose run is not live."""
    found = []
    for pid, argv in process_argvs():
        if not argv or not argv[0].endswith(b"qemu-system-x86_64"):
            continue
        for flag, value in itertools.pairwise(argv):
            if flag == b"-name":
                run = _run_of_netns(value.decode(errors="replace"))
                if run is not None and run not in live and (dead is None or run in dead):
                    found.append((pid, run))
    return found


def _our_shims(live: set[str]) -> list[tuple[int, str]]:
    """(pid, run) of shim processes (``shim.py bst-<run>-<i>``) whose run is not live."""
    found = []
    script = str(SHIM_SCRIPT).encode()
    for pid, argv in process_argvs():
        for arg, name in itertools.pairwise(argv):
            if arg == script:
                run = _run_of_netns(name.decode(errors="replace"))
                if run is not None and run not in live:
                    found.append((pid, run))
                break
    return found


def _cni_containers(state: Path) -> list[str]:
    """Container ids that hold an address in a run's host-local state
    (``<dataDir>/<network>/<ip>``: the id on the first line)."""
    ids = []
    for entry in sorted(state.glob("ipam/*/*")):
        if entry.name in ("lock",) or entry.name.startswith("last_reserved_ip"):
            continue
        with contextlib.suppress(OSError, IndexError):
            ids.append(entry.read_text().splitlines()[0].strip())
    return [i for i in dict.fromkeys(ids) if i]


@dataclass(frozen=True, kw_only=True)
class SavedNetwork:
    """A CNI network as its owner saved it (``<state>/run.json``): what a
    sweep needs to DEL the containers it left."""

    network: CniNetwork
    bin_dir: Path
    ifname: str


def read_saved_network(state: Path) -> SavedNetwork:
    """The network saved in ``state``; OSError or ValueError (KeyError,
    TypeError) if there is none or it is malformed."""
    from .cni import CniNetwork

    saved = json.loads((state / "run.json").read_text())
    return SavedNetwork(
        network=CniNetwork.from_conflist(saved["conflist"]),
        bin_dir=Path(saved["bin_dir"]),
        ifname=str(saved.get("ifname", "eth0")),
    )


def _sweep_cni_dir(state: Path) -> None:
    """DEL a dead run's sandboxes through its plugins, then remove its state."""
    from .cni import delete_logged

    try:
        saved = read_saved_network(state)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("cni state %s: no usable run.json (%s); removing it as it is", state, exc)
    else:
        for container in _cni_containers(state):
            # The namespace is gone: each plugin releases what it holds on the host.
            delete_logged(
                saved.network,
                None,
                bin_dir=saved.bin_dir,
                container_id=container,
                netns=f"/run/netns/{container}",
                ifname=saved.ifname,
            )
    shutil.rmtree(state, ignore_errors=True)


def sweep_leftovers(*, keep: set[str] | None = None, lock: SweepLock | None = None) -> SweepReport:
    """Remove objects of testbed runs that are no longer alive (see module doc).

    ``keep`` names run ids to spare besides the live ones (the caller's own).
    ``lock`` says the caller already holds :func:`sweep_lock`; without it the
    sweep takes the lock itself, waiting for a sweep or registration under way.
    """
    if lock is None:
        with sweep_lock() as held:
            return sweep_leftovers(keep=keep, lock=held)
    live = _live_runs() | (keep or set())
    report = SweepReport()
    # Shims first (a shim may start a VM until it dies), then the VMs.
    for pid, _run in [*_our_shims(live), *_our_vm_processes(None, live)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # a shim or VM of a killed run: ours, by its pid
            report.processes.append(pid)
    for name in list_netns():
        run = _run_of_netns(name)
        if run is not None and run not in live and remove_netns(name):
            report.netns.append(name)
    if CNI_STATE_DIR.is_dir():
        for state in sorted(CNI_STATE_DIR.iterdir()):
            if len(state.name) == _RUN_LEN and state.name not in live and state.is_dir():
                _sweep_cni_dir(state)
                report.cni.append(str(state))
        with contextlib.suppress(OSError):
            CNI_STATE_DIR.rmdir()  # only when no run uses it
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            run = _run_of_link(name) if name else None
            if run is not None and run not in live:
                with contextlib.suppress(Exception):  # gone already with its netns peer
                    ipr.link("del", index=link["index"])
                    report.links.append(name)
    with contextlib.suppress(CgroupError):
        parent = cgroup2_root() / CGROUP_PARENT
        if parent.is_dir():
            for child in parent.iterdir():
                if child.is_dir() and child.name not in live:
                    kill_and_remove(child)
                    report.cgroups.append(str(child))
            with contextlib.suppress(OSError):
                parent.rmdir()  # only succeeds when no run uses it
    # Work directories (the built guest stub) of killed runs.
    for workdir in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        run = workdir.name[len(WORKDIR_PREFIX) :].partition("-")[0]
        if len(run) == _RUN_LEN and run not in live and workdir.is_dir():
            shutil.rmtree(workdir, ignore_errors=True)
            report.workdirs.append(str(workdir))
    with contextlib.suppress(FileNotFoundError):
        for entry in REGISTRY_DIR.iterdir():
            if entry.name not in live:
                entry.unlink(missing_ok=True)
                report.registry.append(entry.name)
        with contextlib.suppress(OSError):
            REGISTRY_DIR.rmdir()
    from ...traces.kernel import sweep_instances

    report.tracefs.extend(sweep_instances())
    if report.total:
        log.info("swept leftovers of killed runs: %s", report)
    return report
