"""Identifiability: which costs a fit saw, and the cautions of what-ifs that
rest on the others (calibration/identify.py, trace_fit.fit_storms, plan.py).

The storms here are *synthetic recordings*: the testbed catalog simulated
under a known "true" profile, written as traces. A fit that never sees a
cost must say so when a what-if rests on it; a storm that uses the cost
must identify it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bootstorm.calibration import trace_fit
from bootstorm.calibration.identify import (
    ASSUMPTION_FACTOR,
    DECISION_EVEN_REL,
    DecisionCaution,
    decision_cautions,
    identification_of,
    unseen_directions_of,
    whatif_cautions,
)
from bootstorm.calibration.plan import calibration_plan
from bootstorm.models import (
    Identification,
    Profile,
    Scenario,
    TunedConfig,
    UnseenDirection,
    compile_scenario,
    load_profile,
)
from bootstorm.simulator import run_with
from bootstorm.traces import HostFacts, Trace
from bootstorm.validation.recording import from_recording

EXECUTOR = "compiled"

#: The node the synthetic storms come from: a move into a namespace costs
#: 8 ms (synchronize_net), sixteen times the fit's starting guess.
TRUE_RCU_S = 8e-3


@pytest.fixture(scope="module")
def truth() -> Profile:
    start = trace_fit.testbed_template(cores=2, memory_mib=2048, service_cv=0.05)
    return start.with_values(
        {
            "testbed.rcu_grace_s": TRUE_RCU_S,
            "testbed.py_op_cpu_s": 1e-3,
            "testbed.vm_boot_s": 0.1,
            "testbed.vm_boot_cpu_s": 0.02,
        },
        source="the synthetic node",
    )


def recorded(truth: Profile, *, sandboxes: int, moved: bool = False, seed: int = 1) -> Trace:
    """The catalog's storm under ``truth``, as the testbed would record it."""
    cni = "testbed-veth-moved" if moved else "testbed-veth"
    scenario = Scenario(cni=cni, sandboxes=sandboxes, profile="local")
    result = run_with(compile_scenario(scenario, seed=seed, profile=truth), "simpy", record=True)
    assert result.recording is not None
    trace = from_recording(
        result.recording, cni="veth-peer-moved" if moved else "veth-peer-in-netns"
    )
    header = trace.header.model_copy(
        update={"source": "testbed", "host": HostFacts(kernel="6.1", cores=2, memory_mib=2048)}
    )
    return dataclasses.replace(trace, header=header)


def test_a_zero_column_is_an_unseen_direction_and_a_full_rank_has_none() -> None:
    jac = np.array([[1.0, 0.0], [0.5, 0.0]])
    (d,) = unseen_directions_of(jac, ["a", "b"], error_rel=0.05)
    assert d.weights == {"b": 1.0}
    assert d.span_log == pytest.approx(math.log(4.0))
    assert unseen_directions_of(np.eye(2), ["a", "b"], error_rel=0.05) == []


def test_two_costs_seen_only_as_a_sum_leave_their_difference_unseen() -> None:
    jac = np.array([[1.0, 1.0], [2.0, 2.0]])
    (d,) = unseen_directions_of(jac, ["a", "b"], error_rel=0.05)
    assert d.weights["a"] == pytest.approx(-d.weights["b"], abs=1e-3)
    assert abs(d.weights["a"]) == pytest.approx(math.sqrt(0.5), abs=1e-3)


def test_a_built_in_profile_s_assumptions_are_its_unseen_directions() -> None:
    prof = load_profile("paper-000")
    ident = identification_of(prof)
    assumed = {p for p, s in prof.sources.items() if s.startswith("assumption")}
    paths = {p for d in ident.unseen for p in d.weights}
    assert paths and paths <= assumed
    assert "costs.rcu_grace_s" in paths
    assert all(d.span_log == pytest.approx(math.log(ASSUMPTION_FACTOR)) for d in ident.unseen)


def test_a_what_if_on_a_cost_it_does_not_use_gets_no_caution(truth: Profile) -> None:
    lone = Identification(
        error_rel=0.05,
        unseen=[UnseenDirection(weights={"testbed.rcu_grace_s": 1.0}, span_log=2.0, by="test")],
    )
    prof = truth.model_copy(update={"identification": lone})
    in_netns = Scenario(cni="testbed-veth", sandboxes=20, profile="local")
    assert whatif_cautions(in_netns, profile=prof, executor=EXECUTOR) == ()
    moved = in_netns.model_copy(update={"cni": "testbed-veth-moved"})
    (caution,) = whatif_cautions(moved, profile=prof, executor=EXECUTOR)
    assert caution.costs == "testbed.rcu_grace_s"
    assert "testbed.rcu_grace_s is unidentified" in caution.line()


