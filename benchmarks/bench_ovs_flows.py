"""What one security-group flow costs Open vSwitch's ovs-vswitchd, as
paper-000's ``costs.ovs_flow_mod_s`` was measured.

Seed 000 configures security-group rules "for each pod using OVS flow
tables" (§4.1.2); how its CNI sends them is not said. vswitchd serves
OpenFlow clients from its one main loop, so what pods wait for each other on
is vswitchd's work per request; the client's own process (``ovs-ofctl``:
start, connect, negotiate, send, barrier) runs beside it.

Method. A private ovsdb-server and ovs-vswitchd (the distribution's, Debian
12 ships OVS 3.1.0; seed 000 used 3.1.2) run inside a network namespace this
benchmark creates (``bst-ovs``), on a userspace-datapath bridge (``bstbr0``,
no kernel module). For each of ``--pods`` pods it installs ``--rules``
distinct flows (an ACL-like match: destination address, TCP port), either in
one ``ovs-ofctl add-flows`` per pod (a batch) or one ``ovs-ofctl add-flow``
per rule, alternating pods between the two ways; the clients run in the host
namespace and reach vswitchd by the bridge's management socket. vswitchd's
CPU time (all its threads, from ``/proc/PID/task/*/schedstat``, less its
idle rate) and the client's (``getrusage`` of children) are read around
every invocation; the
serialised cost per flow is the batch's vswitchd CPU over its flows, and the
cost of one connection is what a one-flow invocation costs beyond a flow.

Needs root and ``openvswitch-switch`` (``ip``, ``ovsdb-server``,
``ovs-vswitchd``, ``ovs-vsctl``, ``ovs-ofctl``). Creates only its namespace
and a temporary directory; removes them and ends the daemons it started, by
PID, even on failure.

Run: ``python benchmarks/bench_ovs_flows.py [--pods 40] [--rules 10]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NETNS = "bst-ovs"
BRIDGE = "bstbr0"
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
TOOLS = ("ip", "ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl")


def _cpu_s(pid: int) -> float:
    """CPU time of every thread of ``pid``, seconds (schedstat: nanoseconds,
    where ``/proc/PID/stat`` counts 10 ms ticks)."""
    total_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            total_ns += int((task / "schedstat").read_text().split()[0])
    return total_ns / 1e9


def _in_netns(*argv: str) -> list[str]:
    return ["ip", "netns", "exec", NETNS, *argv]


def _flow(pod: int, rule: int) -> str:
    address = f"10.{pod // 250}.{pod % 250}.{1 + rule % 250}"
    return f"priority=100,tcp,nw_dst={address},tp_dst={1000 + rule},actions=normal"


@contextlib.contextmanager
def _ovs(tmp: Path) -> Iterator[tuple[dict[str, str], int]]:
    """A private ovsdb-server and ovs-vswitchd in ``NETNS``; yields (env, vswitchd PID)."""
    env = {**os.environ, "OVS_RUNDIR": str(tmp), "OVS_DBDIR": str(tmp), "OVS_LOGDIR": str(tmp)}
    db_sock = f"unix:{tmp / 'db.sock'}"
    procs: list[subprocess.Popen[bytes]] = []
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(["ovsdb-tool", "create", str(tmp / "conf.db"), str(SCHEMA)], check=True)
        procs.append(
            subprocess.Popen(
                _in_netns(
                    "ovsdb-server",
                    str(tmp / "conf.db"),
                    f"--remote=p{db_sock}",
                    f"--unixctl={tmp / 'db.ctl'}",
                    "-vconsole:off",
                ),
                env=env,
            )
        )
        vsctl = ["ovs-vsctl", f"--db={db_sock}", "--timeout=10"]
        _wait_for(tmp / "db.sock")
        subprocess.run([*vsctl, "--no-wait", "init"], env=env, check=True)
        procs.append(
            subprocess.Popen(
                _in_netns(
                    "ovs-vswitchd",
                    db_sock,
                    f"--unixctl={tmp / 'vswitchd.ctl'}",
                    "-vconsole:off",
                ),
                env=env,
            )
        )
        subprocess.run(
            _in_netns(
                *vsctl, "add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev"
            ),
            env=env,
            check=True,
            capture_output=True,
        )
        yield env, procs[-1].pid
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["ip", "netns", "del", NETNS], check=False)


def _wait_for(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s:g} s")
        time.sleep(0.02)


SETTLE_S = 0.05  # after a change, for vswitchd's revalidators to finish what it set off


def _idle_cpu_rate(vswitchd: int, seconds: float = 2.0) -> float:
    """vswitchd's own CPU per second with no client (its periodic work)."""
    cpu0, wall0 = _cpu_s(vswitchd), time.perf_counter()
    time.sleep(seconds)
    return (_cpu_s(vswitchd) - cpu0) / (time.perf_counter() - wall0)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Calls:
    """Per invocation: client wall and CPU seconds, vswitchd CPU seconds."""

    wall_s: list[float] = field(default_factory=list)
    client_cpu_s: list[float] = field(default_factory=list)
    vswitchd_cpu_s: list[float] = field(default_factory=list)


