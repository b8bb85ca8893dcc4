"""A host's CNI networks, as a testbed run and a node agent share them.

A testbed run of the ``cni`` runtime and an agent started with ``--cni``
each keep a network of their own on the host: a subnet no route, address or
other network uses, a state directory under :data:`CNI_STATE_DIR` holding
``run.json`` (the conflist, the plugin directory, the sandbox's interface
name) and host-local's leases, and, for the bridge plugin, a bridge made
before any ADD. Both claim a subnet the same way (:func:`claim_network`,
under the sweep lock, so that two claims never take one subnet), make the
bridge the same way (:func:`make_bridge`), and read a saved network back the
same way (:func:`read_saved_network`: a sweep's DEL, an agent's adoption).
This module is that shared ground, public so that the agent needs no
private module of the testbed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from ._leftovers import CNI_STATE_DIR, SavedNetwork, read_saved_network, sweep_lock
from .cni import CniNetwork, pick_subnet

__all__ = [
    "CNI_STATE_DIR",
    "IFNAME",
    "SavedNetwork",
    "claim_network",
    "make_bridge",
    "read_saved_network",
]

#: The sandbox's interface a run's ADD names (``CNI_IFNAME``), saved with its network.
IFNAME = "eth0"


def _host_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 prefix routed or addressed on the host (the default route aside)."""
    nets = []
    with IPRoute() as ipr:
        for route in ipr.route("dump", family=socket.AF_INET):
            dst = route.get_attr("RTA_DST")
            if dst and route["dst_len"] > 0:
                nets.append(ipaddress.IPv4Network(f"{dst}/{route['dst_len']}", strict=False))
        for addr in ipr.get_addr(family=socket.AF_INET):
            a = addr.get_attr("IFA_ADDRESS")
            if a:
                nets.append(ipaddress.IPv4Network(f"{a}/{addr['prefixlen']}", strict=False))
    return nets


def _other_runs_subnets() -> list[ipaddress.IPv4Network]:
    nets = []
    for saved in CNI_STATE_DIR.glob("*/run.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            nets.append(ipaddress.IPv4Network(json.loads(saved.read_text())["subnet"]))
    return nets


def claim_network(
    state_dir: Path,
    network_on: Callable[[ipaddress.IPv4Network], CniNetwork],
    *,
    bin_dir: Path,
) -> tuple[ipaddress.IPv4Network, CniNetwork]:
    """A subnet no route, address or other CNI state directory on the host
    uses, and the network ``network_on`` builds on it, saved as
    ``state_dir/run.json`` (the sweep's way to DEL what it holds, and other
    runs' and agents' way to keep off its subnet). Two claims at once must
    not take one subnet: both hold the sweep lock."""
    with sweep_lock():
        subnet = pick_subnet([*_host_networks(), *_other_runs_subnets()])
        state_dir.mkdir(parents=True, exist_ok=False)
        network = network_on(subnet)
        saved = {
            "conflist": network.conflist(),
            "bin_dir": str(bin_dir),
            "subnet": str(subnet),
            "ifname": IFNAME,
        }
        tmp = state_dir / "run.json.tmp"
        tmp.write_text(json.dumps(saved, indent=1) + "\n")
        tmp.replace(state_dir / "run.json")
    return subnet, network


def make_bridge(ipr: Any, name: str, subnet: ipaddress.IPv4Network) -> None:
    """The bridge plugin's bridge, made before any ADD, with the subnet's
    first address as its gateway, up.

    A node's bridge exists before a storm (the first ADD made it long ago);
    made here, the storm's ADDs find it instead of racing to create it. Its
    MAC is set: a bridge takes the lowest MAC of its ports otherwise, and
    each ADD's result names the bridge's MAC, which CHECK compares, so it
    must not move as later sandboxes join.
    """
    ipr.link("add", ifname=name, kind="bridge")
    (idx,) = ipr.link_lookup(ifname=name)
    (link,) = ipr.get_links(idx)
    ipr.link("set", index=idx, address=link.get_attr("IFLA_ADDRESS"))
    gateway = next(subnet.hosts())
    ipr.addr("add", index=idx, address=str(gateway), prefixlen=subnet.prefixlen)
    ipr.link("set", index=idx, state="up")
