"""A testbed storm through ``bootstorm-cni`` (root): the cni runtime execs the
plugin as containerd would (its conflist wraps the bridge plugin), the plugin
takes each AddCNI permit from the node agent, the trace shows the plugin's
own time beside its delegate's, and nothing is left."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import CNI_ROOT_MARKS, TOKEN, process_agent
from test_cni_root import _host_links, _objects_of

from bootstorm.models import TunedConfig

if TYPE_CHECKING:
    from bootstorm.validation.testbed import StormResult

pytestmark = [
    *CNI_ROOT_MARKS,
    pytest.mark.skipif(shutil.which("cc") is None, reason="the compiled front end needs cc"),
]


def _counter(metrics: str, family: str, stage: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(family) and f'stage="{stage}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _storm_through_agent(
    tmp_path: Path, config: TunedConfig, *, sandboxes: int, every: int
) -> tuple[StormResult, str]:
    """A cni storm of ``sandboxes`` (no VMs) through bootstorm-cni for one
    sandbox in ``every``, admitted by a node agent process with ``config``;
    the storm's result and the agent's metrics after it."""
    from bootstorm.validation.agent import AgentAdmission, AgentClient
    from bootstorm.validation.testbed import StormOptions, run_storm

    with (
        process_agent(tmp_path, config=config) as agent,
        AgentClient(agent.url, token=TOKEN) as client,
    ):
        options = StormOptions(
            sandboxes=sandboxes,
            vm=False,
            kernel_trace=False,
            runtime="cni",
            config=config,
            cni_wrapper="bootstorm-cni",
            cni_wrapper_every=every,
        )
        result = run_storm(options, admission=AgentAdmission(client))
        return result, client.metrics()


def test_a_storm_through_bootstorm_cni_takes_its_permits_from_the_agent(tmp_path: Path) -> None:
    n = 6
    links_before = _host_links()
    config = TunedConfig(limits={"AddCNI": 2, "StartVM": 3}, lease_ttl_s=60)
    result, metrics = _storm_through_agent(tmp_path, config, sandboxes=n, every=1)
    assert result.failures == ()
    # The plugin, not the driver, took AddCNI's permits: one per sandbox.
    assert _counter(metrics, "bootstorm_agent_leases_granted_total", "AddCNI") == n
    assert _counter(metrics, "bootstorm_agent_leases_released_total", "AddCNI") == n
    trace = result.trace
    adds = [e for e in trace.execs if e.command == "ADD" and e.stage == "AddCNI"]
    wrapped = {e.sandbox for e in adds if e.program == "bootstorm-cni"}
    inner = {e.sandbox for e in adds if e.program == "bridge"}
    assert wrapped == inner == set(range(n))  # its own exec, and its delegate's inside
    for outer in (e for e in adds if e.program == "bootstorm-cni"):
        delegate = next(e for e in adds if e.program == "bridge" and e.sandbox == outer.sandbox)
        assert outer.start_s <= delegate.start_s and delegate.end_s <= outer.end_s
    assert any(note.startswith("bootstorm-cni: median ADD") for note in trace.header.notes)
    assert _objects_of(result.run, links_before) == []


def test_half_a_storm_through_bootstorm_cni_compares_like_with_like(tmp_path: Path) -> None:
    """``cni_wrapper_every=2``: sandboxes 0, 2, 4 go through the plugin (it
    takes their AddCNI permit), 1, 3, 5 exec the bridge themselves (the
    driver takes theirs): every sandbox admitted once, and the trace's note
    weighs the two ADDs of the same storm."""
    from bootstorm.validation.testbed import wrapper_split

    n = 6
    links_before = _host_links()
    config = TunedConfig(limits={"AddCNI": 2}, lease_ttl_s=60)
    result, metrics = _storm_through_agent(tmp_path, config, sandboxes=n, every=2)
    assert result.failures == ()
    assert _counter(metrics, "bootstorm_agent_leases_granted_total", "AddCNI") == n
    assert _counter(metrics, "bootstorm_agent_leases_released_total", "AddCNI") == n
    adds = [e for e in result.trace.execs if e.command == "ADD" and e.stage == "AddCNI"]
    assert {e.sandbox for e in adds if e.program == "bootstorm-cni"} == {0, 2, 4}
    assert {e.sandbox for e in adds if e.program == "bridge"} == set(range(n))
    split = wrapper_split(result.trace.execs)
    assert split is not None and (split.wrapped, split.plain) == (3, 3)
    assert any("alone in the same storm" in note for note in result.trace.header.notes)
    assert _objects_of(result.run, links_before) == []
