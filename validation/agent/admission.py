"""A node agent's admission for a testbed storm: the testbed's
:class:`~bootstorm.validation.testbed.admission.Admission` protocol over the
agent's HTTP API.

It lives in the agent's package and implements the testbed's public
protocol: the testbed never imports the agent (the driver takes any
``Admission``), and ``bootstorm testbed run --agent URL`` passes one of these.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Collection, Iterator

from ..testbed.admission import CniPooledNetns, PluginAgentEndpoint, PoolLevel, PoolLevelNow
from .client import AgentClient, AgentError

__all__ = ["AgentAdmission"]


class AgentAdmission:
    """Admission by a node agent (``bootstorm agent serve``) over HTTP.

    Each stage is a lease the agent grants under its pushed limits (waiting
    up to ``wait_s`` for a permit); ``take`` asks the agent's pools. A device
    handed out is the sandbox's from then on: the driver removes it after
    the storm like one it made.

    ``limited``: the stages the agent's config in force limits, where the
    caller knows it (it pushed that config): only those are leased, as a
    node's plugin asks for a permit only where there is one to wait for. A
    lease is two HTTP calls (2.6 ms on loopback on this project's 2-core
    host, 2.0 ms of it the client's CPU under the testbed's GIL), so leasing
    every stage of every sandbox slowed a 63-start burst's p99 2.5-fold. None
    (the default): every stage is leased, since a config pushed during the
    storm may limit any.
    """

    def __init__(
        self, client: AgentClient, *, wait_s: float = 300.0, limited: Collection[str] | None = None
    ) -> None:
        self.client = client
        self.wait_s = wait_s
        self.limited = None if limited is None else frozenset(limited)

    def gated(self, name: str) -> bool:
        # Without ``limited``, the agent's limits may be pushed during the
        # storm, and every stage is a lease it grants: any stage may wait.
        return self.limited is None or name in self.limited

    @contextlib.contextmanager
    def stage(self, name: str, holder: str) -> Iterator[None]:
        if not self.gated(name):
            yield
            return
        with self.client.stage(name, holder, wait_s=self.wait_s):
            yield

    def plugin_agent(self) -> PluginAgentEndpoint:
        """The testbed's ``PluginAgent``: this agent, for a ``bootstorm-cni`` plugin."""
        return PluginAgentEndpoint(
            url=self.client.base_url, token=self.client._token, ca_file=self.client._ca_file
        )

    def take(self, kind: str, holder: str) -> str | None:
        device = self.client.take(kind, holder)
        return None if device is None else device.name

    def level_after_take(self, kind: str, holder: str) -> PoolLevel | None:
        """The level this thread's last take left ``kind``'s pool at (the
        testbed's ``PoolLevels``, for the trace's pool takes): the client keeps
        each answer's ``ready`` and ``target`` per thread, and the testbed asks
        on the sandbox's thread right after its take. Another kind's answer (a
        take that never reached the agent) is no answer: unknown. A pool kept
        at nothing and holding nothing is none, as the testbed's own pools: not
        recorded (None)."""
        level = self.client.last_pool_level
        if level is None or level.kind != kind:
            return PoolLevel()
        if level.ready == 0 and level.target == 0:
            return None
        return PoolLevel(ready=level.ready, target=level.target)

    def pool_levels(self) -> list[PoolLevelNow]:
        """The agent's pools now (``GET /v1/pools``), for the testbed's
        ``PoolSampling``: the driver samples them while the storm runs.
        Raises :class:`AgentError` when the agent does not answer."""
        return [
            PoolLevelNow(kind=p.kind, ready=p.ready, making=p.making, target=p.target)
            for p in self.client.pools()
        ]

    def take_pair(self, kind: str, holder: str) -> tuple[str, str] | None:
        device = self.client.take(kind, holder)
        if device is None:
            return None
        if device.peer is None:
            raise ValueError(f"pools.{kind}: the agent handed out {device.name!r} without a peer")
        return device.name, device.peer

    def take_netns_veth(self, holder: str) -> tuple[str, str] | None:
        try:
            device = self.client.take("netns-veth", holder)
        except AgentError as exc:
            if exc.status == 422 and "unknown pool kind" in exc.message:
                return None  # an agent older than the kind pools none
            raise
        if device is None:
            return None
        # The agent's answer: the namespace as ``name``, the pair's end on the
        # host as ``peer`` (the peer inside is eth0).
        if device.peer is None:
            raise ValueError(
                f"pools.netns-veth: the agent handed out {device.name!r} without a host end"
            )
        return device.name, device.peer

    @functools.cached_property
    def cni_network(self) -> str | None:
        """The network an agent started with ``--cni`` plumbs its
        ``netns-veth`` namespaces on, or None: asked once, from ``/healthz``."""
        network = self.client.healthz().get("cni_network")
        return network if isinstance(network, str) else None

    def offers_cni_netns(self) -> bool:
        return self.cni_network is not None

    def take_cni_netns(self, holder: str) -> CniPooledNetns | None:
        if not self.offers_cni_netns():
            return None
        device = self.client.take("netns-veth", holder)
        if device is None:
            return None
        if device.cni is None:
            raise ValueError(
                f"pools.netns-veth: the agent handed out {device.name!r} without its CNI network"
            )
        return CniPooledNetns(
            netns=device.name,
            container_id=device.cni.container_id,
            conflist=device.cni.conflist,
            result=device.cni.result,
        )
