"""``tune``: the whole loop on this node, as explicit steps.

calibrate (a plan of real storms and the operations timed alone) → search
pools and limits on the fitted model → run the best few candidates and the
baseline for real, interleaved → refit with those storms if prediction and
measurement disagree beyond the profile's error → write the config that was
*measured* faster than the baseline, and nothing otherwise.

:func:`tune` runs them in order; each step is a function of its own that a
notebook can call and inspect.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._io import write_atomically
from ..models import ConfigError, Profile, Scenario, TunedConfig
from ..models.tuned import settings_line
from ._progress import Progress, SilentProgress
from .profile import calibrate_plan, load_measured
from .storms import candidate_runner

if TYPE_CHECKING:
    from ..traces import Trace
    from ..validation.candidates import Candidate, CandidateComparison, StormRunner

__all__ = [
    "CandidatesCompared",
    "Chosen",
    "NodeProfile",
    "SearchedCandidate",
    "TuneOutcome",
    "choose",
    "describe_config",
    "measure",
    "node_profile_for_tune",
    "refit_if_missed",
    "search_candidates",
    "tune",
]


@dataclass(frozen=True, kw_only=True)
class NodeProfile:
    """Step 1's outcome: the node's profile and the storms it was fitted to."""

    profile: Profile
    plan_traces: tuple[Trace, ...]
    measured: dict[str, Any]
    """Costs timed alone (for a refit)."""


@dataclass(frozen=True, kw_only=True)
class SearchedCandidate:
    """One of the search's best distinct configs (step 2)."""

    name: str
    config: TunedConfig
    predicted_makespan_s: float


@dataclass(frozen=True, kw_only=True)
class CandidatesCompared:
    """Shown after steps 3 and 4: predicted against measured per candidate."""

    title: str
    comparison: CandidateComparison


@dataclass(frozen=True, kw_only=True)
class Chosen:
    """Step 5's outcome: the config measured faster than the baseline, if any."""

    name: str | None
    config: TunedConfig | None
    """As written (with its origin), or None."""
    wins: int
    """Rounds in which its storm was faster than the baseline's (same round)."""
    measured_makespan_s: float | None
    baseline_makespan_s: float


@dataclass(frozen=True, kw_only=True)
class TuneOutcome:
    """What ``tune`` found: the comparison of the candidates on real storms
    (before and after any refit) and the config it wrote, if any."""

    comparison: CandidateComparison
    refitted: CandidateComparison | None
    chosen: str | None
    wins: int
    """Rounds in which the chosen config's storm was faster than the baseline's (same round)."""
    rounds: int
    profile: Profile


def describe_config(config: TunedConfig | None) -> str:
    """A config's pools and limits in one line ("pools netns=6, limits AddCNI=2")."""
    if config is None:
        return "no pools, no limits"
    return settings_line(pools=config.pools, limits=config.limits) or "no pools, no limits"


