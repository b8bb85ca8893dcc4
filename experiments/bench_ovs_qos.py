"""What QoS rules on vPorts cost Open vSwitch, as paper-000's
``costs.ovs_qos_s`` and ``costs.ovs_qos_resend_s`` are measured (the latter is
per rule: half of what one port with both rules adds).

Seed 000 (§4.1.2, Fig. 7a) configures "two QoS rules for each vport to
control the average and peak bandwidth of the ingress and egress traffic";
for veth every pod has its own vPort, so a storm of N pods sets 2N rules.
In OVS a rule is a row written through ovsdb-server (``ovs-vsctl``, which
waits until ovs-vswitchd has applied it). vswitchd, from its one main loop,
sees the database change and reconfigures every bridge, port and interface;
for every port that has QoS it sends that port's tc configuration again by
netlink (strace of OVS 3.1.0: two RTM_NEWTCLASS for the HTB rule, one
RTM_DELQDISC, one RTM_NEWQDISC and two RTM_NEWTFILTER for the policing rule),
whichever port the change was about.

Method. A private switch (``_ovs.py``: namespace ``bst-ovs``, userspace
bridge ``bstbr0``). For each bridge size in ``--ports`` (cumulative), veth
pairs are made in the namespace (``bstv<i>``/``bstp<i>``) and added as
ports; after ``--settle`` seconds a no-op change (an ``external_ids`` key on
one port) is timed ``--repeats`` times (A: no port has QoS); then both rules
are set on every port, each call timed (the ingress rule:
``ingress_policing_rate``/``_burst``; the egress rule: a ``linux-htb`` QoS
with one queue, min and max rate); after settling the no-op is timed again
(B: every port has QoS); then the rules are cleared. vswitchd's CPU (all
threads, less its idle rate, measured after settling) and the client's are
read around each call. What one QoS port adds to every reconfiguration is
(B - A) / ports; what one rule costs is its call on the smallest bridge;
what every port, QoS or not, adds to a reconfiguration is the slope of A
against the bridge's size (``ovs_reconfigure_per_port_s``).

Needs root and ``openvswitch-switch``. Creates only its namespace (with the
veths in it) and a temporary directory; removes them and ends the daemons it
started, by PID, even on failure.

With ``--strace`` it also counts, on the smallest bridge, the tc messages
vswitchd sends per QoS port for one change that concerns none of them.

With ``--rtnl`` it measures, on every bridge size, how long the kernel takes
over each message vswitchd re-sends (``costs.ovs_qos_resend_rtnl_s``): a
tracefs instance (``bst-ovs-rtnl``; this kernel allows no kprobes or function
tracing) records ``sys_enter/exit_sendmsg`` and ``qdisc:qdisc_create/destroy``
of vswitchd's main thread over ``--repeats`` no-op changes. Every rtnetlink
request is handled inside the sender's ``sendmsg``, so its time there bounds
what the request holds RTNL from above. The messages are told apart by what
happens inside them and by their size (OVS 3.1.0): DELQDISC destroys the
ingress qdisc and NEWQDISC creates it again; NEWTCLASS carries the HTB rates
(2 152 bytes), NEWTFILTER the policer (1 172-1 176 bytes); the remaining
52-byte requests are RTM_GETLINK by index. DELQDISC, NEWQDISC and NEWTCLASS
run under RTNL (``tc_get_qdisc``, ``tc_modify_qdisc``, ``tc_ctl_tclass``).
Whether NEWTFILTER and GETLINK take it depends on the kernel and classifier,
so they are reported apart and left out: the share is a lower bound. The
RTNL share is the RTNL messages' kernel time over all re-sent messages'
kernel time, both from the same trace (the tracepoints' own cost falls on
both); vswitchd's CPU per QoS port is about that kernel time, so the re-send
is the kernel's work.

Run: ``python experiments/bench_ovs_qos.py [--ports 10,50,100,200,300] [--strace] [--rtnl]``.
"""

