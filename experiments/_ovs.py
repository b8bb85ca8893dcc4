"""A private Open vSwitch for the OVS experiments (``bench_ovs_flows.py``,
``bench_ovs_qos.py``): an ovsdb-server and an ovs-vswitchd of the
distribution's (Debian 12: OVS 3.1.0; seed 000 used 3.1.2) inside a network
namespace made for them (``bst-ovs``), with one userspace-datapath bridge
(``bstbr0``; this machine has no openvswitch kernel module), and the meters
the experiments read around each client call.

Creates only its namespace and the caller's temporary directory's contents;
ends the daemons it started, by PID, and deletes the namespace (and every
device in it) even on failure or SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NETNS = "bst-ovs"
BRIDGE = "bstbr0"
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
TOOLS = ("ip", "ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl")
SETTLE_S = 0.05  # after a change, for vswitchd's revalidators to finish what it set off


def require_root_and_ovs() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        sys.exit(f"needs root and {', '.join(missing) or 'nothing else'} (openvswitch-switch)")


def cpu_s(pid: int) -> float:
    """CPU time of every thread of ``pid``, seconds (schedstat: nanoseconds,
    where ``/proc/PID/stat`` counts 10 ms ticks)."""
    total_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            total_ns += int((task / "schedstat").read_text().split()[0])
    return total_ns / 1e9


def in_netns(*argv: str) -> list[str]:
    return ["ip", "netns", "exec", NETNS, *argv]


@dataclass(frozen=True)
class Ovs:
    """The running switch: the clients' environment, ovs-vsctl's command
    prefix and ovs-vswitchd's PID."""

    env: dict[str, str]
    vsctl: tuple[str, ...]
    vswitchd_pid: int


@contextlib.contextmanager
def private_ovs(tmp: Path) -> Iterator[Ovs]:
    """A private ovsdb-server and ovs-vswitchd in ``NETNS`` with ``BRIDGE``."""
    env = {**os.environ, "OVS_RUNDIR": str(tmp), "OVS_DBDIR": str(tmp), "OVS_LOGDIR": str(tmp)}
    db_sock = f"unix:{tmp / 'db.sock'}"
    procs: list[subprocess.Popen[bytes]] = []
    # SIGTERM would end the interpreter without unwinding: make it unwind.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(["ovsdb-tool", "create", str(tmp / "conf.db"), str(SCHEMA)], check=True)
        procs.append(
            subprocess.Popen(
                in_netns(
                    "ovsdb-server",
                    str(tmp / "conf.db"),
                    f"--remote=p{db_sock}",
                    f"--unixctl={tmp / 'db.ctl'}",
                    "-vconsole:off",
                ),
                env=env,
            )
        )
        vsctl = ("ovs-vsctl", f"--db={db_sock}", "--timeout=10")
        _wait_for(tmp / "db.sock")
        subprocess.run([*vsctl, "--no-wait", "init"], env=env, check=True)
        procs.append(
            subprocess.Popen(
                in_netns(
                    "ovs-vswitchd",
                    db_sock,
                    f"--unixctl={tmp / 'vswitchd.ctl'}",
                    "-vconsole:off",
                ),
                env=env,
            )
        )
        subprocess.run(
            in_netns(
                *vsctl, "add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev"
            ),
            env=env,
            check=True,
            capture_output=True,
        )
        yield Ovs(env=env, vsctl=vsctl, vswitchd_pid=procs[-1].pid)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["ip", "netns", "del", NETNS], check=False)
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _wait_for(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s:g} s")
        time.sleep(0.02)


def idle_cpu_rate(vswitchd: int, seconds: float = 2.0) -> float:
    """vswitchd's own CPU per second with no client (its periodic work)."""
    cpu0, wall0 = cpu_s(vswitchd), time.perf_counter()
    time.sleep(seconds)
    return (cpu_s(vswitchd) - cpu0) / (time.perf_counter() - wall0)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Calls:
    """Per invocation: client wall and CPU seconds, vswitchd CPU seconds."""

    wall_s: list[float] = field(default_factory=list)
    client_cpu_s: list[float] = field(default_factory=list)
    vswitchd_cpu_s: list[float] = field(default_factory=list)


def timed(argv: Sequence[str], ovs: Ovs, idle_rate: float, into: Calls) -> None:
    """Run one client in the host namespace (it reaches the daemons by their
    sockets in OVS_RUNDIR, as a CNI on the host would); record its wall and
    CPU time and what vswitchd spent beyond its idle rate meanwhile."""
    vswitchd = ovs.vswitchd_pid
    cpu0, children0, wall0 = cpu_s(vswitchd), _children_cpu_s(), time.perf_counter()
    subprocess.run(argv, env=ovs.env, check=True, stdout=subprocess.DEVNULL)
    into.wall_s.append(time.perf_counter() - wall0)
    into.client_cpu_s.append(_children_cpu_s() - children0)
    time.sleep(SETTLE_S)
    elapsed = time.perf_counter() - wall0
    into.vswitchd_cpu_s.append(cpu_s(vswitchd) - cpu0 - idle_rate * elapsed)
