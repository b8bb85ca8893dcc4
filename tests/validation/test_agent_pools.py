"""Device pools with real netlink devices: fill, take, refill, shrink, clean up, sweep."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TOKEN, free_pool_id, needs_root, process_agent, thread_agent
from prometheus_client.parser import text_string_to_metric_families

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentClient

pytestmark = [pytest.mark.root, needs_root]


def pooled_on_host(pool_id: int) -> set[str]:
    """This agent's pool names present on the host, seen with iproute2 (not the agent's code)."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = {m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", links, re.M)}
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names |= {line.split()[0] for line in netns.splitlines() if line.strip()}
    link_re = re.compile(rf"^bsp{pool_id}[vt]\d+p?$")
    netns_re = re.compile(rf"^bstpool-netns-{pool_id}-\d+$")
    return {n for n in names if link_re.match(n) or netns_re.match(n)}


def levels(client: AgentClient) -> dict[str, float]:
    for family in text_string_to_metric_families(client.metrics()):
        if family.name == "bootstorm_agent_pool_level":
            return {s.labels["kind"]: s.value for s in family.samples}
    raise AssertionError("no pool levels in the metrics")


def wait_for_levels(client: AgentClient, want: dict[str, int], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (got := levels(client)) != want:
        assert time.monotonic() < deadline, f"pool levels {got}, wanted {want}"
        time.sleep(0.05)


@pytest.fixture
def pool_id() -> Iterator[int]:
    pid = free_pool_id()
    assert not pooled_on_host(pid), "leftovers from an earlier run"
    yield pid
    # Whatever a test handed out (or leaked) goes; then the host must be clean.
    for name in pooled_on_host(pid):
        if name.startswith("bstpool-"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        else:
            subprocess.run(["ip", "link", "del", name], capture_output=True)
    assert not pooled_on_host(pid)


def test_pools_fill_hand_out_refill_and_are_removed_on_shutdown(pool_id: int) -> None:
    config = TunedConfig(pools={"netns": 2, "veth": 3, "tap": 2, "ipvtap": 4})
    with thread_agent(config, pool_id=pool_id) as client:
        # ipvtap: not ours, ignored
        wait_for_levels(client, {"netns": 2, "veth": 3, "tap": 2, "netns-veth": 0})
        assert len(pooled_on_host(pool_id)) == 2 + 2 * 3 + 2
        veth = client.take("veth", "sb-1")
        netns = client.take("netns", "sb-1")
        tap = client.take("tap", "sb-1")
        assert veth is not None and netns is not None and tap is not None
        assert veth.kind == "veth" and veth.peer == f"{veth.name}p" and veth.holder == "sb-1"
        taken = {veth.name, veth.peer, netns.name, tap.name}
        assert taken <= pooled_on_host(pool_id)  # real devices, now the client's
        wait_for_levels(client, {"netns": 2, "veth": 3, "tap": 2, "netns-veth": 0})  # refilled
        for family in text_string_to_metric_families(client.metrics()):
            if family.name == "bootstorm_agent_pool_refill_seconds":
                counts = {
                    s.labels["kind"]: s.value for s in family.samples if s.name.endswith("_count")
                }
                assert counts == {"netns": 3, "veth": 4, "tap": 3}
        # Shrinking the pools removes the surplus.
        client.put_config(TunedConfig(pools={"veth": 1}))
        wait_for_levels(client, {"netns": 0, "veth": 1, "tap": 0, "netns-veth": 0})
        assert len(pooled_on_host(pool_id) - taken) == 2  # one veth pair
    # Shut down: every pooled device is gone; the handed-out ones are the client's.
    assert pooled_on_host(pool_id) == taken


def test_an_empty_pool_answers_none(pool_id: int) -> None:
    with thread_agent(TunedConfig(pools={"tap": 1}), pool_id=pool_id) as client:
        wait_for_levels(client, {"netns": 0, "veth": 0, "tap": 1, "netns-veth": 0})
        client.put_config(TunedConfig(pools={"tap": 0}))
        wait_for_levels(client, {"netns": 0, "veth": 0, "tap": 0, "netns-veth": 0})
        assert client.take("tap", "sb-1") is None
        assert client.take("netns", "sb-1") is None
    assert not pooled_on_host(pool_id)


def test_sigterm_cleans_up_and_a_restart_sweeps_a_killed_agents_leftovers(
    pool_id: int, tmp_path: Path
) -> None:
    config = TunedConfig(pools={"netns": 2, "veth": 2, "tap": 1})
    want = {"netns": 2, "veth": 2, "tap": 1, "netns-veth": 0}
    args = ("--pool-id", str(pool_id))
    with process_agent(tmp_path, *args, config=config) as agent:
        with AgentClient(agent.url, token=TOKEN) as client:
            wait_for_levels(client, want)
        agent.stop(signal.SIGKILL)  # no chance to clean up
    leftovers = pooled_on_host(pool_id)
    assert len(leftovers) == 2 + 2 * 2 + 1
    with process_agent(tmp_path, *args, config=TunedConfig()) as agent:
        with AgentClient(agent.url, token=TOKEN) as client:
            assert levels(client) == {"netns": 0, "veth": 0, "tap": 0, "netns-veth": 0}
        assert not pooled_on_host(pool_id)  # swept at start
        assert agent.stop(signal.SIGTERM) is not None
    with process_agent(tmp_path, *args, config=config) as agent:
        with AgentClient(agent.url, token=TOKEN) as client:
            wait_for_levels(client, want)
        out = agent.stop(signal.SIGTERM)
        assert agent.proc.returncode == 0, out
        assert "pooled devices removed" in out
    assert not pooled_on_host(pool_id)


def test_without_privileges_the_pools_stay_empty_and_the_agent_serves(tmp_path: Path) -> None:
    """In a user namespace of its own the agent may not create devices (EPERM from the
    kernel): it keeps serving, counts the errors, and answers 'pool empty'."""
    probe = subprocess.run(["unshare", "-U", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -U not allowed here: {probe.stderr.decode().strip()}")
    config = TunedConfig(limits={"StartVM": 1}, pools={"netns": 1, "veth": 1, "tap": 1})
    with process_agent(tmp_path, config=config, prefix=("unshare", "-U")) as agent:
        with AgentClient(agent.url, token=TOKEN) as client:
            deadline = time.monotonic() + 10
            while True:
                errors = {
                    s.labels["kind"]: s.value
                    for f in text_string_to_metric_families(client.metrics())
                    if f.name == "bootstorm_agent_pool_errors"
                    for s in f.samples
                    if s.name.endswith("_total")
                }
                if set(errors) == {"netns", "veth", "tap"}:
                    break
                assert time.monotonic() < deadline, errors
                time.sleep(0.1)
            assert client.take("veth", "sb-1") is None
            client.release(client.acquire("StartVM", "sb-1", wait_s=1))
        out = agent.stop()
    assert agent.proc.returncode == 0, out
    assert "refill failed" in out
