"""A small, typed, synchronous client of the node agent (httpx).

>>> with AgentClient("http://127.0.0.1:8787", token=token) as agent:
...     with agent.stage("StartVM", holder="sb-17") as lease:
...         boot()
...     device = agent.take("veth", holder="sb-17")  # None: make your own

Every refusal raises :class:`AgentError` with the HTTP status and the agent's
message; a network failure raises it with ``status=None``.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from ...models import TunedConfig
from ._protocol import DEFAULT_WAIT_S, AcquireRequest, TakeRequest

__all__ = ["AgentClient", "AgentError", "Lease", "PooledCni", "PooledDevice"]


class AgentError(Exception):
    """The agent refused a request (``status``) or could not be reached (``status=None``)."""

    def __init__(self, status: int | None, message: str, *, reason: str | None = None) -> None:
        super().__init__(f"{status or 'unreachable'}: {message}")
        self.status = status
        self.message = message
        #: The agent's machine-readable reason, when it gives one (``expired``, ``timeout``...).
        self.reason = reason


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Lease(_Answer):
    """A permit on a stage until ``expires_at_s`` (UNIX time) unless renewed."""

    lease_id: str
    stage: str
    holder: str
    ttl_s: float
    expires_at_s: float


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
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"}
        self._transport = transport
        # One TLS context for all threads' pools: building one costs milliseconds.
        self._tls = ssl.create_default_context()
        self._local = threading.local()
        self._pools: list[httpx.Client] = []
        self._lock = threading.Lock()
        self._closed = False

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
    def stage(self, stage: str, holder: str, wait_s: float | None = None) -> Iterator[Lease]:
        """Hold a permit on ``stage`` for the block; released when it ends.

        If the lease expired during the block, leaving it raises AgentError (404,
        reason ``expired``) unless the block is already raising.
        """
        lease = self.acquire(stage, holder, wait_s)
        try:
            yield lease
        except BaseException:
            with contextlib.suppress(AgentError):  # the block's own error matters more
                self.release(lease)
            raise
        self.release(lease)

    # -- pools ------------------------------------------------------------------

    def take(self, kind: str, holder: str) -> PooledDevice | None:
        """A pre-created device, or None when the pool is empty (make one yourself)."""
        body = TakeRequest(holder=holder).model_dump()
        try:
            data = self._call("POST", f"/v1/pools/{kind}/take", json=body)
        except AgentError as exc:
            if exc.status == 404 and exc.message == "pool empty":
                return None
            raise
        return PooledDevice.model_validate(data)

    # -- config and observation ---------------------------------------------------

    def put_config(self, config: TunedConfig) -> int:
        """Apply ``config`` on the node; returns the agent's new config generation."""
        data = self._call("PUT", "/config", json=config.model_dump(mode="json"))
        return int(data["generation"])

    def get_config(self) -> TunedConfig:
        return TunedConfig(**self._call("GET", "/config"))

    def metrics(self) -> str:
        """The Prometheus text exposition of the agent's metrics."""
        return self._send("GET", "/metrics").text

    def healthz(self) -> dict[str, Any]:
        return self._call("GET", "/healthz")

    # -- plumbing -----------------------------------------------------------------

    def close(self) -> None:
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
            message, reason = _error_of(response)
            raise AgentError(response.status_code, message, reason=reason)
        return response


def _lease_id(lease: Lease | str) -> str:
    return lease.lease_id if isinstance(lease, Lease) else lease


def _error_of(response: httpx.Response) -> tuple[str, str | None]:
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text.strip() or response.reason_phrase, None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        reason = data.get("reason")
        return data["error"], reason if isinstance(reason, str) else None
    return response.text.strip(), None
