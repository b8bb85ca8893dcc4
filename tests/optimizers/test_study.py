"""Searches: common random numbers, constraints, Pareto fronts, samplers by name."""

from __future__ import annotations

import itertools
import os
import re
import socket
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from bootstorm.models import ConfigError, Scenario, TunedConfig
from bootstorm.optimizers import (
    SAMPLERS,
    Constraints,
    Evaluator,
    IntRange,
    Metrics,
    SearchSpace,
    StudySpec,
    make_sampler,
    optimize,
    read_study,
)
from bootstorm.optimizers._study import _SURPLUS_ATTR
from bootstorm.simulator import ProgramError

SMALL = Scenario(sandboxes=40)


def _space(**pools: IntRange) -> SearchSpace:
    return SearchSpace(
        cni="ipvtap",
        limits={"AddCNI": IntRange(low=1, high=40), "Cgroup": IntRange(low=1, high=40)},
        pools=pools,
        pool_device_mib={"netns": 0.18, "vport": 0.3, "ipvtap": 0.3},
    )


def test_same_config_gives_identical_objective() -> None:
    """Common random numbers: a config is judged on the very same storms each time."""
    config = TunedConfig(limits={"Cgroup": 5})
    first = Evaluator(base=SMALL, seeds=(0, 1)).evaluate(config)
    again = Evaluator(base=SMALL, seeds=(0, 1)).evaluate(config)
    assert first == again
    other_seed = Evaluator(base=SMALL, seeds=(2,)).evaluate(config)
    assert other_seed != first


def test_robust_worst_is_at_least_the_mean() -> None:
    config = TunedConfig(limits={"Cgroup": 5})
    mean = Evaluator(base=SMALL, sizes=(20, 40), seeds=(0, 1), robust="mean").evaluate(config)
    worst = Evaluator(base=SMALL, sizes=(20, 40), seeds=(0, 1), robust="worst").evaluate(config)
    assert worst.makespan_s > mean.makespan_s
    big = Evaluator(base=SMALL, sizes=(40,)).evaluate(config)
    assert worst.makespan_s >= big.makespan_s


def test_bad_storms_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^seeds: must hold each value once \(got \(1, 1\)\)$"):
        Evaluator(base=SMALL, seeds=(1, 1))
    with pytest.raises(ConfigError, match=r"^robust: must be one of mean, worst \(got 'max'\)$"):
        Evaluator(base=SMALL, robust="max")  # type: ignore[arg-type]


def test_search_beats_the_baseline_and_is_reproducible() -> None:
    spec = StudySpec(scenario=SMALL, space=_space(), trials=15, sampler="tpe")
    first = optimize(spec)
    assert first.completed == 15
    assert first.best[0].metrics.makespan_s <= first.baseline.makespan_s
    again = optimize(spec)
    assert again.best[0].number == first.best[0].number
    assert again.best[0].metrics == first.best[0].metrics


def test_memory_budget_is_respected() -> None:
    budget = 5.0  # MiB: room for some netns devices, never for 40 of each kind
    spec = StudySpec(
        scenario=SMALL,
        space=_space(
            netns=IntRange(low=0, high=40, log=False), ipvtap=IntRange(low=0, high=40, log=False)
        ),
        trials=20,
        constraints=Constraints(memory_budget_mib=budget),
    )
    result = optimize(spec)
    assert result.feasible < result.completed  # the budget did bind on some trials
    assert result.best and result.best[0].metrics.memory_mib <= budget
    assert result.best[0].feasible


def test_impossible_slo_leaves_no_best_and_says_why() -> None:
    spec = StudySpec(
        scenario=SMALL, space=_space(), trials=5, constraints=Constraints(p99_slo_s=1e-3)
    )
    result = optimize(spec)
    assert result.best == ()
    with pytest.raises(ConfigError, match="no trial met"):
        result.tuned_config()


def test_two_objectives_give_a_pareto_front(tmp_path: Path) -> None:
    spec = StudySpec(
        storage=f"sqlite:///{tmp_path}/pareto.db",
        scenario=SMALL,
        space=_space(netns=IntRange(low=0, high=40, log=False)),
        objectives=("makespan", "memory"),
        sampler="nsga2",
        trials=30,
    )
    result = optimize(spec)
    front = result.best
    assert len(front) >= 2
    points = [(p.metrics.makespan_s, p.metrics.memory_mib) for p in front]
    # Sorted by makespan, a front trades time for memory: memory strictly falls.
    assert points == sorted(points)
    assert all(b[1] < a[1] for a, b in itertools.pairwise(points))
    # No completed trial of the study dominates a point of the front.
    every = [(t.values[0], t.values[1]) for t in spec.open_study().trials if t.values]
    assert len(every) == 30
    for p in points:
        assert not any(o[0] <= p[0] and o[1] <= p[1] and o != p for o in every)


@pytest.mark.parametrize("name", ["tpe", "cmaes", "nsga2", "random"])
def test_samplers_by_name_run(name: str) -> None:
    spec = StudySpec(scenario=SMALL, space=_space(), trials=4, sampler=name, storage=None)
    result = optimize(spec)
    assert result.completed == 4


