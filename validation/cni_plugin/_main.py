"""The plugin's commands: ADD, DEL, CHECK, VERSION, STATUS, GC (module doc of the package)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from . import _agent
from ._config import (
    PLUGIN_TYPE,
    SUPPORTED_VERSIONS,
    PluginConfig,
    Request,
    check_version,
    load_json,
    parse_config,
    parse_request,
    state_path,
)
from ._delegate import DelegateRun, delegate_config, encode, find_plugin, run_plugin
from ._errors import (
    CODE_AGENT,
    CODE_INCOMPATIBLE_VERSION,
    CODE_IO,
    CODE_NOT_AVAILABLE,
    CODE_TRY_AGAIN,
    PluginError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, BinaryIO, TextIO

__all__ = ["main", "run"]

#: The version an error is reported in when the config did not say one.
FALLBACK_VERSION = "1.0.0"
#: Versions from which STATUS and GC exist.
STATUS_VERSIONS = ("1.1.0",)
#: Longest stdin read (a network config with a prevResult is a few KiB).
MAX_STDIN_BYTES = 1 << 20


class _Interrupted(BaseException):
    """SIGTERM from the runtime (a cancelled ADD): unwinds through the ``finally``s."""


class _Log:
    """What one call did, for the operator (stderr: the runtime's log) and
    for the optional ``log_file`` (one JSON line per call)."""

    def __init__(self, *, err: TextIO, request: Request | None) -> None:
        self.err = err
        self.start_s = time.monotonic()
        self.wall_start = time.time()
        self.request = request
        self.events: list[str] = []
        self.fields: dict[str, Any] = {}
        self.agent_s = 0.0
        # The plugin's pid, logged: a detached release's child writes the line.
        self.pid = os.getpid()
        #: What is left once the answer is written (the lease's release):
        #: :func:`run` does it inline, or in a detached child (``detach``).
        self.tail: Callable[[], None] | None = None

    def warn(self, message: str) -> None:
        # One line per event: the runtime keeps a plugin's stderr in its log.
        who = self.request.container_id[:12] if self.request is not None else "-"
        self.err.write(f"{PLUGIN_TYPE}: {who}: {message}\n")
        self.events.append(message)

    def write(self, config: PluginConfig | None, *, outcome: str) -> None:
        if config is None or config.log_file is None or self.request is None:
            return
        line = {
            "wall_s": self.wall_start,
            "start_s": self.start_s,
            "end_s": time.monotonic(),
            "pid": self.pid,
            "command": self.request.command,
            "container_id": self.request.container_id,
            "ifname": self.request.ifname,
            "stage": config.stage,
            "policy": config.failure_policy,
            "outcome": outcome,
            "agent_s": round(self.agent_s, 6),
            "events": self.events,
            **self.fields,
        }
        try:
            fd = os.open(
                config.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
            try:
                # One write of one line: appends of concurrent plugins do not interleave.
                os.write(fd, (json.dumps(line) + "\n").encode())
            finally:
                os.close(fd)
        except OSError as exc:
            self.err.write(f"{PLUGIN_TYPE}: log_file {config.log_file}: {exc.strerror}\n")


class _Agent:
    """The agent as one call sees it: its token read once, every call timed."""

    def __init__(self, config: PluginConfig, log: _Log) -> None:
        self.config = config
        self.log = log
        self.token = config.agent.token()

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, extra_s: float = 0.0
    ) -> _agent.AgentAnswer:
        t0 = time.monotonic()
        try:
            return _agent.call(
                self.config.agent,
                token=self.token,
                method=method,
                path=path,
                body=body,
                timeout_s=self.config.agent.timeout_s + extra_s,
            )
        finally:
            self.log.agent_s += time.monotonic() - t0


class _Lease:
    """A permit held while the delegate runs; renewed at a third of its TTL."""

    def __init__(self, agent: _Agent, *, lease_id: str, ttl_s: float) -> None:
        self.agent = agent
        self.lease_id = lease_id
        self.ttl_s = ttl_s
        self.renewed_at = time.monotonic()
        self.lost: str | None = None

    @property
    def tick_s(self) -> float:
        return max(self.ttl_s / 3.0, 0.05)

    def renew(self) -> None:
        if self.lost is not None:
            return
        try:
            answer = self.agent.call("POST", f"/v1/leases/{self.lease_id}/renew")
        except _agent.AgentUnreachableError as exc:
            # Not lost yet: the agent keeps it until its TTL runs out unrenewed.
            if time.monotonic() - self.renewed_at >= self.ttl_s:
                self.lost = f"not renewed within its TTL of {self.ttl_s:g} s ({exc})"
            return
        if answer.status == 200:
            self.renewed_at = time.monotonic()
            self.ttl_s = float(answer.body.get("ttl_s", self.ttl_s))
        else:
            self.lost = f"renewal refused: {answer.error}"

    def release(self, log: _Log) -> None:
        """Give it back; an agent that forgot it (expired, restarted) is no error."""
        try:
            answer = self.agent.call("POST", f"/v1/leases/{self.lease_id}/release")
        except _agent.AgentUnreachableError as exc:
            log.warn(
                f"lease {self.lease_id} not released ({exc}); the agent frees it after its TTL"
            )
            return
        if answer.status != 200:
            log.warn(f"lease {self.lease_id} already gone at release: {answer.error}")


def _acquire(agent: _Agent, config: PluginConfig, request: Request, log: _Log) -> _Lease | None:
    """The stage's permit, or None where the policy lets the ADD go without one."""
    holder = f"cni:{request.container_id[:96]}:{request.ifname}"
    t0 = time.monotonic()
    try:
        answer = agent.call(
            "POST",
            f"/v1/stages/{config.stage}/acquire",
            {"holder": holder, "wait_s": config.agent.wait_s},
            extra_s=config.agent.wait_s,
        )
    except _agent.AgentUnreachableError as exc:
        failure = PluginError(
            CODE_TRY_AGAIN, f"no permit for stage {config.stage}: agent {config.agent.url}: {exc}"
        )
    else:
        log.fields["permit_wait_s"] = round(time.monotonic() - t0, 6)
        if answer.status == 200:
            lease_id = str(answer.body.get("lease_id", ""))
            log.fields["lease"] = lease_id
            return _Lease(agent, lease_id=lease_id, ttl_s=float(answer.body.get("ttl_s", 30.0)))
        transient = answer.status in (408, 429) or answer.status >= 500
        failure = PluginError(
            CODE_TRY_AGAIN if transient else CODE_AGENT,
            f"no permit for stage {config.stage}: agent {config.agent.url} answered "
            f"{answer.status}: {answer.error}",
        )
    if config.fail_open:
        log.warn(f"failure_policy open: going ahead without a permit ({failure.msg})")
        log.fields["permit"] = "skipped"
        return None
    raise failure


def _delegate_version(config: PluginConfig, executable: str) -> str:
    """The version the delegate is called with: the network's, or 1.0.0 for a
    1.1.0 network whose delegate does not speak 1.1.0 (their results are alike)."""
    if config.cni_version not in STATUS_VERSIONS:
        return config.cni_version
    return config.cni_version if _speaks(executable, config.cni_version) else "1.0.0"


def _speaks(executable: str, version: str) -> bool:
    run = run_plugin(
        executable,
        stdin=encode({"cniVersion": version}),
        environ={**os.environ, "CNI_COMMAND": "VERSION"},
    )
    try:
        supported = json.loads(run.stdout).get("supportedVersions", [])
    except (ValueError, AttributeError):
        return False
    return version in supported


def _call_delegate(
    config: PluginConfig,
    request: Request,
    environ: Mapping[str, str],
    log: _Log,
    *,
    lease: _Lease | None = None,
    command: str | None = None,
    version: str | None = None,
) -> DelegateRun:
    executable = find_plugin(config.delegate_type, request.path)
    conf = delegate_config(
        config.delegate, config.raw, cni_version=version or _delegate_version(config, executable)
    )
    env = dict(environ)
    if command is not None:
        env["CNI_COMMAND"] = command
    run = run_plugin(
        executable,
        stdin=encode(conf),
        environ=env,
        tick_s=None if lease is None else lease.tick_s,
        on_tick=None if lease is None else lease.renew,
    )
    log.fields.setdefault("delegates", []).append({"command": env["CNI_COMMAND"], **run.record()})
    return run


def _passed_through(run: DelegateRun, out: BinaryIO, err: TextIO) -> int:
    """The delegate's output as ours, unchanged; its exit status."""
    if run.stderr:
        err.write(run.stderr.decode(errors="replace"))
    if run.rc != 0 and not run.stdout.strip():
        tail = " ".join(run.stderr.decode(errors="replace").split())[-200:] or "no output"
        raise PluginError(
            CODE_IO, f"delegate {run.program} failed (exit {run.rc}) with no error JSON: {tail}"
        )
    out.write(run.stdout)
    return run.rc if run.rc > 0 else (1 if run.rc else 0)


def _add(
    config: PluginConfig, request: Request, environ: Mapping[str, str], out: BinaryIO, log: _Log
) -> int:
    agent = _Agent(config, log)
    lease = _acquire(agent, config, request, log)
    answered = False
    try:
        if config.pool is not None:
            from . import _pool  # the pool path only: its imports stay off plain ADDs

            result = _pool.take_and_attach(agent, config, request, log)
            if result is not None:
                out.write(result)
                answered = True
                return 0
        run = _call_delegate(config, request, environ, log, lease=lease)
        if lease is not None and lease.lost is not None:
            # The permit admitted this ADD; losing it midway (the agent restarted,
            # or renewals went unanswered past the TTL) may have let another in,
            # which undoing this ADD would not undo: logged, the result kept.
            log.warn(f"the permit for stage {config.stage} was lost during the ADD ({lease.lost})")
        rc = _passed_through(run, out, log.err)
        answered = True
        return rc
    finally:
        if lease is not None:
            if answered:
                # The answer is written: the release's round trip to the agent
                # need not be the ADD's (run() decides, see ``detach``).
                log.tail = lambda: lease.release(log)
            else:
                lease.release(log)


def _del(
    config: PluginConfig, request: Request, environ: Mapping[str, str], out: BinaryIO, log: _Log
) -> int:
    # DEL never asks the agent: it must work when the agent is gone.
    return _pooled_or_delegated(lambda pool: pool.release_taken, config, request, environ, out, log)


def _check(
    config: PluginConfig, request: Request, environ: Mapping[str, str], out: BinaryIO, log: _Log
) -> int:
    return _pooled_or_delegated(lambda pool: pool.check_taken, config, request, environ, out, log)


def _pooled_or_delegated(
    handler: Any,
    config: PluginConfig,
    request: Request,
    environ: Mapping[str, str],
    out: BinaryIO,
    log: _Log,
) -> int:
    """An attachment an ADD took from the pool is the pool module's (``handler``
    picks its function from :mod:`._pool`, imported only then: DEL is on every
    sandbox's teardown); any other goes to the delegate."""
    if os.path.exists(state_path(config, request.container_id, request.ifname)):
        from . import _pool

        if handler(_pool)(config, request, log):
            return 0
    run = _call_delegate(config, request, environ, log)
    return _passed_through(run, out, log.err)


def _status(
    config: PluginConfig, request: Request, environ: Mapping[str, str], out: BinaryIO, log: _Log
) -> int:
    if config.cni_version not in STATUS_VERSIONS:
        raise PluginError(
            CODE_INCOMPATIBLE_VERSION,
            f"cniVersion: STATUS needs 1.1.0 (got {config.cni_version!r})",
        )
    agent = _Agent(config, log)
    try:
        answer = agent.call("GET", "/healthz")
        problem = None if answer.status == 200 else f"answered {answer.status}: {answer.error}"
    except _agent.AgentUnreachableError as exc:
        problem = str(exc)
    if problem is not None:
        if not config.fail_open:
            raise PluginError(CODE_NOT_AVAILABLE, f"agent {config.agent.url}: {problem}")
        log.warn(f"failure_policy open: agent {config.agent.url}: {problem}")
    executable = find_plugin(config.delegate_type, request.path)
    if _speaks(executable, "1.1.0"):
        return _passed_through(
            _call_delegate(config, request, environ, log, version="1.1.0"), out, log.err
        )
    return 0


def _gc(
    config: PluginConfig, request: Request, environ: Mapping[str, str], out: BinaryIO, log: _Log
) -> int:
    if config.cni_version not in STATUS_VERSIONS:
        raise PluginError(
            CODE_INCOMPATIBLE_VERSION, f"cniVersion: GC needs 1.1.0 (got {config.cni_version!r})"
        )
    valid = config.raw.get("cni.dev/valid-attachments", [])
    keep = {
        (str(a.get("containerID")), str(a.get("ifname")))
        for a in valid
        if isinstance(valid, list) and isinstance(a, dict)
    }
    from . import _pool

    _pool.collect(config, keep=keep, log=log)
    executable = find_plugin(config.delegate_type, request.path)
    if _speaks(executable, "1.1.0"):
        return _passed_through(
            _call_delegate(config, request, environ, log, version="1.1.0"), out, log.err
        )
    return 0


_COMMANDS = {"ADD": _add, "DEL": _del, "CHECK": _check, "STATUS": _status, "GC": _gc}


def _version(data: bytes, out: BinaryIO) -> int:
    asked = FALLBACK_VERSION
    try:
        conf = json.loads(data) if data.strip() else {}
        if isinstance(conf, dict) and isinstance(conf.get("cniVersion"), str):
            asked = conf["cniVersion"]
    except ValueError:
        pass
    out.write(
        json.dumps({"cniVersion": asked, "supportedVersions": list(SUPPORTED_VERSIONS)}).encode()
    )
    return 0


def run(
    *,
    environ: Mapping[str, str],
    stdin: BinaryIO,
    out: BinaryIO,
    err: TextIO,
    detach: bool = False,
) -> int:
    """One call of the plugin: its exit status; its result or error JSON on ``out``.

    With ``detach`` (the executable), what is left once the answer is written
    (an ADD's lease release, then the log line) runs in a child in its own
    session with its stdio on /dev/null, and this process returns at once:
    the runtime waits for the plugin's exit and for EOF on its stdout and
    stderr, not for the agent's answer to a release. Without (a caller in
    this process), inline.
    """
    data = stdin.read(MAX_STDIN_BYTES)
    if environ.get("CNI_COMMAND") == "VERSION":
        return _version(data, out)
    version = FALLBACK_VERSION
    config: PluginConfig | None = None
    log = _Log(err=err, request=None)
    outcome = "error"
    try:
        conf = load_json(data)
        if isinstance(conf.get("cniVersion"), str):
            version = conf["cniVersion"]
        check_version(conf)
        request = parse_request(environ)
        log.request = request
        config = parse_config(conf)
        rc = _COMMANDS[request.command](config, request, environ, out, log)
        outcome = "ok" if rc == 0 else "delegate_error"
        return rc
    except PluginError as exc:
        out.write(exc.to_json(version).encode())
        log.warn(f"error {exc.code}: {exc.msg}")
        return 1
    except _Interrupted:
        failure = PluginError(CODE_TRY_AGAIN, "interrupted (SIGTERM) before the call completed")
        out.write(failure.to_json(version).encode())
        return 1
    finally:
        tail, log.tail = log.tail, None

        def rest() -> None:
            if tail is not None:
                tail()
            log.write(config, outcome=outcome)

        if tail is None or not (detach and _detached(rest, out, err)):
            rest()


def _detached(work: Callable[[], None], out: BinaryIO, err: TextIO) -> bool:
    """``work`` in a child detached from the runtime (its own session, stdio on
    /dev/null): True in this process once the child runs, False if it could
    not be made (the caller does ``work`` inline). The child never returns."""
    out.flush()
    err.flush()
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid:
        return True
    try:
        # A release runs to its end (bounded by timeout_s), as the inline one does.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        work()
    finally:
        os._exit(0)


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Interrupted()


def main() -> int:
    """The ``bootstorm-cni`` executable (console script)."""
    # A cancelled ADD (the runtime's SIGTERM) still releases its permit and
    # kills its delegate on the way out (the ``finally`` blocks).
    signal.signal(signal.SIGTERM, _on_sigterm)
    out = sys.stdout.buffer
    try:
        return run(environ=os.environ, stdin=sys.stdin.buffer, out=out, err=sys.stderr, detach=True)
    finally:
        out.flush()
