"""The agent keeps what it was told (issue 35): a pushed config is saved before
it is answered, survives a SIGKILL and a restart with its generation, and a
start-up file wins only when it is newer (or forced); damage is set aside."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TOKEN, NoDevices, free_pool_id, process_agent
from pydantic import SecretStr

from bootstorm.cli import main
from bootstorm.models import TunedConfig
from bootstorm.validation.agent import (
    AgentClient,
    AgentSettings,
    StartupConfig,
    agent_in_thread,
)

START = TunedConfig(limits={"StartVM": 4}, lease_ttl_s=30.0)
PUSHED = TunedConfig(limits={"StartVM": 40, "Cgroup": 8}, lease_ttl_s=12.0)
LATER = TunedConfig(limits={"StartVM": 2})


@pytest.fixture(autouse=True)
def private_files() -> Iterator[None]:
    """``agent serve`` refuses a token file open to group or others."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def config_in_force(url: str) -> tuple[TunedConfig, int, str, str]:
    """The config an agent serves, its generation, source and restored flag."""
    r = httpx.get(f"{url}/config", timeout=10)
    assert r.status_code == 200, r.text
    h = r.headers
    return (
        TunedConfig(**r.json()),
        int(h["X-Bootstorm-Config-Generation"]),
        h.get("X-Bootstorm-Config-Source", "?"),
        h.get("X-Bootstorm-Config-Restored", "?"),
    )


def push(url: str, config: TunedConfig) -> int:
    with AgentClient(url, token=TOKEN) as client:
        generation: int = client.put_config(config)
    return generation


def state_file(state_dir: Path, pool_id: int) -> Path:
    return state_dir / f"pool-{pool_id}.config.json"


@contextmanager
def thread_agent_at(
    state_dir: Path, pool_id: int, config: TunedConfig | StartupConfig | None = None
) -> Iterator[str]:
    settings = AgentSettings(token=SecretStr(TOKEN), port=0, pool_id=pool_id, state_dir=state_dir)
    with agent_in_thread(settings, config, device_ops=NoDevices()) as url:
        yield url


def test_a_pushed_config_survives_a_sigkill_and_its_generation_continues(
    tmp_path: Path, agent_state_dir: Path
) -> None:
    """The agent's default state directory ($STATE_DIRECTORY here) keeps the push:
    the restarted process, with the same --config, serves the pushed config at
    the pushed generation, and the next push takes the next one. (Before: the
    start-up file at generation 1.)"""
    pool = ("--pool-id", str(free_pool_id()))
    config_file = tmp_path / "tuned.yaml"
    config_file.write_text(START.to_yaml())
    start = (*pool, "--config", str(config_file))
    with process_agent(tmp_path, *start) as agent:
        assert config_in_force(agent.url)[:2] == (START, 1)
        assert push(agent.url, PUSHED) == 2
        agent.stop(signal.SIGKILL)  # no chance to save anything on the way out
    with process_agent(tmp_path, *start) as agent:
        assert config_in_force(agent.url)[:2] == (PUSHED, 2)  # before: (START, 1)
        assert config_in_force(agent.url)[2:] == ("push", "true")
        assert push(agent.url, LATER) == 3
        agent.stop(signal.SIGKILL)
    with process_agent(tmp_path, *pool) as agent:  # no --config: what was saved
        assert config_in_force(agent.url) == (LATER, 3, "push", "true")
        health = httpx.get(f"{agent.url}/healthz", timeout=10).json()
        assert (health["generation"], health["config_source"]) == (3, "push")


def test_a_start_up_file_edited_after_the_push_wins_and_force_config_wins_anyway(
    tmp_path: Path,
) -> None:
    pool = ("--pool-id", str(free_pool_id()))
    config_file = tmp_path / "tuned.yaml"
    config_file.write_text(START.to_yaml())
    old_s = time.time() - 3600
    os.utime(config_file, (old_s, old_s))  # written an hour before the push
    start = (*pool, "--config", str(config_file))
    with process_agent(tmp_path, *start) as agent:
        assert push(agent.url, PUSHED) == 2
    # The operator edits the file after the push and restarts: the edit wins,
    # with the next generation (clients see a change).
    config_file.write_text(LATER.to_yaml())
    with process_agent(tmp_path, *start) as agent:
        assert config_in_force(agent.url) == (LATER, 3, "file", "false")
        assert push(agent.url, PUSHED) == 4
    # An older file loses to the push, unless --force-config.
    os.utime(config_file, (old_s, old_s))
    with process_agent(tmp_path, *start) as agent:
        assert config_in_force(agent.url) == (PUSHED, 4, "push", "true")
    with process_agent(tmp_path, *start, "--force-config") as agent:
        assert config_in_force(agent.url) == (LATER, 5, "file", "false")
    # The same file again: the same config, the same generation.
    with process_agent(tmp_path, *start, "--force-config") as agent:
        assert config_in_force(agent.url)[:3] == (LATER, 5, "file")