from __future__ import annotations

import argparse
import codecs
import collections
import contextlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _ovs import (
    BRIDGE,
    NETNS,
    Calls,
    Ovs,
    idle_cpu_rate,
    private_ovs,
    require_root_and_ovs,
    timed,
)

# Rates of the two rules (any values: the cost is in configuring them).
POLICING_RATE_KBPS = 100_000
POLICING_BURST_KB = 10_000
EGRESS_MAX_BPS = 100_000_000
EGRESS_MIN_BPS = 10_000_000


@dataclass
class Size:
    """One bridge size: no-op reconfigurations without (A) and with (B) QoS on
    every port, and the rule calls in between."""

    ports: int
    noop_plain: Calls = field(default_factory=Calls)
    noop_qos: Calls = field(default_factory=Calls)
    ingress: Calls = field(default_factory=Calls)
    egress: Calls = field(default_factory=Calls)

    def per_qos_port(self, of: str) -> float:
        """What one QoS port adds to a reconfiguration (``of``: a Calls field)."""
        b = statistics.mean(getattr(self.noop_qos, of))
        a = statistics.mean(getattr(self.noop_plain, of))
        return (b - a) / self.ports


def _veth(pod: int) -> str:
    name = f"bstv{pod}"
    subprocess.run(
        ["ip", "-n", NETNS, "link", "add", name, "type", "veth", "peer", "name", f"bstp{pod}"],
        check=True,
    )
    for dev in (name, f"bstp{pod}"):
        subprocess.run(["ip", "-n", NETNS, "link", "set", dev, "up"], check=True)
    return name


# ovs-vsctl arguments, by what they do to ``{port}``. The ingress rule polices
# what the port receives (a tc ingress qdisc and filter); the egress rule
# shapes what it sends (an HTB qdisc and one queue).
INGRESS_RULE = (
    f"set interface {{port}} ingress_policing_rate={POLICING_RATE_KBPS} "
    f"ingress_policing_burst={POLICING_BURST_KB}"
)
EGRESS_RULE = (
    f"set port {{port}} qos=@q -- --id=@q create qos type=linux-htb "
    f"other-config:max-rate={EGRESS_MAX_BPS} queues:0=@q0 -- --id=@q0 create queue "
    f"other-config:min-rate={EGRESS_MIN_BPS} other-config:max-rate={EGRESS_MAX_BPS}"
)
CLEAR_RULES = (
    "set interface {port} ingress_policing_rate=0 ingress_policing_burst=0 -- clear port {port} qos"
)


def _vsctl(ovs: Ovs, template: str, port: str) -> list[str]:
    return [*ovs.vsctl, *template.format(port=port).split()]


def _settled_idle_rate(ovs: Ovs, settle_s: float) -> float:
    """Wait out what the last changes set off, then vswitchd's idle CPU rate."""
    time.sleep(settle_s)
    return idle_cpu_rate(ovs.vswitchd_pid, seconds=3.0)


def _noop_changes(ovs: Ovs, tag: str, repeats: int, settle_s: float, into: Calls) -> float:
    """Time ``repeats`` changes that concern no QoS (an ``external_ids`` key on
    one port) after settling; returns the idle rate used."""
    idle_rate = _settled_idle_rate(ovs, settle_s)
    for r in range(repeats):
        noop = [*ovs.vsctl, "set", "port", "bstv0", f"external_ids:bst={tag}-{r}"]
        timed(noop, ovs, idle_rate, into)
    return idle_rate


# rtnetlink message types a tc configuration sends (linux/rtnetlink.h)
_RTM_TC = {36: "NEWQDISC", 37: "DELQDISC", 40: "NEWTCLASS", 41: "DELTCLASS", 44: "NEWTFILTER"}


