"""A small, typed, synchronous client of the node agent (httpx).

>>> with AgentClient("http://127.0.0.1:8787", token=token) as agent:
...     with agent.stage("StartVM", holder="sb-17") as lease:
...         boot()  # may outlast the lease's TTL: the lease is renewed meanwhile
...     device = agent.take("veth", holder="sb-17")  # None: make your own
...     level = agent.last_pool_level  # the pool after that take: ready, target
...     levels = agent.pools()  # every pool now: ready, target, making

Every refusal raises :class:`AgentError` with the HTTP status and the agent's
message; a network failure raises it with ``status=None``.

A :meth:`AgentClient.stage` block keeps its lease alive: one thread per client
renews every lease held by a block at a third of its TTL. A lease that could
not be renewed (it expired, the agent restarted) is recorded on the block's
:class:`StageLease` (``lost``) as soon as it is known, and leaving the block
raises AgentError: the block may have shared the stage with another holder,
and its caller must hear of it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from ...models import ConfigError, TunedConfig
from ._protocol import DEFAULT_WAIT_S, AcquireRequest, TakeRequest

__all__ = [
    "AgentClient",
    "AgentError",
    "ConfigInForce",
    "Lease",
    "PoolLevel",
    "PoolState",
    "PooledCni",
    "PooledDevice",
    "PoolsNotReadyError",
    "StageLease",
    "wait_pools_ready",
]

log = logging.getLogger(__name__)

#: A ``stage()`` lease is renewed when this share of its TTL has passed: two
#: more renewals fit before it expires, so one slow or failed call costs nothing.
RENEW_FRACTION = 1 / 3
#: After a failed renewal that may pass (no answer, 5xx), the next try comes
#: after this share of the TTL, for as long as the lease may still be alive.
_RETRY_FRACTION = 1 / 10


class AgentError(Exception):
    """The agent refused a request (``status``) or could not be reached (``status=None``)."""

    def __init__(
        self,
        status: int | None,
        message: str,
        *,
        reason: str | None = None,
        answer: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status or 'unreachable'}: {message}")
        self.status = status
        self.message = message
        #: The agent's machine-readable reason, when it gives one (``expired``, ``timeout``...).
        self.reason = reason
        #: The agent's JSON error object whole (its other fields: a 404 ``pool
        #: empty``'s ``ready`` and ``target``), when it sent one.
        self.answer = answer


class PoolsNotReadyError(AgentError):
    """:func:`wait_pools_ready` ran out of time: pool ``kind`` held ``ready``
    of its ``target`` devices when it did (status 408, reason ``timeout``,
    as a stage's wait that runs out). Its text is the one line alone."""

    def __init__(self, kind: str, ready: int, target: int, *, waited_s: float) -> None:
        super().__init__(
            408, f"pools.{kind}: {ready} of {target} ready after {waited_s:g} s", reason="timeout"
        )
        self.args = (self.message,)
        self.kind = kind
        self.ready = ready
        self.target = target


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Lease(_Answer):
    """A permit on a stage until ``expires_at_s`` (UNIX time) unless renewed."""

    lease_id: str
    stage: str
    holder: str
    ttl_s: float
    expires_at_s: float


class ConfigInForce(_Answer):
    """The config an agent runs now (:meth:`AgentClient.config_in_force`)."""

    config: TunedConfig
    #: Configs applied since the agent's state began (1: the start-up one).
    generation: int
    #: ``default``, ``file`` (``--config``) or ``push``; None: an agent too old to say.
    source: str | None = None


class PooledCni(_Answer):
    """How a ``netns-veth`` of an agent started with ``--cni`` was plumbed: a
    CNI ADD on the agent's network, which its taker DELs when done."""

    container_id: str
    #: The agent's network as a conflist (``name``, ``cniVersion``, ``plugins``).
    conflist: dict[str, Any]
    #: The ADD's final result JSON, as the last plugin printed it.
    result: str | None = None


class PooledDevice(_Answer):
    """A pre-created device, now the holder's to use and to remove."""

    kind: str
    name: str
    #: The other end of a veth pair, in the host namespace.
    peer: str | None = None
    holder: str
    #: A ``netns-veth`` whose interface a CNI ADD made (an agent with ``--cni``).
    cni: PooledCni | None = None
    #: Devices of the kind still ready after this take (None: an agent too old to say).
    ready: int | None = None
    #: The size the agent keeps the pool at after this take (it follows the
    #: start rate under ``pool_refill.follow_rate``); None: an agent too old to say.
    target: int | None = None


class PoolLevel(_Answer):
    """A pool as the agent left it when it answered a take (the device's or
    ``pool empty``): :attr:`AgentClient.last_pool_level`."""

    kind: str
    #: Devices of the kind ready after the take.
    ready: int
    #: The size the agent keeps the pool at now.
    target: int


class PoolState(_Answer):
    """A pool as the agent holds it now (:meth:`AgentClient.pools`)."""

    kind: str
    #: Devices of the kind ready in the pool.
    ready: int
    #: The size the agent keeps the pool at now.
    target: int
    #: Devices of the kind its refill workers are making now (counted
    #: against the target); None: an agent too old to say.
    making: int | None = None


class StageLease:
    """The lease a :meth:`AgentClient.stage` block holds, renewed in the background.

    ``lease`` is the latest answer of the agent (its expiry moves with each
    renewal); ``lost`` is the error that ended it early, None while it holds.
    A block that must not run on without its permit checks ``lost`` (or
    calls :meth:`check`) between steps; leaving the block raises it anyway.
    """

    def __init__(self, lease: Lease, *, granted_at: float) -> None:
        self._lock = threading.Lock()
        self._lease = lease
        #: How many renewals the agent answered.
        self.renewals = 0
        self._lost: AgentError | None = None
        self._done = False
        # Monotonic time until which the lease is alive: a renewal's TTL counted
        # from when it was *sent* (the agent renewed it later); the grant's from
        # when its answer came (a long poll's grant time is not known closer).
        self._alive_until = granted_at + lease.ttl_s

    @property
    def lease(self) -> Lease:
        with self._lock:
            return self._lease

    @property
    def lease_id(self) -> str:
        return self._lease.lease_id

    @property
    def stage(self) -> str:
        return self._lease.stage

    @property
    def holder(self) -> str:
        return self._lease.holder

    @property
    def ttl_s(self) -> float:
        return self.lease.ttl_s

    @property
    def expires_at_s(self) -> float:
        return self.lease.expires_at_s

    @property
    def lost(self) -> AgentError | None:
        """Why the lease ended before the block did, or None while it holds."""
        with self._lock:
            return self._lost

    def check(self) -> None:
        """Raise the :attr:`lost` error if the lease is gone."""
        lost = self.lost
        if lost is not None:
            raise lost

    def __repr__(self) -> str:
        state = "held" if self.lost is None else f"lost ({self.lost.message})"
        return f"StageLease({self.stage!r}, holder={self.holder!r}, {self.lease_id}, {state})"

    # -- the renewer's side ---------------------------------------------------------

    def _renewed(self, lease: Lease, *, sent_at: float) -> bool:
        """Record a renewal; False if the block already ended (nothing to keep)."""
        with self._lock:
            if self._done:
                return False
            self._lease = lease
            self.renewals += 1
            self._alive_until = sent_at + lease.ttl_s
            return True

    def _lose(self, cause: AgentError) -> None:
        """The lease is gone (or may be): the block will hear of it."""
        with self._lock:
            if self._done or self._lost is not None:
                return
            lease = self._lease
            self._lost = AgentError(
                cause.status,
                f"lease {lease.lease_id} of {lease.holder!r} on stage {lease.stage!r} was "
                f"lost during the block ({cause.message}); another holder may have "
                f"entered the stage meanwhile",
                reason=cause.reason or "lost",
            )
        log.warning("%s", self._lost.message)

    def _end(self) -> AgentError | None:
        """The block is over: no more renewals; the error it must raise, if any."""
        with self._lock:
            self._done = True
            return self._lost

    @property
    def _ended(self) -> bool:
        with self._lock:
            return self._done or self._lost is not None


class _Renewer:
    """One thread per client that renews the leases of every ``stage()`` block.

    One thread and so one connection, whatever the number of blocks (a
    thread per block would open a connection per block: see AgentClient).
    Renewals are due at :data:`RENEW_FRACTION` of each lease's TTL; they
    are quick calls, so one after another is soon enough for hundreds.
    """

    def __init__(self, client: AgentClient) -> None:
        self._client = client
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, StageLease]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, held: StageLease, *, now: float) -> None:
        with self._cond:
            if self._closed:
                held._lose(AgentError(None, f"{self._client.base_url}: client is closed"))
                return
            self._push(now + held.ttl_s * RENEW_FRACTION, held)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="bootstorm-agent-renew", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        """Stop renewing; leases still held by a block are lost (they will expire)."""
        with self._cond:
            self._closed = True
            thread, self._thread = self._thread, None
            pending = [held for _, _, held in self._due]
            self._due.clear()
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        for held in pending:
            held._lose(AgentError(None, f"{self._client.base_url}: client closed"))

    def _push(self, at: float, held: StageLease) -> None:
        heapq.heappush(self._due, (at, next(self._order), held))

    def _next(self) -> StageLease | None:
        """The next lease due (waiting for it), or None once closed."""
        with self._cond:
            while not self._closed:
                while self._due and self._due[0][2]._ended:
                    heapq.heappop(self._due)  # its block is over: forget it
                now = time.monotonic()
                if self._due and self._due[0][0] <= now:
                    return heapq.heappop(self._due)[2]
                self._cond.wait(self._due[0][0] - now if self._due else None)
            return None

    def _run(self) -> None:
        while (held := self._next()) is not None:
            self._renew(held)

    def _renew(self, held: StageLease) -> None:
        sent_at = time.monotonic()
        try:
            lease = self._client.renew(held.lease_id)
        except AgentError as exc:
            now = time.monotonic()
            retry_at = now + held.ttl_s * _RETRY_FRACTION
            # No answer or a server error: the lease may still be alive; try
            # again while it surely is. A 4xx (404 expired, released) is final.
            transient = exc.status is None or exc.status >= 500
            with held._lock:
                alive_until = held._alive_until
            if transient and retry_at < alive_until:
                with self._cond:
                    if not self._closed:
                        self._push(retry_at, held)
                return
            held._lose(exc)
            return
        except Exception as exc:  # a bug or a malformed answer: the block must hear of it
            held._lose(AgentError(None, f"renewal failed: {type(exc).__name__}: {exc}"))
            return
        if held._renewed(lease, sent_at=sent_at):
            with self._cond:
                if not self._closed:
                    self._push(sent_at + lease.ttl_s * RENEW_FRACTION, held)


