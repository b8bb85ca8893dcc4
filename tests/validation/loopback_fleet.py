"""Tens of real node agents on loopback, in one background event loop, with traffic.

Each agent is the real aiohttp application (``create_app``: leases, ``PUT
/config`` saved in its own state directory, ``/metrics``) on a free port,
with fake pool devices (no root, no netlink). A middleware gives some of
them a behaviour: ``slow`` (every request waits ``delay_s``), ``failing``
(500 on every request), ``dropping`` (the connection is closed unanswered)
or ``refusing`` (422 on ``PUT /config``). Traffic: on every agent, starts
arrive at ``rate`` a second (Poisson, seeded) and each holds a lease of
stage ``StartVM`` for ``hold_s``, through the agent's own lease table (the
path an acquire/release takes in the handler, without the HTTP cost: 50
agents' traffic fits on 2 cores), so a config that limits the stage to 1
queues the starts for real and the agent's ``stage_seconds`` shows it.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from conftest import TOKEN, NoDevices
from pydantic import SecretStr

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentSettings, create_app
from bootstorm.validation.agent._leases import LeaseError
from bootstorm.validation.agent._server import AGENT

Behaviour = str  # "ok", "slow", "failing", "dropping", "refusing"


@dataclass
class LoopbackAgent:
    name: str
    url: str
    behaviour: Behaviour
    app: web.Application
    runner: web.AppRunner
    puts: list[float] = field(default_factory=list)

    @property
    def config(self) -> TunedConfig:
        config: TunedConfig = self.app[AGENT].config
        return config

    @property
    def generation(self) -> int:
        generation: int = self.app[AGENT].generation
        return generation


def _behaviour_middleware(
    behaviour: Behaviour, delay_s: float, puts: list[float]
) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def behave(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method == "PUT" and request.path == "/config":
            puts.append(asyncio.get_running_loop().time())
        if behaviour == "slow":
            await asyncio.sleep(delay_s)
        elif behaviour == "failing":
            return web.json_response({"error": "internal error: disk on fire"}, status=500)
        elif behaviour == "dropping":
            if request.transport is not None:
                request.transport.close()
            await asyncio.sleep(3600)  # cancelled: the connection is gone (handler_cancellation)
        elif behaviour == "refusing" and request.method == "PUT" and request.path == "/config":
            return web.json_response(
                {"error": "config: refused by this node's policy", "problems": []}, status=422
            )
        return await handler(request)

    return behave


class LoopbackFleet:
    """Agents and their traffic on one event loop in a daemon thread."""

    def __init__(
        self,
        state_root: Path,
        behaviours: Sequence[Behaviour],
        *,
        config: TunedConfig | None = None,
        rate: float = 25.0,
        hold_s: float = 0.05,
        delay_s: float = 0.3,
        seed: int = 7,
    ) -> None:
        self._root = state_root
        self._behaviours = list(behaviours)
        self._config = config or TunedConfig(lease_ttl_s=10.0)
        self._rate = rate
        self._hold_s = hold_s
        self._delay_s = delay_s
        self._seed = seed
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.agents: list[LoopbackAgent] = []
        self._traffic: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    def call(self, coro: Awaitable[object], timeout_s: float = 60.0) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)  # type: ignore[arg-type]

    def start(self) -> None:
        self._thread.start()
        self.call(self._start())

    async def _start(self) -> None:
        base = 5000 + (os.getpid() % 60) * 80
        for i, behaviour in enumerate(self._behaviours):
            settings = AgentSettings(
                token=SecretStr(TOKEN),
                port=0,
                pool_id=base + i,
                state_dir=self._root / f"agent-{i}",
            )
            app = create_app(settings, self._config, device_ops=NoDevices())
            puts: list[float] = []
            app.middlewares.append(_behaviour_middleware(behaviour, self._delay_s, puts))
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            url = f"http://{host}:{port}"
            self.agents.append(LoopbackAgent(f"node-{i:02d}", url, behaviour, app, runner, puts))
        for i, agent in enumerate(self.agents):
            rng = random.Random(self._seed * 1000 + i)
            self._traffic.append(asyncio.create_task(self._starts(agent, rng)))

    async def _starts(self, agent: LoopbackAgent, rng: random.Random) -> None:
        leases = agent.app[AGENT].leases
        pending: set[asyncio.Task[None]] = set()
        n = 0

        async def one(holder: str) -> None:
            try:
                lease = await leases.acquire("StartVM", holder, 5.0)
            except LeaseError:
                return
            await asyncio.sleep(self._hold_s)
            with suppress(LeaseError):
                leases.release(lease.lease_id)

        while not self._stop.is_set():
            await asyncio.sleep(rng.expovariate(self._rate))
            n += 1
            task = asyncio.create_task(one(f"sb-{n}"))
            pending.add(task)
            task.add_done_callback(pending.discard)
        for task in list(pending):
            task.cancel()

    def stop(self) -> None:
        async def _stop() -> None:
            self._stop.set()
            await asyncio.gather(*self._traffic, return_exceptions=True)
            for agent in self.agents:
                agent.app[AGENT].leases.close()
                await agent.runner.cleanup()

        try:
            self.call(_stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def inventory(
        self, path: Path, *, labels: Callable[[int], dict[str, str]] | None = None
    ) -> Path:
        """An inventory of the fleet (token in a file), optionally labelled by index."""
        token_file = path.parent / "fleet.token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        lines = []
        for i, agent in enumerate(self.agents):
            lines += [f"- name: {agent.name}", f"  url: {agent.url}", f"  token_file: {token_file}"]
            if labels is not None:
                pairs = ", ".join(f"{k}: {v}" for k, v in labels(i).items())
                lines.append(f"  labels: {{{pairs}}}")
        path.write_text("\n".join(lines) + "\n")
        return path


@contextmanager
def loopback_fleet(
    state_root: Path, behaviours: Sequence[Behaviour], **kw: object
) -> Iterator[LoopbackFleet]:
    fleet = LoopbackFleet(state_root, behaviours, **kw)  # type: ignore[arg-type]
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.stop()
