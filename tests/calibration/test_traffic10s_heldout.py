"""Issue 33's held-out traffic through a *searched* policy, ten minutes, on
this project's host (``traces/data/cni/traffic10s``, recorded 2026-11-30 by
its ``record.sh``): the CNI runtime's calibration plan, then the policy
``optimize --workload --slo-p99 2s`` chose on its profile for a seeded MMPP
it never saw (829 starts in 600 s, each VM stopped 5 s after it came up): a
netns-veth pool of 10 whose target follows the start rate, two refill
workers, four stage limits; the stream through a node agent running it,
twice, once on the bare node, and once through the policy cut to one
refill worker.

*Predict*: nothing held out is in the fit. The p99 per window meets the
issue's 20%; the empty-pool starts, the memory held and the SLO on the node
do not, and are held as known misses, as measured, with a margin.

**This set's agent had a defect** (mended the same day): it counted a start
at a sandbox's netns take, which a sandbox makes only after an empty
netns-veth take, so its rate-following targets followed the empty-pool
starts alone, where the model's follow every start. Its empty-pool starts
and pooled device-seconds measure that agent; ``traffic10f`` measures the
mended one. The model has since put an empty pool's ADD under AddCNI's
permit, as the runtime does (its empty-pool starts 45 -> 38 here).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from validate_rows import P99_WINDOWS, plan_refit, validate_rows

from bootstorm.calibration.trace_fit import Comparison
from bootstorm.models import Profile, TunedConfig
from bootstorm.traces import read_trace
from bootstorm.traces.workload import read_workload

DATA = Path(__file__).resolve().parents[2] / "traces" / "data" / "cni" / "traffic10s"
PROFILE = DATA / "plan" / "local.yaml"
POOLED = tuple(DATA / f"pooled-run{k}.jsonl.gz" for k in (1, 2))
STREAM = (DATA / "stream-run1.jsonl.gz",)
ONE_WORKER = (DATA / "one-worker-run1.jsonl.gz",)


def _rows(paths: tuple[Path, ...]) -> dict[str, Comparison]:
    return validate_rows(paths, Profile.from_yaml(PROFILE))


def test_the_policy_was_searched_on_the_plans_profile_for_a_stream_in_no_fit() -> None:
    workload = read_workload(DATA / "workload-mmpp101.csv")
    assert len(workload) == 829 and workload.duration_s == 600.0
    config = TunedConfig.from_yaml(DATA / "searched.yaml")
    assert config.origin is not None and config.origin.profile == "plan/local.yaml"
    assert config.pool_refill is not None and config.pool_refill.concurrency == 2
    assert config.pool_refill.follow_rate is not None
    # The runs ran the searched config itself (the header records it).
    for path in POOLED:
        assert read_trace(path).header.config == config
    tb = Profile.from_yaml(PROFILE).testbed
    assert tb is not None and tb.kernel_holders_pinned is False  # measured: 1.56x


def test_the_searched_policy_s_p99_per_window_is_within_the_issue_but_its_pool_is_not() -> None:
    """Two runs: p99 per 60-s window 1.091 ±0.090 s measured, -15.0%
    predicted (the issue: within 20%); empty-pool starts 77 against 29
    (-62.3%: the agent's targets followed the empty-pool starts alone, the
    module's text; -50.6% before the agent's worker was modelled as the
    agent, whose refills then queued on the testbed's GIL); idle pooled
    device-seconds +6.3% (the model's pool fuller)."""
    rows = _rows(POOLED)
    assert rows[P99_WINDOWS].measured == pytest.approx(1.091, abs=0.005)
    assert abs(rows[P99_WINDOWS].rel_error) <= 0.20
    empty = rows["empty-pool starts"]
    assert empty.measured == pytest.approx(77.0)
    assert -0.70 <= empty.rel_error <= -0.55  # the agent's defect, measured
    assert 0.03 <= rows["idle pooled device-s"].rel_error <= 0.10
    assert -0.24 <= rows["CPU busy per start_s"].rel_error <= -0.14


def test_the_policy_the_model_had_meet_its_slo_missed_it_on_the_node() -> None:
    """The SLO was 2 s of whole-run p99: 3.37 s on the node through the
    policy, 3.57 s bare; the model 2.26 s on the measured arrivals."""
    slo_s = 2.0
    pooled = _rows(POOLED)["startup p99_s"]
    assert pooled.measured == pytest.approx(3.373, abs=0.005)
    assert pooled.measured > slo_s >= pooled.predicted - 0.4
    bare = _rows(STREAM)["startup p99_s"]
    assert bare.measured > pooled.measured  # the policy bought a little
    assert -0.40 <= pooled.rel_error <= -0.25 and -0.40 <= bare.rel_error <= -0.25


def test_the_bare_stream_s_p99_per_window_is_within_this_time() -> None:
    rows = _rows(STREAM)
    assert rows[P99_WINDOWS].measured == pytest.approx(0.859, abs=0.005)
    assert 0.0 <= rows[P99_WINDOWS].rel_error <= 0.15
    assert -0.35 <= rows["startup mean_s"].rel_error <= -0.20


def test_one_refill_worker_the_node_s_tail_is_predicted_and_its_pool_is_not() -> None:
    """The same policy with one refill worker: whole-run p99 2.462 s on the
    node, -8.1% predicted (two workers: 3.373 s, -33.0%: the second
    worker's cost to the starts is what the model misses); empty-pool
    starts 163 against 86 (-47.2%, the agent's defect: the module's text;
    the second worker halved them on the node, 163 -> 77, and in the
    model, 86 -> 29)."""
    rows = _rows(ONE_WORKER)
    assert rows["startup p99_s"].measured == pytest.approx(2.462, abs=0.005)
    assert abs(rows["startup p99_s"].rel_error) <= 0.10
    assert abs(rows[P99_WINDOWS].rel_error) <= 0.20
    empty = rows["empty-pool starts"]
    assert empty.measured == pytest.approx(163.0)
    assert -0.55 <= empty.rel_error <= -0.40  # a known miss
    assert empty.measured > 1.8 * _rows(POOLED)["empty-pool starts"].measured


@pytest.mark.slow
def test_the_profile_is_the_plans_refit_byte_for_byte() -> None:
    assert plan_refit(DATA / "plan").to_yaml() == PROFILE.read_text()
