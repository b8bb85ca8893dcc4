"""The testbed admitted by a real node agent (root): the agent's limits gate
the stages, its netns pool serves the NetNS stage, and the storm's devices
are gone afterwards."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
from conftest import TOKEN, free_pool_id, process_agent

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentAdmission
from bootstorm.validation.testbed import StormOptions, run_storm

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, cgroups, tracefs)"),
    pytest.mark.skipif(sys.platform != "linux", reason="Linux only"),
]


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(name) and (not labels or want in line):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{want}}} not in metrics")


def test_a_storm_admitted_by_the_node_agent(tmp_path: Path) -> None:
    from bootstorm.validation.agent import AgentClient

    config = TunedConfig(limits={"AttachIf": 2}, pools={"netns": 4}, lease_ttl_s=60)
    with (
        process_agent(tmp_path, "--pool-id", str(free_pool_id()), config=config) as agent,
        AgentClient(agent.url, token=TOKEN) as client,
    ):
        # Let the pool fill before the storm (refilled in the background).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if _metric(client.metrics(), "bootstorm_agent_pool_level", kind="netns") >= 4:
                break
            time.sleep(0.2)
        options = StormOptions(sandboxes=6, vm=False, kernel_trace=False, config=config)
        result = run_storm(options, admission=AgentAdmission(client))
        metrics = client.metrics()
    assert not result.failures
    assert len(result.trace.spans) == 6 * 5
    granted = _metric(metrics, "bootstorm_agent_leases_granted_total", stage="AttachIf")
    assert granted == 6
    assert _metric(metrics, "bootstorm_agent_stage_permits_high_water", stage="AttachIf") <= 2
    # The four made before the storm at least; the agent refills while it runs.
    assert 4 <= _metric(metrics, "bootstorm_agent_pool_taken_total", kind="netns") <= 6
    # Taken namespaces were the storm's to remove, the rest the agent's at its stop.
    pool_id = free_pool_id()
    left = [n for n in os.listdir("/run/netns") if re.match(rf"bstpool-netns-{pool_id}-", n)]
    assert left == []