def _timed(
    argv: Sequence[str], env: dict[str, str], vswitchd: int, idle_rate: float, into: Calls
) -> None:
    """Run one client in the host namespace (it reaches vswitchd by the bridge's
    management socket in OVS_RUNDIR, as a CNI on the host would)."""
    cpu0, children0, wall0 = _cpu_s(vswitchd), _children_cpu_s(), time.perf_counter()
    subprocess.run(argv, env=env, check=True)
    into.wall_s.append(time.perf_counter() - wall0)
    into.client_cpu_s.append(_children_cpu_s() - children0)
    time.sleep(SETTLE_S)
    elapsed = time.perf_counter() - wall0
    into.vswitchd_cpu_s.append(_cpu_s(vswitchd) - cpu0 - idle_rate * elapsed)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--rules", type=int, default=10)
    args = parser.parse_args(argv)
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        sys.exit(f"needs root and {', '.join(missing) or 'nothing else'} (openvswitch-switch)")
    with tempfile.TemporaryDirectory(prefix="bst-ovs-") as tmp_name:
        tmp = Path(tmp_name)
        with _ovs(tmp) as (env, vswitchd):
            idle_rate = _idle_cpu_rate(vswitchd)
            batch, single = Calls(), Calls()
            for pod in range(args.pods):
                flows = [_flow(pod, r) for r in range(args.rules)]
                if pod % 2 == 0:
                    path = tmp / f"pod{pod}.flows"
                    path.write_text("\n".join(flows) + "\n")
                    argv = ["ovs-ofctl", "add-flows", BRIDGE, str(path)]
                    _timed(argv, env, vswitchd, idle_rate, batch)
                else:
                    for flow in flows:
                        _timed(
                            ["ovs-ofctl", "add-flow", BRIDGE, flow],
                            env,
                            vswitchd,
                            idle_rate,
                            single,
                        )
            installed = subprocess.run(
                _in_netns("ovs-ofctl", "dump-aggregate", BRIDGE),
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
    mean = statistics.mean
    per_call = mean(single.vswitchd_cpu_s)
    # batch = connection + rules x flow; one call = connection + flow.
    flow_s = (mean(batch.vswitchd_cpu_s) - per_call) / max(args.rules - 1, 1)
    sys.stdout.write(
        f"{args.pods} pods x {args.rules} rules ({installed}); vswitchd idle: "
        f"{idle_rate * 1e3:.2f} ms of CPU per second, subtracted\n"
        f"batch (add-flows, {args.rules} flows): vswitchd CPU "
        f"{mean(batch.vswitchd_cpu_s) * 1e3:.3f} ms; client CPU "
        f"{mean(batch.client_cpu_s) * 1e3:.2f} ms, wall "
        f"{statistics.median(batch.wall_s) * 1e3:.2f} ms\n"
        f"one flow per call (add-flow): vswitchd CPU {per_call * 1e3:.3f} ms; client CPU "
        f"{mean(single.client_cpu_s) * 1e3:.2f} ms, wall "
        f"{statistics.median(single.wall_s) * 1e3:.2f} ms\n"
        f"solved: one flow {flow_s * 1e6:.1f} us, one connection "
        f"{(per_call - flow_s) * 1e6:.1f} us of vswitchd CPU\n"
    )


if __name__ == "__main__":
    main()