def test_unknown_sampler_names_the_value() -> None:
    with pytest.raises(ConfigError, match=r"sampler: unknown sampler 'bayes'; known: tpe"):
        StudySpec(scenario=SMALL, sampler="bayes")


def test_cmaes_refuses_two_objectives_and_constraints() -> None:
    with pytest.raises(ConfigError, match="'cmaes' optimises one objective, but got 2"):
        StudySpec(scenario=SMALL, sampler="cmaes", objectives=("makespan", "memory"))
    with pytest.raises(ConfigError, match="'cmaes' does not support constraints"):
        StudySpec(scenario=SMALL, sampler="cmaes", constraints=Constraints(p99_slo_s=5.0))


def test_gp_without_torch_says_how_to_install_it() -> None:
    pytest.importorskip("optuna")
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"'gp' needs the 'torch' package; pip install"):
            make_sampler("gp", seed=0, n_objectives=1)
    else:
        assert make_sampler("gp", seed=0, n_objectives=1) is not None
    assert set(SAMPLERS) == {"tpe", "gp", "cmaes", "nsga2", "random"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"objectives": ("speed",)}, "objective: unknown objective 'speed'"),
        ({"objectives": ()}, "objective: give at least one"),
        ({"trials": 0}, "trials: must be an integer within 1..100000 (got 0)"),
        ({"constraints": None}, None),
    ],
)
def test_bad_specs_name_field_and_value(changes: dict[str, object], message: str | None) -> None:
    if message is None:
        with pytest.raises(
            ConfigError,
            match=r"^memory_budget_mib: must be a finite number > 0 and <= 1\.07374e\+09 MiB",
        ):
            Constraints(memory_budget_mib=-1.0)
        return
    with pytest.raises(ConfigError, match=re.escape(message)):
        StudySpec(scenario=SMALL, **changes)  # type: ignore[arg-type]


def test_constraint_values_follow_optunas_sign() -> None:
    c = Constraints(memory_budget_mib=100.0, p99_slo_s=10.0)
    ok = Metrics(makespan_s=1.0, mean_s=1.0, p99_s=9.0, memory_mib=50.0)
    bad = Metrics(makespan_s=1.0, mean_s=1.0, p99_s=12.0, memory_mib=50.0)
    assert c.values(ok) == (-50.0, -1.0) and c.feasible(ok)
    assert c.values(bad) == (-50.0, 2.0) and not c.feasible(bad)


def test_a_study_refuses_another_search_under_its_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    optimize(StudySpec(scenario=SMALL, space=_space(), trials=2, storage=url, study_name="a"))
    # Resuming the same search adds trials up to the new total.
    spec = StudySpec(scenario=SMALL, space=_space(), trials=4, storage=url, study_name="a")
    assert optimize(spec).completed == 4
    assert read_study(spec).completed == 4
    other = StudySpec(scenario=Scenario(sandboxes=30), trials=2, storage=url, study_name="a")
    with pytest.raises(ConfigError, match="study_name: study 'a' in this storage is a different"):
        optimize(other)


@pytest.mark.slow
def test_two_local_workers_share_a_sqlite_study(tmp_path: Path) -> None:
    spec = StudySpec(
        scenario=Scenario(sandboxes=100),
        space=_space(),
        trials=40,
        storage=f"sqlite:///{tmp_path}/jobs.db",
    )
    me = f"{socket.gethostname()}:{os.getpid()}"

    def wait_for_the_helper(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        # A trial takes milliseconds and a spawned worker seconds to import:
        # hold this worker back (bounded) until the helper has a trial of its own.
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline:
            if any(t.user_attrs.get("worker", me) != me for t in study.get_trials(deepcopy=False)):
                return
            time.sleep(0.05)

    result = optimize(spec, jobs=2, callbacks=[wait_for_the_helper])
    assert 40 <= result.completed <= 41  # the helper may finish the trial it had started
    study = spec.open_study()
    # Two workers asking at once for the last place: the later trial is failed
    # as surplus before it runs, and so never gets a worker's name.
    surplus = [t for t in study.trials if t.system_attrs.get(_SURPLUS_ATTR)]
    assert all(t.state == TrialState.FAIL for t in surplus)
    ran = [t for t in study.trials if t not in surplus]
    workers = {t.user_attrs["worker"] for t in ran}
    assert len(workers) == 2, workers


def test_both_executors_evaluate_a_config_alike() -> None:
    base = Scenario(cni="ipvtap", sandboxes=80)
    config = TunedConfig(limits={"AddCNI": 4, "StartVM": 30}, pools={"netns": 40})
    compiled = Evaluator(base=base, seeds=(0, 1)).evaluate(config)
    simpy = Evaluator(base=base, seeds=(0, 1), executor="simpy").evaluate(config)
    assert compiled == simpy
    assert compiled != Evaluator(base=base, seeds=(0, 1)).evaluate(None)


def test_an_unknown_executor_is_refused_before_any_trial() -> None:
    with pytest.raises(
        ProgramError,
        match=re.escape("executor: must be one of compiled, simpy, python (got 'numba')"),
    ):
        StudySpec(scenario=Scenario(sandboxes=10), executor="numba").evaluator()  # type: ignore[arg-type]