def test_a_schedules_caution_moves_its_p99_not_its_span(truth: Profile) -> None:
    """Starts on a schedule end when the schedule does: a cost moves their
    p99 startup, which the caution names, while the makespan stays the span."""
    lone = Identification(
        error_rel=0.05,
        unseen=[UnseenDirection(weights={"testbed.rcu_grace_s": 1.0}, span_log=2.0, by="test")],
    )
    prof = truth.model_copy(update={"identification": lone})
    burst = Scenario(cni="testbed-veth-moved", sandboxes=20, profile="local")
    (at_once,) = whatif_cautions(burst, profile=prof, executor=EXECUTOR)
    assert at_once.sensitivity.headline == "makespan" and "moves the makespan" in at_once.line()
    spread = burst.replace(arrival_s=tuple(0.5 * k for k in range(20)))
    (scheduled,) = whatif_cautions(spread, profile=prof, executor=EXECUTOR)
    assert scheduled.sensitivity.headline == "p99 startup"
    assert "moves the p99 startup" in scheduled.line()
    assert scheduled.to_dict()["headline"] == "p99 startup"


def test_a_caution_names_what_a_cost_rests_on_whole(truth: Profile) -> None:
    """A long source was cut to 70 characters mid-word in every simulate's
    caution ("(seed 000 gives on…)"); its kind is shown whole, the full text
    stays in the profile's sources and in --json."""
    source = "assumption: " + "a long reason, " * 10 + "and its end"
    lone = Identification(
        error_rel=0.05,
        unseen=[UnseenDirection(weights={"testbed.rcu_grace_s": 1.0}, span_log=2.0, by=source)],
    )
    prof = truth.model_copy(update={"identification": lone})
    moved = Scenario(cni="testbed-veth-moved", sandboxes=20, profile="local")
    (caution,) = whatif_cautions(moved, profile=prof, executor=EXECUTOR)
    assert "is unidentified (assumption): within" in caution.line()
    assert caution.to_dict()["by"] == source


@pytest.fixture(scope="module")
def fitted_without_moves(truth: Profile) -> Profile:
    storms = [recorded(truth, sandboxes=20), recorded(truth, sandboxes=10)]
    return trace_fit.fit_storms(storms, executor=EXECUTOR, max_evaluations=60).profile


@pytest.fixture(scope="module")
def fitted_with_a_move(truth: Profile) -> Profile:
    storms = [
        recorded(truth, sandboxes=20),
        recorded(truth, sandboxes=10),
        recorded(truth, sandboxes=20, moved=True),
    ]
    return trace_fit.fit_storms(storms, executor=EXECUTOR, max_evaluations=60).profile


def test_a_fit_that_never_saw_a_move_cautions_a_what_if_that_moves(
    fitted_without_moves: Profile,
) -> None:
    ident = fitted_without_moves.identification
    assert ident is not None
    assert ident.costs["testbed.rcu_grace_s"].status == "unidentified"
    moved = Scenario(cni="testbed-veth-moved", sandboxes=40, profile="local")
    cautions = whatif_cautions(moved, profile=fitted_without_moves, executor=EXECUTOR)
    assert any("testbed.rcu_grace_s" in c.costs for c in cautions)


def test_a_storm_that_moves_identifies_the_move(
    fitted_with_a_move: Profile, truth: Profile
) -> None:
    ident = fitted_with_a_move.identification
    assert ident is not None
    assert ident.costs["testbed.rcu_grace_s"].status == "fitted"
    assert all("rcu_grace_s" not in d.weights for d in ident.unseen)
    moved = Scenario(cni="testbed-veth-moved", sandboxes=40, profile="local")
    cautions = whatif_cautions(moved, profile=fitted_with_a_move, executor=EXECUTOR)
    assert not any("rcu_grace_s" in c.costs for c in cautions)
    # ... and predicts a moved storm of twice the size the fit never saw.
    real = run_with(compile_scenario(moved, seed=3, profile=truth), EXECUTOR).makespan_s
    model = run_with(compile_scenario(moved, seed=3, profile=fitted_with_a_move), EXECUTOR)
    assert model.makespan_s == pytest.approx(real, rel=0.15)


def test_a_measured_cost_is_identified_without_a_storm_that_uses_it(truth: Profile) -> None:
    class Measured:
        path = "testbed.rcu_grace_s"
        value = TRUE_RCU_S
        low = 0.9 * TRUE_RCU_S
        high = 1.1 * TRUE_RCU_S
        how = "move_into_netns - link_up"

    report = trace_fit.fit_storms(
        [recorded(truth, sandboxes=20)],
        measured={Measured.path: Measured()},
        executor=EXECUTOR,
        max_evaluations=40,
    )
    ident = report.profile.identification
    assert ident is not None
    assert ident.costs["testbed.rcu_grace_s"].status == "measured"
    assert report.profile.testbed is not None
    assert report.profile.testbed.rcu_grace_s == pytest.approx(TRUE_RCU_S, rel=0.1)


