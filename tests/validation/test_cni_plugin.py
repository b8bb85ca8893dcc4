"""``bootstorm-cni`` exec'd as a runtime execs it, against a real agent; the
delegate is a small script plugin in a CNI_PATH of the test's own (no root).
The real bridge plugin and the agent's plumbed pool: ``test_cni_plugin_root.py``."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cni_plugin_helpers import Call, call, cni_environ, fake_bin, log_lines, network, plugin_argv
from conftest import TOKEN, free_pool_id, thread_agent
from pydantic import SecretStr

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentClient, AgentError, AgentSettings, agent_in_thread

LIMIT_1 = TunedConfig(limits={"AddCNI": 1})


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    return fake_bin(tmp_path)


@pytest.fixture
def fake_dir(tmp_path: Path) -> Path:
    path = tmp_path / "fake"
    path.mkdir()
    return path


def _permit_free(client: AgentClient, *, within_s: float = 10.0) -> bool:
    """Whether AddCNI's one permit is free within ``within_s`` (taken and given
    back at once): a finished ADD releases it from a detached child, a moment
    after the plugin exits; ``within_s=0`` asks whether it is held now."""
    try:
        lease = client.acquire("AddCNI", "probe", wait_s=within_s)
    except AgentError as exc:
        assert exc.status == 408
        return False
    client.release(lease)
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _silent_server() -> Iterator[str]:
    """A listener that accepts and never answers: a hung agent."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_version_lists_the_spec_versions(bin_dir: Path) -> None:
    got = call({"cniVersion": "1.1.0"}, command="VERSION", bin_dir=bin_dir)
    assert got.rc == 0
    assert got.json == {
        "cniVersion": "1.1.0",
        "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    }


def test_add_delegates_and_returns_the_result_unchanged(
    bin_dir: Path, fake_dir: Path, token_file: Path, tmp_path: Path
) -> None:
    log_file = tmp_path / "plugin.log"
    with thread_agent(LIMIT_1) as client:
        conf = network(url=client.base_url, token_file=token_file, log_file=str(log_file))
        conf["prevResult"] = {"cniVersion": "1.0.0", "interfaces": []}
        got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
        assert got.rc == 0, got
        assert _permit_free(client)  # released after the ADD
    # Byte for byte what the delegate printed.
    assert got.stdout.startswith(b'{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"')
    given = json.loads((fake_dir / "stdin-ADD").read_text())
    assert given == {
        "type": "fakeplug",
        "custom": 7,
        "cniVersion": "1.0.0",
        "name": "testnet",
        "prevResult": {"cniVersion": "1.0.0", "interfaces": []},
    }
    (line,) = log_lines(log_file)
    record = json.loads(line)
    assert record["outcome"] == "ok" and record["lease"]
    (delegate,) = record["delegates"]
    assert delegate["program"] == "fakeplug" and delegate["rc"] == 0
    assert record["start_s"] <= delegate["start_s"] <= delegate["end_s"] <= record["end_s"]


def test_add_holds_the_permit_while_the_delegate_runs(
    bin_dir: Path, fake_dir: Path, token_file: Path
) -> None:
    with thread_agent(LIMIT_1) as client:
        conf = network(url=client.base_url, token_file=token_file)
        env = {"FAKE_DIR": str(fake_dir), "FAKE_SLEEP_S": "1.5"}
        proc = subprocess.Popen(
            plugin_argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=cni_environ(command="ADD", bin_dir=bin_dir, netns="/run/netns/x", env=env),
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(conf).encode())
        proc.stdin.close()
        deadline = time.monotonic() + 10
        while not (fake_dir / "pid-ADD").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert not _permit_free(client, within_s=0)  # the plugin holds it while the delegate runs
        assert proc.wait(timeout=30) == 0
        assert _permit_free(client)


def test_a_delegate_outlasting_the_lease_ttl_keeps_its_permit(
    bin_dir: Path, fake_dir: Path, token_file: Path
) -> None:
    config = TunedConfig(limits={"AddCNI": 1}, lease_ttl_s=0.3)
    with thread_agent(config) as client:
        conf = network(url=client.base_url, token_file=token_file)
        got = call(
            conf,
            command="ADD",
            bin_dir=bin_dir,
            env={"FAKE_DIR": str(fake_dir), "FAKE_SLEEP_S": "1.2"},
        )
        assert got.rc == 0, got
        assert "lost" not in got.stderr and "already gone" not in got.stderr, got.stderr
        assert _permit_free(client)


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_agent_down(policy: str, bin_dir: Path, fake_dir: Path, token_file: Path) -> None:
    conf = network(
        url=f"http://127.0.0.1:{_free_port()}", token_file=token_file, failure_policy=policy
    )
    got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
    if policy == "closed":
        assert got.rc == 1
        assert got.json["code"] == 11
        assert "no permit for stage AddCNI" in got.json["msg"]
        assert "ConnectionRefusedError" in got.json["msg"]
        assert not (fake_dir / "stdin-ADD").exists()  # the delegate never ran
    else:
        assert got.rc == 0, got
        assert json.loads(got.stdout)["interfaces"][0]["name"] == "eth0"
        assert "failure_policy open: going ahead without a permit" in got.stderr
    assert "Traceback" not in got.stderr


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_agent_slow_is_bounded_by_timeout_s(
    policy: str, bin_dir: Path, fake_dir: Path, token_file: Path
) -> None:
    with _silent_server() as url:
        conf = network(
            url=url,
            token_file=token_file,
            failure_policy=policy,
            agent={"timeout_s": 0.3, "wait_s": 0.2},
        )
        t0 = time.monotonic()
        got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
        took = time.monotonic() - t0
    # timeout_s + wait_s bound the acquire (the long-poll), plus the plugin's start.
    assert took < 0.5 + 2.0
    if policy == "closed":
        assert got.rc == 1 and got.json["code"] == 11
        assert "no answer within 0.5 s" in got.json["msg"]
    else:
        assert got.rc == 0 and "failure_policy open" in got.stderr


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_no_permit_within_wait_s(
    policy: str, bin_dir: Path, fake_dir: Path, token_file: Path
) -> None:
    with thread_agent(LIMIT_1) as client:
        held = client.acquire("AddCNI", "someone-else")
        conf = network(
            url=client.base_url, token_file=token_file, failure_policy=policy, agent={"wait_s": 0.2}
        )
        got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
        client.release(held)
        assert _permit_free(client)
    if policy == "closed":
        assert got.rc == 1 and got.json["code"] == 11 and "answered 408" in got.json["msg"]
    else:
        assert got.rc == 0 and "going ahead without a permit" in got.stderr


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_agent_restarted_mid_add_loses_the_lease_and_leaks_nothing(
    policy: str, bin_dir: Path, fake_dir: Path, token_file: Path
) -> None:
    port = _free_port()
    config = TunedConfig(limits={"AddCNI": 1}, lease_ttl_s=0.3)

    def settings() -> AgentSettings:
        return AgentSettings(token=SecretStr(TOKEN), port=port, pool_id=free_pool_id())

    stopped = threading.Event()
    restarted = threading.Event()
    done = threading.Event()

    def restart() -> None:
        while not (fake_dir / "pid-ADD").exists():
            time.sleep(0.01)
        stop_first.set()
        stopped.wait()
        with agent_in_thread(settings(), config):
            restarted.set()
            done.wait(30)

    stop_first = threading.Event()
    url = f"http://127.0.0.1:{port}"
    conf = network(url=url, token_file=token_file, failure_policy=policy)
    worker = threading.Thread(target=restart)
    result: list[Call] = []

    def add() -> None:
        result.append(
            call(
                conf,
                command="ADD",
                bin_dir=bin_dir,
                env={"FAKE_DIR": str(fake_dir), "FAKE_SLEEP_S": "1.5"},
            )
        )

    with agent_in_thread(settings(), config):
        adder = threading.Thread(target=add)
        adder.start()
        worker.start()
        stop_first.wait(30)
    stopped.set()
    adder.join(30)
    assert restarted.is_set()
    with AgentClient(url, token=TOKEN) as client:
        assert _permit_free(client)  # the new agent holds no permit of the old one's
    done.set()
    worker.join(30)
    (got,) = result
    # The permit admitted the ADD; its result stands, the loss is logged.
    assert got.rc == 0, got
    assert "was lost during the ADD" in got.stderr
    assert "Traceback" not in got.stderr


def test_pool_empty_delegates(
    bin_dir: Path, fake_dir: Path, token_file: Path, tmp_path: Path
) -> None:
    log_file = tmp_path / "plugin.log"
    with thread_agent(LIMIT_1) as client:
        conf = network(
            url=client.base_url,
            token_file=token_file,
            pool="netns-veth",
            log_file=str(log_file),
            state_dir=str(tmp_path / "state"),
        )
        got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
        assert got.rc == 0, got
        assert _permit_free(client)
    assert (fake_dir / "stdin-ADD").exists()
    assert json.loads(log_lines(log_file)[0])["pool"] == "empty"
    assert not got.stderr  # an empty pool is no error, nor a warning


@contextmanager
def _agent_answering_release_late() -> Iterator[tuple[str, threading.Event, list[str]]]:
    """An agent that grants every permit at once and answers a release only
    when the test sets the event: (url, event, the paths it was asked)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answer = threading.Event()
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            asked.append(self.path)
            if self.path.endswith("/release"):
                answer.wait(30)
            body = json.dumps({"lease_id": "L1", "ttl_s": 30.0}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer, asked
    finally:
        answer.set()
        server.shutdown()
        server.server_close()


def test_add_answers_before_its_release_is_answered(
    bin_dir: Path, fake_dir: Path, token_file: Path, tmp_path: Path
) -> None:
    # The runtime waits for the plugin's exit (and EOF on its output), not for
    # the agent's answer to the release: a detached child releases and logs.
    log_file = tmp_path / "plugin.log"
    with _agent_answering_release_late() as (url, answer, asked):
        conf = network(url=url, token_file=token_file, log_file=str(log_file))
        got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
        assert got.rc == 0, got
        assert got.stdout.startswith(b'{"cniVersion":"1.0.0","interfaces"')
        # Exited with the release unanswered (the old plugin waited for it here).
        assert not answer.is_set() and not log_file.exists()
        answer.set()
        (line,) = log_lines(log_file)
    record = json.loads(line)
    assert asked == ["/v1/stages/AddCNI/acquire", "/v1/leases/L1/release"]
    assert record["outcome"] == "ok" and record["events"] == [] and record["lease"] == "L1"


def test_delegate_failure_passes_through_and_releases(
    bin_dir: Path, fake_dir: Path, token_file: Path
) -> None:
    with thread_agent(LIMIT_1) as client:
        conf = network(url=client.base_url, token_file=token_file)
        got = call(
            conf,
            command="ADD",
            bin_dir=bin_dir,
            env={"FAKE_DIR": str(fake_dir), "FAKE_FAIL": "no luck"},
        )
        assert _permit_free(client)
    assert got.rc == 1
    assert got.stdout == (
        b'{"cniVersion":"1.0.0","code":101,"msg":"no luck","details":"from the fake"}'
    )


def test_sigterm_mid_add_releases_the_permit_and_kills_the_delegate(
    bin_dir: Path, fake_dir: Path, token_file: Path
) -> None:
    with thread_agent(LIMIT_1) as client:
        conf = network(url=client.base_url, token_file=token_file)
        proc = subprocess.Popen(
            plugin_argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cni_environ(
                command="ADD",
                bin_dir=bin_dir,
                netns="/run/netns/x",
                env={"FAKE_DIR": str(fake_dir), "FAKE_SLEEP_S": "30"},
            ),
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(conf).encode())
        proc.stdin.close()
        deadline = time.monotonic() + 10
        while not (fake_dir / "pid-ADD").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert not _permit_free(client, within_s=0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 1
        assert proc.stdout is not None
        assert json.loads(proc.stdout.read())["code"] == 11
        assert _permit_free(client)
    delegate_pid = int((fake_dir / "pid-ADD").read_text())
    time.sleep(0.1)
    assert not Path(f"/proc/{delegate_pid}").exists() or "Z" in _state(delegate_pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_del_never_asks_the_agent(bin_dir: Path, fake_dir: Path, token_file: Path) -> None:
    conf = network(url=f"http://127.0.0.1:{_free_port()}", token_file=token_file)
    got = call(conf, command="DEL", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
    assert got.rc == 0, got
    assert json.loads((fake_dir / "stdin-DEL").read_text())["type"] == "fakeplug"
    # Twice: DEL is idempotent.
    assert call(conf, command="DEL", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)}).rc == 0


def test_check_delegates(bin_dir: Path, fake_dir: Path, token_file: Path) -> None:
    conf = network(url="http://127.0.0.1:1", token_file=token_file)
    conf["prevResult"] = {"cniVersion": "1.0.0"}
    got = call(conf, command="CHECK", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
    assert got.rc == 0, got
    assert json.loads((fake_dir / "stdin-CHECK").read_text())["prevResult"] == {
        "cniVersion": "1.0.0"
    }


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_status_asks_the_agent(policy: str, bin_dir: Path, token_file: Path) -> None:
    down = network(
        url=f"http://127.0.0.1:{_free_port()}",
        token_file=token_file,
        version="1.1.0",
        failure_policy=policy,
    )
    got = call(down, command="STATUS", bin_dir=bin_dir)
    if policy == "closed":
        assert got.rc == 1 and got.json["code"] == 50, got
    else:
        assert got.rc == 0 and "failure_policy open" in got.stderr
    with thread_agent() as client:
        up = network(url=client.base_url, token_file=token_file, version="1.1.0")
        assert call(up, command="STATUS", bin_dir=bin_dir).rc == 0
    # STATUS is a 1.1.0 command.
    old = network(url="http://127.0.0.1:1", token_file=token_file, version="1.0.0")
    assert call(old, command="STATUS", bin_dir=bin_dir).json["code"] == 1


def test_gc_gives_back_what_stale_attachments_took(
    bin_dir: Path, token_file: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    stale = {
        "netns": "bstest-gone-netns",
        "container_id": "pooled-1",
        "conflist": {"name": "n", "cniVersion": "1.0.0", "plugins": []},
        "result": "{}",
        "sandbox_container_id": "old",
        "ifname": "eth0",
        "sandbox_netns": "",
    }
    kept = {**stale, "sandbox_container_id": "live"}
    (state / "old-eth0.json").write_text(json.dumps(stale))
    (state / "live-eth0.json").write_text(json.dumps(kept))
    conf = network(url="http://127.0.0.1:1", token_file=token_file, version="1.1.0")
    conf["state_dir"] = str(state)
    conf["cni.dev/valid-attachments"] = [{"containerID": "live", "ifname": "eth0"}]
    got = call(conf, command="GC", bin_dir=bin_dir)
    assert got.rc == 0, got
    assert sorted(p.name for p in state.iterdir()) == ["live-eth0.json"]


BAD_CONFIGS: list[tuple[str, Any, str]] = [
    ("failure_policy", "maybe", "failure_policy: must be 'open' or 'closed' (got 'maybe')"),
    (
        "agent",
        {"url": "ftp://x", "token_file": "/t"},
        "agent.url: must be an http:// or https:// URL (got 'ftp://x')",
    ),
    (
        "agent",
        {"url": "http://h:99999", "token_file": "/t"},
        "agent.url: has a port outside 1..65535 (got 'http://h:99999')",
    ),
    (
        "agent",
        {"url": "http://h", "token_file": "/t", "timeout_s": -1},
        "agent.timeout_s: must be within 0.01..60 seconds (got -1)",
    ),
    (
        "agent",
        {"url": "http://h", "token_file": "/t", "timeout_s": True},
        "agent.timeout_s: must be a number of seconds (got True)",
    ),
    (
        "agent",
        {"url": "http://h", "token_file": "rel"},
        "agent.token_file: must be an absolute path (got 'rel')",
    ),
    (
        "agent",
        {"url": "http://h", "token_file": "/t", "tiemout_s": 1},
        "agent.tiemout_s: is not a field of bootstorm-cni",
    ),
    ("failurePolicy", "open", "failurePolicy: is not a field of bootstorm-cni"),
    ("stage", "Add CNI", "stage: must be a stage name like AddCNI (got 'Add CNI')"),
    ("pool", "veth", "pool: must be one of netns-veth or absent (got 'veth')"),
    ("delegate", None, "delegate: must be the real plugin's config"),
    (
        "delegate",
        {"type": "bootstorm-cni"},
        "delegate.type: must be the real plugin, not bootstorm-cni itself",
    ),
    (
        "delegate",
        {"type": "../bridge"},
        "delegate.type: must be a plugin's name in CNI_PATH (got '../bridge')",
    ),
    ("delegate", {"type": "nosuchplugin"}, "delegate.type: no plugin 'nosuchplugin' in CNI_PATH"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD_CONFIGS)
def test_bad_config_is_code_7_naming_field_and_value(
    field: str, value: Any, message: str, bin_dir: Path, token_file: Path
) -> None:
    with thread_agent() as client:
        conf = network(url=client.base_url, token_file=token_file)
        conf[field] = value
        got = call(conf, command="ADD", bin_dir=bin_dir)
    assert got.rc == 1
    error = got.json
    assert error["code"] == 7, error
    assert error["msg"].startswith(message), error["msg"]
    assert error["cniVersion"] == "1.0.0"
    assert "Traceback" not in got.stderr


def test_missing_token_file_is_code_7(bin_dir: Path, tmp_path: Path) -> None:
    conf = network(url="http://127.0.0.1:1", token_file=tmp_path / "nope")
    got = call(conf, command="ADD", bin_dir=bin_dir)
    assert got.json["code"] == 7
    assert got.json["msg"].startswith("agent.token_file: cannot be opened (No such file")


@pytest.mark.parametrize(
    ("stdin", "env", "code", "start"),
    [
        (b"not json", {}, 6, "network config: not JSON"),
        (b"[1]", {}, 6, "network config: not a JSON object"),
        (b'{"cniVersion": "9.9.9"}', {}, 1, "cniVersion: bootstorm-cni does not speak '9.9.9'"),
        (None, {"CNI_CONTAINERID": ""}, 4, "CNI_CONTAINERID: is required"),
        (None, {"CNI_COMMAND": "FROB"}, 4, "CNI_COMMAND: must be one of"),
        (None, {"CNI_IFNAME": "x" * 16}, 4, "CNI_IFNAME: must be an interface name"),
    ],
)
def test_bad_input_is_one_cni_error(
    stdin: bytes | None, env: dict[str, str], code: int, start: str, bin_dir: Path, token_file: Path
) -> None:
    conf = stdin if stdin is not None else network(url="http://127.0.0.1:1", token_file=token_file)
    env = dict(env)  # the parameter is shared by every run of this case (and module)
    command = env.pop("CNI_COMMAND", "ADD")
    got = call(conf, command=command, bin_dir=bin_dir, env=env)
    assert got.rc == 1
    assert got.json["code"] == code, got.json
    assert got.json["msg"].startswith(start), got.json["msg"]
    assert "Traceback" not in got.stderr


ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "validation" / "agent" / "deploy"


def _docs_conflist() -> dict[str, Any]:
    text = (ROOT / "docs" / "agent.md").read_text()
    section = text.split("## In the node's startup path", 1)[1]
    block = section.split("```json\n", 1)[1].split("```", 1)[0]
    data: dict[str, Any] = json.loads(block)
    return data


def test_the_docs_sample_conflist_is_the_shipped_one_and_valid() -> None:
    from bootstorm.validation.cni_plugin._config import parse_config

    conflist = _docs_conflist()
    assert conflist == json.loads((DEPLOY / "10-bootstorm.conflist").read_text())
    plugin = conflist["plugins"][0]
    config = parse_config(
        {**plugin, "cniVersion": conflist["cniVersion"], "name": conflist["name"]}
    )
    assert config.delegate_type == "bridge"
    assert config.failure_policy == "open"
    assert config.agent.timeout_s == 2.0


@pytest.mark.skipif(not Path("/usr/bin/systemd-analyze").exists(), reason="needs systemd-analyze")
def test_the_shipped_systemd_unit_verifies(tmp_path: Path) -> None:
    import sys

    unit = (DEPLOY / "bootstorm-agent.service").read_text()
    assert "CapabilityBoundingSet=CAP_NET_ADMIN CAP_SYS_ADMIN" in unit
    assert "LoadCredential=agent-token:" in unit
    # The unit names the installed path; verify checks that ExecStart exists.
    local = unit.replace("/usr/local/bin/bootstorm", str(Path(sys.executable).parent / "bootstorm"))
    path = tmp_path / "bootstorm-agent.service"
    path.write_text(local)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "bootstorm-agent.service" not in done.stderr, done.stderr
