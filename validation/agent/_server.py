"""The node agent's HTTP service (aiohttp).

Endpoints (all bodies JSON; mutating calls need ``Authorization: Bearer <token>``,
else 401; errors are ``{"error": message, "reason"?: word}``):

=======  ==================================  ======================================================
method   path                                answer
=======  ==================================  ======================================================
POST     /v1/stages/{stage}/acquire          200 lease, 408 none within ``wait_s``, 503 stopping
POST     /v1/leases/{lease_id}/release       200, 404 unknown / expired / released
POST     /v1/leases/{lease_id}/renew         200 lease with a new expiry, 404 as above
POST     /v1/pools/{kind}/take               200 device, 404 ``pool empty``
PUT      /config                             200 ``{generation, config}``, 422 refused
GET      /config                             the TunedConfig in force
GET      /metrics                            Prometheus text format
GET      /healthz                            ``{"status": "ok", ...}``
=======  ==================================  ======================================================
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import BaseModel, SecretStr, ValidationError

from ...models import ConfigError, TunedConfig
from ...models._errors import format_validation_error
from ._cni_pool import CniDevices, CniPoolSettings, agent_network_name
from ._leases import LeaseError, LeaseTable, ServerLease
from ._metrics import AgentMetrics, LiveSnapshot
from ._pools import DeviceOps, NetlinkDevices, PoolManager
from ._protocol import DEFAULT_WAIT_S, POOL_KINDS, STAGE_NAME, AcquireRequest, TakeRequest

__all__ = ["AgentSettings", "create_app", "serve"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, kw_only=True)
class AgentSettings:
    """How one agent runs (the tuned settings arrive separately, as a TunedConfig)."""

    token: SecretStr
    host: str = "127.0.0.1"
    port: int = 8787
    #: Number in this agent's pool device names; two agents on a host need two ids.
    pool_id: int = 0
    default_wait_s: float = DEFAULT_WAIT_S
    #: Plumb the ``netns-veth`` pool with a CNI ADD on a network of the agent's
    #: own (``agent serve --cni``); None: a bare veth pair per namespace.
    cni: CniPoolSettings | None = None


@dataclass(eq=False)
class _Agent:
    settings: AgentSettings
    metrics: AgentMetrics
    leases: LeaseTable
    pools: PoolManager
    config: TunedConfig
    generation: int = 1

    def snapshot(self) -> LiveSnapshot:
        return LiveSnapshot(self.leases.snapshot(), self.pools.snapshot(), self.generation)

    def apply(self, config: TunedConfig) -> None:
        # No await in here: a scrape or an acquire sees the old config or the new
        # one, never half of each.
        self.leases.apply(limits=config.limits, lease_ttl_s=config.lease_ttl_s)
        self.pools.set_targets(config.pools)
        self.config = config
        self.generation += 1


AGENT = web.AppKey("agent", _Agent)


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def _lease_json(lease: ServerLease) -> dict[str, Any]:
    now = asyncio.get_running_loop().time()
    return {
        "lease_id": lease.lease_id,
        "stage": lease.stage,
        "holder": lease.holder,
        "ttl_s": lease.ttl_s,
        "expires_at_s": lease.expires_at_wall_s(now),
    }


class _BadRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def _body(request: web.Request, model: type[R]) -> R:
    raw = await request.read()
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _BadRequestError(400, f"body: malformed JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _BadRequestError(400, f"body: expected a JSON object, but got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _BadRequestError(422, format_validation_error(exc, prefix="body.")) from None


def _token_middleware(token: SecretStr) -> Middleware:
    expected = token.get_secret_value().encode()

    @web.middleware
    async def check_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return await handler(request)
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return _error(401, "missing bearer token (Authorization: Bearer <token>)")
        # Constant time, so the answer's timing tells nothing about the token.
        if not hmac.compare_digest(given.strip().encode(), expected):
            return _error(401, "wrong bearer token")
        return await handler(request)

    return check_token


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except LeaseError as exc:
        return _error(exc.status, exc.message, reason=exc.reason)
    except _BadRequestError as exc:
        return _error(exc.status, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, f"{exc.reason}: {request.method} {request.path}")
    except Exception as exc:  # a bug: log it whole, answer in the same JSON shape
        log.exception("%s %s failed", request.method, request.path)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")


async def _acquire(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    stage = request.match_info["stage"]
    if not STAGE_NAME.match(stage):
        return _error(422, f"stage: expected a name like StartVM (got {stage!r})")
    body = await _body(request, AcquireRequest)
    wait_s = agent.settings.default_wait_s if body.wait_s is None else body.wait_s
    lease = await agent.leases.acquire(stage, body.holder, wait_s)
    return web.json_response(_lease_json(lease))


async def _release(request: web.Request) -> web.Response:
    lease = request.app[AGENT].leases.release(request.match_info["lease_id"])
    return web.json_response({"released": True, **_lease_json(lease)})


async def _renew(request: web.Request) -> web.Response:
    lease = request.app[AGENT].leases.renew(request.match_info["lease_id"])
    return web.json_response(_lease_json(lease))


async def _take(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    kind = request.match_info["kind"]
    if kind not in POOL_KINDS:
        return _error(422, f"kind: unknown pool kind {kind!r}; known: {', '.join(POOL_KINDS)}")
    body = await _body(request, TakeRequest)
    device = agent.pools.take(kind)
    if device is None:
        return _error(404, "pool empty", kind=kind)
    log.info("%s %s handed to %s", kind, device.name, body.holder)
    answer: dict[str, Any] = {
        "kind": device.kind,
        "name": device.name,
        "peer": device.peer,
        "holder": body.holder,
    }
    if device.cni is not None:
        answer["cni"] = {
            "container_id": device.cni.container_id,
            "conflist": dict(device.cni.conflist),
            "result": device.cni.result,
        }
    return web.json_response(answer)


def _parse_config(raw: bytes) -> TunedConfig:
    """A TunedConfig from a YAML or JSON body (JSON is YAML); ConfigError if bad."""
    try:
        data = yaml.safe_load(raw.decode())
    except UnicodeDecodeError:
        raise ConfigError("config: body is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"config:{where}: malformed YAML/JSON: {problem}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(
            f"config: expected a mapping with string keys at the top level, "
            f"but got {type(data).__name__}"
        )
    return TunedConfig(**data)


async def _put_config(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    try:
        config = _parse_config(await request.read())
    except ConfigError as exc:
        text = str(exc)
        return _error(422, text, problems=text.splitlines())
    agent.apply(config)
    log.info("config generation %d applied", agent.generation)
    return web.json_response(
        {"generation": agent.generation, "config": config.model_dump(mode="json")}
    )


async def _get_config(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    return web.json_response(
        agent.config.model_dump(mode="json"),
        headers={"X-Bootstorm-Config-Generation": str(agent.generation)},
    )


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[AGENT].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


async def _healthz(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    cni = agent.settings.cni
    return web.json_response(
        {
            "status": "ok",
            "generation": agent.generation,
            # The network the netns-veth pool is plumbed on (clients of the
            # testbed's cni runtime take those only then), or null.
            "cni_network": None if cni is None else agent_network_name(agent.settings.pool_id),
        }
    )


def create_app(
    settings: AgentSettings,
    config: TunedConfig | None = None,
    *,
    device_ops: DeviceOps | None = None,
) -> web.Application:
    """The agent as an aiohttp application; pools start and stop with it."""
    if not settings.token.get_secret_value():
        raise ConfigError("token: must not be empty")
    config = config if config is not None else TunedConfig()
    metrics = AgentMetrics()
    ops: DeviceOps
    if device_ops is not None:
        ops = device_ops
    elif settings.cni is not None:
        ops = CniDevices(settings.pool_id, settings.cni)
    else:
        ops = NetlinkDevices(settings.pool_id)
    app = web.Application(middlewares=[_json_errors, _token_middleware(settings.token)])

    leases = LeaseTable(limits=config.limits, lease_ttl_s=config.lease_ttl_s, metrics=metrics)
    pools = PoolManager(ops, metrics, pool_id=settings.pool_id)
    agent = _Agent(settings, metrics, leases, pools, config)
    pools.set_targets(config.pools)
    metrics.watch(agent.snapshot)
    app[AGENT] = agent

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await pools.start()
        try:
            yield
        finally:
            await pools.close()

    async def turn_waiters_away(app: web.Application) -> None:
        # Before aiohttp waits for running handlers: long-polls answer 503 now
        # rather than hold the shutdown (and the pool clean-up) for up to wait_s.
        leases.close()

    app.on_shutdown.append(turn_waiters_away)

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/v1/stages/{stage}/acquire", _acquire)
    app.router.add_post("/v1/leases/{lease_id}/release", _release)
    app.router.add_post("/v1/leases/{lease_id}/renew", _renew)
    app.router.add_post("/v1/pools/{kind}/take", _take)
    app.router.add_put("/config", _put_config)
    app.router.add_get("/config", _get_config)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    return app


async def serve(
    settings: AgentSettings,
    config: TunedConfig | None = None,
    *,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when run in the main thread).

    ``on_ready`` gets the base URL once the socket listens (port 0 picks a free one).
    Shutdown removes every pooled device the agent still holds.
    """
    app = create_app(settings, config)
    stop = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    except (RuntimeError, ValueError):  # not the main thread: the caller sets `stop`
        pass
    # handler_cancellation: a client that hangs up while queued leaves the queue at
    # once instead of being granted a permit nobody will release before the TTL.
    # Safe because no handler awaits between reading and changing agent state.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(
                f"port: cannot listen on {settings.host}:{settings.port} ({exc.strerror})"
            ) from None
        host, port = runner.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        if on_ready is not None:
            on_ready(f"http://{shown}:{port}")
        await stop.wait()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
