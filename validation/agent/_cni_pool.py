"""An agent's ``netns-veth`` pool plumbed by real CNI plugins (``agent serve --cni-plugin``).

A containerd + Kata node's namespace is plumbed by a CNI ADD; a pool that
saves a sandbox that work must hold namespaces whose ADD is done. Started
with ``--cni-plugin bridge`` (or ``ptp``), the agent keeps a network of its own:

* ``bsp<id>br``, the bridge plugin's bridge (made up front, its gateway
  address on it, as :func:`~bootstorm.validation.testbed.networks.make_bridge`
  makes a testbed run's);
* a subnet no route, address or other CNI state on the host uses, claimed as
  a testbed run claims one (under the sweep lock, saved in
  ``/run/bootstorm-cni/agent-<id>/run.json``, where runs look for subnets in
  use); host-local's leases live in ``ipam/`` beside it.

Each pooled ``netns-veth`` is a namespace ``bstpool-netns-veth-<id>-<n>`` and
an ADD with container id = its name: ``eth0`` inside, the plugin's host veth
as the device's ``peer``. A taker gets the conflist and the ADD's result with
it (:class:`~bootstorm.validation.agent._pools.CniPlumbing`) and DELs through
that network when done. The other kinds are :class:`NetlinkDevices`' own.

On start the agent sweeps what a killed agent of the same id left: each
namespace is DELed through the saved network (host-local releases its
address) and removed, except those handed out (the pool manager's record
names them). If none of its namespaces is left, the bridge and the state
directory go, and the first ``netns-veth`` made claims a fresh network; if
handed-out ones are still there, their network is theirs too: the agent
adopts the saved one (same subnet, bridge, host-local state) rather than
pull the bridge and the address leases from under them. On shutdown, after
the pool manager removed what is still pooled, the network goes too, unless
handed-out namespaces still use it (then the next start adopts it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..._params import OneOf, Rules, validate
from .._names import AGENT_POOL_LINK_PREFIX, owned_netns
from .._netns import create_netns_here, list_netns, remove_netns
from ._pools import CniPlumbing, Device, NetlinkDevices
from ._protocol import NETNS_VETH_PEER

__all__ = ["CniDevices", "CniPoolSettings"]

log = logging.getLogger(__name__)

#: The plugins an agent can plumb with: those that need no master link.
AGENT_CNI_PLUGINS = ("bridge", "ptp")


@dataclass(frozen=True, kw_only=True)
class CniPoolSettings:
    """How an agent plumbs its ``netns-veth`` pool: ``plugin`` (with
    host-local IPAM) from the plugin directory ``bin_dir``."""

    plugin: str
    bin_dir: Path

    __rules__: ClassVar[Rules] = Rules(plugin=OneOf(AGENT_CNI_PLUGINS))

    def __post_init__(self) -> None:
        validate(self)

    @classmethod
    def discover(cls, plugin: str, bin_dir: Path | None = None) -> CniPoolSettings:
        """``plugin`` and host-local from ``bin_dir``, or from the first default
        plugin directory that has them; ``ValueError`` (one line: an unknown
        plugin, or a missing one with the install command) otherwise."""
        from ..testbed.cni import IPAM_PLUGIN, CniSetupError, discover_bin_dir

        cls(plugin=plugin, bin_dir=Path("."))  # the plugin's name first
        try:
            return cls(plugin=plugin, bin_dir=discover_bin_dir(bin_dir, [plugin, IPAM_PLUGIN]))
        except CniSetupError as exc:
            raise ValueError(str(exc)) from None


def agent_bridge(pool_id: int) -> str:
    """The bridge of agent ``pool_id``'s network (``bsp9999br``: 9 bytes)."""
    return f"{AGENT_POOL_LINK_PREFIX}{pool_id}br"


def agent_network_name(pool_id: int) -> str:
    return f"bootstorm-agent-{pool_id}"


def agent_state_dir(pool_id: int) -> Path:
    from ..testbed.networks import CNI_STATE_DIR

    return CNI_STATE_DIR / f"agent-{pool_id}"


