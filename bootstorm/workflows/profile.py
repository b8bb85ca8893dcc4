"""A node's profile: loaded, fitted to recorded storms, or fitted to a
calibration plan run here (the operations timed alone, then storms chosen
so that every cost the search touches is identified); and the paper
profiles' fits and checks."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._io import write_atomically
from .._params import short_repr
from ..models import ConfigError, Profile
from ._progress import Progress, SilentProgress
from .storms import storm_trace

if TYPE_CHECKING:
    from ..calibration import FitReport
    from ..calibration.check import RowCheck
    from ..calibration.plan import CalibrationPlan, PlanStorm
    from ..calibration.trace_fit import BootstrapInterval
    from ..traces import Trace

__all__ = [
    "DEFAULT_CHECK_SEEDS",
    "REFRESH_STORMS",
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
    "measure_here",
    "node_profile",
    "refresh_node_profile",
    "run_plan",
]

#: ``calibrate --check --seeds``' default: ten seeds no paper fit uses.
DEFAULT_CHECK_SEEDS = "1001-1010"


@dataclass(frozen=True, kw_only=True)
class PlanDesigned:
    """Shown before a plan runs: its storms and why each is there."""

    plan: CalibrationPlan
    runs: int


@dataclass(frozen=True, kw_only=True)
class ProfileFitted:
    """Shown after a fit: the error per target and what identified each cost."""

    title: str
    report: FitReport


@dataclass(frozen=True, kw_only=True)
class TraceFit:
    """A local profile fitted to recorded storms (:func:`fit_traces`)."""

    traces: tuple[Trace, ...]
    storms: int
    """How many distinct storms the runs are of."""
    report: FitReport

    @property
    def name(self) -> str:
        return f"{len(self.traces)} run(s) of {self.storms} storm(s)"


@dataclass(frozen=True, kw_only=True)
class PaperCheck:
    """Every row of a built-in profile's paper at each seed (:func:`check_paper`)."""

    targets: str
    seeds: tuple[int, ...]
    checks: tuple[RowCheck, ...]

    @property
    def unexpected(self) -> tuple[RowCheck, ...]:
        """Misses that ``KNOWN_MISSES`` does not name."""
        return tuple(c for c in self.checks if c.status == "MISS")

    @property
    def mislabelled(self) -> tuple[RowCheck, ...]:
        """Rows whose label the identity check contradicts: a *predict* row its
        declared relation determines, or an *identity* it does not."""
        return tuple(c for c in self.checks if not c.label_holds)


def _target_set(targets: str) -> Any:
    from ..calibration import TARGET_SETS

    if targets not in TARGET_SETS:
        known = ", ".join(TARGET_SETS)
        raise ConfigError(f"targets: unknown target set {short_repr(targets)}; known: {known}")
    return TARGET_SETS[targets]


def check_paper(
    targets: str,
    *,
    seeds: str = DEFAULT_CHECK_SEEDS,
    executor: str = "compiled",
    progress: Progress | None = None,
) -> PaperCheck:
    """Every row of the built-in profile ``targets`` at each seed, judged on
    the mean over the seeds, with the spread across seeds and each row's kind."""
    from ..calibration.check import check_profile, parse_seeds

    _target_set(targets)
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    progress = progress or SilentProgress()
    with progress.status(f"checking {targets} at {len(seed_list)} seed(s) …"):
        checks = check_profile(targets, seeds=seed_list, executor=executor)
    return PaperCheck(targets=targets, seeds=tuple(seed_list), checks=tuple(checks))


def fit_paper(
    targets: str,
    *,
    max_evaluations: int,
    executor: str = "compiled",
    progress: Progress | None = None,
) -> FitReport:
    """Fit the built-in profile ``targets`` to its paper's *fit* rows."""
    target_set = _target_set(targets)
    progress = progress or SilentProgress()
    with progress.status(f"fitting {targets} …") as update:
        report: FitReport = target_set.fit(
            max_evaluations=max_evaluations,
            executor=executor,
            on_evaluation=lambda n, cost: update(
                f"fitting {targets} … evaluation {n}, cost {cost:.4g}"
            ),
        )
    return report


