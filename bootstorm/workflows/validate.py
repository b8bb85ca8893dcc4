"""Predicted against measured: one storm (run here or read), or tuned
configs ranked by the model and by this node."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._io import shown_name
from .._params import refuse_given
from ..models import ConfigError, Profile, Scenario, TunedConfig
from ._progress import Progress, SilentProgress
from .profile import node_profile
from .storms import agent_admission, candidate_runner, storm_trace

if TYPE_CHECKING:
    from ..calibration.trace_fit import Comparison, StormStats
    from ..traces import Trace
    from ..validation.candidates import Candidate, CandidateComparison

__all__ = [
    "HEADLINE_METRICS",
    "CandidateValidation",
    "StormValidation",
    "check_profile_source",
    "check_validate_options",
    "read_candidates",
    "validate_candidates",
    "validate_storm",
]

#: The metrics a storm's validation passes or fails on.
HEADLINE_METRICS = ("makespan_s", "startup mean_s", "startup p99_s")


@dataclass(frozen=True, kw_only=True)
class StormValidation:
    """One storm measured (or read) against the model's prediction of it."""

    stats: StormStats
    scenario: Scenario
    profile: Profile
    rows: tuple[tuple[str, float, float], ...]
    """(metric, measured, predicted), headline metrics first."""
    errors: dict[str, float]
    """Relative error of each metric (predicted over measured, minus 1); of
    a metric in ``points``, predicted minus measured."""
    runs: int
    threshold: float
    headline: tuple[str, ...] = HEADLINE_METRICS
    """The metrics the verdict reads: makespan and mean startup for a storm
    released at once; for one on a workload's schedule, the traffic's (p99
    per window, empty-pool starts, idle pooled device-seconds)."""
    shares: frozenset[str] = frozenset()
    """Metrics that are fractions (a stage's share of the startup, a lock's
    of a stage's time), shown as percentages."""
    points: frozenset[str] = frozenset()
    """Shares compared in points: their ``errors`` entry is predicted minus
    measured (a stage's lock-wait share)."""
    measured_se: Mapping[str, float] = field(default_factory=dict)
    """The standard error of a measured figure over the runs (several runs
    only): how far the node's own runs leave it uncertain."""
    runs_to_resolve: Mapping[str, int] = field(default_factory=dict)
    """The headline figures the runs measured less precisely than half the
    threshold, each with the runs that would measure it so
    (:meth:`~bootstorm.calibration.trace_fit.Comparison.runs_to_resolve`):
    a verdict on them at this threshold is partly the node's own spread."""

    @property
    def failed(self) -> list[str]:
        """Headline metrics off by more than the threshold."""
        return [k for k in self.headline if abs(self.errors[k]) > self.threshold]

    @property
    def within(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """The ``validate --json`` object."""
        return {
            "sandboxes": self.stats.sandboxes,
            "scenario": self.scenario.model_dump(mode="json"),
            "rows": [
                {
                    "metric": n,
                    "measured": m,
                    "predicted": p,
                    ("error_points" if n in self.points else "rel_error"): (
                        round(100.0 * self.errors[n], 6) if n in self.points else self.errors[n]
                    ),
                    **({"measured_se": self.measured_se[n]} if n in self.measured_se else {}),
                }
                for n, m, p in self.rows
            ],
            "runs": self.runs,
            "threshold": self.threshold,
            "within": self.within,
            "runs_to_resolve": dict(self.runs_to_resolve),
        }


@dataclass(frozen=True, kw_only=True)
class CandidateValidation:
    """Tuned configs ranked by the model and by this node."""

    comparison: CandidateComparison
    threshold: float
    min_spearman: float

    @property
    def ranked(self) -> bool:
        """The Spearman of predicted against measured makespan is defined and high enough."""
        rho = self.comparison.spearman_makespan
        return not math.isnan(rho) and rho >= self.min_spearman

    @property
    def failed(self) -> list[str]:
        """Candidates whose makespan is off by more than the threshold."""
        return [
            r["name"]
            for r in self.comparison.records()
            if abs(r["makespan_error"]) > self.threshold
        ]

    @property
    def within(self) -> bool:
        return self.ranked and not self.failed


def check_profile_source(
    profile: Path | None, calibrate_from: Sequence[Path] | None, recorded: str | None
) -> None:
    """At most one of ``--profile`` and ``--calibrate-from``, and one of them
    when the storms are read (option ``recorded``) rather than run here."""
    if profile is not None and calibrate_from:
        raise ConfigError("profile: give at most one of --profile FILE or --calibrate-from TRACE")
    if recorded is not None and profile is None and not calibrate_from:
        raise ConfigError(
            f"profile: {recorded} compares recorded storms and runs none here: "
            "give --profile FILE or --calibrate-from TRACE"
        )


def _check_calibration(runs: int, sandboxes: int | None) -> None:
    if runs < 1:
        raise ConfigError(f"calibration_runs: must be at least 1, but got {runs}")
    if sandboxes is not None and sandboxes < 2:
        raise ConfigError(f"calibration_sandboxes: must be at least 2, but got {sandboxes}")


def _local_profile(
    *,
    profile: Path | None,
    calibrate_from: Sequence[Path] | None,
    sandboxes: int,
    calibration_sandboxes: int | None,
    calibration_runs: int,
    vm: bool,
    executor: str,
    runtime: str,
    progress: Progress,
    calibration_path: Callable[[int], Path] | None,
) -> Profile:
    """The node's profile for a validation of storms of ``sandboxes``: given,
    fitted to recorded storms, or fitted to storms of half the size (unless
    ``calibration_sandboxes``) run here first, never to the storm validated."""
    return node_profile(
        profile=profile,
        calibrate_from=calibrate_from,
        size=calibration_sandboxes or max(2, sandboxes // 2),
        runs=calibration_runs,
        vm=vm,
        executor=executor,
        runtime=runtime,
        progress=progress,
        calibration_path=calibration_path,
    )


def validate_storm(
    *,
    sandboxes: int,
    config: Path | None,
    profile: Path | None,
    calibrate_from: Sequence[Path] | None,
    measured: Sequence[Path] | None,
    trace_out: Path | None,
    threshold: float,
    vm: bool,
    agent: str | None = None,
    token_file: Path | None = None,
    repeat: int = 1,
    calibration_sandboxes: int | None = None,
    calibration_runs: int = 3,
    executor: str = "compiled",
    runtime: str = "threads",
    progress: Progress | None = None,
    arrival_s: tuple[float, ...] | None = None,
    lifetime_s: float | None = None,
    cni_wrapper: str = "none",
) -> StormValidation:
    """Measure a storm (or read one), predict it, and compare.

    ``cni_wrapper``: the measured storm's CNI plugin runs through
    ``bootstorm-cni`` (its AddCNI permits from ``agent``), as a node's
    conflist puts it in the startup path; the calibration storms do not.

    ``arrival_s``: start the sandboxes on a workload's schedule (``lifetime_s``:
    stop each VM that long after it came up), and compare it as traffic: p99
    per window, empty-pool starts, idle pooled device-seconds.

    The node's profile is loaded (``profile``), fitted to recorded storms
    (``calibrate_from``) or, with neither, fitted to ``calibration_runs``
    storms of ``calibration_sandboxes`` (default: half the size) run on this
    host first, without the config: the prediction is then one of another
    size under other settings, never of the storm it was fitted to.
    """
    from ..calibration.trace_fit import StormStats, predicted_vs_measured, traffic_vs_measured
    from ..traces import read_trace, write_trace

    if not threshold > 0.0:
        raise ConfigError(f"threshold: must be > 0, but got {threshold}")
    check_profile_source(profile, calibrate_from, "--measured" if measured else None)
    if repeat < 1:
        raise ConfigError(f"repeat: must be at least 1, but got {repeat}")
    _check_calibration(calibration_runs, calibration_sandboxes)
    progress = progress or SilentProgress()
    tuned = TunedConfig.from_yaml(config) if config is not None else None
    local = _local_profile(
        profile=profile,
        calibrate_from=calibrate_from,
        sandboxes=sandboxes,
        calibration_sandboxes=calibration_sandboxes,
        calibration_runs=calibration_runs,
        vm=vm,
        executor=executor,
        runtime=runtime,
        progress=progress,
        calibration_path=None
        if trace_out is None
        else lambda k: trace_out.with_name(f"calibration-{k}-{trace_out.name}"),
    )
    if measured:
        traces = [read_trace(p) for p in measured]
    else:
        admission = agent_admission(agent, token_file, tuned) if agent is not None else None
        traces = []
        for k in range(repeat):
            traces.append(
                storm_trace(
                    sandboxes,
                    tuned,
                    vm=vm,
                    admission=admission,
                    runtime=runtime,
                    progress=progress,
                    arrival_s=arrival_s,
                    lifetime_s=lifetime_s,
                    cni_wrapper=cni_wrapper,
                )
            )
            if trace_out is not None:
                path = trace_out if repeat == 1 else trace_out.with_name(f"{k}-{trace_out.name}")
                write_trace(traces[-1], path)
    try:
        stats = StormStats.pooled(traces)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    comparisons = predicted_vs_measured(traces, local, executor=executor)
    headline = HEADLINE_METRICS
    if stats.arrival_s is not None:
        traffic = traffic_vs_measured(traces, local, executor=executor)
        comparisons = traffic + comparisons
        headline = tuple(c.metric for c in traffic)
    return StormValidation(
        stats=stats,
        scenario=stats.scenario(),
        profile=local,
        rows=tuple((c.metric, c.measured, c.predicted) for c in comparisons),
        errors={c.metric: c.rel_error for c in comparisons},
        runs=len(traces),
        threshold=threshold,
        headline=headline,
        shares=frozenset(c.metric for c in comparisons if c.share),
        points=frozenset(c.metric for c in comparisons if c.points),
        measured_se={c.metric: c.measured_se for c in comparisons if c.measured_se is not None},
        runs_to_resolve=_runs_to_resolve(comparisons, headline, threshold, runs=len(traces)),
    )


def _runs_to_resolve(
    comparisons: Sequence[Comparison], headline: Sequence[str], threshold: float, *, runs: int
) -> dict[str, int]:
    """Headline figures whose runs' spread is wider than half ``threshold``,
    each with the runs that would bring it within (none for one run)."""
    out: dict[str, int] = {}
    for c in comparisons:
        if c.metric in headline and c.measured_se is not None:
            needed = c.runs_to_resolve(threshold, runs=runs)
            if needed is not None and needed > runs:
                out[c.metric] = needed
    return out


def check_validate_options(
    *,
    candidates: Sequence[str] | None,
    config: Path | None,
    measured: Sequence[Path] | None,
    measured_dir: Path | None,
    trace: Path | None,
    trace_out: Path | None,
    agent: str | None,
) -> None:
    """``bootstorm validate``'s options of one mode only: one storm, or ``--candidates``."""
    if candidates:
        if config is not None:
            raise ConfigError(
                f"config: with --candidates, give {config} as --candidates "
                "(--baseline ranks the storm without a config)"
            )
        if measured:
            raise ConfigError(
                f"measured: with --candidates, give the recorded runs as --measured-dir DIR "
                f"(DIR/<candidate>-run<k>.jsonl.gz), not {measured[0]}"
            )
        if trace is not None:
            raise ConfigError(
                f"trace: with --candidates, give --trace-dir DIR (one file per run), not {trace}"
            )
        if agent is not None:
            raise ConfigError(f"agent: --candidates runs the storms without an agent ({agent})")
        return
    if measured_dir is not None:
        raise ConfigError(
            f"measured_dir: {measured_dir} holds the runs of --candidates: give --candidates "
            "(for one storm: --measured FILE)"
        )
    if measured:
        # Read, not run: each recorded storm brings its size, config and
        # admission in its header; an option of a run would be ignored.
        refuse_given(
            "not with --measured (each brings the config it ran with in its header)",
            (("config", config),),
        )
        refuse_given(
            "not with --measured (they are read, none is run to record or through an agent)",
            (("trace", trace), ("agent", agent)),
        )
    if trace_out is not None:
        raise ConfigError(
            f"trace_dir: {trace_out} is for the runs of --candidates (for one storm: --trace FILE)"
        )


def read_candidates(items: Sequence[str], *, baseline: bool) -> list[Candidate]:
    """``--candidates [NAME=]FILE`` (and the baseline first, with ``--baseline``).

    An item that is an existing file is a path, whatever it holds; else
    ``NAME=FILE`` where NAME is a plain name (letters, digits, ``.``, ``_``,
    ``-``); else a path. A name defaults to the file's stem.
    """
    from ..validation.candidates import BASELINE, NAME_PATTERN, Candidate

    out = [Candidate(name=BASELINE, config=None)] if baseline else []
    given = {BASELINE: "--baseline"} if baseline else {}
    for item in items:
        name, sep, file = item.partition("=")
        if not _is_file(Path(item)) and sep and file and NAME_PATTERN.fullmatch(name):
            path = Path(file)
        else:
            name, path = Path(item).stem, Path(item)
        if not _is_file(path):
            raise ConfigError(f"candidates: {shown_name(item, max_chars=200)}: no such file")
        try:
            config = TunedConfig.from_yaml(path)
        except ConfigError as exc:
            raise ConfigError(
                "\n".join(f"candidates: {line}" for line in str(exc).splitlines())
            ) from None
        if name in given:
            raise ConfigError(
                f"candidates: duplicate name {name!r} ({given[name]} and {item}); "
                "name them NAME=FILE"
            )
        try:
            out.append(Candidate(name=name, config=config))
        except ConfigError as exc:
            raise ConfigError(f"candidates: {item}: {exc}; name it NAME=FILE") from None
        given[name] = item
    return out


def _is_file(path: Path) -> bool:
    """``path.is_file()``, false for a name the file system refuses (too long)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def validate_candidates(
    *,
    candidates: Sequence[str],
    baseline: bool,
    sandboxes: int,
    repeat: int,
    profile: Path | None,
    calibrate_from: Sequence[Path] | None,
    measured_dir: Path | None,
    trace_out: Path | None,
    threshold: float,
    min_spearman: float,
    vm: bool,
    calibration_sandboxes: int | None = None,
    calibration_runs: int = 3,
    order_seed: int = 0,
    executor: str = "compiled",
    runtime: str = "threads",
    progress: Progress | None = None,
) -> CandidateValidation:
    """Rank tuned configs on this host (or on recorded runs) and by the model.

    Runs ``repeat`` storms of ``sandboxes`` per candidate, interleaved
    (:func:`~bootstorm.validation.candidates.measure_candidates`), or reads
    ``measured_dir/<candidate>-run<k>.jsonl[.gz]``; predicts each under the
    node's profile (as :func:`validate_storm` gets it). The outcome says
    whether the Spearman of the two rankings reaches ``min_spearman`` and
    every makespan is within ``threshold``.
    """
    from ..validation.candidates import (
        compare_candidates,
        measure_candidates,
        read_runs,
        run_path,
        storm_options,
    )

    if not threshold > 0.0:
        raise ConfigError(f"threshold: must be > 0, but got {threshold}")
    if not -1.0 <= min_spearman <= 1.0:
        raise ConfigError(f"min_spearman: must be within -1 and 1, but got {min_spearman}")
    check_profile_source(profile, calibrate_from, "--measured-dir" if measured_dir else None)
    if repeat < 1:
        raise ConfigError(f"repeat: must be at least 1, but got {repeat}")
    if sandboxes < 1:
        raise ConfigError(f"sandboxes: must be at least 1, but got {sandboxes}")
    _check_calibration(calibration_runs, calibration_sandboxes)
    if measured_dir is not None and trace_out is not None:
        raise ConfigError(
            f"trace_out: --measured-dir runs no storm, there is nothing to write to {trace_out}"
        )
    if trace_out is not None and trace_out.exists() and not trace_out.is_dir():
        raise ConfigError(f"trace_out: not a directory: {str(trace_out)!r}")
    chosen = read_candidates(candidates, baseline=baseline)
    if len(chosen) < 2:
        raise ConfigError(
            f"candidates: a ranking needs at least two candidates (the baseline counts), "
            f"but got {len(chosen)}"
        )
    calibrating = measured_dir is None and profile is None and not calibrate_from
    if calibrating and trace_out is not None and "calibration" in {c.name for c in chosen}:
        raise ConfigError(
            "candidates: the name 'calibration' is taken by the calibration storms' traces "
            "in --trace-dir; name it NAME=FILE"
        )
    progress = progress or SilentProgress()
    if measured_dir is not None:
        traces = read_runs(measured_dir, [c.name for c in chosen])
    else:
        for c in chosen:  # a config the testbed cannot run fails before any storm
            try:
                storm_options(c, sandboxes=sandboxes, vm=vm, runtime=runtime)
            except ConfigError as exc:
                raise ConfigError(f"candidates: {exc}") from None
        if trace_out is not None:
            trace_out.mkdir(parents=True, exist_ok=True)
    local = _local_profile(
        profile=profile,
        calibrate_from=calibrate_from,
        sandboxes=sandboxes,
        calibration_sandboxes=calibration_sandboxes,
        calibration_runs=calibration_runs,
        vm=vm,
        executor=executor,
        runtime=runtime,
        progress=progress,
        calibration_path=None
        if trace_out is None
        else lambda k: run_path(trace_out, "calibration", k + 1),
    )
    if measured_dir is None:

        def ran(candidate: Candidate, r: int, trace: Trace) -> None:
            _ran(progress, trace_out, candidate, r, repeat, trace)

        traces = measure_candidates(
            chosen,
            sandboxes=sandboxes,
            repeats=repeat,
            vm=vm,
            run_storm=candidate_runner(runtime=runtime, progress=progress),
            order_seed=order_seed,
            on_run=ran,
        )
    with progress.status("simulating each candidate's storm …"):
        comparison = compare_candidates(traces, chosen, local, executor=executor)
    return CandidateValidation(
        comparison=comparison, threshold=threshold, min_spearman=min_spearman
    )


def _ran(
    progress: Progress,
    trace_out: Path | None,
    candidate: Candidate,
    r: int,
    repeat: int,
    trace: Trace,
) -> None:
    """After each storm: keep its trace at once, and say how long it took."""
    from ..calibration.trace_fit import StormStats
    from ..traces import write_trace
    from ..validation.candidates import run_path

    where = ""
    if trace_out is not None:
        path = run_path(trace_out, candidate.name, r + 1)
        write_trace(trace, path)
        where = f" → {path}"
    try:
        took = f"makespan {StormStats.of(trace).makespan_s:.3f} s"
    except ValueError as exc:
        took = str(exc)
    progress.note(f"round {r + 1}/{repeat}: {candidate.name}: {took}{where}")
