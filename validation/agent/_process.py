"""An agent in a process of its own (``bootstorm agent serve``), as on a node.

:func:`agent_in_thread` shares its process, and so its GIL, with the caller:
a testbed storm through it measures the agent's request handling on the
sandboxes' own threads (2.5x the p99 startup of the same storm without an
agent, on this project's 2-core host), a cost no node pays. Here the agent is
the command a node runs, on loopback, with a token passed in its environment
only, its state in a folder of its own, and stopped by its PID (SIGTERM:
it removes its pooled devices on the way out) when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...models import TunedConfig
from ...traces.operations import AgentCallCost, AgentDeviceCost
from .._names import AGENT_TOKEN_ENV

__all__ = [
    "AgentProcess",
    "AgentProcessError",
    "agent_process",
    "measure_agent_calls",
    "measure_agent_devices",
]

#: The environment variable ``agent serve`` reads its token from.
TOKEN_ENV = AGENT_TOKEN_ENV
#: The agent's nice value, as its systemd unit sets it (``Nice=`` in
#: deploy/bootstorm-agent.service). Every ADD through ``bootstorm-cni`` waits
#: for the agent's answer; in a storm the agent shares the cores with a
#: hundred plugins and VMMs, and at nice 0 it answered a permit in 116-155 ms
#: (median of a 100-sandbox storm on this project's 2-core host) against
#: 35 ms at -10. On a node its own cgroup gives it a share of its own; where
#: everything is in one CPU group (this host: no cpu controller on v2) the
#: nice value is what stands for that share.
AGENT_NICE = -10
_LISTENING = re.compile(r"listening on (\S+)")


class AgentProcessError(RuntimeError):
    """The agent did not start (its log's last line says why)."""


@dataclass(frozen=True, slots=True)
class AgentProcess:
    """A running agent: its base URL and its process id."""

    url: str
    pid: int

    def cpu_s(self) -> float:
        """CPU seconds the agent process has used (user + system)."""
        user_s, system_s, _ = self.cpu_times_s()
        return user_s + system_s

    def cpu_times_s(self) -> tuple[float, float, float]:
        """CPU seconds of the agent process: user, system, and its reaped
        children's (user + system: the plugins it ran)."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        user, system, c_user, c_system = (int(fields[i]) for i in (11, 12, 13, 14))
        return user / tick, system / tick, (c_user + c_system) / tick


@contextlib.contextmanager
def agent_process(
    *,
    token: str,
    pool_id: int,
    config: TunedConfig | None = None,
    cni_plugin: str | None = None,
    start_timeout_s: float = 60.0,
    stop_timeout_s: float = 120.0,
    nice: int | None = AGENT_NICE,
) -> Iterator[AgentProcess]:
    """Run ``bootstorm agent serve`` on a free loopback port until the block
    ends; yields its URL and PID. ``config``: the config it starts with;
    ``cni_plugin``: plumb its ``netns-veth`` pool with that plugin (``--cni``);
    ``nice``: its event loop's nice value, as its systemd unit runs it
    (:data:`AGENT_NICE`; a value below 0 needs root: without, it keeps the
    caller's); None: the caller's.
    """
    with tempfile.TemporaryDirectory(prefix="bootstorm-agent-") as tmp:
        folder = Path(tmp)
        args = [
            sys.executable,
            "-c",
            "from bootstorm.cli import main; main()",
            "agent",
            "serve",
            "--port",
            "0",
            "--pool-id",
            str(pool_id),
            "--state-dir",
            str(folder / "state"),
        ]
        if config is not None:
            (folder / "config.yaml").write_text(config.to_yaml())
            args += ["--config", str(folder / "config.yaml"), "--force-config"]
        if cni_plugin is not None:
            args += ["--cni-plugin", cni_plugin]
        log_path = folder / "agent.log"
        env = {**os.environ, TOKEN_ENV: token, "COLUMNS": "200"}
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=log, env=env, text=True, bufsize=1
            )
        if nice is not None:
            # The main thread serves every request (threads it makes later
            # inherit this); set before it has started any.
            with contextlib.suppress(PermissionError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        try:
            url = _wait_listening(proc, log_path, timeout_s=start_timeout_s)
            yield AgentProcess(url=url, pid=proc.pid)
        finally:
            _stop(proc, timeout_s=stop_timeout_s)


def _wait_listening(proc: subprocess.Popen[str], log_path: Path, *, timeout_s: float) -> str:
    """The URL the agent prints once it listens; its stdout is drained from
    then on (a full pipe would block it)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, name="agent-stdout", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            raise AgentProcessError(f"agent: not listening after {timeout_s:g} s") from None
        if line is None:
            proc.wait()
            said = [s for s in log_path.read_text().splitlines() if s.strip()]
            why = said[-1] if said else f"exit status {proc.returncode}"
            raise AgentProcessError(f"agent: did not start: {why}")
        if m := _LISTENING.search(line):
            return m.group(1)


def _stop(proc: subprocess.Popen[str], *, timeout_s: float) -> None:
    """SIGTERM by PID (the agent removes its pooled devices), then SIGKILL
    if it has not ended within ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


#: The stage a measurement leases (limited, so that each lease is a real permit).
_MEASURED_STAGE = "AddCNI"
#: The pool id of the agent a measurement runs: apart from a user's agent (0
#: by default) and ``tune --workload``'s (77); it makes no device anyway.
MEASURE_POOL_ID = 79


def measure_agent_calls(
    *, batches: int = 7, calls_per_batch: int = 100, pool_id: int = MEASURE_POOL_ID
) -> AgentCallCost:
    """Time calls to an agent of its own (:func:`agent_process`) as a sandbox
    makes them through it: in each batch, ``calls_per_batch`` calls, half of
    them the two of a stage lease (acquire, release), half a take from an
    empty pool; after a warm-up batch. Needs no root (no device is made)."""
    import secrets

    from .client import AgentClient

    token = secrets.token_urlsafe(32)
    config = TunedConfig(limits={_MEASURED_STAGE: 1000}, pools={"tap": 0})
    client_cpu: list[float] = []
    agent_cpu: list[float] = []
    wall: list[float] = []
    with (
        agent_process(token=token, pool_id=pool_id, config=config) as agent,
        AgentClient(agent.url, token=token) as client,
    ):

        def batch(tag: str) -> None:
            for i in range(calls_per_batch // 4):
                with client.stage(_MEASURED_STAGE, f"{tag}-{i}"):
                    pass
                client.take("tap", f"{tag}-{i}")
                client.take("tap", f"{tag}-{i}b")

        batch("warmup")
        for b in range(batches):
            a0, c0, t0 = agent.cpu_s(), time.thread_time(), time.perf_counter()
            batch(f"b{b}")
            wall.append(time.perf_counter() - t0)
            client_cpu.append(time.thread_time() - c0)
            agent_cpu.append(agent.cpu_s() - a0)
    made = calls_per_batch // 4 * 4
    return AgentCallCost(
        calls_per_batch=made,
        client_cpu_s=tuple(client_cpu),
        agent_cpu_s=tuple(agent_cpu),
        wall_s=tuple(wall),
    )


#: The pool id of the agent :func:`measure_agent_devices` runs (its own
#: devices and network: apart from a user's agent, tune's and the calls').
MEASURE_DEVICES_POOL_ID = 80
#: What the device measurement pools: the kind whose making is a CNI ADD.
_MEASURED_KIND = "netns-veth"


def measure_agent_devices(
    *,
    devices: int = 60,
    rounds: int = 5,
    plugin: str = "bridge",
    poll_s: float = 0.05,
    stall_s: float = 30.0,
    pool_id: int = MEASURE_DEVICES_POOL_ID,
) -> AgentDeviceCost:
    """Time an agent of its own (``--cni-plugin plugin``, one refill worker)
    making ``devices`` plumbed namespaces and removing them, ``rounds``
    times after a warm-up round of 5 (root; the plugin and host-local in a
    CNI plugin directory). The pool's level is read every ``poll_s`` (each
    read is a call the agent serves: 0.2 ms of its CPU on this host, so a
    few per second are noise against a device's milliseconds). A level
    that has not moved for ``stall_s`` ends it: :class:`AgentProcessError`."""
    import secrets

    if os.geteuid() != 0:
        raise AgentProcessError("agent: timing its devices needs root (it makes namespaces)")

    from ...models import PoolRefill
    from .client import AgentClient

    token = secrets.token_urlsafe(32)

    def config(n: int) -> TunedConfig:
        return TunedConfig(pools={_MEASURED_KIND: n}, pool_refill=PoolRefill(concurrency=1))

    figures: dict[str, list[float]] = {}
    with (
        agent_process(token=token, pool_id=pool_id, config=config(0), cni_plugin=plugin) as agent,
        AgentClient(agent.url, token=token) as client,
    ):

        def reach(n: int) -> None:
            moved, last = time.monotonic(), None
            while True:
                pool = next(p for p in client.pools() if p.kind == _MEASURED_KIND)
                if pool.ready == n and pool.making == 0:
                    return
                if (pool.ready, pool.making) != last:
                    moved, last = time.monotonic(), (pool.ready, pool.making)
                elif time.monotonic() - moved > stall_s:
                    raise AgentProcessError(
                        f"agent: its {_MEASURED_KIND} pool stayed at {pool.ready} for "
                        f"{stall_s:g} s on its way to {n} (its refills failed)"
                    )
                time.sleep(poll_s)

        def phase(name: str, n: int) -> None:
            user0, system0, children0 = agent.cpu_times_s()
            began = time.perf_counter()
            client.put_config(config(n))
            reach(n)
            wall = time.perf_counter() - began
            user1, system1, children1 = agent.cpu_times_s()
            for figure, value in (
                ("wall_s", wall),
                ("user_s", user1 - user0),
                ("system_s", system1 - system0),
                ("children_s", children1 - children0),
            ):
                figures.setdefault(f"{name}_{figure}", []).append(value)

        client.put_config(config(5))  # warm-up: the network claimed, the plugins cached
        reach(5)
        client.put_config(config(0))
        reach(0)
        for _ in range(rounds):
            phase("make", devices)
            phase("remove", 0)
    return AgentDeviceCost(
        plugin=plugin, devices=devices, **{name: tuple(v) for name, v in figures.items()}
    )
