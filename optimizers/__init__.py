"""bootstorm.optimizers — search per-stage concurrency limits and device pools.

A :class:`SearchSpace` says what may change, a :class:`StudySpec` says what
to minimise under which constraints on which storms, and :func:`optimize`
runs the Optuna study (in a journal file, or on PostgreSQL when workers on
several machines share it) and returns the best config(s) as :class:`~bootstorm.models.TunedConfig`.
:func:`sweep` runs a what-if grid on Dask.
"""

from ._evaluate import Evaluator, Robust, run_scenario
from ._objectives import (
    MAX_MEMORY_BUDGET_MIB,
    MAX_SLO_S,
    OBJECTIVES,
    Constraints,
    Metrics,
    ObjectiveName,
    check_objectives,
)
from ._samplers import SAMPLERS, SamplerPlugin, make_sampler
from ._space import DEFAULT_STAGES, IntRange, RefillSpace, SearchSpace
from ._storage import HeartbeatJournalStorage, open_storage
from ._study import (
    Callback,
    OptimizeResult,
    StudySpec,
    TrialOutcome,
    feasible_best_trial,
    optimize,
    read_study,
    run_worker,
    searched_scenario,
    trial_feasible,
    trial_outcomes,
    trial_scenario,
)
from ._sweep import SweepGrid, check_sweep, pools_for, sweep

__all__ = [
    "DEFAULT_STAGES",
    "MAX_MEMORY_BUDGET_MIB",
    "MAX_SLO_S",
    "OBJECTIVES",
    "SAMPLERS",
    "Callback",
    "Constraints",
    "Evaluator",
    "HeartbeatJournalStorage",
    "IntRange",
    "Metrics",
    "ObjectiveName",
    "OptimizeResult",
    "RefillSpace",
    "Robust",
    "SamplerPlugin",
    "SearchSpace",
    "StudySpec",
    "SweepGrid",
    "TrialOutcome",
    "check_objectives",
    "check_sweep",
    "feasible_best_trial",
    "make_sampler",
    "open_storage",
    "optimize",
    "pools_for",
    "read_study",
    "run_scenario",
    "run_worker",
    "searched_scenario",
    "sweep",
    "trial_feasible",
    "trial_outcomes",
    "trial_scenario",
]
