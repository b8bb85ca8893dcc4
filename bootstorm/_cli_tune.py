"""``bootstorm tune``: the whole loop on this node, shown step by step.

calibrate (a plan of real storms and the operations timed alone) → search
pools and limits on the fitted model → run the best few candidates and the
baseline for real, interleaved → refit with those storms if prediction and
measurement disagree beyond the profile's error → write the config that was
*measured* faster than the baseline, and nothing otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ._io import write_atomically
from .models import ConfigError, Profile, Scenario, TunedConfig

__all__ = ["TuneOutcome", "search_candidates", "tune"]


@dataclass(frozen=True, kw_only=True)
class TuneOutcome:
    """What ``tune`` found: the comparison of the candidates on real storms
    (before and after any refit) and the config it wrote, if any."""

    comparison: Any
    refitted: Any | None
    chosen: str | None
    wins: int
    """Rounds in which the chosen config's storm was faster than the baseline's (same round)."""
    rounds: int
    profile: Profile


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
) -> list[tuple[str, TunedConfig, float]]:
    """A TPE search on the model of the testbed's ``cni`` variant; the
    ``candidates`` best distinct configs (name, config, predicted makespan),
    best first."""
    import tempfile

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the console shows the outcome

    # A search names its profile (its workers load it by name or path).
    with tempfile.TemporaryDirectory(prefix="bootstorm-tune-") as tmp:
        path = Path(tmp) / "local.yaml"
        path.write_text(profile.to_yaml())
        return _search(
            Scenario(cni=cni, sandboxes=sandboxes, profile=str(path)),
            trials=trials,
            candidates=candidates,
            pool_kinds=pool_kinds,
            limit_stages=limit_stages,
            seed=seed,
        )


def _search(
    base: Scenario,
    *,
    trials: int,
    candidates: int,
    pool_kinds: Sequence[str],
    limit_stages: Sequence[str],
    seed: int,
) -> list[tuple[str, TunedConfig, float]]:
    from .optimizers import IntRange, SearchSpace, StudySpec, optimize

    sandboxes = base.sandboxes
    space = SearchSpace(
        cni=base.cni,
        limits={s: IntRange(low=1, high=sandboxes) for s in limit_stages},
        pools={k: IntRange(low=0, high=sandboxes, log=False) for k in pool_kinds},
        # The testbed's pooled devices hold no memory the search must budget.
        pool_device_mib={k: 0.0 for k in pool_kinds},
    )
    spec = StudySpec(scenario=base, space=space, trials=trials, sampler="tpe", sampler_seed=seed)
    found = optimize(spec)
    assert found.study is not None
    done = [t for t in found.study.trials if t.value is not None]
    done.sort(key=lambda t: (t.value, t.number))
    out: list[tuple[str, TunedConfig, float]] = []
    seen: set[str] = set()
    for t in done:
        config = space.config_of(t.params)
        key = config.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        out.append((f"candidate-{len(out) + 1}", config, float(t.value)))
        if len(out) == candidates:
            break
    return out


def _describe(config: TunedConfig | None) -> str:
    if config is None:
        return "no pools, no limits"
    parts = []
    if config.pools:
        parts.append("pools " + " ".join(f"{k}={v}" for k, v in sorted(config.pools.items())))
    if config.limits:
        parts.append("limits " + " ".join(f"{k}={v}" for k, v in sorted(config.limits.items())))
    return ", ".join(parts) or "no pools, no limits"


def _table(title: str, comparison: Any) -> Table:
    t = Table(title=title)
    for col in (
        "config",
        "settings",
        "makespan measured",
        "predicted",
        "error",
        "mean measured",
        "predicted",
        "error",
    ):
        t.add_column(col, justify="left" if col in ("config", "settings") else "right")
    for r in comparison.rows:
        t.add_row(
            r.name,
            escape(_describe(r.candidate.config)),
            f"{r.measured_makespan_s:.2f} s",
            f"{r.predicted_makespan_s:.2f} s",
            f"{r.makespan_error:+.1%}",
            f"{r.measured_mean_s:.2f} s",
            f"{r.predicted_mean_s:.2f} s",
            f"{r.mean_error:+.1%}",
        )
    return t


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
    console: Console,
    run_storm: Callable[..., Any] | None = None,
    runtime: str = "threads",
) -> TuneOutcome:
    """The loop (see the module's docstring). ``run_storm``: one real storm of
    a candidate (default: this host's testbed, root), for tests."""
    from .calibration.identify import DEFAULT_ERROR_REL, decision_cautions, identification_of
    from .calibration.trace_fit import fit_storms
    from .traces import read_trace, write_trace
    from .validation.candidates import Candidate, compare_candidates, measure_candidates

    if sandboxes < 2:
        raise ConfigError(f"sandboxes: must be at least 2, but got {sandboxes}")
    for name, value in (("trials", trials), ("candidates", candidates), ("repeats", repeats)):
        if value < 1:
            raise ConfigError(f"{name}: must be at least 1, but got {value}")
    if run_storm is None and os.geteuid() != 0:
        raise ConfigError("tune: runs real storms and needs root (sudo bootstorm tune ...)")
    from ._cli_calibrate import calibrate_plan, load_measured
    from .calibration.plan import runtime_pool_kinds, runtime_variant

    if runtime not in ("threads", "cni"):
        raise ConfigError(f"runtime: one of threads, cni, but got {runtime!r}")
    cni = runtime_variant(runtime)
    kinds = tuple(pool_kinds) if pool_kinds else runtime_pool_kinds(runtime)
    measured = load_measured(measured_ops)
    plan_traces: list[Any] = []
    # 1. The node's profile: given, or fitted to a calibration plan run here.
    if profile_path is not None:
        profile = Profile.from_yaml(profile_path)
        console.rule("1. profile")
        console.print(f"the node's profile: {profile_path}")
    else:
        console.rule("1. calibrate: the operations alone, then the plan's storms")
        plan_dir = (trace_dir / "plan") if trace_dir is not None else None
        fitted = calibrate_plan(
            sandboxes=plan_sandboxes or max(8, sandboxes // 3),
            runs=plan_runs,
            pool_kinds=kinds,
            limit_stages=limit_stages,
            measured_ops=measured_ops,
            measure=True,
            trace_dir=plan_dir,
            output=(trace_dir / "local.yaml") if trace_dir is not None else None,
            dry_run=False,
            vm=vm,
            max_evaluations=160,
            console=console,
            runtime=runtime,
        )
        assert fitted is not None
        profile = fitted
        if plan_dir is not None:
            plan_traces = [read_trace(p) for p in sorted(plan_dir.glob("*.jsonl.gz"))]
            ops = plan_dir / "ops.json"
            if not measured and ops.exists():
                measured = load_measured(ops)
    if profile.testbed is None:
        raise ConfigError(f"profile: {profile.name!r} has no testbed section (fit one first)")
    # 2. Search the model.
    console.rule(f"2. search pools and limits on the model ({trials} TPE trials)")
    with console.status("searching …"):
        best = search_candidates(
            profile,
            sandboxes=sandboxes,
            trials=trials,
            candidates=candidates,
            pool_kinds=kinds,
            limit_stages=limit_stages,
            cni=cni,
        )
    chosen_candidates = [Candidate(name="baseline", config=None)] + [
        Candidate(name=n, config=c) for n, c, _ in best
    ]
    for n, c, v in best:
        console.print(f"{n}: predicted {v:.2f} s — {escape(_describe(c))}")
    base = Scenario(cni=cni, sandboxes=sandboxes, profile="local")
    with console.status("checking the ranking against the unidentified costs …"):
        flags = decision_cautions(
            {n: base.replace(config=c) for n, c, _ in best}, baseline=base, profile=profile
        )
    for f in flags:
        console.print(f"[yellow]caution: {escape(f.line())}[/]")
    # 3. Measure them for real, interleaved with the baseline.
    console.rule(f"3. run the baseline and {len(best)} candidate(s) for real, {repeats} rounds")

    def on_run(candidate: Any, r: int, trace: Any) -> None:
        console.print(f"[dim]{candidate.name} run {r + 1}: {_makespan(trace):.2f} s[/]")
        if trace_dir is not None:
            trace_dir.mkdir(parents=True, exist_ok=True)
            write_trace(trace, trace_dir / f"{candidate.name}-run{r + 1}.jsonl.gz")

    from ._cli_validate import interruptible_runner

    kw: dict[str, Any] = {"run_storm": run_storm or interruptible_runner(console, runtime=runtime)}
    traces = measure_candidates(
        chosen_candidates, sandboxes=sandboxes, repeats=repeats, vm=vm, on_run=on_run, **kw
    )
    comparison = compare_candidates(traces, chosen_candidates, profile)
    console.print(_table("predicted against measured (medians of the runs)", comparison))
    console.print(
        f"ranking agreement (Spearman): makespan {comparison.spearman_makespan:+.2f}, "
        f"mean startup {comparison.spearman_mean:+.2f}; "
        f"measured best {comparison.measured_best.name}, predicted best "
        f"{comparison.predicted_best.name}"
    )
    # 4. Refit with the candidates' storms when the profile missed them.
    # Beyond the profile's own error (never tighter than a paper row's ±10%).
    error = max(identification_of(profile).error_rel, DEFAULT_ERROR_REL)
    missed = [r for r in comparison.rows if abs(r.makespan_error) > error]
    refitted = None
    if missed:
        console.rule("4. refit: the profile missed " + ", ".join(r.name for r in missed))
        everything = plan_traces + [t for ts in traces.values() for t in ts]
        with console.status(f"refitting on {len(everything)} storms …"):
            profile = fit_storms(everything, measured=measured).profile
        refitted = compare_candidates(traces, chosen_candidates, profile)
        console.print(_table("after the refit (the candidates' storms now in the fit)", refitted))
        if trace_dir is not None:
            write_atomically(trace_dir / "local-refitted.yaml", profile.to_yaml())
    # 5. Choose by measurement, never by prediction alone.
    console.rule("5. choose")
    baseline_runs = np.array(comparison.rows[0].run_makespans_s)
    chosen: str | None = None
    wins = 0
    ranked = sorted(comparison.rows[1:], key=lambda r: r.measured_makespan_s)
    if ranked and ranked[0].measured_makespan_s < comparison.rows[0].measured_makespan_s:
        top = ranked[0]
        chosen = top.name
        # Runs are in the order they ran: run k of each is from round k.
        wins = int(np.sum(np.array(top.run_makespans_s) < baseline_runs))
        config = _with_origin(
            top.candidate.config, profile, sandboxes=sandboxes, output=output, cni=cni
        )
        write_atomically(output, config.to_yaml())
        console.print(
            f"[green]{chosen} ({escape(_describe(config))}) measured "
            f"{top.measured_makespan_s:.2f} s against the baseline's "
            f"{comparison.rows[0].measured_makespan_s:.2f} s "
            f"({top.measured_makespan_s / comparison.rows[0].measured_makespan_s - 1:+.1%}; "
            f"faster in {wins} of {repeats} rounds); written to {output}[/]"
        )
    else:
        console.print(
            "[yellow]no candidate was measured faster than the baseline: no config written "
            "(the node is best left as it is, or the model needs the storms above)[/]"
        )
    if report is not None:
        from .report import write_report

        rows = (refitted or comparison).rows
        write_report(
            report,
            title=f"bootstorm tune: {sandboxes} sandboxes on this node",
            facts=[
                ("repeats", str(repeats)),
                ("Spearman (makespan)", f"{comparison.spearman_makespan:+.2f}"),
                ("Spearman (mean startup)", f"{comparison.spearman_mean:+.2f}"),
                ("chosen", chosen or "none (no candidate beat the baseline)"),
            ],
            candidates=rows,
        )
        console.print(f"report written to [bold]{report}[/]")
    return TuneOutcome(
        comparison=comparison,
        refitted=refitted,
        chosen=chosen,
        wins=wins,
        rounds=repeats,
        profile=profile,
    )


def _with_origin(
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

    from .models import ConfigOrigin, compile_scenario
    from .simulator import run_with

    assert config is not None
    profile_path = output.with_name(output.stem + ".profile.yaml")
    write_atomically(profile_path, profile.to_yaml())
    storm = Scenario(cni=cni, sandboxes=sandboxes, profile=str(profile_path))
    result = run_with(compile_scenario(storm.replace(config=config), profile=profile), "compiled")
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


def _makespan(trace: Any) -> float:
    from .calibration.trace_fit import StormStats

    return float(StormStats.of(trace).makespan_s)
