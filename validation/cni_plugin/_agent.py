"""The node agent's HTTP API, as much of it as the plugin calls.

One connection per call (``Connection: close``): a plugin process makes two
to four calls in its life, on loopback, so keeping a connection buys nothing
and would need ``http.client`` (30 ms to import on this host). Every call is
bounded by a deadline: connect, send and the whole answer.
"""

from __future__ import annotations

import json
import socket
import time

from ._errors import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ._config import AgentConfig

__all__ = ["AgentAnswer", "AgentUnreachableError", "call"]

#: An answer larger than this is not the agent's (its largest is a take with a conflist).
MAX_ANSWER_BYTES = 1 << 20


class AgentUnreachableError(Exception):
    """No answer from the agent within the deadline (refused, reset, timed out)."""


class AgentAnswer(Frozen):
    """The agent's HTTP status and its JSON body (``{}`` if it sent none)."""

    __slots__ = ("body", "status")
    status: int
    body: dict[str, Any]

    def __init__(self, *, status: int, body: dict[str, Any]) -> None:
        self._set(status=status, body=body)

    @property
    def error(self) -> str:
        """The agent's one-line error, with its reason where it gives one."""
        text = str(self.body.get("error", f"HTTP {self.status}"))
        reason = self.body.get("reason")
        return f"{text} ({reason})" if reason else text


def _connect(agent: AgentConfig, deadline: float) -> socket.socket:
    sock = socket.create_connection((agent.host, agent.port), timeout=_left(deadline))
    if agent.scheme != "https":
        return sock
    import ssl  # only for https: 6 ms of imports a plain-HTTP node need not pay

    context = ssl.create_default_context(cafile=agent.ca_file)
    return context.wrap_socket(sock, server_hostname=agent.host)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def call(
    agent: AgentConfig,
    *,
    token: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    timeout_s: float,
) -> AgentAnswer:
    """One request; its answer, or :class:`AgentUnreachableError` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    payload = b"" if body is None else json.dumps(body).encode()
    head = (
        f"{method} {agent.base_path}{path} HTTP/1.1\r\n"
        f"Host: {agent.host}:{agent.port}\r\n"
        f"Authorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    try:
        sock = _connect(agent, deadline)
        try:
            sock.settimeout(_left(deadline))
            sock.sendall(head + payload)
            chunks: list[bytes] = []
            size = 0
            while True:
                sock.settimeout(_left(deadline))
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise AgentUnreachableError(f"answer over {MAX_ANSWER_BYTES} bytes")
        finally:
            sock.close()
    except TimeoutError:  # socket.timeout is TimeoutError; before OSError, its base
        raise AgentUnreachableError(f"no answer within {timeout_s:g} s") from None
    except OSError as exc:  # refused, reset, unreachable, ssl.SSLError
        raise AgentUnreachableError(f"{type(exc).__name__}: {exc.strerror or exc}") from None
    return _parse(b"".join(chunks))


def _parse(raw: bytes) -> AgentAnswer:
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        raise AgentUnreachableError("the answer ended before its headers")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise AgentUnreachableError(f"not an HTTP answer: {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        try:
            rest = _unchunk(rest)
        except ValueError:
            raise AgentUnreachableError("the answer's chunked body is malformed") from None
    elif "content-length" in headers and headers["content-length"].isdigit():
        rest = rest[: int(headers["content-length"])]
    try:
        data = json.loads(rest) if rest.strip() else {}
    except ValueError:
        data = {"error": rest.decode(errors="replace").strip()[:200]}
    return AgentAnswer(status=int(parts[1]), body=data if isinstance(data, dict) else {})


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)
