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
    trace_path: Path,
    *,
    output: Path | None,
    bootstrap: int,
    predict_sandboxes: int | None,
    max_evaluations: int,
) -> None:
    """Fit a ``local`` profile to a recorded storm and print its error table."""
    from ._render import target_table
    from .calibration.trace_fit import StormStats, bootstrap_prediction, fit_trace
    from .traces import read_trace

    console = _console()
    trace = read_trace(trace_path)
    try:
        StormStats.of(trace)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    with console.status(f"fitting a local profile to {trace_path.name} …") as status:
        report = fit_trace(
            trace,
            max_evaluations=max_evaluations,
            on_evaluation=lambda n, cost: status.update(
                f"fitting a local profile to {trace_path.name} … evaluation {n}, cost {cost:.4g}"
            ),
        )
    console.print(
        target_table(
            f"local profile vs {trace_path.name} ({report.evaluations} evaluations)",
            report.checks,
        )
    )
    if output is not None:
        write_atomically(output, report.profile.to_yaml())
        console.print(f"profile written to [bold]{output}[/]")
    if bootstrap:
        stats = StormStats.of(trace)
        what_if = stats.scenario(sandboxes=predict_sandboxes or stats.sandboxes)
        with console.status(f"bootstrap: {bootstrap} refits …"):
            interval = bootstrap_prediction(
                trace, report.profile, what_if, resamples=bootstrap, max_evaluations=40
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
    calibrate_from: Path | None,
    measured: Path | None,
    trace_out: Path | None,
    threshold: float,
    vm: bool,
    as_json: bool,
    agent: str | None = None,
    token_file: Path | None = None,
) -> None:
    """Measure a storm (or read one), predict it, print both and the errors."""
    from .calibration.trace_fit import StormStats, fit_trace, predicted_vs_measured
    from .traces import read_trace, write_trace

    if not threshold > 0.0:
        raise ConfigError(f"threshold: must be > 0, but got {threshold}")
    if (profile is None) == (calibrate_from is None):
        raise ConfigError("profile: give exactly one of --profile FILE or --calibrate-from TRACE")
    console = _console()
    tuned = TunedConfig.from_yaml(config) if config is not None else None
    if profile is not None:
        local = Profile.from_yaml(profile)
    else:
        assert calibrate_from is not None
        with console.status(f"fitting a local profile to {calibrate_from.name} …"):
            local = fit_trace(read_trace(calibrate_from)).profile
    if measured is not None:
        trace = read_trace(measured)
    else:
        admission = None
        if agent is not None:
            from ._cli_testbed import agent_admission

            admission = agent_admission(agent, token_file, tuned)
        trace = _run_testbed(sandboxes, tuned, vm, console, admission)
        if trace_out is not None:
            write_trace(trace, trace_out)
    stats = StormStats.of(trace)
    scenario = stats.scenario()
    comparisons = predicted_vs_measured(trace, local)
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
            "threshold": threshold,
            "within": not failed,
        }
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        table = Table(title=f"{stats.sandboxes} × {stats.cni}: predicted vs measured")
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
