"""Tens of real node agents on loopback, in processes of their own, with traffic.

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

The agents run in up to ``processes`` forked processes (an event loop each,
agents dealt to them in turn), apart from the test's own, as nodes are
apart: with all of them on one loop in the test's process, a scrape of 47
agents' ``/metrics`` at a window's edge, or the rollout's own work holding
the GIL, stalled every agent's timers at once and a harmless push read as a
StartVM p99 of 704 ms against 70 ms (a loaded CI host). What the test reads
back is what a node keeps on disk: the config in force from the agent's
saved state, and one line per ``PUT /config`` it was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from aiohttp import web
from conftest import TOKEN, NoDevices
from pydantic import SecretStr

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentSettings, create_app
from bootstorm.validation.agent._leases import LeaseError
from bootstorm.validation.agent._server import AGENT
from bootstorm.validation.agent._state import ConfigStore

Behaviour = str  # "ok", "slow", "failing", "dropping", "refusing"
#: How long a process may take to start its agents, or to stop them.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LoopbackAgent:
    """One agent as the test sees it: its address, and what it keeps on disk."""

    name: str
    url: str
    behaviour: Behaviour
    state_dir: Path
    pool_id: int
    start_config: TunedConfig

    @property
    def config(self) -> TunedConfig:
        """The config in force: saved before it is applied (``_state``)."""
        saved = ConfigStore(self.state_dir, self.pool_id).load()
        return saved.config if saved is not None else self.start_config

    @property
    def puts(self) -> list[str]:
        """One line per ``PUT /config`` it was sent (its loop's time)."""
        path = self.state_dir / "puts"
        return path.read_text().splitlines() if path.exists() else []


@dataclass(frozen=True)
class _Spec:
    index: int
    behaviour: Behaviour
    state_dir: Path
    pool_id: int
    seed: int


def _behaviour_middleware(behaviour: Behaviour, delay_s: float, puts: Path) -> Any:
    @web.middleware
    async def behave(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "PUT" and request.path == "/config":
            with puts.open("a") as f:
                f.write(f"{asyncio.get_running_loop().time()}\n")
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
        response: web.StreamResponse = await handler(request)
        return response

    return behave


async def _starts(
    app: web.Application, rng: random.Random, stop: asyncio.Event, *, rate: float, hold_s: float
) -> None:
    leases = app[AGENT].leases
    pending: set[asyncio.Task[None]] = set()
    n = 0

    async def one(holder: str) -> None:
        try:
            lease = await leases.acquire("StartVM", holder, 5.0)
        except LeaseError:
            return
        await asyncio.sleep(hold_s)
        with suppress(LeaseError):
            leases.release(lease.lease_id)

    while not stop.is_set():
        await asyncio.sleep(rng.expovariate(rate))
        n += 1
        task = asyncio.create_task(one(f"sb-{n}"))
        pending.add(task)
        task.add_done_callback(pending.discard)
    for task in list(pending):
        task.cancel()


def _serve(
    specs: list[_Spec],
    config: TunedConfig,
    rate: float,
    hold_s: float,
    delay_s: float,
    conn: Connection,
) -> None:
    """A forked process's life: start its agents, send their URLs, serve and
    drive traffic until the parent says stop, then clean up and say done."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    stop = asyncio.Event()
    runners: list[web.AppRunner] = []
    apps: list[web.Application] = []

    async def start() -> dict[int, str]:
        urls = {}
        for spec in specs:
            settings = AgentSettings(
                token=SecretStr(TOKEN), port=0, pool_id=spec.pool_id, state_dir=spec.state_dir
            )
            app = create_app(settings, config, device_ops=NoDevices())
            app.middlewares.append(
                _behaviour_middleware(spec.behaviour, delay_s, spec.state_dir / "puts")
            )
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            host, port = runner.addresses[0][:2]
            urls[spec.index] = f"http://{host}:{port}"
            runners.append(runner)
            apps.append(app)
        return urls

    async def run() -> None:
        traffic = [
            asyncio.create_task(
                _starts(app, random.Random(spec.seed), stop, rate=rate, hold_s=hold_s)
            )
            for app, spec in zip(apps, specs, strict=True)
        ]
        loop.add_reader(conn.fileno(), stop.set)
        await stop.wait()
        loop.remove_reader(conn.fileno())
        await asyncio.gather(*traffic, return_exceptions=True)
        for app, runner in zip(apps, runners, strict=True):
            app[AGENT].leases.close()
            await runner.cleanup()

    code = 1
    try:
        conn.send(loop.run_until_complete(start()))
        loop.run_until_complete(run())
        conn.send("done")
        code = 0
    except BaseException as exc:  # the parent reads it as one line
        with contextlib.suppress(Exception):
            conn.send(f"error: {type(exc).__name__}: {exc}")
    finally:
        os._exit(code)  # a forked test process: no pytest teardown here


class LoopbackFleet:
    """Agents and their traffic in up to ``processes`` processes."""

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
        processes: int = 10,
    ) -> None:
        self._config = config or TunedConfig(lease_ttl_s=10.0)
        self._rate = rate
        self._hold_s = hold_s
        self._delay_s = delay_s
        base = 5000 + (os.getpid() % 60) * 80
        self._specs = [
            _Spec(i, b, state_root / f"agent-{i}", base + i, seed * 1000 + i)
            for i, b in enumerate(behaviours)
        ]
        for spec in self._specs:
            spec.state_dir.mkdir(parents=True, exist_ok=True)
        count = max(1, min(processes, len(self._specs)))
        self._groups = [self._specs[k::count] for k in range(count)]
        self._procs: list[tuple[Any, Connection]] = []
        self.agents: list[LoopbackAgent] = []

    def start(self) -> None:
        # fork: the children have this process's imports (no second start-up).
        ctx = multiprocessing.get_context("fork")
        urls: dict[int, str] = {}
        for group in self._groups:
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_serve,
                args=(group, self._config, self._rate, self._hold_s, self._delay_s, theirs),
                daemon=True,
            )
            proc.start()
            theirs.close()
            self._procs.append((proc, mine))
        for proc, conn in self._procs:
            if not conn.poll(START_TIMEOUT_S):
                raise RuntimeError(f"fleet process {proc.pid}: no agents in {START_TIMEOUT_S} s")
            got = conn.recv()
            if isinstance(got, str):
                raise RuntimeError(f"fleet process {proc.pid}: {got}")
            urls.update(got)
        self.agents = [
            LoopbackAgent(
                name=f"node-{s.index:02d}",
                url=urls[s.index],
                behaviour=s.behaviour,
                state_dir=s.state_dir,
                pool_id=s.pool_id,
                start_config=self._config,
            )
            for s in self._specs
        ]

    def stop(self) -> None:
        for _proc, conn in self._procs:
            with suppress(OSError):
                conn.send("stop")
        for proc, conn in self._procs:
            with suppress(OSError, EOFError):
                if conn.poll(STOP_TIMEOUT_S):
                    conn.recv()
            proc.join(STOP_TIMEOUT_S)
            if proc.is_alive():  # ours, by PID: it did not stop in time
                proc.kill()
                proc.join(5)
            conn.close()

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
    state_root: Path, behaviours: Sequence[Behaviour], **kw: Any
) -> Iterator[LoopbackFleet]:
    fleet = LoopbackFleet(state_root, behaviours, **kw)
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()
