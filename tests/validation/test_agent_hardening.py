"""The node agent under abuse (issue 23): all-or-nothing configs, bounded stage
names, ranged numbers, hostile bodies, half-sent requests, tokens and TLS."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import TOKEN, NoDevices, free_pool_id, process_agent
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from bootstorm.cli import main
from bootstorm.models import ConfigError, TunedConfig
from bootstorm.validation.agent import AgentClient, AgentError, AgentSettings, agent_in_thread
from bootstorm.validation.agent._leases import MAX_UNLIMITED_STAGES
from bootstorm.validation.agent._metrics import MAX_IDLE_STAGE_SERIES

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextmanager
def agent_url(config: TunedConfig | None = None, **settings: Any) -> Iterator[str]:
    settings.setdefault("pool_id", free_pool_id())  # each agent holds its id's owner lock
    full = AgentSettings(token=SecretStr(TOKEN), port=0, **settings)
    with agent_in_thread(full, config, device_ops=NoDevices()) as url:
        yield url


@contextmanager
def http_to(url: str, **kwargs: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, headers=AUTH, timeout=10, **kwargs) as http:
        yield http


def acquire(http: httpx.Client, stage: str, *, wait_s: float = 0) -> dict[str, Any]:
    r = http.post(f"/v1/stages/{stage}/acquire", json={"holder": "t", "wait_s": wait_s})
    assert r.status_code == 200, r.text
    lease: dict[str, Any] = r.json()
    return lease


def release(http: httpx.Client, lease: dict[str, Any]) -> None:
    r = http.post(f"/v1/leases/{lease['lease_id']}/release")
    assert r.status_code == 200, r.text


def ttl_in_force(http: httpx.Client) -> float:
    """The TTL the agent grants now (not what GET /config says): a probe lease's."""
    lease = acquire(http, "TtlProbe")
    release(http, lease)
    return float(lease["ttl_s"])


def one_line_error(r: httpx.Response) -> str:
    assert r.headers["Content-Type"].startswith("application/json"), r.text
    error = r.json()["error"]
    assert isinstance(error, str) and error and "\n" not in error, error
    return error


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def stage_series(text: str, family: str) -> set[str]:
    for f in text_string_to_metric_families(text):
        if f.name == family:
            return {s.labels["stage"] for s in f.samples}
    return set()


# -- D1: all or nothing; stage names freed ----------------------------------------------


def test_stage_names_are_freed_so_a_config_naming_a_new_stage_still_applies() -> None:
    """Old agent: after 256 invented names every new one (and any config naming
    one) was refused, and the refused config's TTL was in force anyway."""
    with agent_url(TunedConfig(lease_ttl_s=30)) as url, http_to(url) as http:
        for i in range(MAX_UNLIMITED_STAGES + 44):
            release(http, acquire(http, f"Invented{i}"))
        r = http.put("/config", json={"limits": {"NewStage": 2}, "lease_ttl_s": 7})
        assert r.status_code == 200, r.text
        assert http.get("/config").json()["lease_ttl_s"] == 7
        assert ttl_in_force(http) == 7
        text = http.get("/metrics").text
        # Idle stages without a limit are gone from the live gauges...
        assert stage_series(text, "bootstorm_agent_stage_permits_in_use") == {"NewStage"}
        # ... and their counters are kept for a bounded number of them only.
        granted = stage_series(text, "bootstorm_agent_leases_granted")
        assert 0 < len(granted) <= MAX_IDLE_STAGE_SERIES
        assert "TtlProbe" in granted  # the most recent are kept


def test_held_stages_without_a_limit_are_bounded_but_never_block_a_config() -> None:
    with agent_url() as url, http_to(url) as http:
        held = [acquire(http, f"Held{i}") for i in range(MAX_UNLIMITED_STAGES)]
        r = http.post("/v1/stages/OneTooMany/acquire", json={"holder": "t", "wait_s": 0})
        assert r.status_code == 429 and r.json()["reason"] == "too_many_stages"
        assert "OneTooMany" in one_line_error(r)
        # A config's limits are not invented names: it applies, whole.
        r = http.put("/config", json={"limits": {"Limited": 1}, "lease_ttl_s": 9})
        assert r.status_code == 200, r.text
        release(http, acquire(http, "Limited"))
        # A name ends with its last lease, making room for another.
        release(http, held.pop())
        lease = acquire(http, "OneTooMany")
        assert lease["ttl_s"] == 9
        for each in [*held, lease]:
            release(http, each)


