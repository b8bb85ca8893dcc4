"""What any client can send without a token (issue 35): every malformed
request is answered with the agent's one-line JSON naming the part that was
wrong, and logged as one line per kind per minute — never a traceback, not
even at the file-descriptor limit."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TOKEN, NoDevices, free_pool_id
from pydantic import SecretStr

from bootstorm.validation.agent import AgentSettings, agent_in_thread
from bootstorm.validation.agent._http import RateLimitedLog, install_accept_error_handler

AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
PUT = b"PUT /config HTTP/1.1\r\nHost: agent\r\n" + AUTH

# (raw request, the part the answer names). aiohttp's C and Python parsers
# both refuse these, naming the same part.
PROBES = {
    "not HTTP": (b"GARBAGE\r\n\r\n", "method"),
    "a space in a header name": (b"GET /healthz HTTP/1.1\r\nBad Header: x\r\n\r\n", "headers"),
    "a header line without a colon": (b"GET /healthz HTTP/1.1\r\nnocolon\r\n\r\n", "headers"),
    "a control character in a header": (b"GET /healthz HTTP/1.1\r\nX: a\x01b\r\n\r\n", "headers"),
    "a 20 KB header": (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", "headers"),
    "a 20 KB request line": (b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n", "headers"),
    "300 headers": (
        b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(300)) + b"\r\n",
        "headers",
    ),
    "a NUL in the path": (b"GET /heal\x00thz HTTP/1.1\r\n\r\n", "url"),
    "bad chunk size": (
        PUT + b"Transfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n",
        "body",
    ),
    "chunked and a length": (
        PUT + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        "headers",
    ),
    "a negative length": (PUT + b"Content-Length: -5\r\n\r\n", "headers"),
    "two lengths": (PUT + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef", "headers"),
    "an unknown transfer coding": (PUT + b"Transfer-Encoding: gzip\r\n\r\n", "headers"),
    "a gzip body that is not gzip": (
        PUT + b"Content-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello",
        "body",
    ),
}


@contextmanager
def agent_with_logs(
    caplog: pytest.LogCaptureFixture, **settings: float
) -> Iterator[tuple[str, int]]:
    caplog.set_level(logging.DEBUG)  # every record, aiohttp's debug ones too
    full = AgentSettings(token=SecretStr(TOKEN), port=0, pool_id=free_pool_id(), **settings)
    with agent_in_thread(full, device_ops=NoDevices()) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        yield host, int(port)


def exchange(host: str, port: int, data: bytes, *, timeout_s: float = 5.0) -> bytes:
    """Send ``data`` and read until the agent closes the connection."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


def json_answer(raw: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert any(line.lower().startswith("content-type: application/json") for line in lines[1:]), (
        raw[:300]
    )
    assert body.count(b"\n") == 0, body  # one line
    answer = json.loads(body)
    assert isinstance(answer, dict)
    return int(lines[0].split()[1]), answer


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    shown = [(r.name, r.getMessage()) for r in caplog.records if r.exc_info or r.exc_text]
    assert not shown, shown


@pytest.mark.parametrize(("raw", "field"), PROBES.values(), ids=PROBES.keys())
def test_a_malformed_request_is_one_json_line_and_one_log_line(
    caplog: pytest.LogCaptureFixture, raw: bytes, field: str
) -> None:
    with agent_with_logs(caplog) as (host, port):
        status, answer = json_answer(exchange(host, port, raw))
        time.sleep(0.05)  # the agent's log line is written after its answer
    assert status == 400
    assert answer["field"] == field
    error = answer["error"]
    assert isinstance(error, str) and error.startswith(f"{field}: ")
    # No byte the client sent is quoted back (these probes' payloads).
    for echo in ("GARBAGE", "Bad Header", "nocolon", "aaaa", "ZZ", "hello", "heal"):
        assert echo not in error
    said = warnings_of(caplog)
    assert len(said) == 1 and said[0].startswith("malformed request from 127.0.0.1: "), said
    assert f": {field}: " in said[0] and "\n" not in said[0]
    no_tracebacks(caplog)


def test_a_flood_of_one_kind_is_one_log_line_and_counted_in_full(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with agent_with_logs(caplog) as (host, port):
        for _ in range(30):
            status, answer = json_answer(exchange(host, port, PROBES["not HTTP"][0]))
            assert (status, answer["field"]) == (400, "method")
        for _ in range(30):
            status, answer = json_answer(exchange(host, port, PROBES["a 20 KB header"][0]))
            assert (status, answer["field"]) == (400, "headers")
        metrics = httpx.get(f"http://{host}:{port}/metrics", timeout=10).text
        health = httpx.get(f"http://{host}:{port}/healthz", timeout=10)
    assert health.status_code == 200  # and it serves everyone else
    said = warnings_of(caplog)
    assert len(said) == 2, said  # one a kind, not 60
    assert 'bootstorm_agent_malformed_requests_total{field="method"} 30.0' in metrics
    assert 'bootstorm_agent_malformed_requests_total{field="headers"} 30.0' in metrics
    no_tracebacks(caplog)


def test_a_client_that_hangs_up_mid_body_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with agent_with_logs(caplog) as (host, port):
        for _ in range(5):
            s = socket.create_connection((host, port))
            s.sendall(PUT + b"Content-Length: 100\r\n\r\nlimits:")
            time.sleep(0.1)  # the handler is reading the body
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # a reset, not a clean close
        time.sleep(0.2)
        assert httpx.get(f"http://{host}:{port}/healthz", timeout=10).status_code == 200
    said = warnings_of(caplog)
    assert len(said) == 1 and "connection: closed mid-request" in said[0], said
    no_tracebacks(caplog)


def test_the_rate_limited_log_says_how_many_it_left_out() -> None:
    now = [0.0]
    logger = logging.getLogger("test.rate_limited")
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    try:
        log = RateLimitedLog(logger, interval_s=60.0, clock=lambda: now[0])
        assert log.note("headers", "bad header")
        for _ in range(9):
            now[0] += 1.0
            assert not log.note("headers", "bad header")
        assert log.note("body", "bad body")  # another kind has its own interval
        now[0] = 60.0
        assert log.note("headers", "bad header")
    finally:
        logger.removeHandler(handler)
    assert records == [
        "bad header",
        "bad body",
        "bad header (9 more like it in the last 60 s not logged)",
    ]


_FD_LIMIT = 64


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_FD_LIMIT, _FD_LIMIT))