def node_profile_for_tune(
    *,
    sandboxes: int,
    profile_path: Path | None,
    measured_ops: Path | None,
    plan_sandboxes: int | None,
    plan_runs: int,
    pool_kinds: Sequence[str],
    limit_stages: Sequence[str],
    trace_dir: Path | None,
    vm: bool,
    runtime: str,
    progress: Progress,
) -> NodeProfile:
    """Step 1: the node's profile, given or fitted to a calibration plan run here."""
    from ..traces import read_trace

    measured = load_measured(measured_ops)
    if profile_path is not None:
        progress.step("1. profile")
        progress.note(f"the node's profile: {profile_path}")
        return NodeProfile(
            profile=Profile.from_yaml(profile_path), plan_traces=(), measured=measured
        )
    progress.step("1. calibrate: the operations alone, then the plan's storms")
    plan_dir = (trace_dir / "plan") if trace_dir is not None else None
    fitted = calibrate_plan(
        sandboxes=plan_sandboxes or max(8, sandboxes // 3),
        runs=plan_runs,
        pool_kinds=pool_kinds,
        limit_stages=limit_stages,
        measured_ops=measured_ops,
        measure=True,
        trace_dir=plan_dir,
        output=(trace_dir / "local.yaml") if trace_dir is not None else None,
        dry_run=False,
        vm=vm,
        max_evaluations=160,
        progress=progress,
        runtime=runtime,
    )
    assert fitted is not None
    plan_traces: tuple[Trace, ...] = ()
    if plan_dir is not None:
        plan_traces = tuple(read_trace(p) for p in sorted(plan_dir.glob("*.jsonl.gz")))
        ops = plan_dir / "ops.json"
        if not measured and ops.exists():
            measured = load_measured(ops)
    return NodeProfile(profile=fitted, plan_traces=plan_traces, measured=measured)


def search_candidates(
    profile: Profile,
    *,
    sandboxes: int,
    trials: int,
    candidates: int,
    pool_kinds: Sequence[str],
    limit_stages: Sequence[str],
    seed: int = 0,
    cni: str = "testbed-veth",
) -> list[SearchedCandidate]:
    """Step 2: a TPE search on the model of the testbed's ``cni`` variant;
    the ``candidates`` best distinct configs, best first."""
    import tempfile

    import optuna

    from ..optimizers import IntRange, SearchSpace, StudySpec, optimize

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the caller shows the outcome
    # A search names its profile (its workers load it by name or path).
    with tempfile.TemporaryDirectory(prefix="bootstorm-tune-") as tmp:
        path = Path(tmp) / "local.yaml"
        path.write_text(profile.to_yaml())
        base = Scenario(cni=cni, sandboxes=sandboxes, profile=str(path))
        space = SearchSpace(
            cni=base.cni,
            limits={s: IntRange(low=1, high=sandboxes) for s in limit_stages},
            pools={k: IntRange(low=0, high=sandboxes, log=False) for k in pool_kinds},
            # The testbed's pooled devices hold no memory the search must budget.
            pool_device_mib={k: 0.0 for k in pool_kinds},
        )
        spec = StudySpec(
            scenario=base, space=space, trials=trials, sampler="tpe", sampler_seed=seed
        )
        found = optimize(spec)
    assert found.study is not None
    done = [t for t in found.study.trials if t.value is not None]
    done.sort(key=lambda t: (t.value, t.number))
    out: list[SearchedCandidate] = []
    seen: set[str] = set()
    for t in done:
        config = space.config_of(t.params)
        key = config.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        out.append(
            SearchedCandidate(
                name=f"candidate-{len(out) + 1}", config=config, predicted_makespan_s=float(t.value)
            )
        )
        if len(out) == candidates:
            break
    return out


def measure(
    chosen: Sequence[Candidate],
    profile: Profile,
    *,
    sandboxes: int,
    repeats: int,
    vm: bool,
    run_storm: StormRunner,
    trace_dir: Path | None,
    progress: Progress,
) -> tuple[dict[str, list[Trace]], CandidateComparison]:
    """Step 3: every candidate's storm run for real, ``repeats`` interleaved
    rounds, and compared with the model's prediction of it."""
    from ..calibration.trace_fit import StormStats
    from ..traces import write_trace
    from ..validation.candidates import compare_candidates, measure_candidates

    def on_run(candidate: Candidate, r: int, trace: Trace) -> None:
        took = float(StormStats.of(trace).makespan_s)
        progress.note(f"{candidate.name} run {r + 1}: {took:.2f} s", tone="dim")
        if trace_dir is not None:
            trace_dir.mkdir(parents=True, exist_ok=True)
            write_trace(trace, trace_dir / f"{candidate.name}-run{r + 1}.jsonl.gz")

    traces = measure_candidates(
        list(chosen),
        sandboxes=sandboxes,
        repeats=repeats,
        vm=vm,
        on_run=on_run,
        run_storm=run_storm,
    )
    return traces, compare_candidates(traces, list(chosen), profile)


def refit_if_missed(
    comparison: CandidateComparison,
    traces: dict[str, list[Trace]],
    chosen: Sequence[Candidate],
    node: NodeProfile,
    *,
    trace_dir: Path | None,
    progress: Progress,
) -> tuple[Profile, CandidateComparison | None]:
    """Step 4: when the profile missed a candidate beyond its own error
    (never tighter than a paper row's ±10%), refit it with every storm run
    so far; the profile to choose under, and the comparison after the refit."""
    from ..calibration.identify import DEFAULT_ERROR_REL, identification_of
    from ..calibration.trace_fit import fit_storms
    from ..validation.candidates import compare_candidates

    profile = node.profile
    error = max(identification_of(profile).error_rel, DEFAULT_ERROR_REL)
    missed = [r for r in comparison.rows if abs(r.makespan_error) > error]
    if not missed:
        return profile, None
    progress.step("4. refit: the profile missed " + ", ".join(r.name for r in missed))
    everything = list(node.plan_traces) + [t for ts in traces.values() for t in ts]
    with progress.status(f"refitting on {len(everything)} storms …"):
        profile = fit_storms(everything, measured=node.measured).profile
    refitted = compare_candidates(traces, list(chosen), profile)
    progress.show(
        CandidatesCompared(
            title="after the refit (the candidates' storms now in the fit)", comparison=refitted
        )
    )
    if trace_dir is not None:
        write_atomically(trace_dir / "local-refitted.yaml", profile.to_yaml())
    return profile, refitted


def choose(
    comparison: CandidateComparison,
    profile: Profile,
    *,
    sandboxes: int,
    output: Path,
    cni: str,
) -> Chosen:
    """Step 5: by measurement, never by prediction alone: the candidate whose
    median makespan beat the baseline's, written to ``output`` with its origin."""
    baseline = comparison.rows[0]
    ranked = sorted(comparison.rows[1:], key=lambda r: r.measured_makespan_s)
    if not ranked or ranked[0].measured_makespan_s >= baseline.measured_makespan_s:
        return Chosen(
            name=None,
            config=None,
            wins=0,
            measured_makespan_s=None,
            baseline_makespan_s=baseline.measured_makespan_s,
        )
    top = ranked[0]
    # Runs are in the order they ran: run k of each is from round k.
    wins = int(np.sum(np.array(top.run_makespans_s) < np.array(baseline.run_makespans_s)))
    config = with_origin(top.candidate.config, profile, sandboxes=sandboxes, output=output, cni=cni)
    write_atomically(output, config.to_yaml())
    return Chosen(
        name=top.name,
        config=config,
        wins=wins,
        measured_makespan_s=top.measured_makespan_s,
        baseline_makespan_s=baseline.measured_makespan_s,
    )


def with_origin(
    config: TunedConfig | None,
    profile: Profile,
    *,
    sandboxes: int,
    output: Path,
    cni: str = "testbed-veth",
) -> TunedConfig:
    """The chosen config as written: with the profile it was last predicted
    under (saved beside it) and that prediction, so that applying it to the
    bare storm under that profile reproduces ``origin.predicted``."""
    from datetime import UTC, datetime

    from ..models import ConfigOrigin, run_scenario

    assert config is not None
    profile_path = output.with_name(output.stem + ".profile.yaml")
    write_atomically(profile_path, profile.to_yaml())
    storm = Scenario(cni=cni, sandboxes=sandboxes, profile=str(profile_path))
    result = run_scenario(storm.replace(config=config), profile=profile)
    origin = ConfigOrigin(
        profile=str(profile_path),
        cni=cni,
        sandboxes=sandboxes,
        sampler="tpe",
        predicted={
            "makespan_s": result.makespan_s,
            "mean_s": result.startup.mean,
            "p99_s": result.startup.p99,
        },
        created_at=datetime.now(UTC),
    )
    return config.model_copy(update={"origin": origin})


def tune(
    *,
    sandboxes: int,
    trials: int,
    candidates: int,
    repeats: int,
    profile_path: Path | None,
    measured_ops: Path | None,
    plan_sandboxes: int | None,
    plan_runs: int,
    pool_kinds: Sequence[str] | None,
    limit_stages: Sequence[str],
    output: Path,
    trace_dir: Path | None,
    report: Path | None,
    vm: bool,
    progress: Progress | None = None,
    run_storm: StormRunner | None = None,
    runtime: str = "threads",
) -> TuneOutcome:
    """The loop (see the module's docstring). ``run_storm``: one real storm of
    a candidate (default: this host's testbed, root), for tests."""
    from ..calibration.identify import decision_cautions
    from ..calibration.plan import check_plan_names, runtime_pool_kinds, runtime_variant
    from ..validation.candidates import Candidate

    if sandboxes < 2:
        raise ConfigError(f"sandboxes: must be at least 2, but got {sandboxes}")
    for name, value in (("trials", trials), ("candidates", candidates), ("repeats", repeats)):
        if value < 1:
            raise ConfigError(f"{name}: must be at least 1, but got {value}")
    if run_storm is None and os.geteuid() != 0:
        raise ConfigError("tune: runs real storms and needs root (sudo bootstorm tune ...)")
    if runtime not in ("threads", "cni"):
        raise ConfigError(f"runtime: one of threads, cni, but got {runtime!r}")
    try:  # a typo in a name is refused before the operations are timed
        check_plan_names(runtime=runtime, pool_kinds=pool_kinds, limit_stages=limit_stages)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    progress = progress or SilentProgress()
    cni = runtime_variant(runtime)
    kinds = tuple(pool_kinds) if pool_kinds else runtime_pool_kinds(runtime)
    node = node_profile_for_tune(
        sandboxes=sandboxes,
        profile_path=profile_path,
        measured_ops=measured_ops,
        plan_sandboxes=plan_sandboxes,
        plan_runs=plan_runs,
        pool_kinds=kinds,
        limit_stages=limit_stages,
        trace_dir=trace_dir,
        vm=vm,
        runtime=runtime,
        progress=progress,
    )
    if node.profile.testbed is None:
        raise ConfigError(f"profile: {node.profile.name!r} has no testbed section (fit one first)")
    progress.step(f"2. search pools and limits on the model ({trials} TPE trials)")
    with progress.status("searching …"):
        best = search_candidates(
            node.profile,
            sandboxes=sandboxes,
            trials=trials,
            candidates=candidates,
            pool_kinds=kinds,
            limit_stages=limit_stages,
            cni=cni,
        )
    chosen = [Candidate(name="baseline", config=None)] + [
        Candidate(name=c.name, config=c.config) for c in best
    ]
    for c in best:
        progress.note(
            f"{c.name}: predicted {c.predicted_makespan_s:.2f} s — {describe_config(c.config)}"
        )
    base = Scenario(cni=cni, sandboxes=sandboxes, profile="local")
    with progress.status("checking the ranking against the unidentified costs …"):
        flags = decision_cautions(
            {c.name: base.replace(config=c.config) for c in best},
            baseline=base,
            profile=node.profile,
        )
    for f in flags:
        progress.note(f"caution: {f.line()}", tone="warn")
    progress.step(f"3. run the baseline and {len(best)} candidate(s) for real, {repeats} rounds")
    traces, comparison = measure(
        chosen,
        node.profile,
        sandboxes=sandboxes,
        repeats=repeats,
        vm=vm,
        run_storm=run_storm or candidate_runner(runtime=runtime, progress=progress),
        trace_dir=trace_dir,
        progress=progress,
    )
    progress.show(
        CandidatesCompared(
            title="predicted against measured (medians of the runs)", comparison=comparison
        )
    )
    progress.note(
        f"ranking agreement (Spearman): makespan {comparison.spearman_makespan:+.2f}, "
        f"mean startup {comparison.spearman_mean:+.2f}; "
        f"measured best {comparison.measured_best.name}, predicted best "
        f"{comparison.predicted_best.name}"
    )
    profile, refitted = refit_if_missed(
        comparison, traces, chosen, node, trace_dir=trace_dir, progress=progress
    )
    progress.step("5. choose")
    pick = choose(comparison, profile, sandboxes=sandboxes, output=output, cni=cni)
    if pick.name is not None and pick.measured_makespan_s is not None:
        change = pick.measured_makespan_s / pick.baseline_makespan_s - 1
        progress.note(
            f"{pick.name} ({describe_config(pick.config)}) measured "
            f"{pick.measured_makespan_s:.2f} s against the baseline's "
            f"{pick.baseline_makespan_s:.2f} s ({change:+.1%}; "
            f"faster in {pick.wins} of {repeats} rounds); written to {output}",
            tone="good",
        )
    else:
        progress.note(
            "no candidate was measured faster than the baseline: no config written "
            "(the node is best left as it is, or the model needs the storms above)",
            tone="warn",
        )
    if report is not None:
        from ..report import write_report

        write_report(
            report,
            title=f"bootstorm tune: {sandboxes} sandboxes on this node",
            facts=[
                ("repeats", str(repeats)),
                ("Spearman (makespan)", f"{comparison.spearman_makespan:+.2f}"),
                ("Spearman (mean startup)", f"{comparison.spearman_mean:+.2f}"),
                ("chosen", pick.name or "none (no candidate beat the baseline)"),
            ],
            candidates=(refitted or comparison).rows,
            chosen=(pick.name, pick.config)
            if pick.name is not None
            else ("none: no candidate was measured faster than the baseline", None),
        )
        progress.note(f"report written to {report}", tone="strong")
    return TuneOutcome(
        comparison=comparison,
        refitted=refitted,
        chosen=pick.name,
        wins=pick.wins,
        rounds=repeats,
        profile=profile,
    )