def test_a_config_with_more_limits_than_allowed_is_one_line_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    limits = {f"S{i}": 1 for i in range(257)}
    with pytest.raises(ConfigError, match=r"^config: limits: .*at most 256 items"):
        TunedConfig(limits=limits)
    config_file = tmp_path / "tuned.yaml"
    config_file.write_text(yaml.safe_dump({"limits": limits}))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    argv = ["agent", "serve", "--port", "0", "--token-file", str(token_file)]
    assert run([*argv, "--config", str(config_file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {config_file}: config: limits:")


# -- D2: every number has a range ---------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"lease_ttl_s": 1e-9}, "lease_ttl_s"),
        ({"lease_ttl_s": 0}, "lease_ttl_s"),
        ({"lease_ttl_s": 1e308}, "lease_ttl_s"),
        ({"lease_ttl_s": True}, "lease_ttl_s"),
        ({"pools": {"netns": 1_000_000_000}}, "pools.netns"),
        ({"pools": {"netns": -1}}, "pools.netns"),
        ({"limits": {"StartVM": True}}, "limits.StartVM"),
        ({"limits": {"StartVM": 100_001}}, "limits.StartVM"),
        ({"limits": {"StartVM": "3"}}, "limits.StartVM"),
        ({"limits": {"StartVM": 2.5}}, "limits.StartVM"),
        ({"rtnl_priority": {"StartVM": 10**30}}, "rtnl_priority.StartVM"),
        ({"limits": {"Start VM": 1}}, "limits.Start VM"),
    ],
)
def test_numbers_out_of_range_are_refused_and_change_nothing(
    body: dict[str, Any], field: str
) -> None:
    start = TunedConfig(limits={"StartVM": 4}, lease_ttl_s=12)
    with agent_url(start) as url, http_to(url) as http:
        r = http.put("/config", json={**body, "lease_ttl_s": body.get("lease_ttl_s", 7)})
        assert r.status_code == 422, r.text
        assert f"config: {field}" in one_line_error(r)
        assert TunedConfig(**http.get("/config").json()) == start
        assert ttl_in_force(http) == 12


def test_the_bounds_themselves_are_accepted() -> None:
    config = TunedConfig(
        limits={"StartVM": 100_000, "Cgroup": 1},
        pools={"ipvtap": 100_000, "netns": 0},  # ipvtap: a kind this agent does not make
        rtnl_priority={"AddCNI": -10_000, "AttachIf": 10_000},
        lease_ttl_s=3600,
    )
    assert TunedConfig(lease_ttl_s=0.1).lease_ttl_s == 0.1
    with agent_url() as url, http_to(url) as http:
        r = http.put("/config", content=config.to_yaml())
        assert r.status_code == 200, r.text
        assert TunedConfig(**http.get("/config").json()) == config


# -- D5: small hostile bodies -------------------------------------------------------------

ALIAS_BOMB = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(
            f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "limits: *i\n",
    ]
)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (ALIAS_BOMB.encode(), "aliases are not accepted"),
        # libyaml's own cap (1 000 levels) may speak first: either way, one line.
        (b"limits: " + b"[" * 5000 + b"]" * 5000, "nest"),
        (b'{"origin": ' + b'{"a": ' * 40 + b"1" + b"}" * 41, "nested deeper than 32"),
        (b"lease_ttl_s: " + b"9" * 5000, "a number of 5000 characters"),
        (b'{"limits": {"StartVM": ' + b"1" * 5000 + b"}}", "a number of 5000 characters"),
        (b"\xff\xfelimits: {}", "not UTF-8"),
        (b'{"limits": {"a\\nb": 1, "c\\u0000": 2}}', "limits."),
        (b"- a list\n", "expected a mapping"),
        (b"just text", "expected a mapping"),
        # The last of two kept, silently: {"limits": {"AddCNI": 2}, "limits": ...} ran 3.
        (b'{"limits": {"AddCNI": 2}, "limits": {"AddCNI": 3}}', "'limits' is given twice"),
    ],
    ids=[
        "alias-bomb",
        "deep-list",
        "deep-json",
        "huge-yaml-int",
        "huge-json-int",
        "not-utf8",
        "control-chars-in-keys",
        "list",
        "scalar",
        "duplicate-key",
    ],
)
def test_hostile_config_bodies_are_refused_at_once(body: bytes, says: str) -> None:
    start = TunedConfig(limits={"StartVM": 4}, lease_ttl_s=12)
    with agent_url(start) as url, http_to(url) as http:
        started = time.perf_counter()
        r = http.put("/config", content=body)
        took_s = time.perf_counter() - started
        assert r.status_code == 422, r.text
        assert says in one_line_error(r)
        assert took_s < 1.0  # the old agent: 5.8 s of blocked event loop for the alias bomb
        assert TunedConfig(**http.get("/config").json()) == start
        assert ttl_in_force(http) == 12


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b'{"holder": ' + b"[" * 100_00 + b"]" * 100_00 + b"}", 400, "malformed JSON"),
        (b'{"holder": "a", "wait_s": ' + b"9" * 5000 + b"}", 400, "a number of 5000"),
        (b'{"holder": "a", "wait_s": true}', 422, "body.wait_s"),
        (b'{"holder": "a\\nb"}', 422, "body.holder"),
        (b'{"holder": "a", "a\\nb": 1}', 422, "unknown field"),
        (b"\xff", 400, "malformed JSON"),
    ],
    ids=["deep", "huge-int", "bool-wait", "newline-holder", "newline-key", "not-utf8"],
)
def test_hostile_acquire_bodies_are_4xx(body: bytes, status: int, says: str) -> None:
    with agent_url(TunedConfig(limits={"S": 1})) as url, http_to(url) as http:
        r = http.post("/v1/stages/S/acquire", content=body)
        assert r.status_code == status, r.text
        assert says in one_line_error(r)


