"""Searches on the model: an Optuna study over limits and pools (``optimize``),
and a what-if grid on Dask (``sweep``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._params import short_repr
from ..models import ConfigError, Scenario, TunedConfig
from .whatif import Identification, KnownMisses, identification, known_misses

if TYPE_CHECKING:
    from ..calibration.identify import DecisionCaution
    from ..optimizers import OptimizeResult, StudySpec, SweepGrid

__all__ = [
    "DEFAULT_STORAGE",
    "MAX_AXIS_VALUES",
    "MAX_SWEEP_POINTS",
    "ChosenConfig",
    "SearchRun",
    "SweepOutcome",
    "choose_config",
    "default_study_storage",
    "run_search",
    "run_sweep",
    "study_spec",
    "sweep_grid",
]

DEFAULT_STORAGE = "default"
"""``--storage``'s default: the Optuna journal file :func:`default_study_storage`
names. A journal costs a trial a tenth of the simulation where SQLite cost
six times it; ``sqlite:///study.db`` still opens a study kept there before."""

#: Most points in one sweep. Each is a storm (~0.1-1 s compiled at 400
#: sandboxes), and the grid is a cross product that a few long lists make
#: astronomical (5 axes of 1 000 values: 10¹⁵ points, built before any runs).
MAX_SWEEP_POINTS = 10_000
#: Most values on one axis (``--sandboxes 1,2,...``).
MAX_AXIS_VALUES = 1_000


def default_study_storage() -> Path:
    """The journal file every study of this user goes to unless ``--storage`` says
    otherwise: ``$XDG_STATE_HOME/bootstorm/studies.log`` (``~/.local/state/...``).

    Not the working directory: a search run from a notebook's folder, a
    checkout or ``/tmp`` is found again by the next one, and nothing lands
    beside the user's files unasked. Studies in it are told apart by name.
    """
    import os

    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "bootstorm" / "studies.log"


