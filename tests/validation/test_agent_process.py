"""The agent as a node runs it (``bootstorm agent serve`` in a process of
its own), what a call to it costs, and a testbed admission that leases only
the stages its config limits."""

from __future__ import annotations

import os

import httpx
import pytest
from conftest import free_pool_id

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import (
    AgentAdmission,
    AgentClient,
    AgentProcessError,
    agent_process,
    measure_agent_calls,
    measure_agent_devices,
)

TOKEN = "test-token-0123456789abcdef"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_agent_process_serves_its_config_and_is_gone_after_the_block() -> None:
    config = TunedConfig(limits={"AddCNI": 3})
    with agent_process(token=TOKEN, pool_id=free_pool_id(), config=config) as agent:
        assert agent.url.startswith("http://127.0.0.1:")
        with AgentClient(agent.url, token=TOKEN) as client:
            assert client.get_config().limits == {"AddCNI": 3}
        assert agent.cpu_s() > 0.0
        pid = agent.pid
    assert not _alive(pid)


def _nice(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])  # field 19: nice


def test_the_agent_runs_at_its_units_nice_value() -> None:
    from pathlib import Path

    from bootstorm.validation.agent._process import AGENT_NICE

    unit = Path(__file__).parents[2] / "validation/agent/deploy/bootstorm-agent.service"
    assert f"\nNice={AGENT_NICE}\n" in unit.read_text()
    with agent_process(token=TOKEN, pool_id=free_pool_id()) as agent:
        # Lowering a nice value needs root: without, the caller's is kept.
        assert _nice(agent.pid) == (AGENT_NICE if os.geteuid() == 0 else _nice(os.getpid()))
    with agent_process(token=TOKEN, pool_id=free_pool_id(), nice=None) as agent:
        assert _nice(agent.pid) == _nice(os.getpid())


def test_an_agent_that_cannot_start_is_one_line() -> None:
    with pytest.raises(AgentProcessError, match="did not start") as err:  # noqa: SIM117
        with agent_process(token="short", pool_id=free_pool_id()):
            pass
    assert "\n" not in str(err.value)


def test_measuring_calls_gives_a_cost_per_call() -> None:
    cost = measure_agent_calls(batches=2, calls_per_batch=8, pool_id=free_pool_id())
    assert cost.calls_per_batch == 8 and len(cost.wall_s) == 2
    assert 0.0 < cost.per_call_s("client_cpu_s") < cost.per_call_s("wall_s") * 5
    assert cost.per_call_s("wall_s") > 0.0


def test_timing_a_worker_s_devices_needs_root_and_says_so_in_one_line() -> None:
    if os.geteuid() == 0:
        pytest.skip("as root it measures: the root test below")
    with pytest.raises(AgentProcessError, match="needs root") as err:
        measure_agent_devices(devices=2, rounds=1, pool_id=free_pool_id())
    assert "\n" not in str(err.value)


def test_only_the_limited_stages_are_leased() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path.endswith("/release"):
            return httpx.Response(200, json={})
        return httpx.Response(
            200,
            json={
                "lease_id": "l1",
                "stage": "AddCNI",
                "holder": "s/0",
                "ttl_s": 30.0,
                "expires_at_s": 1e9,
                "generation": 1,
            },
        )

    client = AgentClient("http://agent", token=TOKEN, transport=httpx.MockTransport(handler))
    admission = AgentAdmission(client, limited=("AddCNI",))
    assert admission.gated("AddCNI") and not admission.gated("StartVM")
    with admission.stage("StartVM", "s/0"):
        pass
    assert calls == []  # no permit to wait for: no call
    everything = AgentAdmission(client)
    assert everything.gated("StartVM")  # a config may be pushed during the storm
    client.close()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: makes namespaces")
@pytest.mark.skipif(
    not any(os.path.exists(os.path.join(d, "bridge")) for d in ("/usr/lib/cni", "/opt/cni/bin")),
    reason="needs the CNI plugins: apt-get install containernetworking-plugins",
)
def test_timing_a_worker_s_devices_gives_its_cpu_per_device() -> None:
    """Real plumbed namespaces (root, the bridge plugin): each round makes and
    removes them all; the agent's own CPU and its plugins' are apart, and
    its removals leave nothing of its own behind (the agent's exit sweeps)."""
    cost = measure_agent_devices(devices=3, rounds=1, pool_id=free_pool_id())
    assert cost.devices == 3 and cost.rounds == 1 and cost.plugin == "bridge"
    assert cost.per_device_s("make", ("wall_s",)) > 0.0
    assert cost.per_device_s("remove", ("wall_s",)) > 0.0
    assert cost.per_device_s("make", ("children_s",)) >= 0.0
