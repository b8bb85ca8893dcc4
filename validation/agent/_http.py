"""What the agent does with traffic it cannot serve: one JSON line back, one log line.

aiohttp answers a request it cannot parse (a bad request line, a bad header,
a header over 8 190 bytes, bad chunked framing, TLS to a plain-HTTP port)
itself, before any middleware runs: a multi-line ``text/plain`` 400 that
quotes the client's bytes, and a full traceback in the log for each one. Any
client, without a token, could fill the log that way (18 tracebacks for 24
probes), and asyncio logged a traceback for every refused ``accept()`` at
the file-descriptor limit (263 of them in one probe).

Here the agent's own connection class (:class:`AgentRequestHandler`, made by
:class:`AgentServer` and :class:`AgentRunner`) answers those with the agent's
one-line JSON, ``{"error": "<field>: <problem>", "field": ..., "reason":
"malformed_request"}``, and :class:`RateLimitedLog` writes one line per kind
of problem per interval, saying how many more it did not write. The loop's
exception handler does the same for a full descriptor table
(:func:`install_accept_error_handler`); asyncio retries the accept every
second by itself, so the agent keeps serving its open connections and takes
new ones once some close. A bug (an exception that is none of these) is
still logged whole: that is for a developer to see.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    ContentLengthError,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    PayloadEncodingError,
    TransferEncodingError,
)

__all__ = [
    "LOG_INTERVAL_S",
    "AgentRequestHandler",
    "AgentRunner",
    "AgentServer",
    "Malformed",
    "RateLimitedLog",
    "describe",
    "install_accept_error_handler",
]

log = logging.getLogger(__name__)

#: One log line per kind of problem per this many seconds; the next line says
#: how many were not written. A minute keeps a flood to a line a minute a kind.
LOG_INTERVAL_S = 60.0
#: Kinds remembered by a RateLimitedLog (ours are a handful of fixed words).
_MAX_KINDS = 64
#: Longest problem text quoted in an answer or a log line.
_MAX_PROBLEM_CHARS = 120
#: A quoted stretch of a message: in a status-line error, the client's line.
_QUOTED = re.compile(r"""\s*(b?'[^']*'|b?"[^"]*")""")
#: What asyncio's accept() reports when a descriptor table or the memory is full.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class RateLimitedLog:
    """Writes at most one WARNING line per kind per ``interval_s``."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        # kind -> (when its last line was written, lines not written since)
        self._seen: dict[str, tuple[float, int]] = {}

    def note(self, kind: str, message: str) -> bool:
        """Log ``message`` unless a line of ``kind`` was written within the
        interval (then only counted); whether it was written."""
        now = self._clock()
        last = self._seen.get(kind)
        if last is not None and now - last[0] < self._interval_s:
            self._seen[kind] = (last[0], last[1] + 1)
            return False
        skipped = last[1] if last is not None else 0
        tail = (
            f" ({skipped} more like it in the last {self._interval_s:g} s not logged)"
            if skipped
            else ""
        )
        self._logger.warning("%s%s", message, tail)
        if kind not in self._seen and len(self._seen) >= _MAX_KINDS:
            self._seen.pop(next(iter(self._seen)))
        self._seen[kind] = (now, 0)
        return True


@dataclass(frozen=True, kw_only=True)
class Malformed:
    """What was wrong with a request, in the words of its answer."""

    #: The part of the request: request_line, method, url, headers or body.
    field: str
    #: One line, no byte of the client's quoted.
    problem: str


def _first_words(message: str) -> str:
    # aiohttp's messages are "<what>:\n\n  b'<the client's bytes>'\n   ^"; keep
    # the description lines, never the quoted bytes or the caret under them.
    kept = []
    for line in message.splitlines():
        text = line.strip()
        if not text or text.startswith(("b'", 'b"', "bytearray(", "^")) or "b'" in text:
            continue
        kept.append(text.rstrip(":"))
    words = "; ".join(kept) or "not HTTP/1.1"
    words = "".join(c if c.isprintable() else "?" for c in words)
    return words[:_MAX_PROBLEM_CHARS]


def describe(exc: BaseException | None, status: int) -> Malformed:
    """The field and problem of a request aiohttp could not parse (or answer)."""
    if isinstance(exc, ConnectionError):
        return Malformed(field="connection", problem=f"closed mid-request ({type(exc).__name__})")
    if isinstance(exc, web.RequestPayloadError):
        # Raised again when aiohttp drains a body that did not decode.
        return Malformed(field="body", problem="cannot be read as sent")
    if isinstance(exc, LineTooLong):
        # Its message quotes the whole line: the size is the problem.
        return Malformed(field="headers", problem="a request line or header field over 8190 bytes")
    if isinstance(exc, InvalidURLError):
        return Malformed(field="url", problem="not a valid URL (the request line's target)")
    if isinstance(exc, BadHttpMethod):
        words = _first_words(exc.message)
        if "HTTPS" in words:
            return Malformed(field="request_line", problem="TLS sent to a plain-HTTP port")
        return Malformed(field="method", problem="not an HTTP method (or not HTTP at all)")
    if isinstance(exc, TransferEncodingError):
        return Malformed(field="body", problem="bad chunked encoding")
    if isinstance(exc, ContentLengthError):
        return Malformed(field="body", problem="shorter than its Content-Length")
    if isinstance(exc, PayloadEncodingError):
        return Malformed(field="body", problem="its Content-Encoding does not decode")
    if isinstance(exc, BadStatusLine):
        # aiohttp's Python parser says "Bad status line '<the line>'": not quoted back.
        unquoted = _QUOTED.sub("", exc.message).replace("  ", " ")
        return Malformed(field="request_line", problem=_first_words(unquoted))
    if isinstance(exc, InvalidHeader):
        return Malformed(field="headers", problem="a header field that is not valid")
    if isinstance(exc, HttpProcessingError):
        words = _first_words(exc.message or "")
        field = "body" if "chunk" in words.lower() else "headers"
        return Malformed(field=field, problem=words)
    # No exception: aiohttp's own status (504: the handler timed out).
    return Malformed(field="request", problem=f"not answered (HTTP {status})")


#: Called with what was wrong and the peer's address, for the log and the metrics.
OnMalformed = Callable[[Malformed, "str | None"], None]


class AgentRequestHandler(web.RequestHandler):
    """aiohttp's connection, answering what it cannot parse in the agent's JSON."""

    def __init__(self, manager: web.Server, *, on_malformed: OnMalformed, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._on_malformed = on_malformed

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if exc is not None and not isinstance(exc, (HttpProcessingError, ConnectionError)):
            # A handler's bug that passed the middleware: whole, for a developer.
            self.logger.error("Error handling request", exc_info=exc)
            body = {"error": f"internal error: {type(exc).__name__}", "reason": "internal"}
        else:
            what = describe(exc, status)
            self._on_malformed(what, request.remote)
            body = {
                "error": f"{what.field}: {what.problem}",
                "field": what.field,
                "reason": "malformed_request",
            }
        # As aiohttp's own: with part of an answer sent, no other can follow.
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was already begun; cannot send the error")
        resp = web.json_response(body, status=status)
        resp.force_close()
        return resp

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, (HttpProcessingError, web.RequestPayloadError, ConnectionError)):
            # A client's doing (a body it broke off, a framing error after the
            # head): a line, not a traceback.
            what = describe(exc, 400)
            self._on_malformed(what, None)
            return
        super().log_exception(*args, **kw)


class AgentServer(web.Server):
    """aiohttp's low-level server, making :class:`AgentRequestHandler` connections."""

    def __init__(
        self,
        handler: Any,
        *,
        request_factory: Any,
        loop: asyncio.AbstractEventLoop,
        handler_cancellation: bool,
        on_malformed: OnMalformed,
        handler_args: dict[str, Any],
    ) -> None:
        super().__init__(
            handler,
            request_factory=request_factory,
            loop=loop,
            handler_cancellation=handler_cancellation,
            **handler_args,
        )
        self._agent_loop = loop
        self._on_malformed = on_malformed
        self._handler_args = dict(handler_args)

    def __call__(self) -> AgentRequestHandler:
        return AgentRequestHandler(
            self, loop=self._agent_loop, on_malformed=self._on_malformed, **self._handler_args
        )