def _tc_messages_per_port(ovs: Ovs, ports: int) -> dict[str, float]:
    """strace vswitchd over one no-op change while every port has both rules:
    the tc messages it sends, per QoS port (raw netlink headers: type at
    bytes 4-5)."""
    log = Path(ovs.env["OVS_RUNDIR"]) / "strace.txt"
    argv = ["strace", "-f", "-qq", "-e", "trace=sendmsg", "-s", "64", "-X", "raw"]
    tracer = subprocess.Popen([*argv, "-o", str(log), "-p", str(ovs.vswitchd_pid)])
    try:
        time.sleep(1.0)  # strace attaches to every thread
        noop = "set port bstv0 external_ids:bst=strace"
        subprocess.run([*ovs.vsctl, *noop.split()], env=ovs.env, check=True)
        time.sleep(0.5)
    finally:
        tracer.terminate()
        tracer.wait()
    counts: collections.Counter[str] = collections.Counter()
    for match in re.finditer(r'iov_base="((?:[^"\\]|\\.)*)"', log.read_text()):
        header = codecs.escape_decode(match.group(1).encode())[0]
        if len(header) >= 6 and (kind := int.from_bytes(header[4:6], "little")) in _RTM_TC:
            counts[_RTM_TC[kind]] += 1
    return {kind: n / ports for kind, n in sorted(counts.items())}


TRACEFS_INSTANCE = Path("/sys/kernel/tracing/instances/bst-ovs-rtnl")
_TRACED = (
    "syscalls/sys_enter_sendmsg",
    "syscalls/sys_exit_sendmsg",
    "qdisc/qdisc_create",
    "qdisc/qdisc_destroy",
)
_EVENT = re.compile(r"-(\d+)\s+\[\d+\]\s+\S+\s+(\d+\.\d+): (.*)$")
#: Under RTNL for certain; the others are reported apart (see the module doc).
RTNL_MESSAGES = ("DELQDISC", "NEWQDISC", "NEWTCLASS")


def _message_kind(size_bytes: int, qdisc_event: str | None) -> str:
    if qdisc_event == "qdisc_destroy":
        return "DELQDISC"
    if qdisc_event == "qdisc_create":
        return "NEWQDISC"
    if size_bytes >= 2000:
        return "NEWTCLASS"
    if size_bytes >= 1000:
        return "NEWTFILTER"
    return "GETLINK"


@dataclass
class Resend:
    """Kernel time of the messages vswitchd re-sends, per QoS port and change."""

    ports: int
    changes: int
    kernel_s: dict[str, float] = field(default_factory=dict)
    count: dict[str, float] = field(default_factory=dict)

    @property
    def rtnl_s(self) -> float:
        return sum(self.kernel_s.get(kind, 0.0) for kind in RTNL_MESSAGES)

    @property
    def rtnl_share(self) -> float:
        return self.rtnl_s / sum(self.kernel_s.values())


def _parse_resends(text: str, ports: int, changes: int) -> Resend:
    kernel: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    entered: float | None = None
    inside: str | None = None
    for line in text.splitlines():
        match = _EVENT.search(line)
        if line.startswith("#") or match is None:
            continue
        stamp, event = float(match.group(2)), match.group(3)
        if event.startswith("sys_sendmsg("):
            entered, inside = stamp, None
        elif event.startswith("sys_sendmsg ->") and entered is not None:
            kind = _message_kind(int(event.split("->")[1], 16), inside)
            kernel[kind] += stamp - entered
            count[kind] += 1
            entered = None
        elif event.startswith(("qdisc_create", "qdisc_destroy")):
            inside = event.split(":")[0]
    per = ports * changes
    return Resend(
        ports,
        changes,
        kernel_s={k: v / per for k, v in sorted(kernel.items())},
        count={k: v / per for k, v in sorted(count.items())},
    )


