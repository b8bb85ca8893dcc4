"""``bootstorm validate`` and ``bootstorm calibrate --trace``: a model of this
host, fitted to one real storm, against another real storm."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ._io import write_atomically
from .models import ConfigError, Profile, TunedConfig

__all__ = ["calibrate_trace", "validate_storm"]


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=140)


def calibrate_trace(
    trace_paths: list[Path],
    *,
    output: Path | None,
    bootstrap: int,
    predict_sandboxes: int | None,
    max_evaluations: int,
    executor: str = "compiled",
) -> None:
    """Fit a ``local`` profile to a recorded storm and print its error table."""
    from ._render import fit_spread, target_table
    from .calibration.trace_fit import StormStats, bootstrap_prediction, fit_trace
    from .traces import read_trace

    console = _console()
    traces = [read_trace(p) for p in trace_paths]
    try:
        StormStats.pooled(traces)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    name = trace_paths[0].name + (f" and {len(traces) - 1} more" if len(traces) > 1 else "")
    trace = traces[0]
    with console.status(f"fitting a local profile to {name} …") as status:
        report = fit_trace(
            traces,
            max_evaluations=max_evaluations,
            executor=executor,
            on_evaluation=lambda n, cost: status.update(
                f"fitting a local profile to {name} … evaluation {n}, cost {cost:.4g}"
            ),
        )
    console.print(
        target_table(
            f"local profile vs {name} ({report.evaluations} evaluations)",
            report.checks,
        )
    )
    console.print(fit_spread(report))
    family = report.profile.sources.get("service_family", "lognormal (no choice stated)")
    console.print(f"service times: {family.removeprefix('the recorded storm: ')}")
    if output is not None:
        write_atomically(output, report.profile.to_yaml())
        console.print(f"profile written to [bold]{output}[/]")
    if bootstrap:
        stats = StormStats.of(trace)
        what_if = stats.scenario(sandboxes=predict_sandboxes or stats.sandboxes)
        with console.status(f"bootstrap: {bootstrap} refits …"):
            interval = bootstrap_prediction(
                trace,
                report.profile,
                what_if,
                resamples=bootstrap,
                max_evaluations=40,
                executor=executor,
            )
        console.print(
            f"predicted makespan of {what_if.sandboxes} sandboxes: {interval.point:.2f} s "
            f"({interval.level:.0%} bootstrap interval {interval.low:.2f} … {interval.high:.2f} s)"
        )


def validate_storm(
    *,
    sandboxes: int,
    config: Path | None,
    profile: Path | None,
    calibrate_from: list[Path] | None,
    measured: list[Path] | None,
    trace_out: Path | None,
    threshold: float,
    vm: bool,
    as_json: bool,
    agent: str | None = None,
    token_file: Path | None = None,
    repeat: int = 1,
    calibration_sandboxes: int | None = None,
    calibration_runs: int = 3,
    executor: str = "compiled",
) -> None:
    """Measure a storm (or read one), predict it, print both and the errors.

    The node's profile is loaded (``profile``), fitted to recorded storms
    (``calibrate_from``) or, with neither, fitted to ``calibration_runs``
    storms of ``calibration_sandboxes`` (default: half the size) run on this
    host first, without the config: the prediction is then one of another
    size under other settings, never of the storm it was fitted to.
    """
    from .calibration.trace_fit import StormStats, fit_trace, predicted_vs_measured
    from .traces import read_trace, write_trace

    if not threshold > 0.0:
        raise ConfigError(f"threshold: must be > 0, but got {threshold}")
    if profile is not None and calibrate_from:
        raise ConfigError("profile: give at most one of --profile FILE or --calibrate-from TRACE")
    if measured and profile is None and not calibrate_from:
        raise ConfigError(
            "profile: --measured compares recorded storms and runs none here: "
            "give --profile FILE or --calibrate-from TRACE"
        )
    if repeat < 1:
        raise ConfigError(f"repeat: must be at least 1, but got {repeat}")
    if calibration_runs < 1:
        raise ConfigError(f"calibration_runs: must be at least 1, but got {calibration_runs}")
    if calibration_sandboxes is not None and calibration_sandboxes < 2:
        raise ConfigError(
            f"calibration_sandboxes: must be at least 2, but got {calibration_sandboxes}"
        )
    console = _console()
    tuned = TunedConfig.from_yaml(config) if config is not None else None
    if profile is not None:
        local = Profile.from_yaml(profile)
    else:
        if calibrate_from:
            fitted_to = [read_trace(p) for p in calibrate_from]
            name = calibrate_from[0].name
        else:
            size = calibration_sandboxes or max(2, sandboxes // 2)
            name = f"{calibration_runs} storm(s) of {size} on this host"
            if not as_json:
                console.print(f"no --profile: fitting this node's profile to {name} first")
            fitted_to = []
            for k in range(calibration_runs):
                fitted_to.append(_run_testbed(size, None, vm, console, None))
                if trace_out is not None:
                    write_trace(
                        fitted_to[-1], trace_out.with_name(f"calibration-{k}-{trace_out.name}")
                    )
        with console.status(f"fitting a local profile to {name} …"):
            local = fit_trace(fitted_to, executor=executor).profile
    if measured:
        traces = [read_trace(p) for p in measured]
    else:
        admission = None
        if agent is not None:
            from ._cli_testbed import agent_admission

            admission = agent_admission(agent, token_file, tuned)
        traces = []
        for k in range(repeat):
            traces.append(_run_testbed(sandboxes, tuned, vm, console, admission))
            if trace_out is not None:
                path = trace_out if repeat == 1 else trace_out.with_name(f"{k}-{trace_out.name}")
                write_trace(traces[-1], path)
    try:
        stats = StormStats.pooled(traces)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    scenario = stats.scenario()
    comparisons = predicted_vs_measured(traces, local, executor=executor)
    rows = [(c.metric, c.measured, c.predicted) for c in comparisons]
    errors = {c.metric: c.rel_error for c in comparisons}
    headline = ("makespan_s", "startup mean_s", "startup p99_s")
    failed = [k for k in headline if abs(errors[k]) > threshold]
    if as_json:
        payload = {
            "sandboxes": stats.sandboxes,
            "scenario": scenario.model_dump(mode="json"),
            "rows": [
                {"metric": n, "measured": m, "predicted": p, "rel_error": errors[n]}
                for n, m, p in rows
            ],
            "runs": len(traces),
            "threshold": threshold,
            "within": not failed,
        }
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        runs = f", median of {len(traces)} runs" if len(traces) > 1 else ""
        table = Table(title=f"{stats.sandboxes} × {stats.cni}: predicted vs measured{runs}")
        for col in ("metric", "measured", "predicted", "error"):
            table.add_column(col, justify="left" if col == "metric" else "right")
        for name, m, p in rows:
            color = "red" if name in failed else "green" if name in headline else "white"
            table.add_row(name, f"{m:.3f}", f"{p:.3f}", f"[{color}]{errors[name]:+.1%}[/]")
        console.print(table)
        if stats.background_load:
            console.print(
                f"[dim]the host's load average before the storm ({stats.background_load:.1f}) "
                "is simulated as that many always-runnable tasks[/]"
            )
    if failed:
        if not as_json:
            console.print(f"[red]outside ±{threshold:.0%}: {', '.join(failed)}[/]")
        raise typer.Exit(1)


def _run_testbed(
    sandboxes: int, tuned: TunedConfig | None, vm: bool, console: Console, admission: Any
) -> Any:
    from ._cli_testbed import run_storm_interruptibly
    from .validation.testbed import StormOptions

    options = StormOptions(sandboxes=sandboxes, vm=vm, config=tuned)
    result = run_storm_interruptibly(options, admission, console)
    if result.failures:
        raise ConfigError(f"testbed: {len(result.failures)} sandboxes failed: {result.failures[0]}")
    return result.trace
