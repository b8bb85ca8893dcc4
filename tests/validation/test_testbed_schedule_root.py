"""Real storms on a schedule (root): arrivals, startup from each arrival,
pool takes, lifetimes, and an interrupt before most sandboxes started.

Assertions name only this test's run (its run id), never "no bst- object
at all": another root test's storm may run at the same moment.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import start_testbed_run

from bootstorm.validation.testbed.testing import leftovers_of

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, cgroups)"),
    pytest.mark.skipif(sys.platform != "linux", reason="Linux only"),
]

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")


def test_six_sandboxes_on_a_three_second_schedule() -> None:
    """Each sandbox arrives at its own time and starts then (not at once);
    its arrival in the trace is that time and its startup counts from it;
    the first three take the netns pool's namespaces, the others find it
    empty; every VM is stopped a lifetime after it came up."""
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed import StormOptions, run_storm, summarize

    arrival_s = (0.0, 0.4, 0.4, 1.5, 2.2, 3.0)
    options = StormOptions(
        sandboxes=6,
        arrival_s=arrival_s,
        lifetime_s=0.3,
        runtime="threads",
        vm=False,
        kernel_trace=False,
        settle_s=2.0,
        config=TunedConfig(pools={"netns": 3}),
    )
    result = run_storm(options)
    assert result.failures == ()
    trace = result.trace
    origin = trace.header.origin_s
    arrivals = {a.sandbox: a.t_s - origin for a in trace.arrivals}
    assert arrivals == pytest.approx(dict(enumerate(arrival_s)), abs=1e-9)
    first = {s.sandbox: s.start_s - origin for s in trace.spans if s.stage == "NetNS"}
    for i, at in enumerate(arrival_s):
        # Not before its time, and not long after it (a 2-core host, loaded).
        assert at - 1e-3 <= first[i] <= at + 0.5, (i, at, first[i])
    assert sorted({s.stage for s in trace.spans}) == sorted(STAGES)
    s = summarize(trace)
    assert s.completed == 6 and s.schedule_span_s == pytest.approx(3.0)
    ends = {}
    for span in trace.spans:
        ends[span.sandbox] = max(ends.get(span.sandbox, 0.0), span.end_s)
    startup = [ends[i] - (origin + at) for i, at in enumerate(arrival_s)]
    assert s.startup_mean_s == pytest.approx(float(np.mean(startup)))
    assert 0.0 < s.startup_p99_s < 2.0  # from its own arrival, not the origin (3 s)
    takes = [(p.sandbox, p.kind, p.taken, p.ready, p.target) for p in trace.pool_takes]
    assert [t[2] for t in takes] == [True, True, True, False, False, False]
    assert [t[3] for t in takes] == [2, 1, 0, 0, 0, 0] and {t[4] for t in takes} == {3}
    assert {t[0] for t in takes if not t[2]} == {3, 4, 5} and s.empty_pool_starts == 3
    notes = "\n".join(trace.header.notes)
    assert "scheduled starts: 6 of 6 over 3.000 s" in notes
    assert "lifetime 0.3 s: each VM stopped that long after it came up" in notes
    assert trace.header.scenario.lifetime_s == 0.3
    # Every VM outlived its 0.3 s before the last start was up: none is left to time.
    stopped_during = int(
        notes.split("lifetime 0.3 s: each VM stopped that long after it came up (")[1].split()[0]
    )
    assert (trace.header.vm_stops is None) == (stopped_during == 6)
    assert leftovers_of(result.run) == []


def test_sigint_before_most_sandboxes_started_leaves_nothing(tmp_path: Path) -> None:
    """Interrupted 1 s into a 20-second schedule, the run removes what its
    started sandboxes made and the not-yet-started ones never make anything."""
    from bootstorm.traces.workload import Workload, format_workload

    starts = np.linspace(0.0, 20.0, 12)
    workload = Workload(
        starts=starts,
        function=np.zeros(12, dtype=np.int32),
        functions=("f",),
        source="test",
        duration_s=20.0,
    )
    path = tmp_path / "node.csv"
    path.write_text(format_workload(workload))

    def started(run: str) -> bool:
        netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
        return any(n.startswith(f"bst-{run}-") for n in netns)

    proc, run = start_testbed_run(
        "--runtime",
        "threads",
        "--no-vm",
        "--no-kernel-trace",
        "--workload",
        str(path),
        "--lifetime-s",
        "5",
        started=started,
        timeout_s=40,
    )
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), err.decode()[-500:]
    assert proc.returncode == 130  # interrupted: 20 s of schedule were not over
    assert leftovers_of(run) == []


def test_an_agents_pool_takes_carry_its_levels(tmp_path: Path) -> None:
    """Through a node agent (as ``testbed run --agent`` passes it), each take
    of its netns pool is recorded with the ready level and target the agent
    answered, a device or ``pool empty``; and its pools' levels are sampled
    while the storm runs."""
    import time

    from conftest import TOKEN, free_pool_id, process_agent

    from bootstorm.models import TunedConfig
    from bootstorm.validation.agent import AgentAdmission, AgentClient
    from bootstorm.validation.testbed import StormOptions, run_storm

    config = TunedConfig(pools={"netns": 2}, lease_ttl_s=60)
    with (
        process_agent(tmp_path, "--pool-id", str(free_pool_id()), config=config) as agent,
        AgentClient(agent.url, token=TOKEN) as client,
    ):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the pool filled before the storm
            level = [
                line.rsplit(" ", 1)[1]
                for line in client.metrics().splitlines()
                if line.startswith('bootstorm_agent_pool_level{kind="netns"')
            ]
            if level and float(level[0]) >= 2:
                break
            time.sleep(0.2)
        options = StormOptions(
            sandboxes=4,
            arrival_s=(0.0, 0.0, 0.0, 0.5),
            runtime="threads",
            vm=False,
            kernel_trace=False,
            settle_s=2.0,
            config=config,
        )
        result = run_storm(options, admission=AgentAdmission(client))
    assert result.failures == ()
    # Its empty veth pool (kept at 0: no pool) is not recorded; netns is.
    assert {p.kind for p in result.trace.pool_takes} == {"netns"}
    netns = [p for p in result.trace.pool_takes if p.kind == "netns"]
    assert len(netns) == 4 and sum(p.taken for p in netns) >= 2
    assert all(p.target == 2 and p.ready is not None and 0 <= p.ready <= 2 for p in netns)
    # Its pools' levels sampled while the storm ran (they refill between
    # takes): the first before the origin, the last once every sandbox was up.
    levels = result.trace.pool_levels
    assert {s.kind for s in levels} == {"netns"} and len(levels) >= 3
    assert all(s.target == 2 and 0 <= s.ready <= 2 and s.making is not None for s in levels)
    assert [s.t_s for s in levels] == sorted(s.t_s for s in levels)
    assert levels[0].t_s <= result.trace.header.origin_s
    assert levels[-1].t_s >= max(s.end_s for s in result.trace.spans)
    assert not any("pool levels" in n for n in result.trace.header.notes)
    assert leftovers_of(result.run) == []