def _names(field: str, text: str | None, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if text.strip() == "all":
        return allowed
    for n in names:
        if n not in allowed:
            raise ConfigError(f"{field}: unknown name {short_repr(n)}; known: {', '.join(allowed)}")
    if not names:
        raise ConfigError(f"{field}: expected comma-separated names, but got {short_repr(text)}")
    return names


def study_spec(
    base: Scenario,
    *,
    trials: int,
    objectives: Sequence[str],
    sampler: str,
    stages: str | None,
    pools: str | None,
    seeds: Sequence[int],
    sizes: Sequence[int],
    robust: str,
    memory_budget_mib: float | None,
    p99_slo_s: float | None,
    storage: str,
    study_name: str | None,
    sampler_seed: int,
    heartbeat_s: float,
    executor: str,
    refill: bool = False,
    max_pool: int | None = None,
    max_refill_workers: int | None = None,
    starts_from: Sequence[TunedConfig] = (),
) -> StudySpec:
    """The study of a search on ``base``: the default space over ``stages``
    and ``pools`` (comma-separated names, ``all``, or None for the defaults),
    kept in ``storage`` (:data:`DEFAULT_STORAGE`, ``memory``, a journal file
    or a database URL). ``refill``: the pools refill while starts go on, and
    the search also chooses how (workers, a static or a rate-following
    target: :class:`~bootstorm.optimizers.RefillSpace`); ``max_pool``: the
    largest pool searched (default: the storm's size);
    ``max_refill_workers``: the most refill workers searched (a node agent
    that runs fewer); ``starts_from``: configs the study tries first
    (:attr:`StudySpec.starts_from`). Everything is checked before a study is
    made."""
    from ..models import load_profile, scenario_pool_kinds, scenario_stages
    from ..optimizers import Constraints, IntRange, RefillSpace, SearchSpace, StudySpec
    from ..optimizers._storage import is_url, prepare_journal

    space = SearchSpace.default(
        cni=base.cni,
        sandboxes=max((*sizes, base.sandboxes)),
        profile=load_profile(base.profile),
        stages=_names("stages", stages, scenario_stages(base.cni)),
        pool_kinds_searched=_names("pools", pools, scenario_pool_kinds(base.cni)) or (),
    )
    if max_pool is not None:
        space = dataclasses.replace(
            space,
            pools={
                k: IntRange(low=r.low, high=max(min(r.high, max_pool), r.low), log=r.log)
                for k, r in space.pools.items()
            },
        )
    if refill:
        # Refilled pools are searched on a log scale from one device: the
        # least memory is a few devices per kind, which a linear range up to
        # twice the largest burst all but never samples (a 60-trial search
        # held 4-7x the memory of a hand-picked small floor).
        space = dataclasses.replace(
            space,
            pools={
                k: IntRange(low=1, high=max(r.high, 2), log=True) for k, r in space.pools.items()
            },
            refill=RefillSpace()
            if max_refill_workers is None
            else RefillSpace(workers=IntRange(low=1, high=max_refill_workers, log=False)),
            # A limit of a workload's every start binds nothing: left out.
            unbound_limit=max((*sizes, base.sandboxes)),
        )
    if storage == DEFAULT_STORAGE:
        journal = default_study_storage()
        try:
            journal.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(
                f"storage: cannot make {str(journal.parent)!r} ({e.strerror}); "
                "name a journal file with --storage"
            ) from None
        storage = str(journal)
    spec = StudySpec(
        scenario=base,
        space=space,
        objectives=tuple(objectives or ("makespan",)),
        sampler=sampler,
        trials=trials,
        seeds=tuple(seeds),
        sizes=tuple(sizes),
        robust=robust,  # checked by the evaluator
        constraints=Constraints(memory_budget_mib=memory_budget_mib, p99_slo_s=p99_slo_s),
        storage=None if storage == "memory" else storage,
        study_name=study_name,
        sampler_seed=sampler_seed,
        heartbeat_interval_s=heartbeat_s,
        executor=executor,
        starts_from=tuple(starts_from),
    )
    spec.evaluator()  # bad seeds, sizes or robust fail here, before the study is made
    if spec.storage is not None and not is_url(spec.storage):
        # A device, a FIFO or a folder refused, and a damaged tail set aside
        # (its one line said), before the search and its progress bar start.
        prepare_journal(Path(spec.storage).expanduser())
    return spec


@dataclass(frozen=True, kw_only=True)
class SearchRun:
    """A search's study as it stands after this process's trials."""

    spec: StudySpec
    result: OptimizeResult
    ran_here: int
    """Trials this process ran (0: a finished study was resumed)."""

    @property
    def storage(self) -> str:
        return self.spec.storage or "memory"


@dataclass(frozen=True, kw_only=True)
class ChosenConfig:
    """The config a search chose, and what to read beside it."""

    trial: Any
    """The trial written (the best, or the front's best first objective)."""
    tuned_config: TunedConfig
    known: KnownMisses
    identification: Identification
    decisions: tuple[DecisionCaution, ...]
    """Unseen costs along which the config's gain over the baseline changes sign."""


def run_search(
    spec: StudySpec,
    *,
    jobs: int = 1,
    on_progress: Callable[[int, str], None] | None = None,
) -> SearchRun:
    """Run the study (``jobs`` workers here; others may share its storage).
    ``on_progress(completed, best)`` after each trial."""
    import optuna

    from ..optimizers import Metrics, optimize

    # Completed trials already looked at (this worker's and the others'), and
    # the best feasible value among them: each trial is judged once, not once
    # per later trial (that was 45 000 judgements in 300 trials).
    judged: set[int] = set()
    best_value = [math.inf]
    ran_here = [0]

    def on_trial(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        ran_here[0] += 1
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        best = ""
        if len(spec.objectives) == 1:
            for t in done:
                if t.number in judged:
                    continue
                judged.add(t.number)
                if t.value is not None and spec.constraints.feasible(
                    Metrics(**t.user_attrs["metrics"])
                ):
                    best_value[0] = min(best_value[0], t.value)
            if best_value[0] < math.inf:
                best = f"best {spec.objectives[0]} {best_value[0]:.3f}"
        if on_progress is not None:
            on_progress(min(len(done), spec.trials), best)

    result = optimize(spec, jobs=jobs, callbacks=[on_trial])
    return SearchRun(spec=spec, result=result, ran_here=ran_here[0])


def choose_config(run: SearchRun) -> ChosenConfig:
    """The best feasible trial's whole config (a front's best first
    objective): the storm's own limits, pools and RTNL priority under the
    searched values, and what it predicts for this storm."""
    from ..calibration.identify import decision_cautions
    from ..models import load_profile

    if not run.result.best:
        raise ConfigError(
            "constraints: no trial met the memory budget and p99 SLO; "
            "relax them or search more trials"
        )
    trial = run.result.best[0]
    tuned_config = run.result.tuned_config(trial)
    base = run.spec.scenario
    tuned = base.replace(config=tuned_config)
    return ChosenConfig(
        trial=trial,
        tuned_config=tuned_config,
        known=known_misses(tuned),
        identification=identification(tuned),
        decisions=decision_cautions(
            {"the tuned config": tuned}, baseline=base, profile=load_profile(base.profile)
        ),
    )


def sweep_grid(base: Scenario, **axes: tuple[Any, ...]) -> SweepGrid:
    """The grid of a sweep over ``axes`` (``sandboxes``, ``cnis``,
    ``memory_mib``, ``pools``, ``seeds``; an empty axis keeps the base's
    value), refused in one line when it is larger than a sweep should be."""
    from ..optimizers import SweepGrid

    shown = {"cnis": "cni", "pools": "pool"}
    for key, values in axes.items():
        if len(values) > MAX_AXIS_VALUES:
            raise ConfigError(
                f"{shown.get(key, key)}: at most {MAX_AXIS_VALUES} values, but got {len(values)}"
            )
    points = math.prod(max(len(v), 1) for v in axes.values())
    if points > MAX_SWEEP_POINTS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in axes.items() if v)
        raise ConfigError(
            f"sweep: {sizes} make {points:,} points; at most {MAX_SWEEP_POINTS:,} in one sweep"
        )
    return SweepGrid(base=base, **axes)


@dataclass(frozen=True, kw_only=True)
class SweepOutcome:
    """A sweep's table (a pandas DataFrame, one row per point, in grid order,
    with the rows of the known misses each rests on) and those misses."""

    frame: Any
    known: tuple[KnownMisses, ...]


def run_sweep(
    grid: SweepGrid,
    *,
    scheduler: str | None,
    workers: int | None,
    executor: str = "compiled",
    on_done: Callable[[int, int], None] | None = None,
) -> SweepOutcome:
    """Every point of ``grid`` simulated on Dask (a running scheduler, or a
    local cluster of ``workers`` processes)."""
    from ..calibration import caveat_rows
    from ..optimizers._sweep import sweep

    frame = sweep(grid, scheduler=scheduler, workers=workers, on_done=on_done, executor=executor)
    # Rows come back in grid order: each point's known misses, by row id.
    scenarios = [scenario for scenario, _pool in grid.points()]
    frame["caveats"] = [caveat_rows(s) for s in scenarios]
    return SweepOutcome(frame=frame, known=tuple(known_misses(s) for s in scenarios))
