"""Issue 33's held-out traffic through a searched policy and the *mended*
agent, ten minutes, on this project's host (``traces/data/cni/traffic10f``,
recorded 2026-11-30 by its ``record.sh``): the CNI runtime's calibration
plan, then the policy ``optimize --workload --slo-p99 3s`` chose on its
profile for a seeded MMPP it never saw (837 starts in 600 s, each VM
stopped 5 s after it came up): a netns-veth pool of 133 and a netns pool of
6 whose targets follow the start rate, one refill worker, four stage
limits; the stream through a node agent running it, twice, and between
them once with two refill workers. Each stream started with the agent's
pools full (``record.sh`` waits for them), as the model's are.

The agent of ``traffic10s`` counted a start at a sandbox's netns take
(made only after an empty netns-veth take); this one counts its first ask.

*Predict*: nothing held out is in the fit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from validate_rows import P99_WINDOWS, plan_refit, validate_rows

from bootstorm.calibration.trace_fit import Comparison
from bootstorm.models import Profile, TunedConfig
from bootstorm.traces import read_trace
from bootstorm.traces.workload import read_workload

DATA = Path(__file__).resolve().parents[2] / "traces" / "data" / "cni" / "traffic10f"
PROFILE = DATA / "plan" / "local.yaml"
POOLED = tuple(DATA / f"pooled-run{k}.jsonl.gz" for k in (1, 2))
TWO_WORKERS = (DATA / "workers-2-run1.jsonl.gz",)


def _rows(paths: tuple[Path, ...]) -> dict[str, Comparison]:
    return validate_rows(paths, Profile.from_yaml(PROFILE))


def test_the_policy_was_searched_for_a_stream_in_no_fit_and_ran_from_full_pools() -> None:
    workload = read_workload(DATA / "workload-mmpp163.csv")
    assert len(workload) == 837 and workload.duration_s == 600.0
    config = TunedConfig.from_yaml(DATA / "searched.yaml")
    assert config.origin is not None and config.origin.profile == "plan/local.yaml"
    assert config.pools == {"netns": 6, "netns-veth": 133}
    assert config.pool_refill is not None and config.pool_refill.concurrency == 1
    assert config.pool_refill.follow_rate is not None
    for path in POOLED:
        trace = read_trace(path)
        assert trace.header.config == config
        first = next(s for s in trace.pool_levels if s.kind == "netns-veth")
        assert first.ready == 133


def test_the_memory_held_is_predicted_and_the_empty_pool_starts_are_short() -> None:
    """Two runs: idle pooled device-seconds +0.3%; empty-pool starts 19.5
    ±0.5 against 15 (-23.1%). Until the agent's worker was modelled as the
    agent (its own GIL, no HTTP call to itself, its own CPU per device, its
    removals as work: 2026-11-30) the model had 21 (+7.7%): its refills
    queued on the testbed's GIL and called the agent, which slowed them to
    about the node's pace by chance. A refill by Little's law from the
    levels: 59 ms on the node, 46 ms in the model."""
    rows = _rows(POOLED)
    empty = rows["empty-pool starts"]
    assert empty.measured == pytest.approx(19.5)
    assert -0.30 <= empty.rel_error <= -0.15  # a known miss: the node refills slower
    assert abs(rows["idle pooled device-s"].rel_error) <= 0.05


def test_the_policy_met_its_slo_on_the_node_where_the_model_put_it_above() -> None:
    """The SLO was 3 s of whole-run p99: 2.865 ±0.289 s on the node; the
    model 3.732 s on the measured arrivals (+30.3%: long, where every
    earlier set had it short), 2.99 s on the schedule in the search. The
    p99 per 60-s window is a known miss: 0.247 ±0.032 -> 0.164 s (-33.5%:
    most windows are quiet, their p99 a few starts'); the mean +19.2%."""
    rows = _rows(POOLED)
    p99 = rows["startup p99_s"]
    assert p99.measured == pytest.approx(2.865, abs=0.005)
    assert p99.measured < 3.0 < p99.predicted
    assert 0.15 <= p99.rel_error <= 0.35
    assert -0.40 <= rows[P99_WINDOWS].rel_error <= -0.25  # a known miss
    assert 0.10 <= rows["startup mean_s"].rel_error <= 0.25


def test_a_second_refill_worker_costs_the_node_more_than_the_model() -> None:
    """Two workers: no empty-pool start on the node or in the model, p99
    per window -0.7%, whole-run p99 4.855 s on the node against 4.393 s
    (-9.5%); one worker 2.865 against 3.732 s. The model has the second
    worker cost the tail (+18%), the node more (+69%)."""
    two = _rows(TWO_WORKERS)
    one = _rows(POOLED)
    assert two["empty-pool starts"].measured == two["empty-pool starts"].predicted == 0.0
    assert abs(two[P99_WINDOWS].rel_error) <= 0.10
    measured_cost = two["startup p99_s"].measured / one["startup p99_s"].measured
    predicted_cost = two["startup p99_s"].predicted / one["startup p99_s"].predicted
    assert measured_cost > 1.5 and 1.1 < predicted_cost < measured_cost


@pytest.mark.slow
def test_the_profile_is_the_plans_refit_byte_for_byte() -> None:
    assert plan_refit(DATA / "plan").to_yaml() == PROFILE.read_text()