def load_measured(path: Path | None) -> dict[str, Any]:
    """The costs measured alone (``bootstorm testbed measure-ops --output``), by path."""
    if path is None:
        return {}
    from ..calibration.measured_ops import testbed_costs_from
    from ..models._yaml import read_text_bounded
    from ..traces.operations import OperationTimes

    try:
        # Bounded (an ops.json is a few KiB), UTF-8 checked: one line, not a traceback.
        text = read_text_bounded(path)
    except ConfigError as exc:
        raise ConfigError(f"measured_ops: {exc}") from None
    try:
        times = OperationTimes.from_json(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deeply
        reason = "JSON nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"measured_ops: {path}: {reason[:200]}") from None
    return dict(testbed_costs_from(times))


def measure_here(
    *, vm: bool, trace_dir: Path | None, progress: Progress | None = None
) -> Mapping[str, Any]:
    """Time each operation alone on this node (root) and return the costs it
    gives (the timings kept as ``trace_dir/ops.json``)."""
    from ..calibration.measured_ops import testbed_costs_from
    from ..validation.testbed.ops import DEFAULT_REPEATS, DEFAULT_WARMUP
    from .storms import measure_operations_here

    times = measure_operations_here(
        repeats=DEFAULT_REPEATS, warmup=DEFAULT_WARMUP, vm=vm, progress=progress
    )
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(trace_dir / "ops.json", times.to_json())
    return dict(testbed_costs_from(times))


def read_storms(paths: Sequence[Path], *, option: str = "measured") -> tuple[Trace, ...]:
    """The recorded storms at ``paths`` (``--measured`` files), each with a
    sandbox that passed every stage: one that has none is refused naming its
    file (a trace cut after its header)."""
    from ..calibration.trace_fit import StormStats
    from ..traces import read_trace
    from ..traces.files import shown_path

    traces = []
    for path in paths:
        trace = read_trace(path)
        try:
            StormStats.of(trace)
        except ValueError as exc:
            why = str(exc).removeprefix("trace: ")
            raise ConfigError(f"{option}: {shown_path(path)}: {why}") from None
        traces.append(trace)
    return tuple(traces)


def fit_traces(
    trace_paths: Sequence[Path],
    *,
    measured_ops: Path | None,
    max_evaluations: int,
    executor: str = "compiled",
    progress: Progress | None = None,
) -> TraceFit:
    """One ``local`` profile fitted to every recorded storm given (runs of
    one storm pooled, different storms together) and the measured costs."""
    from ..calibration.trace_fit import fit_storms, group_storms

    traces = read_storms(trace_paths)
    measured = load_measured(measured_ops)
    try:
        groups = group_storms(list(traces))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    name = f"{len(traces)} run(s) of {len(groups)} storm(s)"
    progress = progress or SilentProgress()
    with progress.status(f"fitting a local profile to {name} …") as update:
        try:
            report = fit_storms(
                list(traces),
                measured=measured,
                max_evaluations=max_evaluations,
                executor=executor,
                on_evaluation=lambda n, cost: update(
                    f"fitting a local profile to {name} … evaluation {n}, cost {cost:.4g}"
                ),
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return TraceFit(traces=traces, storms=len(groups), report=report)


#: Storms a refresh runs on the node when no recorded one is given: "one or
#: two" (issue 38); two give the factor a second look at the same drift.
REFRESH_STORMS = 2


def refresh_node_profile(
    profile_path: Path,
    *,
    trace_paths: Sequence[Path] = (),
    sandboxes: int = 50,
    vm: bool = True,
    runtime: str = "cni",
    trace_dir: Path | None = None,
    executor: str = "compiled",
    progress: Progress | None = None,
) -> Any:
    """``calibrate --refresh``: the node profile at ``profile_path`` rescaled
    to recorded storms (``trace_paths``) or, without any, to
    :data:`REFRESH_STORMS` storms of ``sandboxes`` run here now (root).
    Returns a :class:`~bootstorm.calibration.refresh.Refresh`."""
    from ..calibration.refresh import refresh_profile
    from ..models import load_profile
    from ..traces import write_trace

    profile = load_profile(profile_path)
    if profile.testbed is None:
        raise ConfigError(
            f"refresh: {profile_path} has no testbed section (a published host's); "
            "refresh a node's fitted profile (calibrate --plan)"
        )
    progress = progress or SilentProgress()
    if trace_paths:
        traces = list(read_storms(trace_paths))
    else:
        if os.geteuid() != 0:
            raise ConfigError("refresh: running its storms needs root (or give --trace FILE)")
        traces = []
        for k in range(REFRESH_STORMS):
            traces.append(
                storm_trace(
                    sandboxes,
                    None,
                    vm=vm,
                    runtime=runtime,
                    what=f"refresh storm {k + 1} of {REFRESH_STORMS}",
                    progress=progress,
                )
            )
            if trace_dir is not None:
                write_trace(traces[-1], trace_dir / f"refresh-{sandboxes}-run{k + 1}.jsonl.gz")
    with progress.status(f"rescaling {profile.name!r} to {len(traces)} storm(s) …"):
        try:
            return refresh_profile(profile, traces, executor=executor)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class BootstrapPrediction:
    """A predicted makespan of ``sandboxes`` and its bootstrap interval
    (:func:`bootstrap_interval`)."""

    sandboxes: int
    interval: BootstrapInterval


def bootstrap_interval(
    fit: TraceFit,
    *,
    resamples: int,
    predict_sandboxes: int | None,
    executor: str = "compiled",
    progress: Progress | None = None,
) -> BootstrapPrediction:
    """The bootstrap interval of the fitted profile's predicted makespan of
    ``predict_sandboxes`` (default: the storm's size), refitting on
    resampled sandboxes of the one recorded storm."""
    from ..calibration.trace_fit import StormStats, bootstrap_prediction

    if fit.storms > 1 or len(fit.traces) > 1:
        raise ConfigError("bootstrap: resamples one recorded storm; give one --trace")
    stats = StormStats.of(fit.traces[0])
    what_if = stats.scenario(sandboxes=predict_sandboxes or stats.sandboxes)
    progress = progress or SilentProgress()
    with progress.status(f"bootstrap: {resamples} refits …"):
        interval = bootstrap_prediction(
            fit.traces[0],
            fit.report.profile,
            what_if,
            resamples=resamples,
            max_evaluations=40,
            executor=executor,
        )
    return BootstrapPrediction(sandboxes=what_if.sandboxes, interval=interval)


def run_plan(
    storms: Sequence[PlanStorm],
    *,
    runs: int,
    vm: bool,
    trace_dir: Path | None,
    progress: Progress | None = None,
    run_one: Callable[[PlanStorm], Trace] | None = None,
    order_seed: int = 0,
) -> list[Trace]:
    """Run every storm ``runs`` times, interleaved (each round in its own
    shuffled order, so drift and the previous storm's teardown favour none),
    writing each trace to ``trace_dir/<storm>-run<k>.jsonl.gz``."""
    from ..traces import write_trace

    progress = progress or SilentProgress()
    if run_one is None:

        def run_one(storm: PlanStorm) -> Trace:
            return storm_trace(
                storm.sandboxes,
                storm.config(),
                vm=vm,
                what=f"{storm.name}: ",
                peer=storm.peer,
                runtime=storm.runtime,
                progress=progress,
                cni_plugin=storm.plugin,
            )

    rng = np.random.default_rng(order_seed)
    traces = []
    for k in range(runs):
        for i in rng.permutation(len(storms)):
            storm = storms[int(i)]
            progress.note(f"run {k + 1}/{runs}: {storm.name}", tone="dim")
            trace = run_one(storm)
            traces.append(trace)
            if trace_dir is not None:
                trace_dir.mkdir(parents=True, exist_ok=True)
                write_trace(trace, trace_dir / f"{storm.name}-run{k + 1}.jsonl.gz")
    return traces


def calibrate_plan(
    *,
    sandboxes: int,
    runs: int,
    pool_kinds: Sequence[str] | None,
    limit_stages: Sequence[str],
    measured_ops: Path | None,
    measure: bool,
    trace_dir: Path | None,
    output: Path | None,
    dry_run: bool,
    vm: bool,
    max_evaluations: int,
    executor: str = "compiled",
    progress: Progress | None = None,
    runtime: str = "threads",
    plugins: Sequence[str] = (),
) -> Profile | None:
    """Measure the operations alone (``measure``), design the plan from the
    catalog for the testbed's ``runtime``, run its storms here and fit them
    together; ``dry_run``: show the plan only (returns ``None``).
    ``pool_kinds``: None for every kind the runtime pools; ``plugins``: the
    CNI plugins a what-if may switch to (a storm of each other than the bridge)."""
    from ..calibration.plan import calibration_plan, check_plan_names
    from ..calibration.trace_fit import fit_storms

    progress = progress or SilentProgress()
    if runs < 1:
        raise ConfigError(f"runs: must be at least 1, but got {runs}")
    if sandboxes < 4:
        raise ConfigError(f"plan_sandboxes: must be at least 4, but got {sandboxes}")
    if not dry_run and os.geteuid() != 0:
        raise ConfigError("plan: running the plan's storms needs root (or give --dry-run)")
    try:
        check_plan_names(
            runtime=runtime, pool_kinds=pool_kinds, limit_stages=limit_stages, plugins=plugins
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    measured = load_measured(measured_ops)
    if measure and not measured and not dry_run:
        measured = dict(measure_here(vm=vm, trace_dir=trace_dir, progress=progress))
    try:
        plan = calibration_plan(
            sandboxes=sandboxes,
            runs=runs,
            pool_kinds=pool_kinds,
            limit_stages=limit_stages,
            runtime=runtime,
            plugins=plugins,
            cores=os.cpu_count() or 1,
            measured=measured,
            executor=executor,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    progress.show(PlanDesigned(plan=plan, runs=runs))
    if dry_run:
        return None
    traces = run_plan(plan.storms, runs=runs, vm=vm, trace_dir=trace_dir, progress=progress)
    with progress.status(f"fitting a local profile to {len(traces)} runs …"):
        report = fit_storms(
            traces, measured=measured, max_evaluations=max_evaluations, executor=executor
        )
    progress.show(ProfileFitted(title="local profile vs the plan's storms", report=report))
    if output is not None:
        write_atomically(output, report.profile.to_yaml())
        progress.note(f"profile written to {output}", tone="strong")
    return report.profile


def node_profile(
    *,
    profile: Path | None,
    calibrate_from: Sequence[Path] | None,
    size: int,
    runs: int,
    vm: bool,
    executor: str = "compiled",
    calibration_path: Callable[[int], Path] | None = None,
    runtime: str = "threads",
    progress: Progress | None = None,
) -> Profile:
    """The node's profile: loaded (``profile``), fitted to recorded storms
    (``calibrate_from``) or fitted to ``runs`` storms of ``size`` run here
    first, without a config (each written to ``calibration_path(k)``)."""
    from ..calibration.trace_fit import fit_trace
    from ..traces import read_trace, write_trace

    progress = progress or SilentProgress()
    if profile is not None:
        return Profile.from_yaml(profile)
    if calibrate_from:
        fitted_to = [read_trace(p) for p in calibrate_from]
        name = calibrate_from[0].name
    else:
        name = f"{runs} storm(s) of {size} on this host"
        progress.note(f"no --profile: fitting this node's profile to {name} first")
        fitted_to = []
        for k in range(runs):
            fitted_to.append(storm_trace(size, None, vm=vm, runtime=runtime, progress=progress))
            if calibration_path is not None:
                write_trace(fitted_to[-1], calibration_path(k))
    with progress.status(f"fitting a local profile to {name} …"):
        try:
            return fit_trace(fitted_to, executor=executor).profile
        except ValueError as exc:  # a trace with no storm in it, say: one line
            raise ConfigError(f"calibrate_from: {name}: {str(exc)[:200]}") from None
