"""A five-minute held-out stream recorded after the plan measured a lone
cgroup attach's grace period and a node agent's CPU per plumbed namespace
(``traces/data/cni/traffic5g``, 2026-11-30, by its ``record.sh``): the CNI
runtime's calibration plan, whose ``measure-ops`` now times both, then a
seeded MMPP it never saw (312 starts in 300 s, VMs stopped 5 s after they
came up), once on the bare node and once through a node agent refilling a
netns-veth pool of 10 with one worker.

*Predict*: nothing held out is in the fit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from validate_rows import P99_WINDOWS, plan_refit, validate_rows

from bootstorm.calibration.trace_fit import Comparison
from bootstorm.models import Profile
from bootstorm.traces.workload import read_workload

DATA = Path(__file__).resolve().parents[2] / "traces" / "data" / "cni" / "traffic5g"
PROFILE = DATA / "plan" / "local.yaml"
STREAM = (DATA / "stream-run1.jsonl.gz",)
POOLED = (DATA / "pooled-run1.jsonl.gz",)
CGROUP_WAIT = "cgroup_mutex wait in Cgroup"


def _rows(paths: tuple[Path, ...]) -> dict[str, Comparison]:
    return validate_rows(paths, Profile.from_yaml(PROFILE))


def test_the_plan_measured_the_grace_period_and_the_agent_s_cpu() -> None:
    assert len(read_workload(DATA / "workload-mmpp211.csv")) == 312
    profile = Profile.from_yaml(PROFILE)
    c = profile.testbed
    assert c is not None and c.cgroup_attach_grace_s is not None
    assert 0.003 < c.cgroup_attach_grace_s < 0.02  # a few ticks at HZ=250
    assert c.agent_make_cpu_s is not None and c.agent_remove_cpu_s is not None
    for path in ("cgroup_attach_grace_s", "agent_make_cpu_s", "agent_remove_cpu_s"):
        assert "measure-ops" in profile.sources[f"testbed.{path}"]


def test_the_bare_stream_is_predicted() -> None:
    """p99 per 60-s window 0.172 s measured, -7.8% predicted; mean +1.2%,
    whole-run p99 +2.1%; RTNL's waits within 4 points in every stage. The
    cgroup_mutex wait in Cgroup: 62% of the stage on the node, 14% in the
    model (0 without the grace period): a known miss, smaller."""
    rows = _rows(STREAM)
    assert rows[P99_WINDOWS].measured == pytest.approx(0.172, abs=0.001)
    assert abs(rows[P99_WINDOWS].rel_error) <= 0.15
    assert abs(rows["startup mean_s"].rel_error) <= 0.10
    assert abs(rows["startup p99_s"].rel_error) <= 0.10
    for stage in ("NetNS", "AddCNI", "AttachIf", "StartVM"):
        assert abs(rows[f"rtnl wait in {stage}"].rel_error) <= 0.05, stage  # points
    wait = rows[CGROUP_WAIT]
    assert wait.measured > 0.5 and 0.05 < wait.predicted < wait.measured


def test_the_refilled_pool_is_predicted() -> None:
    """A static pool of 10, one worker: empty-pool starts 15 against 13
    (-13.3%), idle pooled device-seconds +0.1%, p99 per window +8.5%,
    whole-run p99 -2.4%."""
    rows = _rows(POOLED)
    empty = rows["empty-pool starts"]
    assert empty.measured == pytest.approx(15.0)
    assert abs(empty.rel_error) <= 0.20
    assert abs(rows["idle pooled device-s"].rel_error) <= 0.02
    assert abs(rows[P99_WINDOWS].rel_error) <= 0.15
    assert abs(rows["startup p99_s"].rel_error) <= 0.10


@pytest.mark.slow
def test_the_profile_is_the_plans_refit_byte_for_byte() -> None:
    assert plan_refit(DATA / "plan").to_yaml() == PROFILE.read_text()
