"""The node agent's HTTP service (aiohttp).

Endpoints (all bodies JSON; mutating calls need ``Authorization: Bearer <token>``,
else 401; errors are ``{"error": message, "reason"?: word}``):

=======  ==================================  ======================================================
method   path                                answer
=======  ==================================  ======================================================
POST     /v1/stages/{stage}/acquire          200 lease, 408 none within ``wait_s``, 429 too many
                                             stages without a limit held at once, 503 stopping
POST     /v1/leases/{lease_id}/release       200, 404 unknown / expired / released
POST     /v1/leases/{lease_id}/renew         200 lease with a new expiry, 404 as above
POST     /v1/pools/{kind}/take               200 device, 404 ``pool empty``; both with the
                                             kind's ``ready`` devices after it and ``target``
GET      /v1/pools                           ``{concurrency, workers, pools: [{kind, ready,
                                             target, making}]}``
PUT      /config                             200 ``{generation, config}`` once saved, 422 refused,
                                             503 not saved (nothing changed)
GET      /config                             the TunedConfig in force (generation, source:
                                             ``X-Bootstorm-Config-*`` headers)
GET      /metrics                            Prometheus text format
GET      /healthz                            ``{"status": "ok", ...}``
=======  ==================================  ======================================================

Under abuse: a request's line and headers must arrive within
``read_timeout_s`` of the connection's start (or of the previous answer) and
its body within ``read_timeout_s`` more, else the connection is closed (408 if
the headers came); a body over ``max_body_bytes`` is a 413; every refusal is a
4xx JSON answer of one line, and a ``PUT /config`` is parsed, validated in
full and only then applied, so a refused one changes nothing. A request aiohttp
cannot parse gets the same JSON line (``_http``), and one log line per kind
per minute, never a traceback.

With a ``state_dir``, a pushed config is saved there before it is applied and
answered, and is the config in force after a restart (``_state``).
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import json
import logging
import signal
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware
from pydantic import BaseModel, SecretStr, ValidationError

from ..._params import Check, Interval, Rules, own_error_line, unique_keys, validate
from ..._params import short_repr as _short_repr
from ...models import ConfigError, TunedConfig
from ...models._yaml import MAX_NUMBER_CHARS, YamlInputError, parse_yaml
from ._cni_pool import CniDevices, CniPoolSettings, agent_network_name
from ._http import (
    AgentRunner,
    Malformed,
    RateLimitedLog,
    install_accept_error_handler,
)
from ._leases import LeaseError, LeaseTable, ServerLease
from ._metrics import AgentMetrics, LiveSnapshot
from ._pools import DeviceOps, NetlinkDevices, PoolManager
from ._protocol import (
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_WAIT_S,
    MAX_BODY_BYTES,
    MAX_READ_TIMEOUT_S,
    MAX_TOKEN_CHARS,
    MIN_READ_TIMEOUT_S,
    MIN_TOKEN_CHARS,
    POOL_KINDS,
    STAGE_NAME,
    AcquireRequest,
    EmptyRequest,
    TakeRequest,
    ignored_pools,
)
from ._state import ConfigStore, SavedConfig, StartupConfig, resolve_startup

__all__ = ["AgentSettings", "check_token", "create_app", "serve", "tls_context"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_TLS_PAIR = "must be given with the other of tls_cert and tls_key (both or neither)"


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
    #: Seconds for a request's line and headers, then for its body (see the module doc).
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    #: Largest request body, bytes (413 beyond).
    max_body_bytes: int = MAX_BODY_BYTES
    #: PEM certificate chain and private key: serve HTTPS (both or neither).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Where the config in force is saved, so a restart keeps it (``_state``);
    #: None: kept in memory only (tests, an agent in a notebook).
    state_dir: Path | None = None

    __rules__: ClassVar[Rules] = Rules(
        read_timeout_s=Interval(float, MIN_READ_TIMEOUT_S, MAX_READ_TIMEOUT_S, unit="s"),
        max_body_bytes=Interval(int, 1024, 16 * 1024 * 1024),
        checks=(
            Check("tls_key", lambda s: s.tls_cert is None or s.tls_key is not None, _TLS_PAIR),
            Check("tls_cert", lambda s: s.tls_key is None or s.tls_cert is not None, _TLS_PAIR),
        ),
    )

    def __post_init__(self) -> None:
        # The token's own check: its message must not show the secret.
        check_token(self.token.get_secret_value())
        validate(self)


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` is this machine only (a name may resolve anywhere)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def check_token(token: str) -> None:
    """ConfigError unless ``token`` is strong enough to guard the agent: at least
    MIN_TOKEN_CHARS characters of visible ASCII (what an HTTP header carries as is)."""
    rule = f"must be at least {MIN_TOKEN_CHARS} characters of visible ASCII, no spaces"
    bad = next((i for i, c in enumerate(token) if not "!" <= c <= "~"), None)
    if bad is not None:
        # The position, not the character: the message must not leak the secret.
        raise ConfigError(
            f"token: {rule} (got a space or non-ASCII character at position {bad + 1})"
        )
    if len(token) < MIN_TOKEN_CHARS:
        count = f"{len(token)} character{'s' if len(token) != 1 else ''}"
        raise ConfigError(f"token: {rule} (got {count}); e.g. head -c 24 /dev/urandom | base64")
    if len(token) > MAX_TOKEN_CHARS:
        raise ConfigError(
            f"token: must be at most {MAX_TOKEN_CHARS} characters, or no request header "
            f"can carry it (got {len(token)})"
        )


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or later) for ``cert`` and ``key``; ConfigError
    naming the files if they cannot be loaded."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=cert, keyfile=key)
    except OSError as exc:  # ssl.SSLError is an OSError
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ConfigError(
            f"tls-cert: cannot load certificate {str(cert)!r} with key {str(key)!r} ({reason})"
        ) from None
    return context


@dataclass(eq=False)
class _Agent:
    settings: AgentSettings
    metrics: AgentMetrics
    leases: LeaseTable
    pools: PoolManager
    #: The config in force, its generation and where it came from.
    saved: SavedConfig
    store: ConfigStore | None = None
    #: Saved at start-up once the pool id's owner lock is held (``lifecycle``).
    save_at_start: bool = False
    #: One line per kind of malformed request (or refused accept) per minute.
    abuse_log: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))

    def note_malformed(self, what: Malformed, peer: str | None) -> None:
        self.metrics.malformed_requests.labels(what.field).inc()
        self.abuse_log.note(
            what.field, f"malformed request from {peer or 'a client'}: {what.field}: {what.problem}"
        )

    def note_accept_error(self) -> None:
        self.metrics.accept_errors.inc()

    @property
    def config(self) -> TunedConfig:
        return self.saved.config

    @property
    def generation(self) -> int:
        return self.saved.generation

    def snapshot(self) -> LiveSnapshot:
        return LiveSnapshot(self.leases.snapshot(), self.pools.snapshot(), self.generation)

    def push(self, config: TunedConfig) -> None:
        """Save ``config`` as the next generation, then put it in force.

        OSError if it cannot be saved; nothing changed then. No await in here:
        concurrent PUTs are saved and applied one after the other, in the
        order of their generations, and a client that hangs up cannot cancel
        a push between its save and its apply. The fsync blocks the loop for
        the time of one disk flush, once per push (an operator's action).
        """
        pushed = SavedConfig(
            config=config,
            generation=self.generation + 1,
            source="push",
            saved_at_s=time.time(),
        )
        if self.store is not None:
            self.store.save(pushed)
        self.apply(pushed)

    def apply(self, saved: SavedConfig) -> None:
        # No await in here: a scrape or an acquire sees the old config or the new
        # one, never half of each. And nothing here refuses: the config was
        # validated whole (bounded maps, ranged numbers) before this is called.
        config = saved.config
        self.leases.apply(limits=config.limits, lease_ttl_s=config.lease_ttl_s)
        self.pools.set_policy(pools=config.pools, refill=config.pool_refill)
        self.saved = saved
        if ignored := ignored_pools(config):
            # A config may pool kinds for other nodes' CNIs: kept, said.
            log.warning(
                "config generation %d pools %s, which this agent does not make (it makes %s): "
                "ignored",
                saved.generation,
                ", ".join(ignored),
                ", ".join(POOL_KINDS),
            )


AGENT = web.AppKey("agent", _Agent)


def _one_line(text: str) -> str:
    # An error names what the client sent, which may hold newlines or control
    # characters: the answer (and a log line quoting it) stays one line.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": _one_line(message), **extra}, status=status)


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


async def _read(request: web.Request) -> bytes:
    """The body, within the read timeout and the size cap (408 / 413 otherwise)."""
    timeout_s = request.app[AGENT].settings.read_timeout_s
    try:
        # The headers came within the connection's own deadline; a body sent
        # byte by byte (or never) must not hold the handler past this one.
        return await asyncio.wait_for(request.read(), timeout_s)
    except TimeoutError:
        raise _BadRequestError(408, f"body: not received within {timeout_s:g} s") from None
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[AGENT].settings.max_body_bytes
        raise _BadRequestError(413, f"body: larger than {limit} bytes") from None
    except (web.RequestPayloadError, HttpProcessingError) as exc:
        # Bad chunked framing or a Content-Encoding that does not decode: the
        # client's doing, a 400 (aiohttp's text quotes the body: not shown).
        cause = exc.__cause__ if isinstance(exc, web.RequestPayloadError) else exc
        what = type(cause or exc).__name__
        raise _BadRequestError(400, f"body: cannot be read as sent ({what})") from None


def _bounded_int(digits: str) -> int:
    # json.loads turns any run of digits into an int; one of thousands of digits
    # is no quantity of ours, and past 4 300 Python refuses to convert it.
    if len(digits) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(digits)} characters (at most {MAX_NUMBER_CHARS})")
    return int(digits)


async def _body(request: web.Request, model: type[R]) -> R:
    raw = await _read(request)
    try:
        data = (
            json.loads(raw, parse_int=_bounded_int, object_pairs_hook=unique_keys)
            if raw.strip()
            else {}
        )
    except RecursionError:
        raise _BadRequestError(400, "body: malformed JSON (nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, _bounded_int's
        raise _BadRequestError(400, f"body: malformed JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _BadRequestError(400, f"body: expected a JSON object, but got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _BadRequestError(422, "; ".join(_problems(exc, prefix="body."))) from None


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
        if exc.status == 400:
            request.app[AGENT].note_malformed(
                Malformed(field="body", problem=exc.message.removeprefix("body: ")),
                request.remote,
            )
        return _error(exc.status, exc.message, field="body")
    except ConnectionError:
        # The client hung up mid-request: aiohttp's handler (``_http``) logs one
        # line, not the traceback the catch-all below would.
        raise
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
    await _body(request, EmptyRequest)
    lease = request.app[AGENT].leases.release(request.match_info["lease_id"])
    return web.json_response({"released": True, **_lease_json(lease)})


async def _renew(request: web.Request) -> web.Response:
    # A body here is a client's mistake (a field it thinks renew takes, a
    # new TTL say): refused, where it was ignored and the lease renewed.
    await _body(request, EmptyRequest)
    lease = request.app[AGENT].leases.renew(request.match_info["lease_id"])
    return web.json_response(_lease_json(lease))


async def _take(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    kind = request.match_info["kind"]
    if kind not in POOL_KINDS:
        return _error(422, f"kind: unknown pool kind {kind!r}; known: {', '.join(POOL_KINDS)}")
    body = await _body(request, TakeRequest)
    device = agent.pools.take(kind)
    # After the take, with no await between: the level this take left, and the
    # target it set (a rate-following pool's target moves with each start).
    level = agent.pools.level(kind)
    if device is None:
        # The message stays "pool empty": clients match on it.
        return _error(404, "pool empty", kind=kind, ready=level.level, target=level.target)
    log.info("%s %s handed to %s", kind, device.name, body.holder)
    answer: dict[str, Any] = {
        "kind": device.kind,
        "name": device.name,
        "peer": device.peer,
        "holder": body.holder,
        "ready": level.level,
        "target": level.target,
    }
    if device.cni is not None:
        answer["cni"] = {
            "container_id": device.cni.container_id,
            "conflist": dict(device.cni.conflist),
            "result": device.cni.result,
        }
    return web.json_response(answer)


#: Problems of a refused config named in its one-line ``error`` (all of them,
#: up to _MAX_PROBLEMS, are in ``problems``).
_PROBLEMS_IN_ERROR = 5
_MAX_PROBLEMS = 50
#: Longest field name quoted in a problem (a key is the client's own text).
_MAX_NAME_CHARS = 64


def _field_name(part: str | int) -> str:
    if isinstance(part, int) or (len(part) <= _MAX_NAME_CHARS and part.isprintable()):
        return str(part)
    shown: str = _short_repr(part)
    return shown


def _problems(exc: ValidationError, *, prefix: str = "config: ") -> list[str]:
    """One line per problem, ``config: field: rule (got value)``; names and values
    are the client's, so they are quoted and shortened."""
    lines = []
    for e in exc.errors():
        own = own_error_line([_field_name(p) for p in e["loc"]], e["msg"])
        if e["type"] == "value_error" and own is not None:
            lines.append(_one_line(prefix + own))
            continue
        loc = ".".join(_field_name(p) for p in e["loc"]) or "(top level)"
        msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {_short_repr(got)})"
        lines.append(_one_line(f"{prefix}{loc}: {msg}{shown}"))
    return lines


