"""Seed 000 §5.2-5.3: tuned concurrency limits, as predictions of the paper-000 model.

Rows S0-8, S0-9 and S0-10 of PAPER-TARGETS.md are *predict* rows: nothing
here is fitted. Each search is the seed's own budget — Bayes-style
optimisation (TPE), 50 trials, at 400 sandboxes — over the default space:
limits 1..N on the four stages of seed 000 §5.2 (see
``bootstorm.optimizers.DEFAULT_STAGES``). Numbers are held to ±15% relative,
trends to their direction. Misses are strict xfails with the measured numbers,
``raises=AssertionError``: a crash is a failure, not the known miss.
"""

from __future__ import annotations

import pytest

from bootstorm.calibration import PREDICT_TOLERANCE, known_miss
from bootstorm.models import Scenario, TunedConfig
from bootstorm.optimizers import Evaluator, OptimizeResult, StudySpec, optimize, run_scenario

pytestmark = pytest.mark.slow

SEED_000_TRIALS = 50  # §5.2: "the best set of parameters after 50 iterations"
STORM = Scenario(cni="ipvtap", sandboxes=400, profile="paper-000")
FULL_POOLS = {"netns": 400, "vport": 1, "ipvtap": 400}  # seed 000 §5.1, Fig. 14


def _tune(scenario: Scenario) -> OptimizeResult:
    return optimize(StudySpec(scenario=scenario, trials=SEED_000_TRIALS, sampler_seed=0))


@pytest.fixture(scope="module")
def tuned_400() -> OptimizeResult:
    return _tune(STORM)


@pytest.fixture(scope="module")
def tuned_pooled() -> OptimizeResult:
    return _tune(STORM.replace(pools=FULL_POOLS))


def _reduction(before_s: float, after_s: float) -> float:
    return 1.0 - after_s / before_s


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S0-8/cut").reason)
def test_s0_8_tuned_limits_cut_the_storm_18_8_percent(tuned_400: OptimizeResult) -> None:
    """S0-8: Bayes-tuned limits on 4 stages, 50 iterations: 20.9 → 17.0 s (−18.8%)."""
    cut = _reduction(tuned_400.baseline.makespan_s, tuned_400.best[0].metrics.makespan_s)
    assert cut == pytest.approx(0.188, rel=PREDICT_TOLERANCE), cut


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S0-8/cpu").reason)
def test_s0_8_tuned_limits_burn_less_cpu(tuned_400: OptimizeResult) -> None:
    """S0-8 (trend): with the limits, the storm burns less CPU in total (Fig. 18)."""
    before = run_scenario(STORM)
    after = run_scenario(STORM.replace(config=tuned_400.best[0].config))
    assert after.makespan_s < before.makespan_s
    assert after.cpu.busy_core_s < before.cpu.busy_core_s, (
        before.cpu.busy_core_s,
        after.cpu.busy_core_s,
    )


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S0-9/total").reason)
def test_s0_9_pooling_and_limits_cut_58_9_percent(
    tuned_400: OptimizeResult, tuned_pooled: OptimizeResult
) -> None:
    """S0-9: pooling + concurrency control: −58.9% against plain ipvtap."""
    cut = _reduction(tuned_400.baseline.makespan_s, tuned_pooled.best[0].metrics.makespan_s)
    assert cut == pytest.approx(0.589, rel=PREDICT_TOLERANCE), cut


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S0-9/on-top").reason)
def test_s0_9_limits_on_top_of_pooling_cut_18_1_percent(tuned_pooled: OptimizeResult) -> None:
    """S0-9: concurrency control alone on top of pooling: −18.1%.

    Held from the refit with the shared vPort's dependants (10.49 -> 8.46 s,
    -19.4%) until net_prio's walk and cgroup_mutex's hand-over were measured:
    the limits had broken the FIFO lockstep of cgroup_mutex, which a real
    kernel does not have (benchmarks/bench_cgroup_lockstep.py)."""
    cut = _reduction(tuned_pooled.baseline.makespan_s, tuned_pooled.best[0].metrics.makespan_s)
    assert cut == pytest.approx(0.181, rel=PREDICT_TOLERANCE), cut


#: How much of the storm the tuned limits other than AddCNI's may cut and still
#: count as "no gain of their own" (they move it by under 1% at every size).
OTHER_LIMITS_GAIN = 0.02


@pytest.mark.parametrize("sandboxes", [200, 600, 800])
def test_s0_10_limits_tuned_at_400_generalise(tuned_400: OptimizeResult, sandboxes: int) -> None:
    """S0-10 (trend): limits tuned at 400 still cut the storm at other sizes, and
    come close (±15%) to limits tuned at that size (Fig. 19).

    What the model says (checked here, so that the day it changes this test
    says so): the whole gain is AddCNI's limit. The search at 400 keeps
    AddCNI=2 and leaves the other three stages' limits too wide to bind
    (Cgroup=353, AttachIf=284, StartVM=128 with sampler seed 0); AddCNI=2
    alone gives the tuned makespan to the bit at 200, 400, 600 and 800
    sandboxes, the tuned config without it cuts nothing (+0.1..+0.6%), and the
    searches at 200, 600 and 800 settle on AddCNI=2 too. So in the model this
    row holds as "one limit on AddCNI generalises across sizes", a weaker
    statement than the seed's four tuned limits: it is evidence about the
    AddCNI limit only.
    """
    storm = STORM.replace(sandboxes=sandboxes)
    evaluator = Evaluator(base=storm)
    tuned = tuned_400.best[0].config
    plain_s = evaluator.evaluate(None).makespan_s
    general_s = evaluator.evaluate(tuned).makespan_s
    custom_s = _tune(storm).best[0].metrics.makespan_s
    assert general_s < plain_s, (plain_s, general_s)
    assert custom_s < plain_s, (plain_s, custom_s)
    assert general_s == pytest.approx(custom_s, rel=PREDICT_TOLERANCE), (general_s, custom_s)

    # Where the gain comes from: the tuned config with AddCNI's limit removed.
    assert "AddCNI" in tuned.limits, tuned.limits
    others = TunedConfig(limits={k: v for k, v in tuned.limits.items() if k != "AddCNI"})
    others_s = evaluator.evaluate(others).makespan_s
    assert _reduction(plain_s, others_s) < OTHER_LIMITS_GAIN, (
        "the limits other than AddCNI's now cut the storm by themselves: "
        "the docstring's finding no longer holds",
        plain_s,
        others_s,
        tuned.limits,
    )
    alone_s = evaluator.evaluate(TunedConfig(limits={"AddCNI": tuned.limits["AddCNI"]})).makespan_s
    assert alone_s == pytest.approx(general_s, rel=OTHER_LIMITS_GAIN), (alone_s, general_s)