def _trace_resends(ovs: Ovs, ports: int, repeats: int) -> Resend:
    """Trace vswitchd's main thread over ``repeats`` no-op changes."""
    instance = TRACEFS_INSTANCE
    instance.mkdir()
    try:
        (instance / "buffer_size_kb").write_text("32768")
        (instance / "set_event_pid").write_text(str(ovs.vswitchd_pid))
        for event in _TRACED:
            (instance / "events" / event / "enable").write_text("1")
        for r in range(repeats):
            noop = [*ovs.vsctl, "set", "port", "bstv0", f"external_ids:bst=rtnl-{r}"]
            subprocess.run(noop, env=ovs.env, check=True)
            time.sleep(0.2)  # vswitchd's reconfiguration is over
        (instance / "tracing_on").write_text("0")
        text = (instance / "trace").read_text()
    finally:
        for event in _TRACED:
            with contextlib.suppress(OSError):
                (instance / "events" / event / "enable").write_text("0")
        instance.rmdir()
    return _parse_resends(text, ports, repeats)


def _report_resend(resend: Resend) -> None:
    us = 1e6
    kinds = ", ".join(
        f"{kind} {resend.count[kind]:.2f}x {resend.kernel_s[kind] * us:.1f} us"
        for kind in resend.kernel_s
    )
    sys.stdout.write(
        f"{resend.ports} ports: re-sent per QoS port and change: {kinds}; under RTNL "
        f"{resend.rtnl_s * us:.1f} us of {sum(resend.kernel_s.values()) * us:.1f} us "
        f"({resend.rtnl_share:.0%})\n"
    )
    sys.stdout.flush()