def _parse_config(raw: bytes) -> TunedConfig:
    """A TunedConfig from a YAML or JSON body (JSON is YAML), validated in full;
    ConfigError (one problem a line) if bad. Nothing here touches the agent."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config: body is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        # Bounded: no aliases (a 390-byte alias bomb blocked the loop 5.8 s), no
        # nesting past 32 levels, no number of thousands of digits.
        data = parse_yaml(text)
    except YamlInputError as exc:
        raise ConfigError(_one_line(f"config: {exc}")) from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(
            f"config: expected a mapping with string keys at the top level, "
            f"but got {type(data).__name__}"
        )
    # The errors whole, so each problem is formatted (and a client's key quoted) alone.
    problems = TunedConfig.problems(data)
    if problems is not None:
        raise ConfigError("\n".join(_problems(problems)))
    config: TunedConfig = TunedConfig(**data)  # valid: the same rules passed just now
    return config


async def _put_config(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    try:
        config = _parse_config(await _read(request))
    except ConfigError as exc:
        problems = str(exc).splitlines()
        summary = "; ".join(problems[:_PROBLEMS_IN_ERROR])
        if len(problems) > _PROBLEMS_IN_ERROR:
            summary += f"; and {len(problems) - _PROBLEMS_IN_ERROR} more"
        return _error(422, summary, problems=problems[:_MAX_PROBLEMS])
    # Validated whole above; push() saves it, then applies it (which cannot
    # refuse), so the config is in force whole, and on disk when we answer.
    try:
        agent.push(config)
    except OSError as exc:
        store = agent.store
        where = str(store.directory) if store is not None else "?"
        reason = exc.strerror or str(exc)
        log.error("config not saved in %s (%s): refused, nothing changed", where, reason)
        return _error(
            503,
            f"config: not saved in the agent's state directory ({reason}); "
            f"nothing changed (generation {agent.generation} in force)",
            reason="not_saved",
        )
    log.info("config generation %d applied", agent.generation)
    return web.json_response(
        {
            "generation": agent.generation,
            "config": config.model_dump(mode="json"),
            "ignored_pools": list(ignored_pools(config)),
        }
    )


async def _get_config(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    return web.json_response(
        agent.config.model_dump(mode="json"),
        headers={
            "X-Bootstorm-Config-Generation": str(agent.generation),
            # default, file (--config) or push; restored: read back from the
            # state directory at start-up rather than told during this run.
            "X-Bootstorm-Config-Source": agent.saved.source,
            "X-Bootstorm-Config-Restored": "true" if agent.saved.restored else "false",
        },
    )


async def _get_pools(request: web.Request) -> web.Response:
    pools = request.app[AGENT].pools
    return web.json_response(
        {
            "concurrency": pools.concurrency,
            "workers": pools.workers(),
            "pools": [
                {"kind": p.kind, "ready": p.level, "target": p.target, "making": p.making}
                for p in pools.snapshot()
            ],
        }
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
            "config_source": agent.saved.source,
            "config_restored": agent.saved.restored,
            # The network the netns-veth pool is plumbed on (clients of the
            # testbed's cni runtime take those only then), or null.
            "cni_network": None if cni is None else agent_network_name(agent.settings.pool_id),
        }
    )


def _startup_config(
    settings: AgentSettings, config: TunedConfig | StartupConfig | None
) -> tuple[SavedConfig, ConfigStore | None, bool]:
    """The config to start with, the store that keeps it, and whether it must
    be saved at start-up (``_state``'s table decides which config wins)."""
    startup = StartupConfig(config=config) if isinstance(config, TunedConfig) else config
    now_s = time.time()
    if settings.state_dir is None:
        saved, _ = resolve_startup(None, startup, now_s=now_s)
        return saved, None, False
    store = ConfigStore(settings.state_dir, settings.pool_id)
    store.prepare()  # ConfigError (one line) before anything listens
    before = store.load()
    saved, why = resolve_startup(before, startup, now_s=now_s)
    # Shown by default when a start-up file and a saved push disagreed: which
    # one is in force is then worth a line; otherwise with -v.
    conflict = startup is not None and before is not None and before.source == "push"
    level = logging.WARNING if conflict else logging.INFO
    log.log(level, "pool id %d: %s; kept in %s", settings.pool_id, why, store.path)
    if before is not None and saved is before:
        return saved, store, False
    return saved, store, True


def create_app(
    settings: AgentSettings,
    config: TunedConfig | StartupConfig | None = None,
    *,
    device_ops: DeviceOps | None = None,
    device_ops_factory: Callable[[], DeviceOps] | None = None,
) -> web.Application:
    """The agent as an aiohttp application; pools start and stop with it.

    ``config``: the start-up config (a :class:`StartupConfig` says which file
    and when it was modified); with ``settings.state_dir`` a saved config may
    win over it (see ``_state``). ConfigError if the state directory cannot
    be used. ``device_ops`` replaces the real devices (tests);
    ``device_ops_factory`` makes the ops of each further refill worker
    (``pool_refill.concurrency``); without it a ``device_ops`` is refilled
    by one worker.
    """
    saved, store, save_at_start = _startup_config(settings, config)
    tuned = saved.config
    metrics = AgentMetrics()
    ops: DeviceOps
    ops_factory = device_ops_factory
    if device_ops is not None:
        ops = device_ops
    elif settings.cni is not None:
        # The first worker's CniDevices holds the agent's one CNI network
        # (claimed on first use, removed at close); further workers' share it.
        cni_ops = CniDevices(settings.pool_id, settings.cni)
        ops = cni_ops
        if ops_factory is None:
            ops_factory = cni_ops.worker
    else:
        ops = NetlinkDevices(settings.pool_id)
        if ops_factory is None:
            # A socket per worker (pyroute2 sockets are not thread-safe), opened on first use.
            ops_factory = functools.partial(NetlinkDevices, settings.pool_id)
    app = web.Application(
        middlewares=[_json_errors, _token_middleware(settings.token)],
        client_max_size=settings.max_body_bytes,
    )

    leases = LeaseTable(limits=tuned.limits, lease_ttl_s=tuned.lease_ttl_s, metrics=metrics)
    pools = PoolManager(ops, metrics, pool_id=settings.pool_id, ops_factory=ops_factory)
    agent = _Agent(settings, metrics, leases, pools, saved, store, save_at_start)
    pools.set_policy(pools=tuned.pools, refill=tuned.pool_refill)
    metrics.watch(agent.snapshot)
    app[AGENT] = agent

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await pools.start()  # takes the pool id's owner lock
        try:
            # Written only now: a second agent started by mistake with this
            # pool id fails on the lock above and must not overwrite the
            # running agent's saved config first.
            if store is not None:
                store.remove_stale_temps()
                if agent.save_at_start:
                    try:
                        store.save(agent.saved)
                    except OSError as exc:
                        raise ConfigError(
                            f"state-dir: cannot save the config in {str(store.directory)!r} "
                            f"({exc.strerror or exc})"
                        ) from None
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
    app.router.add_get("/v1/pools", _get_pools)
    app.router.add_put("/config", _put_config)
    app.router.add_get("/config", _get_config)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    return app


async def serve(
    settings: AgentSettings,
    config: TunedConfig | StartupConfig | None = None,
    *,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    device_ops: DeviceOps | None = None,
    device_ops_factory: Callable[[], DeviceOps] | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when run in the main thread).

    ``on_ready`` gets the base URL once the socket listens (port 0 picks a free one).
    Shutdown removes every pooled device the agent still holds. ``device_ops``
    replaces the real devices (tests), and ``device_ops_factory`` makes more
    of them, as in :func:`create_app`.
    """
    # Loaded before anything listens: a bad certificate is one line, not a half-started agent.
    tls = None
    if settings.tls_cert is not None and settings.tls_key is not None:
        tls = tls_context(settings.tls_cert, settings.tls_key)
    elif not is_loopback_host(settings.host):
        log.warning(
            "serving %s over plain HTTP: bearer tokens cross the network in clear", settings.host
        )
    app = create_app(settings, config, device_ops=device_ops, device_ops_factory=device_ops_factory)
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
    #
    # keepalive_timeout: aiohttp arms it when a connection opens and again after
    # each answer, and closes the connection when it fires while no request has
    # fully arrived: a deadline for the request line and headers (a client that
    # sends half a request line is cut off), not reset by a byte trickled in.
    # It does not fire under a running handler, so long-polls are unaffected;
    # bodies have their own deadline (_read). lingering_time bounds how long a
    # body nobody reads is drained after the answer.
    #
    # AgentRunner: what aiohttp cannot parse is answered in the agent's JSON
    # and logged as one line (``_http``); a refused accept() likewise.
    agent = app[AGENT]
    runner = AgentRunner(
        app,
        on_malformed=agent.note_malformed,
        handler_cancellation=True,
        handler_args={
            "access_log": None,
            "keepalive_timeout": settings.read_timeout_s,
            "lingering_time": min(settings.read_timeout_s, 2.0),
        },
    )
    restore_handler = install_accept_error_handler(loop, agent.abuse_log, agent.note_accept_error)
    try:
        await runner.setup()
    except BaseException:
        restore_handler()
        raise
    try:
        site = web.TCPSite(runner, settings.host, settings.port, ssl_context=tls)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(
                f"port: cannot listen on {settings.host}:{settings.port} ({exc.strerror})"
            ) from None
        host, port = runner.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        if on_ready is not None:
            on_ready(f"{'https' if tls is not None else 'http'}://{shown}:{port}")
        await stop.wait()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        restore_handler()
