"""Which of a CNI plugin's ADD requests take RTNL: one ADD under strace.

The CNI runtime's catalog (``models/testbed.py``) prices a plugin's ADD as
its netlink requests that take RTNL, each a hold of the lock. This counts
them, for ``bridge``, ``ptp`` and ``macvlan`` as the testbed runs them
(``validation/testbed/cni.py``'s ``build_network``: host-local IPAM;
the bridge made before the ADD, as a node's exists; macvlan's master a
veth pair of the run's own, both ends up), on one ADD each into a fresh
namespace, under ``strace -f`` (every ``sendto``/``sendmsg`` and
``ioctl``, and ``execve`` to place the IPAM call).

A request is classified by its ``nlmsg_type`` and flags: ``RTM_NEW*``,
``RTM_DEL*`` and ``RTM_SETLINK`` take RTNL (``rtnl_lock`` in
``rtnetlink_rcv_msg``); ``RTM_GET*`` lookups and dumps do not on this
kernel (6.18: they run under RCU, ``RTNL_FLAG_DOIT_UNLOCKED`` /
``RTNL_FLAG_DUMP_UNLOCKED``). The sysctl writes the plugins make
(``accept_ra``, ``accept_dad``, ``arp_notify``; ``ip_forward`` only read,
it is 1 already) are ``proc_dointvec``-style handlers that take no RTNL.
Requests sent from inside the namespace are not decoded by strace (their
socket is in another namespace): the raw type is mapped here.

Everything is made with the prefix ``bst-cc`` and removed after (each ADD
is DELeted, then the namespace and links go), on success or failure.

With ``--time N`` it also times, serially in a namespace of its own
(``bst-cc-time``), ``N`` creations each of a veth pair and of a macvlan on
a master (a veth pair's end, up, as the testbed's), interleaved, after 3 warm-ups, with a netlink
no-op (``RTM_GETLINK`` of ``lo``) beside them: each creation's RTNL work
is its median less the no-op's, and their ratio is what a macvlan's
creation costs against a veth pair's (``models/testbed.py``'s
``MACVLAN_PER_VETH_PAIR``).

Run (root, strace, containernetworking-plugins):
``python experiments/count_cni_netlink.py [--plugins bridge ptp macvlan]
[--bin-dir /usr/lib/cni] [--time 30]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PREFIX = "bst-cc"
#: rtnetlink message types (include/uapi/linux/rtnetlink.h).
RTM = {
    16: "RTM_NEWLINK",
    17: "RTM_DELLINK",
    18: "RTM_GETLINK",
    19: "RTM_SETLINK",
    20: "RTM_NEWADDR",
    21: "RTM_DELADDR",
    22: "RTM_GETADDR",
    24: "RTM_NEWROUTE",
    25: "RTM_DELROUTE",
    26: "RTM_GETROUTE",
    28: "RTM_NEWNEIGH",
    29: "RTM_DELNEIGH",
    30: "RTM_GETNEIGH",
}
NLM_F_DUMP = 0x300
_REQUEST = re.compile(
    r"nlmsg_type=(?P<type>RTM_\w+|0x[0-9a-f]+)[^,]*, nlmsg_flags=(?P<flags>[^,]+), "
    r"nlmsg_seq=(?P<seq>\d+)"
)
_EXEC = re.compile(r'execve\("(?P<path>[^"]+)"')


def _type(raw: str) -> str:
    return RTM.get(int(raw, 16), raw) if raw.startswith("0x") else raw


def classify(line: str) -> tuple[str, str, bool] | None:
    """``(type, flags, takes_rtnl)`` of a netlink request in a strace line, else None."""
    m = _REQUEST.search(line)
    if m is None:
        return None
    kind, flags = _type(m["type"]), m["flags"]
    dump = "NLM_F_DUMP" in flags or any(
        int(f, 16) & NLM_F_DUMP == NLM_F_DUMP for f in re.findall(r"0x[0-9a-f]+", flags)
    )
    takes = not dump and kind.startswith(("RTM_NEW", "RTM_DEL", "RTM_SET"))
    if "IFF_UP" in line and kind == "RTM_NEWLINK" and "CREATE" not in flags:
        kind += " (up)"
    if kind == "RTM_NEWLINK" and ("NLM_F_CREATE" in flags or "0x600" in flags):
        kind += " (create)"
    return kind, flags, takes


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def count(plugin: str, bin_dir: Path, work: Path) -> list[tuple[str, bool]]:
    """One ADD of ``plugin`` under strace: its requests in order, and the IPAM exec."""
    ns = f"{PREFIX}-{plugin}"[:15]
    net = {"ptp": "10.253.0.0/16", "macvlan": "10.251.0.0/16", "bridge": "10.252.0.0/16"}[plugin]
    conf: dict[str, object] = {
        "cniVersion": "1.0.0",
        "name": f"{PREFIX}-{plugin}",
        "type": plugin,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": net}]], "dataDir": str(work)},
    }
    links: list[str] = []
    if plugin == "bridge":
        conf |= {"bridge": f"{PREFIX}br", "isGateway": True, "ipMasq": False, "hairpinMode": False}
        _ip("link", "add", f"{PREFIX}br", "type", "bridge")
        links.append(f"{PREFIX}br")
        _ip("addr", "add", net.replace(".0/16", ".1/16"), "dev", f"{PREFIX}br")
        _ip("link", "set", f"{PREFIX}br", "up")
    elif plugin == "ptp":
        conf |= {"ipMasq": False}
    elif plugin == "macvlan":
        conf |= {"master": f"{PREFIX}m", "mode": "bridge"}
        _ip("link", "add", f"{PREFIX}m", "type", "veth", "peer", "name", f"{PREFIX}p")
        links.append(f"{PREFIX}m")
        _ip("link", "set", f"{PREFIX}m", "up")
        _ip("link", "set", f"{PREFIX}p", "up")
    _ip("netns", "add", ns)
    env = {
        **os.environ,
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": ns,
        "CNI_NETNS": f"/var/run/netns/{ns}",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(bin_dir),
    }
    out = work / f"{plugin}.strace"
    stdin = json.dumps(conf)
    try:
        subprocess.run(
            ["strace", "-f", "-qq", "-s", "256", "-o", str(out), "-e",
             "trace=sendto,sendmsg,ioctl,execve", str(bin_dir / plugin)],
            input=stdin, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
    finally:
        subprocess.run(
            [str(bin_dir / plugin)], input=stdin, env={**env, "CNI_COMMAND": "DEL"},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        for link in links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
    seq: list[tuple[str, bool]] = []
    for line in out.read_text().splitlines():
        e = _EXEC.search(line)
        if e and not e["path"].endswith(f"/{plugin}"):
            seq.append((f"exec {Path(e['path']).name}", False))
            continue
        if " ioctl(" in line and "SIOC" in line:
            seq.append((f"ioctl {line.split('ioctl(', 1)[1].split(',')[1].strip()}", True))
            continue
        c = classify(line)
        if c is not None:
            seq.append((c[0], c[2]))
    return seq


_TIMER = r"""
import statistics, sys, time
from pyroute2 import IPRoute
n = int(sys.argv[1])
with IPRoute() as ipr:
    ipr.link("add", ifname="bstccm", kind="veth", peer={"ifname": "bstccmp"})
    (master,) = ipr.link_lookup(ifname="bstccm")
    ipr.link("set", index=master, state="up")
    times = {"noop": [], "veth": [], "macvlan": []}
    for i in range(n + 3):
        for kind in times:
            t0 = time.perf_counter()
            if kind == "noop":
                ipr.link("get", index=1)
            elif kind == "veth":
                ipr.link("add", ifname=f"bstccv{i}", kind="veth", peer={"ifname": f"bstccp{i}"})
            else:
                ipr.link("add", ifname=f"bstccm{i}", kind="macvlan", link=master,
                         macvlan_mode="bridge")
            if i >= 3:
                times[kind].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    q = {k: statistics.quantiles(v, n=4) for k, v in times.items()}
    for k in times:
        lo, hi = q[k][0] * 1e3, q[k][2] * 1e3
        print(f"{k}: median {med[k] * 1e3:.3f} ms, quartiles {lo:.3f}-{hi:.3f} ms")
    veth, mv = med["veth"] - med["noop"], med["macvlan"] - med["noop"]
    print(f"less the no-op: veth pair {veth * 1e3:.3f} ms, macvlan {mv * 1e3:.3f} ms,",
          f"ratio {mv / veth:.3f}")
"""


def time_creations(n: int) -> None:
    """``n`` veth pairs and macvlans made serially in a namespace of their own (module doc)."""
    ns = f"{PREFIX}-time"
    _ip("netns", "add", ns)
    try:
        out = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", _TIMER, str(n)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        print(out.stdout, end="")
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugins", nargs="*", default=["bridge", "ptp", "macvlan"])
    parser.add_argument("--bin-dir", type=Path, default=Path("/usr/lib/cni"))
    parser.add_argument("--time", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if args.time:
        time_creations(args.time)
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-") as tmp:
        for plugin in args.plugins:
            work = Path(tmp) / plugin
            work.mkdir()
            seq = count(plugin, args.bin_dir, work)
            rtnl = sum(takes for _, takes in seq)
            sent = sum(not kind.startswith("exec ") for kind, _ in seq)
            print(f"{plugin}: {rtnl} of its {sent} requests take RTNL")
            for kind, takes in seq:
                print(f"  {'RTNL' if takes else '    '}  {kind}")


if __name__ == "__main__":
    main()