def _decide(
    monkeypatch: pytest.MonkeyPatch,
    truth: Profile,
    *,
    makespans: tuple[float, float, float],
    p99s: tuple[float, float, float],
    scheduled: bool,
) -> tuple[DecisionCaution, ...]:
    """:func:`decision_cautions` for one candidate and one unseen direction,
    the storms' figures given (under the profile, then at the direction's
    two ends): the baseline's are 1.0 s, the candidate's these."""
    import types

    import bootstorm.calibration.identify as identify

    def figures(storms: list[object], seed: object, executor: object) -> list[object]:
        out = []
        for k in range(3):
            for m, p in ((1.0, 1.0), (makespans[k], p99s[k])):
                out.append(
                    types.SimpleNamespace(makespan_s=m, startup=types.SimpleNamespace(p99=p))
                )
        assert len(storms) == len(out)
        return out

    monkeypatch.setattr(identify, "_summaries", figures)
    one = Identification(
        error_rel=0.05,
        unseen=[UnseenDirection(weights={"testbed.rcu_grace_s": 1.0}, span_log=1.0, by="test")],
    )
    prof = truth.model_copy(update={"identification": one})
    base = Scenario(
        cni="testbed-veth",
        sandboxes=3,
        profile="local",
        arrival_s=(0.0, 1.0, 2.0) if scheduled else None,
    )
    pooled = base.replace(config=TunedConfig(pools={"netns": 3}))
    return decision_cautions({"p": pooled}, baseline=base, profile=prof)


def test_a_schedules_decision_is_its_p99s_not_its_span(
    monkeypatch: pytest.MonkeyPatch, truth: Profile
) -> None:
    """On a schedule the makespan is the schedule's span: a config moves it
    by noise (+0.001% here, -0.001% there), which decides nothing, while its
    p99 is what the SLO reads."""
    span_noise = (1.00001, 0.99999, 1.00001)
    assert _decide(monkeypatch, truth, makespans=span_noise, p99s=(0.5,) * 3, scheduled=True) == ()
    flags = _decide(monkeypatch, truth, makespans=(1.0,) * 3, p99s=(0.9, 1.1, 0.8), scheduled=True)
    assert [(f.figure, f.gain_rel_moved) for f in flags] == [("p99 startup", pytest.approx(0.1))]
    assert "p99 startup -10.0% against the baseline, but +10.0%" in flags[0].line()


def test_a_flip_between_two_even_gains_is_no_caution(
    monkeypatch: pytest.MonkeyPatch, truth: Profile
) -> None:
    """Released at once the makespan decides; a gain under DECISION_EVEN_REL
    either way is even, and a flip between evens is not one."""
    tiny = 0.5 * DECISION_EVEN_REL
    evens = (1 - tiny, 1 + tiny, 1 - tiny)
    assert _decide(monkeypatch, truth, makespans=evens, p99s=(1.0,) * 3, scheduled=False) == ()
    # Even under the profile, clearly worse at an end: the end decides against it.
    flags = _decide(
        monkeypatch, truth, makespans=(1 - tiny, 1.03, 1.0), p99s=(1.0,) * 3, scheduled=False
    )
    assert [(f.figure, f.gain_rel) for f in flags] == [("makespan", pytest.approx(-tiny))]


def test_a_decision_that_flips_along_an_unseen_cost_is_flagged(truth: Profile) -> None:
    """Pooling veth pairs saves the pair's creation but moves each peer: with
    the move unidentified over a wide range the gain cannot be decided."""
    wide = Identification(
        error_rel=0.05,
        unseen=[UnseenDirection(weights={"testbed.rcu_grace_s": 1.0}, span_log=3.0, by="test")],
    )
    # Making a pair costs 8 ms under RTNL: pooling wins while a move is
    # cheap (2 ms, 0.1 ms) and loses at 40 ms, the far end of the range.
    prof = truth.with_values(
        {"testbed.rcu_grace_s": 2e-3, "testbed.rtnl_veth_hold_s": 8e-3}
    ).model_copy(update={"identification": wide})
    base = Scenario(cni="testbed-veth", sandboxes=30, profile="local")
    pooled = base.replace(config=TunedConfig(pools={"netns": 30, "veth": 30}))
    flags = decision_cautions({"veth pool": pooled}, baseline=base, profile=prof, executor=EXECUTOR)
    assert [f.candidate for f in flags] == ["veth pool"]
    assert "cannot decide" in flags[0].line()
    none = Identification(error_rel=0.05)
    sure = prof.model_copy(update={"identification": none})
    assert decision_cautions({"p": pooled}, baseline=base, profile=sure, executor=EXECUTOR) == ()


def test_the_plan_includes_a_move_once_the_move_is_known_to_be_large(truth: Profile) -> None:
    """Linearised at a start where a move is cheap no storm shows it; at the
    measured 8 ms the plan adds a storm that moves peers."""
    plan = calibration_plan(sandboxes=20, start=truth, executor=EXECUTOR)
    assert plan.storms[0].name == "20"
    moving = [s for s in plan.storms if s.peer == "moved" or "veth" in s.pools]
    assert moving, plan.describe()
    assert len(plan.storms) < 12


def test_the_plan_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="runs: must be at least 1, but got 0"):
        calibration_plan(sandboxes=20, runs=0)
    with pytest.raises(ValueError, match="pool_kinds: unknown kind 'tap'"):
        calibration_plan(sandboxes=20, pool_kinds=("tap",))