class AgentRunner(web.AppRunner):
    """An AppRunner whose server is an :class:`AgentServer` (``handler_args``:
    the connection's settings, as ``web.AppRunner`` takes them)."""

    def __init__(
        self,
        app: web.Application,
        *,
        on_malformed: OnMalformed,
        handler_cancellation: bool,
        handler_args: dict[str, Any],
    ) -> None:
        super().__init__(app, handle_signals=False)
        self._on_malformed = on_malformed
        self._handler_cancellation = handler_cancellation
        self._handler_args = handler_args

    async def _make_server(self) -> web.Server:
        # The app's own start-up (signals, cleanup contexts) and freezing
        # happen in the parent; its handler and request factory are public.
        made = await super()._make_server()
        return AgentServer(
            made.request_handler,
            request_factory=made.request_factory,
            loop=asyncio.get_running_loop(),
            handler_cancellation=self._handler_cancellation,
            on_malformed=self._on_malformed,
            handler_args=self._handler_args,
        )


def install_accept_error_handler(
    loop: asyncio.AbstractEventLoop, rate_log: RateLimitedLog, on_error: Callable[[], None]
) -> Callable[[], None]:
    """Make ``loop`` log a refused ``accept()`` (descriptor table or memory full)
    as one rate-limited line; other reports go where they went. Returns the
    function that puts the previous handler back, wrapped in a filter that
    keeps asyncio's stale accept retries quiet: they stay scheduled after the
    server closed and fire while the loop winds down (``asyncio.run`` runs
    its ready timers after the serve returned), so putting the bare previous
    handler back printed a traceback per pending retry."""
    previous = loop.get_exception_handler()

    def quiet_stale_retries(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, (ValueError, OSError)) and _is_stale_accept_retry(context):
            log.debug("an accept retry fired after its server closed: %s", exc)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES:
            on_error()
            rate_log.note(
                "accept",
                f"cannot accept new connections: {exc.strerror or exc} "
                f"({errno.errorcode.get(exc.errno or 0, '?')}); serving the open ones, "
                "retrying every second (raise LimitNOFILE / ulimit -n?)",
            )
            return
        quiet_stale_retries(loop, context)

    loop.set_exception_handler(handler)
    return lambda: loop.set_exception_handler(quiet_stale_retries)


def _is_stale_accept_retry(context: dict[str, Any]) -> bool:
    """Whether ``context`` reports asyncio's accept retry (``_start_serving``,
    scheduled a second after an EMFILE) firing on a listening socket the
    server has closed since: harmless, and not ours to report. CPython
    schedules one retry per failed accept of a backlog (python/cpython#151615)
    and does not cancel them when the server closes, so an agent stopped
    within a second of running out of descriptors printed a traceback per
    pending retry ("Invalid file descriptor: -1")."""
    handle = context.get("handle")
    callback = getattr(handle, "_callback", None)  # asyncio.Handle's, no public accessor
    if getattr(callback, "__name__", None) != "_start_serving":
        return False
    args = getattr(handle, "_args", None) or ()
    return any(isinstance(a, socket.socket) and a.fileno() == -1 for a in args)
