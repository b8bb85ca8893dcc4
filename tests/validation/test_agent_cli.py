"""``bootstorm config push`` against real agents, and ``agent serve``'s refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TOKEN, thread_agent

from bootstorm.cli import main
from bootstorm.models import TunedConfig

TUNED = TunedConfig(limits={"StartVM": 120, "Cgroup": 40}, pools={"netns": 0}, lease_ttl_s=20.0)


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def write_inventory(tmp_path: Path, nodes: list[tuple[str, str, str]]) -> Path:
    lines = []
    for name, url, token in nodes:
        token_file = tmp_path / f"{name}.token"
        token_file.write_text(token + "\n")
        lines += [f"- name: {name}", f"  url: {url}", f"  token_file: {token_file}"]
    path = tmp_path / "inventory.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(out: str, node: str) -> str:
    """The first line of ``node``'s row in a pushed config's table."""
    return next(line for line in out.splitlines() if node in line)


def _folded(out: str, node: str) -> str:
    """``node``'s row with its folded lines joined, column by column."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if node in line)
    block = [lines[start]]
    for line in lines[start + 1 :]:
        first = line.replace("│", "|").split("|")[1:2]
        if not line.startswith("│") or (first and first[0].strip()):
            break  # a border, or the next row's node
        block.append(line)
    columns = [[c.strip() for c in line.replace("│", "|").split("|")[1:-1]] for line in block]
    return " ".join(" ".join(filter(None, col)) for col in zip(*columns, strict=True))


def test_push_reaches_every_node_and_names_the_one_that_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "tuned.yaml"
    config_file.write_text(TUNED.to_yaml())
    with thread_agent() as a, thread_agent() as b:
        good = write_inventory(
            tmp_path, [("node-a", a.base_url, TOKEN), ("node-b", b.base_url, TOKEN)]
        )
        assert run(["config", "push", "--nodes", str(good), str(config_file)]) == 0
        out = capsys.readouterr().out
        assert out.count("applied") >= 2
        assert a.get_config() == TUNED and b.get_config() == TUNED

        bad = write_inventory(
            tmp_path, [("node-a", a.base_url, TOKEN), ("node-b", b.base_url, "nope")]
        )
        new = TUNED.model_copy(update={"lease_ttl_s": 7.0})
        config_file.write_text(new.to_yaml())
        assert run(["config", "push", "--nodes", str(bad), str(config_file)]) == 1
        out = capsys.readouterr().out
        row_a, row_b = _rows(out, "node-a"), _rows(out, "node-b")
        assert "applied" in row_a and "200" in row_a
        assert "refused" in row_b and "401" in row_b
        # The reason folds over lines in 80 columns, but is never cut.
        assert "wrong bearer token" in _folded(out, "node-b")
        assert a.get_config().lease_ttl_s == 7.0
        assert b.get_config().lease_ttl_s == 20.0  # unchanged


def test_push_reports_an_unreachable_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "tuned.yaml"
    config_file.write_text(TUNED.to_yaml())
    inventory = write_inventory(tmp_path, [("gone", "http://127.0.0.1:9", TOKEN)])
    assert (
        run(["config", "push", "--nodes", str(inventory), str(config_file), "--timeout-s", "2"])
        == 1
    )
    row = next(line for line in capsys.readouterr().out.splitlines() if "gone" in line)
    assert "refused" in row


def test_push_validates_config_and_inventory_before_sending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with thread_agent(TUNED) as a:
        config_file = tmp_path / "tuned.yaml"
        config_file.write_text("limits: {StartVM: 0}\n")
        inventory = write_inventory(tmp_path, [("node-a", a.base_url, TOKEN)])
        assert run(["config", "push", "--nodes", str(inventory), str(config_file)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        rule = "Input should be greater than or equal to 1"
        assert err == [f"error: {config_file}: config: limits.StartVM: {rule} (got 0)"]

        config_file.write_text(TunedConfig().to_yaml())
        monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
        inventory.write_text(
            f"nodes:\n- {{name: a, url: '{a.base_url}', token_file: {tmp_path / 'node-a.token'}}}\n"
            f"- {{name: b, url: 'http://127.0.0.1:9', token_env: NO_SUCH_TOKEN_VAR}}\n"
        )
        assert run(["config", "push", "--nodes", str(inventory), str(config_file)]) == 2
        err = capsys.readouterr().err.strip()
        assert (
            err == "error: nodes.1.token_env: environment variable 'NO_SUCH_TOKEN_VAR' is not set"
        )

        inventory.write_text("- {name: a, url: 'ftp://x'}\n")
        assert run(["config", "push", "--nodes", str(inventory), str(config_file)]) == 2
        err = capsys.readouterr().err
        assert "nodes.0.url" in err and "nodes.0" in err
        assert a.get_config() == TUNED  # nothing was sent


def test_serve_refuses_a_remote_address_without_the_flag_and_a_missing_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)  # the agent refuses a token file others may read
    assert run(["agent", "serve", "--host", "0.0.0.0", "--token-file", str(token_file)]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: host: '0.0.0.0' is not loopback; pass --allow-remote to serve it"
    )
    monkeypatch.delenv("BOOTSTORM_AGENT_TOKEN", raising=False)
    assert run(["agent", "serve", "--port", "0"]) == 2
    assert "token: none given" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert run(["agent", "serve", "--token-file", str(empty)]) == 2
    assert "token-file:" in capsys.readouterr().err
    assert run(["agent", "serve", "--token-file", str(token_file), "--port", "70000"]) == 2
    assert capsys.readouterr().err.strip() == "error: port: must be within 0..65535 (got 70000)"


def test_serve_refuses_a_bad_start_config_and_a_busy_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)  # the agent refuses a token file others may read
    bad = tmp_path / "tuned.yaml"
    bad.write_text("lease_ttl_s: 0\n")
    argv = ["agent", "serve", "--port", "0", "--token-file", str(token_file)]
    assert run([*argv, "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {bad}: config: lease_ttl_s:") and err.endswith("(got 0)")
    with thread_agent() as busy:
        port = busy.base_url.rsplit(":", 1)[1]
        argv = ["agent", "serve", "--port", port, "--token-file", str(token_file)]
        assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: port: cannot listen on 127.0.0.1:{port}")


def test_an_inventory_names_each_node_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "tuned.yaml"
    config_file.write_text(TUNED.to_yaml())
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "- {name: a, url: 'http://127.0.0.1:1', token_env: X}\n"
        "- {name: a, url: 'http://127.0.0.1:2', token_env: X}\n"
    )
    assert run(["config", "push", "--nodes", str(inventory), str(config_file)]) == 2
    assert "node names must be unique, but got ['a'] more than once" in capsys.readouterr().err
    inventory.write_text("- {name: b, url: 'http://127.0.0.1:3', token_env: X, token_file: /t}\n")
    assert run(["config", "push", "--nodes", str(inventory), str(config_file)]) == 2
    assert "exactly one of token_env and token_file" in capsys.readouterr().err