def test_a_body_over_the_cap_is_a_413() -> None:
    with agent_url(max_body_bytes=4096) as url, http_to(url) as http:
        r = http.put("/config", content=b"# " + b"x" * 5000 + b"\n")
        assert r.status_code == 413
        assert one_line_error(r) == "body: larger than 4096 bytes"
        r = http.post("/v1/stages/S/acquire", json={"holder": "x" * 5000})
        assert r.status_code == 413


# -- D9: half-sent requests ---------------------------------------------------------------


def closed_within(sock: socket.socket, timeout_s: float) -> tuple[bool, bytes]:
    """Whether the peer closed ``sock`` within ``timeout_s``, and what it sent first."""
    sock.settimeout(timeout_s)
    got = b""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                return True, got
            got += chunk
    except TimeoutError:
        return False, got
    except ConnectionResetError:
        return True, got
    return False, got


def test_half_sent_requests_are_cut_off_after_the_read_timeout() -> None:
    with agent_url(read_timeout_s=0.5) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        half_lines = [socket.create_connection((host, int(port))) for _ in range(60)]
        for s in half_lines:
            s.sendall(b"GET /heal")
        half_bodies = [socket.create_connection((host, int(port))) for _ in range(5)]
        for s in half_bodies:
            s.sendall(
                b"PUT /config HTTP/1.1\r\nHost: agent\r\n"
                + f"Authorization: Bearer {TOKEN}\r\n".encode()
                + b"Content-Length: 100\r\n\r\nlimits:"
            )
        # A byte every 0.1 s does not buy time: the deadline is for the whole head.
        trickler = socket.create_connection((host, int(port)))
        cut_off: list[float] = []

        def trickle() -> None:
            began = time.monotonic()
            for byte in b"GET /healthz HTTP/1.1\r\nHost: agent\r\nX-Slow: " + b"a" * 40:
                try:
                    trickler.send(bytes([byte]))
                except OSError:
                    cut_off.append(time.monotonic() - began)
                    return
                time.sleep(0.1)

        thread = threading.Thread(target=trickle)
        thread.start()
        started = time.monotonic()
        try:
            for s in half_lines:
                closed, got = closed_within(s, max(0.1, started + 5 - time.monotonic()))
                assert closed and got == b""
            for s in half_bodies:
                closed, got = closed_within(s, max(0.1, started + 5 - time.monotonic()))
                assert closed and got.startswith(b"HTTP/1.1 408"), got
                assert b"body: not received within 0.5 s" in got
            thread.join(10)
            assert cut_off and cut_off[0] < 4.0  # sending it all takes over 6 s
        finally:
            for s in [*half_lines, *half_bodies, trickler]:
                s.close()
        assert time.monotonic() - started < 5
        with http_to(url) as http:  # and the agent still serves everyone else
            assert http.get("/healthz").status_code == 200


def test_long_polls_and_idle_reuse_outlive_the_read_timeout() -> None:
    config = TunedConfig(limits={"S": 1}, lease_ttl_s=1.0)
    with agent_url(config, read_timeout_s=0.3) as url, http_to(url) as http:
        acquire(http, "S")  # never released: expires after 1 s
        started = time.monotonic()
        lease = acquire(http, "S", wait_s=10)  # held by the handler past 0.3 s
        assert 0.5 < time.monotonic() - started < 10
        time.sleep(0.6)  # the idle connection is closed by now; the client reconnects
        release(http, lease)