class CniDevices(NetlinkDevices):
    """:class:`NetlinkDevices` whose ``netns-veth`` a CNI ADD plumbs (module doc).

    The agent's first refill worker holds the network (claims it on first
    use, removes it at close); each further worker (``pool_refill.
    concurrency``) gets :meth:`worker`'s ops: its own netlink socket, the
    same network, ADDs side by side as a node's runtime runs them (host-local
    serialises its leases under its own file lock)."""

    def __init__(
        self, pool_id: int, settings: CniPoolSettings, *, network_of: CniDevices | None = None
    ) -> None:
        super().__init__(pool_id)
        self._settings = settings
        self._network: Any = None  # a CniNetwork once claimed (the holder's only)
        self._state_dir = agent_state_dir(pool_id)
        self._bridge = agent_bridge(pool_id)
        # None: this one holds the network; else the ops that do.
        self._holder = network_of
        self._claim_lock = threading.Lock()

    def worker(self) -> CniDevices:
        """Ops for one more refill worker: a socket of its own, this network."""
        return CniDevices(self._pool_id, self._settings, network_of=self._holder or self)

    @property
    def network_name(self) -> str:
        return agent_network_name(self._pool_id)

    # -- the network --------------------------------------------------------------

    def _namespaces_in_use(self) -> list[str]:
        """This agent's ``netns-veth`` namespaces on the host. Once the start's
        sweep is done (before any is made) or the pool is emptied (at close),
        these are the handed-out ones."""
        return [n for n in list_netns() if self._netns_veth_re.match(n)]

    def _adopt_network(self, route: Any) -> Any:
        """The saved network of an earlier agent of this id, its bridge made
        again (through ``route``) if gone; None if there is none this agent
        can plumb with."""
        import json

        from ..testbed.networks import make_bridge

        try:
            saved = json.loads((self._state_dir / "run.json").read_text())
            subnet = ipaddress.IPv4Network(saved["subnet"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        network = self._saved_network()
        if network is None or network.types[0] != self._settings.plugin:
            return None
        if self._settings.plugin == "bridge" and not route.link_lookup(ifname=self._bridge):
            make_bridge(route, self._bridge, subnet)
        return network

    def _ensure_network(self) -> Any:
        """The network, claimed on first use by whichever worker needs it
        first, through that worker's socket (pyroute2's are not thread-safe)."""
        holder = self._holder or self
        if holder._network is not None:
            return holder._network
        with holder._claim_lock:
            return holder._claim_network(self._route())

    def _claim_network(self, route: Any) -> Any:
        if self._network is not None:  # another worker claimed it meanwhile
            return self._network
        from ..testbed.cni import build_network
        from ..testbed.networks import claim_network, make_bridge

        in_use = self._namespaces_in_use()
        if in_use:
            adopted = self._adopt_network(route)
            if adopted is not None:
                log.info(
                    "CNI network %s adopted: %d handed-out namespaces still use it",
                    self.network_name,
                    len(in_use),
                )
                self._network = adopted
                return adopted
            log.warning(
                "CNI network %s: %d handed-out namespaces, but no saved network to adopt; "
                "claiming a new one",
                self.network_name,
                len(in_use),
            )
        self._remove_network(route)  # a killed agent's, after its namespaces were swept
        plugin = self._settings.plugin

        def network_on(subnet: ipaddress.IPv4Network) -> Any:
            return build_network(
                name=self.network_name,
                plugin=plugin,
                subnet=subnet,
                ipam_dir=self._state_dir / "ipam",
                bridge=self._bridge if plugin == "bridge" else None,
            )

        subnet, network = claim_network(self._state_dir, network_on, bin_dir=self._settings.bin_dir)
        try:
            if plugin == "bridge":
                make_bridge(route, self._bridge, subnet)
        except BaseException:
            self._remove_network(route)
            raise
        log.info("CNI network %s on %s (%s)", self.network_name, subnet, plugin)
        self._network = network
        return network

    def _saved_network(self) -> Any:
        """The network a killed agent of this id saved, or None."""
        from ..testbed.networks import read_saved_network

        try:
            return read_saved_network(self._state_dir).network
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _remove_network(self, route: Any) -> None:
        self._network = None
        with contextlib.suppress(Exception):
            self._remove_link(self._bridge, route=route)
        shutil.rmtree(self._state_dir, ignore_errors=True)

    # -- DeviceOps ------------------------------------------------------------------

    def create(self, device: Device) -> Device:
        if device.kind != "netns-veth":
            return super().create(device)
        from ..testbed.cni import add

        network = self._ensure_network()
        os.close(create_netns_here(device.name))
        try:
            result = add(
                network,
                bin_dir=self._settings.bin_dir,
                container_id=device.name,
                netns=f"/run/netns/{device.name}",
                ifname=NETNS_VETH_PEER,
                on_exec=lambda _record: None,
            )
        except BaseException:
            self._del(network, device.name, None)
            with contextlib.suppress(Exception):
                remove_netns(device.name)
            raise
        # The bridge plugin reports its bridge first, then the host veth.
        host_end = next(
            (i.name for i in result.interfaces if i.sandbox is None and i.name != self._bridge),
            None,
        )
        return Device(
            kind=device.kind,
            name=device.name,
            peer=host_end,
            cni=CniPlumbing(
                container_id=device.name, conflist=network.conflist(), result=result.text
            ),
        )

    def remove(self, device: Device) -> None:
        if device.kind != "netns-veth":
            super().remove(device)
            return
        assert owned_netns(device.name)
        network = (self._holder or self)._network or self._saved_network()
        if network is not None:
            self._del(network, device.name, device.cni.result if device.cni else None)
        remove_netns(device.name)  # eth0 goes with it, and its host veth

    def _del(self, network: Any, container_id: str, result_text: str | None) -> None:
        from ..testbed.cni import CniError, delete_logged, parse_result

        try:
            result = (
                None if result_text is None else parse_result(result_text, plugin=network.types[-1])
            )
        except CniError:
            result = None  # DEL without prevResult: each plugin finds what it holds
        delete_logged(
            network,
            result,
            bin_dir=self._settings.bin_dir,
            container_id=container_id,
            netns=f"/run/netns/{container_id}",
            ifname=NETNS_VETH_PEER,
        )

    def leftovers(self) -> list[Device]:
        # The plain kinds by name; a netns-veth by its namespace (its host end
        # is the plugin's veth, named by the plugin, and goes with eth0).
        return [
            Device(d.kind, d.name) if d.kind == "netns-veth" else d for d in super().leftovers()
        ]

    def close(self) -> None:
        if self._holder is not None:  # a further worker: its socket only
            super().close()
            return
        # The pool manager removed what was still pooled; what clients took
        # is theirs, and so is the network while they use it: their DEL then
        # goes through it (host-local releases their address), and the next
        # agent of this id adopts it.
        try:
            in_use = self._namespaces_in_use()
        except Exception as exc:
            log.warning("cannot list namespaces: %s; removing the CNI network", exc)
            in_use = []
        if in_use:
            log.info(
                "CNI network %s kept: %d handed-out namespaces still use it",
                self.network_name,
                len(in_use),
            )
            self._network = None
        else:
            self._remove_network(self._route())
        super().close()
