"""Real agents for the tests: on a thread of this process, or as a child process."""

from __future__ import annotations

import fcntl
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentClient, AgentSettings, agent_in_thread
from bootstorm.validation.agent._pools import Device

TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def one_cni_storm_at_a_time() -> Iterator[None]:
    """Held by every root test whose storms make CNI plugin links.

    The bridge plugin names its host veths itself (``veth<hex>``, no run id),
    so a test checks "no plugin link left" as "none new since it started":
    under ``pytest -n 2`` another test's storm (or an agent's pool) would
    show there. One such test at a time; the others' tests run alongside.
    """
    path = os.path.join(tempfile.gettempdir(), "bootstorm-tests-cni-storm.lock")
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


#: The marks of a root test whose storms run the CNI plugins, one such test at a time.
CNI_ROOT_MARKS = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, links, cgroups)"),
    pytest.mark.skipif(sys.platform != "linux", reason="Linux only"),
    pytest.mark.skipif(
        not any(Path(d, "bridge").exists() for d in ("/usr/lib/cni", "/opt/cni/bin")),
        reason="needs the CNI plugins: apt-get install containernetworking-plugins",
    ),
    pytest.mark.usefixtures("one_cni_storm_at_a_time"),
]


@pytest.fixture(autouse=True)
def agent_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Where agents a test starts save their config ($STATE_DIRECTORY, which
    child processes inherit): never /var/lib/bootstorm-agent or the home."""
    path = tmp_path_factory.mktemp("agent-state")
    monkeypatch.setenv("STATE_DIRECTORY", str(path))
    return path


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: creates real netns, veth and tap devices"
)


class NoDevices:
    """A DeviceOps that makes nothing: tests that need no root and touch no netlink
    (a fuzzed pool size must not make real devices)."""

    def create(self, device: Device) -> Device:
        return device

    def remove(self, device: Device) -> None:
        pass

    def leftovers(self) -> list[Device]:
        return []

    def close(self) -> None:
        pass


_pool_id_calls = itertools.count()


def free_pool_id() -> int:
    """A fresh pool id per call: xdist workers (by PID) and the agents of one test
    never share one, since an agent holds its pool id's owner lock for life."""
    return 1000 + (os.getpid() % 400) * 20 + next(_pool_id_calls) % 20


@contextmanager
def thread_agent(
    config: TunedConfig | None = None, *, pool_id: int | None = None
) -> Iterator[AgentClient]:
    settings = AgentSettings(
        token=SecretStr(TOKEN),
        port=0,
        pool_id=free_pool_id() if pool_id is None else pool_id,
    )
    with agent_in_thread(settings, config) as url, AgentClient(url, token=TOKEN) as client:
        yield client


@pytest.fixture
def agent() -> Callable[..., AbstractContextManager[AgentClient]]:
    """``with agent(config) as client:`` — an agent on a free loopback port."""
    return thread_agent


@dataclass
class AgentProcess:
    proc: subprocess.Popen[str]
    url: str

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 15.0) -> str:
        """Signal the agent (by its PID) and return what it printed afterwards."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout_s)
        return out


@contextmanager
def process_agent(
    tmp_path: Path,
    *args: str,
    config: TunedConfig | None = None,
    token: str = TOKEN,
    prefix: tuple[str, ...] = (),
) -> Iterator[AgentProcess]:
    """``bootstorm agent serve --port 0`` in a child process, stopped by PID at the end."""
    token_file = tmp_path / f"token-{len(list(tmp_path.iterdir()))}"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)  # the agent refuses a token file others can read
    argv = ["agent", "serve", "--port", "0", "--token-file", str(token_file), *args]
    if "--pool-id" not in args:  # the default id 0 is another worker's too
        argv += ["--pool-id", str(free_pool_id())]
    if config is not None:
        config_file = tmp_path / f"config-{len(list(tmp_path.iterdir()))}.yaml"
        config_file.write_text(config.to_yaml())
        argv += ["--config", str(config_file)]
    code = "from bootstorm.cli import main; main()"
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-c", code, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # log lines (stderr) may come first
            seen.append(line)
            if "listening on" in line:
                break
        else:
            raise AssertionError(f"agent did not start: {''.join(seen)}")
        yield AgentProcess(proc, line.rsplit(" ", 1)[-1].strip())
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def start_testbed_run(
    *args: str, started: Callable[[str], bool], timeout_s: float
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``bootstorm testbed run ARGS`` in a child process, find its run id
    (the registry entry holding its pid) and wait until ``started(run)``;
    the child is killed (by its pid) and the test fails if it never is."""
    from bootstorm.validation.testbed._leftovers import REGISTRY_DIR

    code = "from bootstorm.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "testbed", "run", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout_s
    run = None
    while time.monotonic() < deadline:
        if run is None:
            for entry in REGISTRY_DIR.glob("*") if REGISTRY_DIR.exists() else []:
                try:
                    if int(entry.read_text()) == proc.pid:
                        run = entry.name
                except (OSError, ValueError):
                    continue
        if run is not None and started(run):
            return proc, run
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    proc.kill()
    raise AssertionError(f"run did not start: {proc.communicate()[1].decode()[-500:]}")