def _size(
    ovs: Ovs,
    ports: int,
    repeats: int,
    settle_s: float,
    *,
    trace: bool = False,
    rtnl: list[Resend] | None = None,
) -> Size:
    size = Size(ports)
    idle_rate = _noop_changes(ovs, f"{ports}a", repeats, settle_s, size.noop_plain)
    for i in range(ports):
        timed(_vsctl(ovs, INGRESS_RULE, f"bstv{i}"), ovs, idle_rate, size.ingress)
        timed(_vsctl(ovs, EGRESS_RULE, f"bstv{i}"), ovs, idle_rate, size.egress)
    _noop_changes(ovs, f"{ports}b", repeats, settle_s, size.noop_qos)
    if trace:
        per_port = _tc_messages_per_port(ovs, ports)
        sys.stdout.write(f"{ports} ports: tc messages per QoS port and change: {per_port}\n")
    if rtnl is not None:
        rtnl.append(_trace_resends(ovs, ports, repeats))
        _report_resend(rtnl[-1])
    for i in range(ports):
        subprocess.run(_vsctl(ovs, CLEAR_RULES, f"bstv{i}"), env=ovs.env, check=True)
    return size


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ports", default="10,50,100,200,300")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--settle", type=float, default=6.0, help="seconds")
    parser.add_argument(
        "--strace", action="store_true", help="count the tc messages of a change (smallest bridge)"
    )
    parser.add_argument(
        "--rtnl",
        action="store_true",
        help="trace the kernel time of the re-sent tc messages (tracefs)",
    )
    args = parser.parse_args(argv)
    sizes = sorted(int(n) for n in args.ports.split(","))
    require_root_and_ovs()
    if args.strace and shutil.which("strace") is None:
        sys.exit("--strace needs strace (apt install strace)")
    if args.rtnl and not Path("/sys/kernel/tracing/events/syscalls").is_dir():
        sys.exit("--rtnl needs tracefs with syscall tracepoints at /sys/kernel/tracing")
    results: list[Size] = []
    resends: list[Resend] | None = [] if args.rtnl else None
    with tempfile.TemporaryDirectory(prefix="bst-ovs-") as tmp, private_ovs(Path(tmp)) as ovs:
        made = 0
        for ports in sizes:
            while made < ports:
                port = _veth(made)
                subprocess.run(
                    [*ovs.vsctl, "add-port", BRIDGE, port],
                    env=ovs.env,
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                made += 1
            results.append(
                _size(
                    ovs,
                    ports,
                    args.repeats,
                    args.settle,
                    trace=args.strace and not results,
                    rtnl=resends,
                )
            )
            _report_size(results[-1])
    _report(results)
    if resends:
        _report_resends(resends)


def _report_resends(resends: Sequence[Resend]) -> None:
    us = 1e6
    per_rule = [r.rtnl_s / 2 for r in resends]  # two rules per port
    shares = [r.rtnl_share for r in resends]
    sys.stdout.write(
        f"re-sent tc messages under RTNL, per rule and change: "
        f"{min(per_rule) * us:.1f}-{max(per_rule) * us:.1f} us (median "
        f"{statistics.median(per_rule) * us:.1f} us); share of their kernel time "
        f"{min(shares):.0%}-{max(shares):.0%} (median {statistics.median(shares):.0%})\n"
    )


def _report_size(size: Size) -> None:
    ms, us = 1e3, 1e6
    mean = statistics.mean
    sys.stdout.write(
        f"{size.ports} ports: no-op change, vswitchd "
        f"{mean(size.noop_plain.vswitchd_cpu_s) * ms:.3f} ms without QoS, "
        f"{mean(size.noop_qos.vswitchd_cpu_s) * ms:.3f} ms with QoS on every port "
        f"(client wall {statistics.median(size.noop_plain.wall_s) * ms:.2f} / "
        f"{statistics.median(size.noop_qos.wall_s) * ms:.2f} ms); per QoS port: "
        f"{size.per_qos_port('vswitchd_cpu_s') * us:.1f} us vswitchd CPU, "
        f"{size.per_qos_port('wall_s') * us:.1f} us client wall; rule calls: ingress "
        f"{mean(size.ingress.vswitchd_cpu_s) * ms:.3f} ms, egress "
        f"{mean(size.egress.vswitchd_cpu_s) * ms:.3f} ms vswitchd CPU, client CPU "
        f"{mean(size.ingress.client_cpu_s + size.egress.client_cpu_s) * ms:.2f} ms\n"
    )
    sys.stdout.flush()


def plain_port_slope(results: Sequence[Size]) -> tuple[float, float]:
    """What each port on the bridge, QoS or not, adds to a reconfiguration:
    the least-squares line of the no-op change's vswitchd CPU without QoS (A)
    against the bridge's ports. Returns (seconds per port, seconds at 0 ports)."""
    ports = [float(s.ports) for s in results]
    cpu = [statistics.mean(s.noop_plain.vswitchd_cpu_s) for s in results]
    slope, intercept = statistics.linear_regression(ports, cpu)
    return slope, intercept


def _report(results: Sequence[Size]) -> None:
    us = 1e6
    per_port = [s.per_qos_port("vswitchd_cpu_s") for s in results if s.ports >= 50]
    smallest = results[0]
    rule_ms = statistics.mean(smallest.ingress.vswitchd_cpu_s + smallest.egress.vswitchd_cpu_s)
    if len(results) >= 2:
        slope, intercept = plain_port_slope(results)
        sys.stdout.write(
            f"per port of any kind and reconfiguration (line through the no-op changes "
            f"without QoS, {len(results)} bridge sizes): vswitchd {slope * us:.1f} us per "
            f"port, {intercept * 1e3:.3f} ms at no port\n"
        )
    if per_port:
        sys.stdout.write(
            f"per QoS port and reconfiguration (bridges of 50+ ports): vswitchd "
            f"{min(per_port) * us:.1f}-{max(per_port) * us:.1f} us, median "
            f"{statistics.median(per_port) * us:.1f} us\n"
        )
    sys.stdout.write(
        f"one rule on a bridge of {smallest.ports} ports: vswitchd {rule_ms * 1e3:.3f} ms of CPU\n"
    )


if __name__ == "__main__":
    main()
