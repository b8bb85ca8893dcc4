"""What one security-group flow costs Open vSwitch's ovs-vswitchd, as
paper-000's ``costs.ovs_flow_mod_s`` was measured.

Seed 000 configures security-group rules "for each pod using OVS flow
tables" (§4.1.2); how its CNI sends them is not said. vswitchd serves
OpenFlow clients from its one main loop, so what pods wait for each other on
is vswitchd's work per request; the client's own process (``ovs-ofctl``:
start, connect, negotiate, send, barrier) runs beside it.

Method. A private ovsdb-server and ovs-vswitchd (the distribution's, Debian
12 ships OVS 3.1.0; seed 000 used 3.1.2) run inside a network namespace this
experiment creates (``bst-ovs``), on a userspace-datapath bridge (``bstbr0``,
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

Run: ``python experiments/bench_ovs_flows.py [--pods 40] [--rules 10]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from _ovs import BRIDGE, Calls, idle_cpu_rate, in_netns, private_ovs, require_root_and_ovs, timed


def _flow(pod: int, rule: int) -> str:
    address = f"10.{pod // 250}.{pod % 250}.{1 + rule % 250}"
    return f"priority=100,tcp,nw_dst={address},tp_dst={1000 + rule},actions=normal"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--rules", type=int, default=10)
    args = parser.parse_args(argv)
    require_root_and_ovs()
    with tempfile.TemporaryDirectory(prefix="bst-ovs-") as tmp_name:
        tmp = Path(tmp_name)
        with private_ovs(tmp) as ovs:
            idle_rate = idle_cpu_rate(ovs.vswitchd_pid)
            batch, single = Calls(), Calls()
            for pod in range(args.pods):
                flows = [_flow(pod, r) for r in range(args.rules)]
                if pod % 2 == 0:
                    path = tmp / f"pod{pod}.flows"
                    path.write_text("\n".join(flows) + "\n")
                    timed(["ovs-ofctl", "add-flows", BRIDGE, str(path)], ovs, idle_rate, batch)
                else:
                    for flow in flows:
                        timed(["ovs-ofctl", "add-flow", BRIDGE, flow], ovs, idle_rate, single)
            installed = subprocess.run(
                in_netns("ovs-ofctl", "dump-aggregate", BRIDGE),
                env=ovs.env,
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
