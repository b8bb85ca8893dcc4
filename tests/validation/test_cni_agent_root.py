"""The cni runtime served by a node agent started with ``--cni`` (root): the
agent's netns-veth namespaces come with their CNI ADD done on its own
network, the storm's sandboxes take them and ADD nothing, their DEL goes
through the agent's network (host-local releases their addresses there),
the agent's limits gate the stages, and nothing is left once the agent stops."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
from conftest import CNI_ROOT_MARKS, TOKEN, free_pool_id, process_agent
from test_cni_root import STAGES, _host_links, _netns, _objects_of, _peak

from bootstorm.models import TunedConfig
from bootstorm.validation.agent._cni_pool import agent_bridge, agent_state_dir

pytestmark = CNI_ROOT_MARKS


def _level(metrics: str, kind: str, family: str = "bootstorm_agent_pool_level") -> float:
    for line in metrics.splitlines():
        if line.startswith(family) and f'kind="{kind}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {family}{{kind={kind}}} in the metrics")


def _leases(pool_id: int) -> set[str]:
    """Container ids holding an address in the agent's host-local state."""
    ipam = agent_state_dir(pool_id) / "ipam"
    return {
        p.read_text().splitlines()[0].strip()
        for p in ipam.glob("*/*")
        if p.name != "lock" and not p.name.startswith("last_reserved_ip")
    }


def test_a_cni_storm_takes_the_agents_plumbed_namespaces(tmp_path: Path) -> None:
    from bootstorm.validation.agent import AgentAdmission, AgentClient
    from bootstorm.validation.testbed import StormOptions, run_storm

    pool_id = free_pool_id()
    links_before = _host_links()
    config = TunedConfig(limits={"StartVM": 2}, pools={"netns-veth": 4}, lease_ttl_s=60)
    args = ("--pool-id", str(pool_id), "--cni", "bridge")
    with (
        process_agent(tmp_path, *args, config=config) as agent,
        AgentClient(agent.url, token=TOKEN) as client,
    ):
        deadline = time.monotonic() + 30
        while _level(client.metrics(), "netns-veth") < 4:
            assert time.monotonic() < deadline, "the agent's netns-veth pool did not fill"
            time.sleep(0.2)
        ready = {n for n in _netns() if n.startswith(f"bstpool-netns-veth-{pool_id}-")}
        assert len(ready) == 4 and _leases(pool_id) == ready  # each ADDed on its network
        n = 6
        options = StormOptions(
            sandboxes=n, vm=False, kernel_trace=False, runtime="cni", config=config
        )
        result = run_storm(options, admission=AgentAdmission(client))
        metrics = client.metrics()
        assert result.failures == ()
        taken = int(_level(metrics, "netns-veth", "bootstorm_agent_pool_taken_total"))
        assert 4 <= taken <= n  # the agent refills while the storm runs
        trace = result.trace
        # Those that took one ADD nothing; every sandbox is DELeted once.
        adds = [e for e in trace.execs if e.command == "ADD" and e.stage == "AddCNI"]
        assert len(adds) == n - taken
        dels = Counter(e.sandbox for e in trace.execs if e.command == "DEL")
        assert dels == Counter(dict.fromkeys(range(n), 1))
        assert Counter((s.sandbox, s.stage) for s in trace.spans) == Counter(
            {(i, st): 1 for i in range(n) for st in STAGES}
        )
        assert _peak(list(trace.spans), "StartVM") <= 2
        # The taken ones' DELs went through the agent's network: host-local
        # there holds only what is pooled (refilled by now); the taken are gone.
        while _level(client.metrics(), "netns-veth") < 4:
            assert time.monotonic() < deadline + 60, "the agent did not refill"
            time.sleep(0.2)
        pooled = {n for n in _netns() if n.startswith(f"bstpool-netns-veth-{pool_id}-")}
        assert not (ready - pooled) & set(_netns())
        assert _leases(pool_id) == pooled
        assert _objects_of(result.run, links_before | _host_links()) == []
    # The agent's stop removes its pool, its bridge and its network's state.
    assert not [n for n in _netns() if n.startswith(f"bstpool-netns-veth-{pool_id}-")]
    assert agent_bridge(pool_id) not in _host_links()
    assert not agent_state_dir(pool_id).exists()
    assert not {n for n in _host_links() - links_before if n.startswith("veth")}


def test_a_cni_agent_refills_with_the_workers_its_config_asks(tmp_path: Path) -> None:
    """It refilled with one worker whatever ``pool_refill.concurrency`` said
    (its one CNI network), while the model simulated the config's workers:
    a searched policy of two workers ran on the node with one. Now each
    further worker ADDs through the same network on a socket of its own."""
    from bootstorm.models import PoolRefill
    from bootstorm.validation.agent import AgentClient

    pool_id = free_pool_id()
    config = TunedConfig(pools={"netns-veth": 9}, pool_refill=PoolRefill(concurrency=3))
    with (
        process_agent(
            tmp_path, "--pool-id", str(pool_id), "--cni", "bridge", config=config
        ) as agent,
        AgentClient(agent.url, token=TOKEN) as client,
    ):
        deadline = time.monotonic() + 60
        while _level(client.metrics(), "netns-veth") < 9:
            assert time.monotonic() < deadline, "the agent's netns-veth pool did not fill"
            time.sleep(0.2)
        answer = httpx.get(f"{agent.url}/v1/pools").json()
        assert (answer["concurrency"], answer["workers"]) == (3, 3)
        ready = {n for n in _netns() if n.startswith(f"bstpool-netns-veth-{pool_id}-")}
        assert len(ready) == 9 and _leases(pool_id) == ready  # one network, every ADD on it
    assert not [n for n in _netns() if n.startswith(f"bstpool-netns-veth-{pool_id}-")]
    assert agent_bridge(pool_id) not in _host_links()
    assert not agent_state_dir(pool_id).exists()