class AgentClient:
    """Talks to one node agent; share one between threads freely.

    Each thread gets its own httpx connection pool: a shared pool under hundreds
    of threads either caps connections (long-polling acquires then take them all
    and starve the releases that would serve them), or keeps hundreds idle and
    slows down, and its closing of surplus idle connections races with threads
    they were just handed to (encode/httpcore#1110: EBADF, or a hang until the
    read timeout). One thread, one connection: none of that.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        """``ca_file``: certificates to trust for an ``https://`` agent besides the
        system's (an agent's self-signed ``--tls-cert``); ``SSL_CERT_FILE`` in the
        environment replaces the system's, as for any OpenSSL client."""
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"}
        # Kept for AgentAdmission.plugin_agent: a bootstorm-cni plugin asks the same agent.
        self._token = token
        self._ca_file = None if ca_file is None else os.fspath(ca_file)
        self._transport = transport
        # One TLS context for all threads' pools: building one costs milliseconds.
        self._tls = ssl.create_default_context()
        if ca_file is not None:
            try:
                self._tls.load_verify_locations(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise AgentError(None, f"ca_file: cannot load {str(ca_file)!r} ({exc})") from None
        self._local = threading.local()
        self._pools: list[httpx.Client] = []
        self._lock = threading.Lock()
        self._closed = False
        self._renewer = _Renewer(self)

    def _http(self) -> httpx.Client:
        if self._closed:
            raise AgentError(None, f"{self.base_url}: client is closed")
        http: httpx.Client | None = getattr(self._local, "http", None)
        if http is None:
            with self._lock:
                if self._closed:
                    raise AgentError(None, f"{self.base_url}: client is closed")
                http = httpx.Client(
                    base_url=self.base_url,
                    headers=self._headers,
                    timeout=self._timeout_s,
                    verify=self._tls,
                    transport=self._transport,
                )
                self._pools.append(http)
            self._local.http = http
        return http

    # -- stages -----------------------------------------------------------------

    def acquire(self, stage: str, holder: str, wait_s: float | None = None) -> Lease:
        """A permit on ``stage``; waits FIFO up to ``wait_s`` (agent default 30 s).

        A wait that runs out raises AgentError with status 408, reason ``timeout``.
        """
        body = AcquireRequest(holder=holder, wait_s=wait_s).model_dump(exclude_none=True)
        waited = DEFAULT_WAIT_S if wait_s is None else wait_s
        # The HTTP timeout covers the long-poll plus the usual time to answer.
        data = self._call("POST", f"/v1/stages/{stage}/acquire", json=body, extra_s=waited)
        return Lease.model_validate(data)

    def release(self, lease: Lease | str) -> None:
        """Give the permit back; a lease that expired or was released raises (404)."""
        self._call("POST", f"/v1/leases/{_lease_id(lease)}/release")

    def renew(self, lease: Lease | str) -> Lease:
        """Push the expiry ``lease_ttl_s`` ahead; a lease already gone raises (404)."""
        return Lease.model_validate(self._call("POST", f"/v1/leases/{_lease_id(lease)}/renew"))

    @contextmanager
    def stage(self, stage: str, holder: str, wait_s: float | None = None) -> Iterator[StageLease]:
        """Hold a permit on ``stage`` for the block; released when it ends.

        The lease is renewed in the background at a third of its TTL, so the
        block may last longer than the TTL. If a renewal fails for good (the
        lease expired, the agent restarted), the yielded :class:`StageLease`
        records it in ``lost`` at once and leaving the block raises that
        AgentError (reason ``expired``, or ``lost``), unless the block is
        already raising (then the block's error carries a note of it).
        """
        lease = self.acquire(stage, holder, wait_s)
        held = StageLease(lease, granted_at=time.monotonic())
        self._renewer.watch(held, now=time.monotonic())
        try:
            yield held
        except BaseException as exc:
            lost = held._end()
            with contextlib.suppress(AgentError):  # the block's own error matters more
                self.release(lease)
            if lost is not None:
                exc.add_note(f"bootstorm agent: {lost.message}")
            raise
        lost = held._end()
        if lost is not None:
            # Given back if the agent still has it after all (a renewal that got
            # no answer); it has expired otherwise, and the block must hear of it.
            with contextlib.suppress(AgentError):
                self.release(lease)
            raise lost
        self.release(lease)

    # -- pools ------------------------------------------------------------------

    def take(self, kind: str, holder: str) -> PooledDevice | None:
        """A pre-created device, or None when the pool is empty (make one yourself).

        The pool's level after the take (its ``ready`` devices and ``target``)
        is on the device, and, empty or not, in :attr:`last_pool_level`.
        """
        self._local.pool_level = None
        body = TakeRequest(holder=holder).model_dump()
        try:
            data = self._call("POST", f"/v1/pools/{kind}/take", json=body)
        except AgentError as exc:
            if exc.status == 404 and exc.message == "pool empty":
                self._local.pool_level = _pool_level(kind, exc.answer)
                return None
            raise
        device = PooledDevice.model_validate(data)
        self._local.pool_level = _pool_level(kind, data)
        return device

    @property
    def last_pool_level(self) -> PoolLevel | None:
        """The pool level the agent answered this thread's last :meth:`take`
        with, a device or ``pool empty``; None before any, after a take that
        failed otherwise, or from an agent too old to say. Per thread, as the
        client is shared between threads: another thread's take never shows here.
        """
        level: PoolLevel | None = getattr(self._local, "pool_level", None)
        return level

    def pools(self) -> list[PoolState]:
        """Every pool of the agent as it is now (``GET /v1/pools``): its ready
        devices, its target and the devices being made, one per kind."""
        data = self._call("GET", "/v1/pools")
        pools = data.get("pools")
        if not isinstance(pools, list):
            raise AgentError(200, "GET /v1/pools: answer has no list of pools")
        try:
            return [PoolState.model_validate(p) for p in pools]
        except ValueError as exc:
            first = str(exc).splitlines()
            raise AgentError(200, f"GET /v1/pools: malformed pool ({first[0]})") from None

    # -- config and observation ---------------------------------------------------

    def put_config(self, config: TunedConfig) -> int:
        """Apply ``config`` on the node; returns the agent's new config generation."""
        data = self._call("PUT", "/config", json=config.model_dump(mode="json"))
        return int(data["generation"])

    def get_config(self) -> TunedConfig:
        return TunedConfig(**self._call("GET", "/config"))

    def config_in_force(self) -> ConfigInForce:
        """The config in force with its generation and source (``GET /config``
        and its headers): what a rollout keeps to put back."""
        response = self._send("GET", "/config")
        try:
            data = response.json()
            config = TunedConfig(**data) if isinstance(data, dict) else None
        except (ValueError, ConfigError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise AgentError(200, f"GET /config: not a tuned config ({first})") from None
        if config is None:
            raise AgentError(200, "GET /config: answer is not an object")
        raw = response.headers.get("X-Bootstorm-Config-Generation", "")
        if not raw.isdigit() or len(raw) > 18:
            raise AgentError(200, "GET /config: no X-Bootstorm-Config-Generation header")
        return ConfigInForce(
            config=config,
            generation=int(raw),
            source=response.headers.get("X-Bootstorm-Config-Source"),
        )

    def metrics(self) -> str:
        """The Prometheus text exposition of the agent's metrics."""
        return self._send("GET", "/metrics").text

    def healthz(self) -> dict[str, Any]:
        return self._call("GET", "/healthz")

    # -- plumbing -----------------------------------------------------------------

    def close(self) -> None:
        self._renewer.close()
        with self._lock:
            self._closed = True
            pools, self._pools = self._pools, []
        for http in pools:
            http.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: str, path: str, *, extra_s: float = 0.0, **kw: Any) -> dict[str, Any]:
        response = self._send(method, path, extra_s=extra_s, **kw)
        data = response.json()
        if not isinstance(data, dict):
            raise AgentError(response.status_code, f"{method} {path}: answer is not an object")
        return data

    def _send(self, method: str, path: str, *, extra_s: float = 0.0, **kw: Any) -> httpx.Response:
        timeout = self._timeout_s + extra_s
        try:
            response = self._http().request(method, path, timeout=timeout, **kw)
        except httpx.HTTPError as exc:
            raise AgentError(None, f"{method} {self.base_url}{path}: {exc}") from None
        if response.status_code >= 400:
            message, reason, answer = _error_of(response)
            raise AgentError(response.status_code, message, reason=reason, answer=answer)
        return response


#: Longest wait :func:`wait_pools_ready` accepts, seconds: an hour is many
#: times what a node takes to make a pool of thousands of devices.
MAX_POOL_WAIT_S = 3600.0


def wait_pools_ready(client: AgentClient, *, timeout_s: float = 120.0, poll_s: float = 0.1) -> None:
    """Return once every pool of the agent kept at a target above 0 holds
    at least that many ready devices (an agent fills its pools in the
    background after a ``PUT /config``: a storm that starts before is not
    the storm the model predicts, whose pools start full).

    Asks ``GET /v1/pools`` every ``poll_s`` seconds for at most
    ``timeout_s``; then raises :class:`PoolsNotReadyError` (an
    :class:`AgentError`) naming the first pool short of its target in one
    line (``pools.netns: 3 of 8 ready after 120 s``). A failed call raises
    :class:`AgentError` at once. Bounded: it never waits past ``timeout_s`` (and one call's own
    HTTP timeout).
    """
    if not 0.0 <= timeout_s <= MAX_POOL_WAIT_S:  # also refuses NaN
        raise ValueError(f"timeout_s: must be in 0..{MAX_POOL_WAIT_S:g}, but got {timeout_s!r}")
    if not 0.0 < poll_s <= MAX_POOL_WAIT_S:
        raise ValueError(f"poll_s: must be in (0, {MAX_POOL_WAIT_S:g}], but got {poll_s!r}")
    deadline = time.monotonic() + timeout_s
    while True:
        short = [p for p in client.pools() if p.target > 0 and p.ready < p.target]
        if not short:
            return
        left = deadline - time.monotonic()
        if left <= 0.0:
            p = short[0]
            raise PoolsNotReadyError(p.kind, p.ready, p.target, waited_s=timeout_s)
        time.sleep(min(poll_s, left))


def _pool_level(kind: str, data: dict[str, Any] | None) -> PoolLevel | None:
    if data is None:
        return None
    ready, target = data.get("ready"), data.get("target")
    if type(ready) is not int or type(target) is not int:
        return None  # an agent from before the pool levels (or a malformed answer)
    return PoolLevel(kind=kind, ready=ready, target=target)


def _lease_id(lease: Lease | str) -> str:
    return lease.lease_id if isinstance(lease, Lease) else lease


def _error_of(response: httpx.Response) -> tuple[str, str | None, dict[str, Any] | None]:
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text.strip() or response.reason_phrase, None, None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        reason = data.get("reason")
        return data["error"], reason if isinstance(reason, str) else None, data
    return response.text.strip(), None, None
