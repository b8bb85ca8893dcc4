"""The product's loops, under the CLI and beside the notebooks.

Each workflow is a function of explicit, keyword-only parameters that
returns an outcome record and reports its steps to a
:class:`~bootstorm.workflows.Progress` (the CLI renders them with rich; the
default shows nothing). Nothing here prints, parses options or exits: a
bad input is a :class:`~bootstorm.models.ConfigError`, an interrupted real
storm a :class:`StormInterruptedError`.

- **what-if** (:func:`what_if`): a storm simulated with what to read beside it;
- **node profile** (:func:`calibrate_plan`, :func:`fit_traces`,
  :func:`node_profile`, :func:`check_paper`, :func:`fit_paper`);
- **storms** (:func:`run_storm_here`, :func:`storm_trace`, :func:`candidate_runner`);
- **validate** (:func:`validate_storm`, :func:`validate_candidates`);
- **tune** (:func:`tune` and its steps in :mod:`bootstorm.workflows.tuning`;
  :func:`tune_traffic`, the same loop on a workload's traffic against a p99 SLO);
- **workload** (:func:`workload`): one node's sandbox starts from an invocation trace;
- **traffic** (:func:`traffic_what_if`): a scenario run on a workload's
  starts, with pools that refill, read per window (p99, empty pools, memory).

>>> from bootstorm.workflows import tune, RecordingProgress  # doctest: +SKIP
>>> outcome = tune(sandboxes=150, ..., progress=RecordingProgress())  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._errors import StormInterruptedError
    from ._progress import Progress, RecordingProgress, SilentProgress, Tone
    from .profile import (
        DEFAULT_CHECK_SEEDS,
        BootstrapPrediction,
        PaperCheck,
        PlanDesigned,
        ProfileFitted,
        TraceFit,
        bootstrap_interval,
        calibrate_plan,
        check_paper,
        fit_paper,
        fit_traces,
        load_measured,
        node_profile,
        refresh_node_profile,
        run_plan,
    )
    from .search import (
        DEFAULT_STORAGE,
        ChosenConfig,
        SearchRun,
        SweepOutcome,
        choose_config,
        default_study_storage,
        run_search,
        run_sweep,
        study_spec,
        sweep_grid,
    )
    from .storms import (
        agent_admission,
        candidate_runner,
        measure_operations_here,
        run_storm_here,
        storm_trace,
    )
    from .traffic import (
        DEFAULT_WINDOW_S,
        RefillLoad,
        TrafficWhatIf,
        traffic_what_if,
        workload_scenario,
    )
    from .tuning import CandidatesCompared, TuneOutcome, describe_config, tune
    from .tuning_traffic import TrafficRow, TrafficTuneOutcome, tune_traffic
    from .validate import (
        CandidateValidation,
        StormValidation,
        check_profile_source,
        check_validate_options,
        read_candidates,
        validate_candidates,
        validate_storm,
    )
    from .whatif import (
        Background,
        Identification,
        KnownMisses,
        WhatIf,
        identification,
        known_misses,
        what_if,
    )
    from .workloads import WorkloadOutcome, WorkloadStats, workload, workload_stats

_SOURCES: dict[str, str] = {
    **dict.fromkeys(("Progress", "RecordingProgress", "SilentProgress", "Tone"), "._progress"),
    "StormInterruptedError": "._errors",
    **dict.fromkeys(
        (
            "DEFAULT_CHECK_SEEDS",
            "BootstrapPrediction",
            "PaperCheck",
            "PlanDesigned",
            "ProfileFitted",
            "TraceFit",
            "bootstrap_interval",
            "calibrate_plan",
            "check_paper",
            "fit_paper",
            "fit_traces",
            "load_measured",
            "node_profile",
            "refresh_node_profile",
            "run_plan",
        ),
        ".profile",
    ),
    **dict.fromkeys(
        (
            "agent_admission",
            "candidate_runner",
            "measure_operations_here",
            "run_storm_here",
            "storm_trace",
        ),
        ".storms",
    ),
    **dict.fromkeys(
        (
            "DEFAULT_STORAGE",
            "ChosenConfig",
            "SearchRun",
            "SweepOutcome",
            "choose_config",
            "default_study_storage",
            "run_search",
            "run_sweep",
            "study_spec",
            "sweep_grid",
        ),
        ".search",
    ),
    **dict.fromkeys(("CandidatesCompared", "TuneOutcome", "describe_config", "tune"), ".tuning"),
    **dict.fromkeys(("TrafficRow", "TrafficTuneOutcome", "tune_traffic"), ".tuning_traffic"),
    **dict.fromkeys(
        (
            "CandidateValidation",
            "StormValidation",
            "check_profile_source",
            "check_validate_options",
            "read_candidates",
            "validate_candidates",
            "validate_storm",
        ),
        ".validate",
    ),
    **dict.fromkeys(
        (
            "Background",
            "Identification",
            "KnownMisses",
            "WhatIf",
            "identification",
            "known_misses",
            "what_if",
        ),
        ".whatif",
    ),
    **dict.fromkeys(
        ("WorkloadOutcome", "WorkloadStats", "workload", "workload_stats"), ".workloads"
    ),
    **dict.fromkeys(
        (
            "DEFAULT_WINDOW_S",
            "RefillLoad",
            "TrafficWhatIf",
            "traffic_what_if",
            "workload_scenario",
        ),
        ".traffic",
    ),
}

__all__ = [
    "DEFAULT_CHECK_SEEDS",
    "DEFAULT_STORAGE",
    "DEFAULT_WINDOW_S",
    "Background",
    "BootstrapPrediction",
    "CandidateValidation",
    "CandidatesCompared",
    "ChosenConfig",
    "Identification",
    "KnownMisses",
    "PaperCheck",
    "PlanDesigned",
    "ProfileFitted",
    "Progress",
    "RecordingProgress",
    "RefillLoad",
    "SearchRun",
    "SilentProgress",
    "StormInterruptedError",
    "StormValidation",
    "SweepOutcome",
    "Tone",
    "TraceFit",
    "TrafficRow",
    "TrafficTuneOutcome",
    "TrafficWhatIf",
    "TuneOutcome",
    "WhatIf",
    "WorkloadOutcome",
    "WorkloadStats",
    "agent_admission",
    "bootstrap_interval",
    "calibrate_plan",
    "candidate_runner",
    "check_paper",
    "check_profile_source",
    "check_validate_options",
    "choose_config",
    "default_study_storage",
    "describe_config",
    "fit_paper",
    "fit_traces",
    "identification",
    "known_misses",
    "load_measured",
    "measure_operations_here",
    "node_profile",
    "read_candidates",
    "refresh_node_profile",
    "run_plan",
    "run_search",
    "run_storm_here",
    "run_sweep",
    "storm_trace",
    "study_spec",
    "sweep_grid",
    "traffic_what_if",
    "tune",
    "tune_traffic",
    "validate_candidates",
    "validate_storm",
    "what_if",
    "workload",
    "workload_scenario",
    "workload_stats",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _SOURCES)