@pytest.mark.slow
def test_at_the_fd_limit_one_line_and_the_agent_serves_again(tmp_path: Path) -> None:
    """An agent with 64 descriptors and 150 idle connections: one log line (not a
    traceback a second), and once they close it answers again."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    log_file = tmp_path / "agent.log"
    argv = ["agent", "serve", "--port", "0", "--token-file", str(token_file)]
    argv += ["--pool-id", str(free_pool_id())]
    with log_file.open("w") as out:  # a file, not a pipe: a flood cannot block it
        proc = subprocess.Popen(
            [sys.executable, "-c", "from bootstorm.cli import main; main()", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_low_fd_limit,
        )
    try:
        deadline = time.monotonic() + 30
        while "listening on" not in log_file.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_file.read_text()
            time.sleep(0.05)
        url = log_file.read_text().split("listening on", 1)[1].split()[0]
        host, port = url.removeprefix("http://").rsplit(":", 1)
        idle = []
        for _ in range(150):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((host, int(port)))
            idle.append(s)
        time.sleep(3.5)  # asyncio retries the accept every second
        for s in idle:
            s.close()
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the agent did not serve again"
    finally:
        proc.terminate()
        proc.wait(15)
    text = log_file.read_text()
    assert "Traceback" not in text, text[:2000]
    refusals = [line for line in text.splitlines() if "cannot accept new connections" in line]
    assert len(refusals) == 1, text[:2000]
    assert "Too many open files" in refusals[0]
    assert os.path.getsize(log_file) < 2000


def _accept_retry_report(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> dict[str, Any]:
    """What asyncio reports when its accept retry (``_start_serving``) fails."""
    retry = asyncio.TimerHandle(0.0, loop._start_serving, (None, sock, None, None, 128), loop)  # type: ignore[attr-defined]
    return {
        "message": f"Exception in callback {retry}",
        "exception": ValueError("Invalid file descriptor: -1"),
        "handle": retry,
    }


def test_an_accept_retry_after_the_server_closed_is_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """asyncio's retry of an accept that hit EMFILE fires after the server
    closed its socket (it is not cancelled): the agent, stopped then, printed a
    traceback per pending retry. Quiet for a closed socket; any other failure
    of the callback (an open socket) is still reported as before."""
    loop = asyncio.new_event_loop()
    restore = install_accept_error_handler(
        loop, RateLimitedLog(logging.getLogger("t")), lambda: None
    )
    try:
        closed, open_ = socket.socket(), socket.socket()
        closed.close()
        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            loop.call_exception_handler(_accept_retry_report(loop, closed))
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
            loop.call_exception_handler(_accept_retry_report(loop, open_))
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1 and errors[0].exc_info is not None
        open_.close()
    finally:
        restore()
        loop.close()


def test_an_accept_retry_after_the_serve_returned_is_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The retries outlive the serve too: ``asyncio.run`` runs the ready timers
    while it winds the loop down, after the serve put the previous handler
    back (a CI run's agent printed a traceback per retry then). Once restored
    a stale retry stays quiet; anything else reaches the previous handler."""
    loop = asyncio.new_event_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    restore = install_accept_error_handler(
        loop, RateLimitedLog(logging.getLogger("t")), lambda: None
    )
    try:
        restore()
        closed, open_ = socket.socket(), socket.socket()
        closed.close()
        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            loop.call_exception_handler(_accept_retry_report(loop, closed))
            assert seen == []
            report = _accept_retry_report(loop, open_)
            loop.call_exception_handler(report)
            assert seen == [report]
        open_.close()
    finally:
        loop.close()
