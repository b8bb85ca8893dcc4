"""The calibration plan recorded on this project's host against storms it
never ran (traces/data/plan/, traces/data/heldout/; docs/testbed.md, "Modelling your
own node"). Fitted here from the plan's traces and measured costs only.

Rows, each a *predict* row of the fitted profile with its tolerance:
- the moved peer at 100 sandboxes: makespan within ±15% (it was −65% with
  ``synchronize_net`` assumed at 0.5 ms instead of measured);
- pooled veth pairs are the slowest of the six 150-sandbox configs, as
  measured (the old profile ranked them best);
- the measured best of the six is the predicted best.
The levels miss by about −20% (a known miss, in docs/testbed.md's table).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstorm.calibration.trace_fit import StormStats, fit_storms, predicted_vs_measured
from bootstorm.models import Profile
from bootstorm.traces import read_trace
from bootstorm.validation.candidates import Candidate, compare_candidates

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"
CONFIGS = (
    "pool-netns",
    "pool-netns-veth",
    "pool-netns-and-veth",
    "limit-attachif4-cgroup8",
    "limit-addcni8",
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plan_profile() -> Profile:
    from bootstorm.workflows import load_measured

    traces = [read_trace(p) for p in sorted((DATA / "plan").glob("*.jsonl.gz"))]
    assert len(traces) == 30
    measured = load_measured(DATA / "plan" / "ops.json")
    return fit_storms(traces, measured=measured).profile


def _runs(name: str) -> list:
    return [read_trace(DATA / "heldout" / f"{name}-run{k}.jsonl.gz") for k in (1, 2, 3)]


def test_the_plan_identifies_the_move_by_measurement(plan_profile: Profile) -> None:
    ident = plan_profile.identification
    assert ident is not None
    assert ident.costs["testbed.rcu_grace_s"].status == "measured"
    assert plan_profile.testbed is not None
    assert plan_profile.testbed.rcu_grace_s > 10e-3  # 13.5 ms measured, not 0.5 ms


def test_predict_the_moved_peer_at_twice_the_plan_size(plan_profile: Profile) -> None:
    rows = {c.metric: c for c in predicted_vs_measured(_runs("moved100"), plan_profile)}
    assert abs(rows["makespan_s"].rel_error) < 0.15
    assert abs(rows["startup mean_s"].rel_error) < 0.15


def test_predict_the_ranking_of_six_configs_at_three_times_the_plan_size(
    plan_profile: Profile,
) -> None:
    from bootstorm.models import TunedConfig

    candidates = [Candidate(name="baseline")] + [
        Candidate(name=n, config=TunedConfig.from_yaml(DATA / "heldout" / f"{n}.yaml"))
        for n in CONFIGS
    ]
    traces = {c.name: _runs(c.name) for c in candidates}
    assert {StormStats.pooled(t).sandboxes for t in traces.values()} == {150}
    comparison = compare_candidates(traces, candidates, plan_profile)
    slowest = max(comparison.rows, key=lambda r: r.predicted_makespan_s)
    assert slowest.name == "pool-netns-and-veth"
    assert max(comparison.rows, key=lambda r: r.measured_makespan_s).name == slowest.name
    assert comparison.best_agrees