# -- D10: tokens, files, TLS --------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("x", "(got 1 character)"),
        ("a" * 15, "(got 15 characters)"),
        ("a token with spaces", "position 2"),
        ("é" * 20, "position 1"),
        ("", "(got 0 characters)"),
    ],
)
def test_weak_tokens_are_refused_with_the_rule(token: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        AgentSettings(token=SecretStr(token))
    message = str(err.value)
    assert message.startswith("token: must be at least 16 characters of visible ASCII")
    assert says in message and "\n" not in message
    assert len(token) < 3 or token not in message  # the secret is not echoed


def test_a_token_no_header_can_carry_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^token: must be at most 4096 characters"):
        AgentSettings(token=SecretStr("a" * 4097))


def test_serve_refuses_a_weak_token_and_a_token_file_open_to_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bad config after the token: an agent that let the token pass stops there
    # (with another message) rather than serving.
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("lease_ttl_s: 0\n")
    base = ["agent", "serve", "--port", "0", "--config", str(bad_config)]
    monkeypatch.setenv("BOOTSTORM_AGENT_TOKEN", "x")
    assert run(base) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: token: must be at least 16 characters")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    for mode in (0o644, 0o640, 0o604, 0o660):
        token_file.chmod(mode)
        assert run([*base, "--token-file", str(token_file)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"error: token-file: '{token_file}' has mode {mode:04o}, open to group or others; "
            f"it holds a secret: chmod 600 {token_file}"
        ]
    token_file.chmod(0o600)
    token_file.write_text("short\n")
    assert run([*base, "--token-file", str(token_file)]) == 2
    assert "token: must be at least 16 characters" in capsys.readouterr().err


def make_certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (mode 600), by openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a test certificate")
    cert_file, key_file = tmp_path / "agent.crt", tmp_path / "agent.key"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=bootstorm-test-agent",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key_file),
            "-out",
            str(cert_file),
        ],
        check=True,
        capture_output=True,
    )
    key_file.chmod(0o600)
    return cert_file, key_file


def test_the_agent_serves_https_with_a_certificate(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    with agent_url(tls_cert=cert, tls_key=key) as url:
        assert url.startswith("https://127.0.0.1:")
        with http_to(url, verify=trust) as http:
            assert http.get("/healthz").json()["status"] == "ok"
            r = http.put("/config", json={"limits": {"StartVM": 3}})
            assert r.status_code == 200, r.text
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port: nothing
            httpx.get(url.replace("https://", "http://") + "/healthz", timeout=5)
        # The package's own client trusts the self-signed agent when told to,
        # and leases over TLS like over HTTP.
        with (
            AgentClient(url, token=TOKEN, ca_file=cert) as client,
            client.stage("StartVM", holder="sb-tls") as lease,
        ):
            assert lease.stage == "StartVM"
        with AgentClient(url, token=TOKEN) as client, pytest.raises(AgentError):
            client.get_config()  # the system's CAs do not know the agent's certificate


def test_serve_over_tls_from_the_command_line(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    old = os.umask(0o077)  # process_agent writes the token file: the owner's alone
    try:
        with process_agent(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key)) as agent:
            assert agent.url.startswith("https://127.0.0.1:")
            trust = ssl.create_default_context(cafile=str(cert))
            assert httpx.get(agent.url + "/healthz", verify=trust).status_code == 200
    finally:
        os.umask(old)


def test_remote_serving_needs_tls_or_insecure_and_tls_needs_both_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, key = make_certificate(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("lease_ttl_s: 0\n")
    # Every command ends at the bad config if it passes the checks before it (never serves).
    base = ["agent", "serve", "--port", "0", "--token-file", str(token_file)]
    base += ["--config", str(bad_config)]
    remote = [*base, "--host", "0.0.0.0", "--allow-remote"]

    def refused(argv: list[str]) -> str:
        assert run(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        return err[0]

    assert refused(remote) == (
        "error: host: serving '0.0.0.0' over plain HTTP would send the bearer token in clear; "
        "give --tls-cert and --tls-key, or --insecure to accept that"
    )
    # --insecure passes that check (the bad config is what stops it here).
    assert refused([*remote, "--insecure"]).startswith(f"error: {bad_config}: config: lease_ttl_s:")
    # With TLS it passes too, without --insecure.
    assert refused([*remote, "--tls-cert", str(cert), "--tls-key", str(key)]).startswith(
        f"error: {bad_config}: config: lease_ttl_s:"
    )
    assert refused([*base, "--tls-cert", str(cert)]) == (
        "error: tls-key: --tls-cert given without --tls-key"
    )
    assert refused([*base, "--tls-key", str(key)]) == (
        "error: tls-cert: --tls-key given without --tls-cert"
    )
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    assert refused([*base, "--tls-cert", str(garbage), "--tls-key", str(key)]).startswith(
        f"error: tls-cert: cannot load certificate '{garbage}'"
    )
    key.chmod(0o644)
    assert refused([*base, "--tls-cert", str(cert), "--tls-key", str(key)]) == (
        f"error: tls-key: '{key}' has mode 0644, open to group or others; "
        f"it holds a secret: chmod 600 {key}"
    )
    assert refused([*base, "--read-timeout-s", "0"]) == (
        "error: read-timeout-s: must be within 0.05..600 (got 0)"
    )
