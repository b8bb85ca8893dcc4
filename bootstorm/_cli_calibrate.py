"""``bootstorm calibrate --trace`` and ``--plan``: a model of this node whose
every cost is identified by a measurement or a calibration storm."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ._io import write_atomically
from .models import ConfigError, Profile

__all__ = [
    "DEFAULT_CHECK_SEEDS",
    "calibrate_check",
    "calibrate_plan",
    "calibrate_traces",
    "identification_summary",
    "load_measured",
    "run_plan",
]


#: ``calibrate --check --seeds``' default: ten seeds no paper fit uses.
DEFAULT_CHECK_SEEDS = "1001-1010"

_STATUS_COLOUR = {"pass": "green", "known miss": "yellow", "MISS": "red", "untestable": "magenta"}


def calibrate_check(
    targets: str,
    *,
    seeds: str = DEFAULT_CHECK_SEEDS,
    executor: str = "compiled",
    console: Console | None = None,
    as_json: bool = False,
) -> int:
    """``bootstorm calibrate --check [--seeds 1001-1010]``: every row of the
    built-in profile ``targets`` at each seed, judged on the mean over the
    seeds, with the spread across seeds and each row's kind (fit, predict,
    identity, mechanism). Returns the exit status: 1 when a row misses that
    ``KNOWN_MISSES`` does not name, else 0."""
    from .calibration import TARGET_SETS
    from .calibration.check import check_profile, parse_seeds

    if targets not in TARGET_SETS:
        known = ", ".join(TARGET_SETS)
        raise ConfigError(f"targets: unknown target set {targets!r}; known: {known}")
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    console = console or _console()
    with console.status(f"checking {targets} at {len(seed_list)} seed(s) …"):
        checks = check_profile(targets, seeds=seed_list, executor=executor)
    unexpected = [c for c in checks if c.status == "MISS"]
    if as_json:
        import json

        rows = [
            {
                "key": c.row.key,
                "kind": c.row.kind,
                "label": c.row.label,
                "paper": c.row.value,
                "model_mean": c.mean,
                "per_seed": list(c.per_seed),
                "rel_error": c.rel_error,
                "seed_sd_rel": c.seed_sd_rel,
                "se_rel": c.se_rel,
                "tolerance_rel": c.row.tolerance_rel,
                "status": c.status,
            }
            for c in checks
        ]
        sys.stdout.write(json.dumps({"targets": targets, "seeds": seed_list, "rows": rows}) + "\n")
        return 1 if unexpected else 0
    span = f"{seed_list[0]}-{seed_list[-1]}" if len(seed_list) > 1 else str(seed_list[0])
    # 80 columns (a pipe's width): the row's label wraps under its key, the
    # numbers never wrap, one space between columns.
    t = Table(
        title=f"{targets}: mean of {len(seed_list)} seed(s) ({span}) against the papers",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
        collapse_padding=True,
    )
    t.add_column("row (kind)", justify="left", min_width=16, ratio=1)
    for col in ("paper", "model\nmean", "seeds\nmin…max", "error", "± se"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("toler-\nance", justify="right")
    t.add_column("status", justify="left", min_width=6)
    for c in checks:
        lo, hi = c.spread
        tol = c.row.tolerance_rel
        t.add_row(
            f"{c.row.key} ({c.row.kind})\n[dim]{escape(c.row.label)}[/]",
            f"{c.row.value:,.4g}",
            f"{c.mean:,.4g}",
            f"{lo:,.3g}…{hi:,.3g}",
            f"{c.rel_error:+.1%}",
            f"{c.se_rel:.1%}",
            f"≥ −{tol:.0%}"
            if c.row.at_least
            else (f"±{tol:.0%} of 1−x" if c.row.complement else f"±{tol:.0%}"),
            f"[{_STATUS_COLOUR[c.status]}]{c.status}[/]",
        )
    console.print(t)
    if unexpected:
        console.print(
            "[red]unexpected misses (not in KNOWN_MISSES): "
            + ", ".join(f"{c.row.key} {escape(c.row.label)}" for c in unexpected)
            + "[/]"
        )
    return 1 if unexpected else 0


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=120)


def load_measured(path: Path | None) -> dict[str, Any]:
    """The costs measured alone (``bootstorm testbed measure-ops --output``), by path."""
    if path is None:
        return {}
    from .models._yaml import read_text_bounded
    from .validation.testbed.ops import OperationTimes, testbed_costs_from

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


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def identification_summary(profile: Profile) -> Table:
    """Each free cost: measured, fitted or unidentified, its range and what identified it."""
    ident = profile.identification
    t = Table(
        title=(
            f"what identified each cost (the profile's own error ±{ident.error_rel:.0%})"
            if ident is not None
            else "no identification recorded"
        ),
        title_justify="left",
    )
    for col in ("cost", "status", "ms", "range (ms)", "by"):
        t.add_column(col, justify="right" if col in ("ms", "range (ms)") else "left")
    if ident is None:
        return t
    assert profile.testbed is not None
    colour = {"measured": "green", "fitted": "cyan", "unidentified": "yellow"}
    for path, e in ident.costs.items():
        value = float(getattr(profile.testbed, path.split(".", 1)[1]))
        t.add_row(
            path.removeprefix("testbed."),
            f"[{colour[e.status]}]{e.status}[/]",
            _ms(value),
            f"{_ms(e.low)}…{_ms(e.high)}",
            escape(e.by[:60]),
        )
    return t


def _print_identification(console: Console, profile: Profile) -> None:
    console.print(identification_summary(profile))
    ident = profile.identification
    if ident is not None and ident.unseen:
        console.print(
            f"[yellow]{len(ident.unseen)} direction(s) of the costs are seen by no fitted storm "
            "or measurement; what-ifs along them carry a caution:[/]"
        )
        for d in ident.unseen:
            console.print(f"  [yellow]{escape(d.label())}[/]")
    elif ident is not None:
        console.print("[green]every cost is identified by a storm or a measurement[/]")


def calibrate_traces(
    trace_paths: Sequence[Path],
    *,
    output: Path | None,
    measured_ops: Path | None,
    bootstrap: int,
    predict_sandboxes: int | None,
    max_evaluations: int,
    executor: str = "compiled",
    as_json: bool = False,
) -> Profile:
    """Fit one ``local`` profile to every recorded storm given (runs of one
    storm pooled, different storms together) and the measured costs; print
    the error table and what identified each cost."""
    from ._render import target_table
    from .calibration.trace_fit import (
        StormStats,
        bootstrap_prediction,
        fit_storms,
        group_storms,
    )
    from .traces import read_trace

    console = _console()
    traces = [read_trace(p) for p in trace_paths]
    measured = load_measured(measured_ops)
    try:
        groups = group_storms(traces)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    name = f"{len(traces)} run(s) of {len(groups)} storm(s)"
    with console.status(f"fitting a local profile to {name} …") as status:
        try:
            report = fit_storms(
                traces,
                measured=measured,
                max_evaluations=max_evaluations,
                executor=executor,
                on_evaluation=lambda n, cost: status.update(
                    f"fitting a local profile to {name} … evaluation {n}, cost {cost:.4g}"
                ),
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if output is not None:
        write_atomically(output, report.profile.to_yaml())
    if as_json:
        import json

        ident = report.profile.identification
        payload = {
            "rows": [
                {
                    "row": c.target.label,
                    "fitted": c.target.weight > 0,
                    "measured": c.target.value,
                    "model": c.model,
                    "rel_error": c.rel_error,
                }
                for c in report.checks
            ],
            "identification": ident.model_dump(mode="json") if ident is not None else None,
            "output": str(output) if output is not None else None,
        }
        sys.stdout.write(json.dumps(payload) + "\n")
        return report.profile
    console.print(
        target_table(f"local profile vs {name} ({report.evaluations} evaluations)", report.checks)
    )
    _print_identification(console, report.profile)
    family = report.profile.sources.get("service_family", "lognormal (no choice stated)")
    console.print(f"service times: {family.removeprefix('the recorded storm: ')}")
    if output is not None:
        console.print(f"profile written to [bold]{output}[/]")
    if bootstrap:
        if len(groups) > 1 or len(traces) > 1:
            raise ConfigError("bootstrap: resamples one recorded storm; give one --trace")
        stats = StormStats.of(traces[0])
        what_if = stats.scenario(sandboxes=predict_sandboxes or stats.sandboxes)
        with console.status(f"bootstrap: {bootstrap} refits …"):
            interval = bootstrap_prediction(
                traces[0],
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
    return report.profile


def run_plan(
    storms: Sequence[Any],
    *,
    runs: int,
    vm: bool,
    trace_dir: Path | None,
    console: Console,
    run_one: Callable[[Any], Any] | None = None,
    order_seed: int = 0,
) -> list[Any]:
    """Run every storm ``runs`` times, interleaved (each round in its own
    shuffled order, so drift and the previous storm's teardown favour none),
    writing each trace to ``trace_dir/<storm>-run<k>.jsonl.gz``."""
    from .traces import write_trace

    if run_one is None:
        from ._cli_validate import _run_testbed

        def run_one(storm: Any) -> Any:
            return _run_testbed(
                storm.sandboxes,
                storm.config(),
                vm,
                console,
                None,
                what=f"{storm.name}: ",
                peer=storm.peer,
                runtime=storm.runtime,
            )

    rng = np.random.default_rng(order_seed)
    traces = []
    for k in range(runs):
        for i in rng.permutation(len(storms)):
            storm = storms[int(i)]
            console.print(f"[dim]run {k + 1}/{runs}: {storm.name}[/]")
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
    console: Console | None = None,
    runtime: str = "threads",
) -> Profile | None:
    """Measure the operations alone (``measure``), design the plan from the
    catalog for the testbed's ``runtime``, run its storms here and fit them
    together (or, ``dry_run``, print the plan only). ``pool_kinds``: None for
    every kind the runtime pools."""
    import os

    from .calibration.plan import calibration_plan
    from .calibration.trace_fit import fit_storms

    console = console or _console()
    if runs < 1:
        raise ConfigError(f"runs: must be at least 1, but got {runs}")
    if sandboxes < 4:
        raise ConfigError(f"plan_sandboxes: must be at least 4, but got {sandboxes}")
    if not dry_run and os.geteuid() != 0:
        raise ConfigError("plan: running the plan's storms needs root (or give --dry-run)")
    measured = load_measured(measured_ops)
    if measure and not measured and not dry_run:
        measured = dict(measure_here(console, vm=vm, trace_dir=trace_dir))
    try:
        plan = calibration_plan(
            sandboxes=sandboxes,
            runs=runs,
            pool_kinds=pool_kinds,
            limit_stages=limit_stages,
            runtime=runtime,
            cores=os.cpu_count() or 1,
            measured=measured,
            executor=executor,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    t = Table(title=f"calibration plan: {len(plan.storms)} storm(s) × {runs} run(s)")
    t.add_column("storm")
    t.add_column("why")
    for s in plan.storms:
        t.add_row(s.name, s.why)
    console.print(t)
    if plan.unseen_after:
        console.print(
            "[yellow]linearised at the start, still unseen after the plan: "
            + "; ".join(plan.unseen_after)
            + " (the fit reports what is left)[/]"
        )
    if dry_run:
        return None
    traces = run_plan(plan.storms, runs=runs, vm=vm, trace_dir=trace_dir, console=console)
    with console.status(f"fitting a local profile to {len(traces)} runs …"):
        report = fit_storms(
            traces, measured=measured, max_evaluations=max_evaluations, executor=executor
        )
    from ._render import target_table

    console.print(target_table("local profile vs the plan's storms", report.checks))
    _print_identification(console, report.profile)
    if output is not None:
        write_atomically(output, report.profile.to_yaml())
        console.print(f"profile written to [bold]{output}[/]")
    return report.profile


def measure_here(console: Console, *, vm: bool, trace_dir: Path | None) -> Mapping[str, Any]:
    """Time each operation alone on this node (root) and return the costs it gives."""
    from .validation.testbed.ops import measure_operations, testbed_costs_from

    with console.status("timing each operation alone (measure-ops) …"):
        times = measure_operations(vm=vm)
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(trace_dir / "ops.json", times.to_json())
    return dict(testbed_costs_from(times))
