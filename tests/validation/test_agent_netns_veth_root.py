"""The agent's ``netns-veth`` pool with real devices (root): a namespace holding
its veth peer as ``eth0``, the host end down on the host; handed out, refilled,
removed at shutdown, swept after a kill; and a testbed storm served by it."""

from __future__ import annotations

import json
import os
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


def netns_veth_on_host(pool_id: int) -> set[str]:
    """This agent's netns-veth names present on the host, seen with iproute2."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = {m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", links, re.M)}
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names |= {line.split()[0] for line in netns.splitlines() if line.strip()}
    link_re = re.compile(rf"^bsp{pool_id}n\d+$")
    netns_re = re.compile(rf"^bstpool-netns-veth-{pool_id}-\d+$")
    return {n for n in names if link_re.match(n) or netns_re.match(n)}


def level(client: AgentClient, kind: str = "netns-veth") -> float:
    for family in text_string_to_metric_families(client.metrics()):
        if family.name == "bootstorm_agent_pool_level":
            return next(s.value for s in family.samples if s.labels["kind"] == kind)
    raise AssertionError("no pool levels in the metrics")


def wait_for_level(client: AgentClient, want: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (got := level(client)) != want:
        assert time.monotonic() < deadline, f"netns-veth level {got}, wanted {want}"
        time.sleep(0.05)


def _link(name: str, *, netns: str | None = None) -> dict[str, object]:
    where = ["-n", netns] if netns is not None else []
    out = subprocess.run(
        ["ip", *where, "-j", "link", "show", "dev", name], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    (link,) = json.loads(out.stdout)
    assert isinstance(link, dict)
    return link


def _remove(names: set[str]) -> None:
    for name in names:
        if name.startswith("bstpool-"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        else:
            subprocess.run(["ip", "link", "del", name], capture_output=True)


@pytest.fixture
def pool_id() -> Iterator[int]:
    pid = free_pool_id()
    assert not netns_veth_on_host(pid), "leftovers from an earlier run"
    yield pid
    _remove(netns_veth_on_host(pid))  # whatever a test took (or leaked)
    assert not netns_veth_on_host(pid)


def test_the_pool_fills_hands_out_refills_and_is_removed(pool_id: int) -> None:
    with thread_agent(TunedConfig(pools={"netns-veth": 2}), pool_id=pool_id) as client:
        wait_for_level(client, 2)
        assert len(netns_veth_on_host(pool_id)) == 2 * 2  # a namespace and a host end each
        device = client.take("netns-veth", "sb-1")
        assert device is not None and device.kind == "netns-veth" and device.peer is not None
        assert device.name.startswith(f"bstpool-netns-veth-{pool_id}-")
        assert device.peer.startswith(f"bsp{pool_id}n")
        host_end = _link(device.peer)
        inside = _link("eth0", netns=device.name)
        assert host_end["link_type"] == "ether" and "UP" not in host_end["flags"]  # type: ignore[operator]
        assert "UP" not in inside["flags"]  # type: ignore[operator]
        assert host_end.get("link_netnsid") is not None  # its peer is in another namespace
        wait_for_level(client, 2)  # refilled
        taken = {device.name, device.peer}
        client.put_config(TunedConfig(pools={"netns-veth": 1}))
        wait_for_level(client, 1)  # the level drops as the removal starts: wait for it
        deadline = time.monotonic() + 10
        while len(netns_veth_on_host(pool_id) - taken) != 2:
            assert time.monotonic() < deadline, netns_veth_on_host(pool_id) - taken
            time.sleep(0.05)
    # Shut down: the pooled ones are gone; the one handed out is the client's.
    assert netns_veth_on_host(pool_id) == taken


def test_a_restart_sweeps_a_killed_agents_netns_veth(pool_id: int, tmp_path: Path) -> None:
    args = ("--pool-id", str(pool_id))
    config = TunedConfig(pools={"netns-veth": 3})
    with process_agent(tmp_path, *args, config=config) as agent:
        with AgentClient(agent.url, token=TOKEN) as client:
            wait_for_level(client, 3)
        agent.stop(signal.SIGKILL)  # no chance to clean up
    left = netns_veth_on_host(pool_id)
    assert len(left) == 3 * 2
    # Half of one gone already (its host end): the sweep still finds the rest.
    host_end = min(n for n in left if n.startswith("bsp"))
    subprocess.run(["ip", "link", "del", host_end], check=True)
    with process_agent(tmp_path, *args, config=TunedConfig()) as agent:
        with AgentClient(agent.url, token=TOKEN) as client:
            assert level(client) == 0
        assert not netns_veth_on_host(pool_id)  # swept at start
        out = agent.stop(signal.SIGTERM)
    assert agent.proc.returncode == 0, out


def test_a_testbed_storm_served_by_the_agents_netns_veth(pool_id: int, tmp_path: Path) -> None:
    from bootstorm.validation.agent import AgentAdmission
    from bootstorm.validation.testbed import StormOptions, run_storm

    config = TunedConfig(pools={"netns-veth": 6})
    with (
        process_agent(tmp_path, "--pool-id", str(pool_id), config=config) as agent,
        AgentClient(agent.url, token=TOKEN) as client,
    ):
        wait_for_level(client, 6, timeout_s=30.0)
        pooled = netns_veth_on_host(pool_id)
        options = StormOptions(sandboxes=6, vm=False, kernel_trace=False, config=config)
        result = run_storm(options, admission=AgentAdmission(client))
        assert not result.failures
        assert len(result.trace.spans) == 6 * 5
        # Every sandbox took one, and the storm removed what it took.
        assert not pooled & netns_veth_on_host(pool_id)
        wait_for_level(client, 6, timeout_s=30.0)  # refilled meanwhile: the agent's
        agent.stop(signal.SIGTERM)
    assert not netns_veth_on_host(pool_id)
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"bst-{result.run}-")]
