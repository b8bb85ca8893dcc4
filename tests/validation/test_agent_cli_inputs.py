"""What ``agent serve`` and ``config push`` read (issue 35): inventories through
the bounded YAML reader, token and TLS files as regular files only, and
numeric options bounded — each refusal one line and exit 2, never a hang,
a traceback or gigabytes read."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TOKEN, free_pool_id, thread_agent

from bootstorm.cli import main
from bootstorm.models import TunedConfig

TUNED = TunedConfig(limits={"StartVM": 3})
#: Address space of a child: enough to import bootstorm, far from the 3 GB
#: the old reader took from /dev/zero, so such a read fails fast here.
_CHILD_MEMORY_BYTES = 1536 * 1024 * 1024


@pytest.fixture(autouse=True)
def private_files() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _bounded_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_CHILD_MEMORY_BYTES, _CHILD_MEMORY_BYTES))


def cli(*argv: str, timeout_s: float = 30.0) -> tuple[int, str]:
    """``bootstorm ARGV`` in a child with bounded memory: its exit code and
    stderr; the test fails (and the child is killed) if it hangs."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from bootstorm.cli import main; main()", *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=_bounded_child,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"bootstorm {' '.join(argv)} hung for {timeout_s:g} s")
    return done.returncode, done.stderr


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tuned.yaml"
    path.write_text(TUNED.to_yaml())
    return path


def test_an_inventory_alias_bomb_or_deep_nesting_is_one_line(
    tmp_path: Path, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.yaml"
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    bomb += [
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    inventory.write_text("\n".join(bomb) + "\n")
    with thread_agent(TUNED) as agent:
        before = agent.get_config()
        assert run(["config", "push", "--nodes", str(inventory), str(config_file)]) == 2
        err = one_line(capsys.readouterr().err)
        assert err.startswith(f"error: {inventory}: line ") and "aliases are not accepted" in err
        inventory.write_text("[" * 5000 + "]" * 5000 + "\n")
        assert run(["config", "push", "--nodes", str(inventory), str(config_file)]) == 2
        err = one_line(capsys.readouterr().err)
        assert "nest" in err  # ours past 32 levels, or libyaml's own past 1000
        assert agent.get_config() == before  # nothing was sent


def test_an_inventory_that_is_a_fifo_or_a_device_is_refused_unread(
    tmp_path: Path, config_file: Path
) -> None:
    fifo = tmp_path / "inventory.fifo"
    os.mkfifo(fifo)
    for inventory in (fifo, Path("/dev/zero")):
        code, err = cli("config", "push", "--nodes", str(inventory), str(config_file))
        assert code == 2
        assert one_line(err).startswith(f"error: {inventory}: ")
        assert "not a regular file" in err


def test_a_node_token_file_that_never_ends_is_refused(tmp_path: Path, config_file: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("- {name: a, url: 'http://127.0.0.1:9', token_file: /dev/zero}\n")
    code, err = cli("config", "push", "--nodes", str(inventory), str(config_file))
    assert code == 2
    line = one_line(err)
    assert line.startswith("error: nodes.0.token_file: /dev/zero: ") and "not a regular" in line


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://127.0.0.1:0", "names port 0"),
    ],
)
def test_a_node_url_no_client_can_dial_is_refused_before_the_push(
    tmp_path: Path, config_file: Path, url: str, why: str
) -> None:
    """``http://[::1`` passed the URL pattern and was an 85-line traceback
    from the HTTP client; port 99999 was pushed to and called unreachable."""
    token = tmp_path / "token"
    token.write_text(TOKEN)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"- {{name: a, url: '{url}', token_file: {token}}}\n")
    code, err = cli("config", "push", "--nodes", str(inventory), str(config_file), "--dry-run")
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"error: {inventory}: nodes.0.url: ") and why in line


def _serve(tmp_path: Path, *args: str) -> list[str]:
    # Refused before the state directory ($STATE_DIRECTORY, conftest) is used.
    return ["agent", "serve", "--port", "0", "--pool-id", str(free_pool_id()), *args]


def test_serve_refuses_a_token_file_that_is_a_fifo_or_gigabytes(tmp_path: Path) -> None:
    fifo = tmp_path / "token.fifo"
    os.mkfifo(fifo, 0o600)
    code, err = cli(*_serve(tmp_path, "--token-file", str(fifo)))
    assert code == 2
    assert one_line(err) == f"error: token-file: '{fifo}' is not a regular file"
    huge = tmp_path / "token.huge"
    with huge.open("wb") as f:
        f.truncate(3 * 1024**3)  # sparse: 3 GB of zeros that take no disk
    huge.chmod(0o600)
    code, err = cli(*_serve(tmp_path, "--token-file", str(huge)))
    assert code == 2
    assert "larger than" in one_line(err) and "token-file" in err


def test_serve_refuses_a_tls_certificate_that_is_a_fifo(tmp_path: Path) -> None:
    cert = tmp_path / "agent.crt"
    os.mkfifo(cert, 0o600)
    key = tmp_path / "agent.key"
    key.write_text("not a key\n")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    code, err = cli(
        *_serve(tmp_path, "--token-file", str(token_file)),
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
    )
    assert code == 2
    assert one_line(err) == f"error: tls-cert: '{cert}' is not a regular file"


@pytest.mark.parametrize("timeout_s", ["inf", "1e300", "nan", "0", "-1", "601"])
def test_push_timeout_is_bounded_before_anything_is_read_or_sent(
    tmp_path: Path, config_file: Path, capsys: pytest.CaptureFixture[str], timeout_s: str
) -> None:
    with thread_agent(TunedConfig()) as agent:
        token_file = tmp_path / "node.token"
        token_file.write_text(TOKEN)
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(f"- {{name: a, url: '{agent.base_url}', token_file: {token_file}}}\n")
        argv = ["config", "push", "--nodes", str(inventory), str(config_file)]
        assert run([*argv, "--timeout-s", timeout_s]) == 2
        err = one_line(capsys.readouterr().err)
        assert err.startswith("error: timeout-s: must be within 0.01..600 s (got ")
        assert agent.get_config() == TunedConfig()  # nothing was sent
        assert run([*argv, "--timeout-s", "600"]) == 0  # the bound itself is accepted
        assert agent.get_config() == TUNED


def test_serve_names_the_cni_plugin_option_it_refuses(tmp_path: Path) -> None:
    """It said ``plugin:``, a field of its settings, not the option given."""
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    code, err = cli(*_serve(tmp_path, "--token-file", str(token), "--cni-plugin", "bogus"))
    assert code == 2 and one_line(err).startswith("error: cni-plugin: must be one of")