def test_which_config_won_is_one_warning_line_when_file_and_push_disagree(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pool_id = free_pool_id()
    with thread_agent_at(tmp_path, pool_id) as url:
        push(url, PUSHED)
    older = StartupConfig(config=START, path=Path("tuned.yaml"), modified_at_s=0.0)
    with thread_agent_at(tmp_path, pool_id, older) as url:
        assert config_in_force(url)[:3] == (PUSHED, 2, "push")
    newer = StartupConfig(config=START, path=Path("tuned.yaml"), modified_at_s=time.time() + 60)
    with thread_agent_at(tmp_path, pool_id, newer) as url:
        assert config_in_force(url)[:3] == (START, 3, "file")
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 2, said
    assert "restored the config pushed at" in said[0]
    assert "newer than tuned.yaml" in said[0] and "pass --force-config" in said[0]
    assert "started with tuned.yaml, replacing the config pushed at" in said[1]
    assert said[1].endswith("(the file is newer); kept in " + str(state_file(tmp_path, pool_id)))


def test_the_push_is_on_disk_before_the_answer(tmp_path: Path) -> None:
    pool_id = free_pool_id()
    with thread_agent_at(tmp_path, pool_id, START) as url:
        saved = json.loads(state_file(tmp_path, pool_id).read_text())
        assert (saved["generation"], saved["source"]) == (1, "file")
        assert push(url, PUSHED) == 2
        # No wait: the 200 came after the rename.
        saved = json.loads(state_file(tmp_path, pool_id).read_text())
        assert (saved["generation"], saved["source"]) == (2, "push")
        assert TunedConfig(**saved["config"]) == PUSHED
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"pool-{pool_id}.config.json"]


def test_a_push_that_cannot_be_saved_is_refused_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool_id = free_pool_id()
    with thread_agent_at(tmp_path, pool_id, START) as url:
        real_write = os.write

        def disk_full(fd: int, data: Any) -> int:
            if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(
                f"pool-{pool_id}.config.json.tmp"
            ):
                raise OSError(28, "No space left on device")
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", disk_full)
        r = httpx.put(
            f"{url}/config",
            json=PUSHED.model_dump(mode="json"),
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        monkeypatch.undo()
        assert r.status_code == 503, r.text
        body = r.json()
        assert body["reason"] == "not_saved" and "\n" not in body["error"]
        assert "No space left on device" in body["error"] and "nothing changed" in body["error"]
        assert config_in_force(url)[:3] == (START, 1, "file")
        saved = json.loads(state_file(tmp_path, pool_id).read_text())
        assert saved["generation"] == 1  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == [f"pool-{pool_id}.config.json"]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (b'{"format": "bootstorm-agent-config/1", "generation": 7, "sou', "not JSON"),
        (b"\x00" * 512, "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"format": "bootstorm-agent-config/99"}', "expected the fields"),
        ("fifo", "not a regular file"),
        ("directory", "not a regular file"),
    ],
)
def test_a_damaged_state_file_is_set_aside_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: bytes | str, says: str
) -> None:
    pool_id = free_pool_id()
    path = state_file(tmp_path, pool_id)
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "directory":
        path.mkdir()
    else:
        assert isinstance(damage, bytes)
        path.write_bytes(damage)
    caplog.set_level(logging.INFO)
    with thread_agent_at(tmp_path, pool_id, START) as url:
        assert config_in_force(url)[:3] == (START, 1, "file")
        assert push(url, PUSHED) == 2
    lines = [r for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert says in lines[0].getMessage() and "\n" not in lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    aside = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].name.startswith(f"{path.name}.corrupt-")
    assert json.loads(path.read_text())["generation"] == 2  # a fresh, whole file


def test_a_saved_config_that_breaks_a_rule_is_set_aside_without_its_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pool_id = free_pool_id()
    record = {
        "format": "bootstorm-agent-config/1",
        "generation": 4,
        "source": "push",
        "file": None,
        "saved_at_s": time.time(),
        "config": {"limits": {"StartVM": "s3cr3t-value"}},
    }
    state_file(tmp_path, pool_id).write_text(json.dumps(record))
    with thread_agent_at(tmp_path, pool_id) as url:
        assert config_in_force(url)[:3] == (TunedConfig(), 1, "default")
    (line,) = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert "limits.StartVM" in line and "s3cr3t" not in line


def test_a_stale_temp_file_of_a_killed_agent_is_removed(tmp_path: Path) -> None:
    pool_id = free_pool_id()
    with thread_agent_at(tmp_path, pool_id, START) as url:
        push(url, PUSHED)
    stale = tmp_path / f"pool-{pool_id}.config.json.tmp-999999"
    stale.write_text('{"torn')
    with thread_agent_at(tmp_path, pool_id) as url:
        assert config_in_force(url) == (PUSHED, 2, "push", "true")
    assert not stale.exists()


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_serve_refuses_an_unusable_state_dir_and_a_lone_force_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    base = ["agent", "serve", "--port", "0", "--token-file", str(token_file)]
    base += ["--pool-id", str(free_pool_id())]
    assert run([*base, "--force-config"]) == 2
    assert capsys.readouterr().err.strip() == "error: force-config: given without --config"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    assert run([*base, "--state-dir", str(not_a_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: state-dir: cannot create") and "\n" not in err
