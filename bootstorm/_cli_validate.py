"""``bootstorm validate`` and ``bootstorm calibrate --trace``: a model of this
host, fitted to one real storm, against another real storm; and
``bootstorm validate --candidates``: whether the model ranks configs as the
host does."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer
from rich.console import Console
from rich.table import Table

from ._io import shown_name, terminal_console
from .models import ConfigError, Profile, TunedConfig
from .models._errors import format_validation_error

if TYPE_CHECKING:
    from .traces import Trace
    from .validation.candidates import Candidate, CandidateComparison, DiscordantPair, StormRunner

__all__ = [
    "check_validate_options",
    "interruptible_runner",
    "read_candidates",
    "validate_candidates",
    "validate_storm",
]


def _console() -> Console:
    return terminal_console()


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
    runtime: str = "threads",
) -> None:
    """Measure a storm (or read one), predict it, print both and the errors.

    The node's profile is loaded (``profile``), fitted to recorded storms
    (``calibrate_from``) or, with neither, fitted to ``calibration_runs``
    storms of ``calibration_sandboxes`` (default: half the size) run on this
    host first, without the config: the prediction is then one of another
    size under other settings, never of the storm it was fitted to.
    """
    from .calibration.trace_fit import StormStats, predicted_vs_measured
    from .traces import read_trace, write_trace

    if not threshold > 0.0:
        raise ConfigError(f"threshold: must be > 0, but got {threshold}")
    _check_profile_source(profile, calibrate_from, "--measured" if measured else None)
    if repeat < 1:
        raise ConfigError(f"repeat: must be at least 1, but got {repeat}")
    _check_calibration(calibration_runs, calibration_sandboxes)
    console = _console()
    tuned = TunedConfig.from_yaml(config) if config is not None else None
    local = _node_profile(
        profile=profile,
        calibrate_from=calibrate_from,
        size=calibration_sandboxes or max(2, sandboxes // 2),
        runs=calibration_runs,
        vm=vm,
        console=console,
        as_json=as_json,
        executor=executor,
        runtime=runtime,
        calibration_path=None
        if trace_out is None
        else lambda k: trace_out.with_name(f"calibration-{k}-{trace_out.name}"),
    )
    if measured:
        traces = [read_trace(p) for p in measured]
    else:
        admission = None
        if agent is not None:
            from ._cli_testbed import agent_admission

            admission = agent_admission(agent, token_file, tuned)
        traces = []
        for k in range(repeat):
            traces.append(_run_testbed(sandboxes, tuned, vm, console, admission, runtime=runtime))
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
        from ._render import print_identification

        print_identification(console, scenario, profile=local)
        if stats.background_load:
            console.print(
                f"[dim]the host's load average before the storm ({stats.background_load:.1f}) "
                "is simulated as that many always-runnable tasks[/]"
            )
    if failed:
        if not as_json:
            console.print(f"[red]outside ±{threshold:.0%}: {', '.join(failed)}[/]")
        raise typer.Exit(1)


def _check_profile_source(
    profile: Path | None, calibrate_from: list[Path] | None, recorded: str | None
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


def _node_profile(
    *,
    profile: Path | None,
    calibrate_from: list[Path] | None,
    size: int,
    runs: int,
    vm: bool,
    console: Console,
    as_json: bool,
    executor: str,
    calibration_path: Callable[[int], Path] | None,
    runtime: str = "threads",
) -> Profile:
    """The node's profile: loaded (``profile``), fitted to recorded storms
    (``calibrate_from``) or fitted to ``runs`` storms of ``size`` run here
    first, without a config (each written to ``calibration_path(k)``)."""
    from .calibration.trace_fit import fit_trace
    from .traces import read_trace, write_trace

    if profile is not None:
        return Profile.from_yaml(profile)
    if calibrate_from:
        fitted_to = [read_trace(p) for p in calibrate_from]
        name = calibrate_from[0].name
    else:
        name = f"{runs} storm(s) of {size} on this host"
        if not as_json:
            console.print(f"no --profile: fitting this node's profile to {name} first")
        fitted_to = []
        for k in range(runs):
            fitted_to.append(_run_testbed(size, None, vm, console, None, runtime=runtime))
            if calibration_path is not None:
                write_trace(fitted_to[-1], calibration_path(k))
    with console.status(f"fitting a local profile to {name} …"):
        return fit_trace(fitted_to, executor=executor).profile


def _run_testbed(
    sandboxes: int,
    tuned: TunedConfig | None,
    vm: bool,
    console: Console,
    admission: Any,
    what: str = "",
    peer: str = "in-netns",
    runtime: str = "threads",
) -> Any:
    from pydantic import ValidationError

    from ._cli_testbed import run_storm_interruptibly
    from .validation.testbed import StormOptions

    try:
        options = StormOptions(sandboxes=sandboxes, vm=vm, config=tuned, peer=peer, runtime=runtime)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix="testbed: ")) from None
    result = run_storm_interruptibly(options, admission, console)
    if result.failures:
        raise ConfigError(
            f"testbed: {what}{len(result.failures)} sandboxes failed: {result.failures[0]}"
        )
    return result.trace


# -- bootstorm validate --candidates ------------------------------------------


def check_validate_options(
    *,
    candidates: list[str] | None,
    config: Path | None,
    measured: list[Path] | None,
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
                f"trace: with --candidates, give --trace-out DIR (one file per run), not {trace}"
            )
        if agent is not None:
            raise ConfigError(f"agent: --candidates runs the storms without an agent ({agent})")
        return
    if measured_dir is not None:
        raise ConfigError(
            f"measured_dir: {measured_dir} holds the runs of --candidates: give --candidates "
            "(for one storm: --measured FILE)"
        )
    if trace_out is not None:
        raise ConfigError(
            f"trace_out: {trace_out} is for the runs of --candidates (for one storm: --trace FILE)"
        )


def interruptible_runner(console: Console, *, runtime: str = "threads") -> StormRunner:
    """A :class:`~bootstorm.validation.candidates.StormRunner` for a command:
    each storm under a status line on ``console``; Ctrl-C (or SIGTERM)
    unwinds through the testbed's cleanup and exits 130; a failed sandbox or
    a testbed that cannot run here is one line (exit 2)."""

    def run(candidate: Candidate, *, sandboxes: int, vm: bool) -> Trace:
        return cast(
            "Trace",
            _run_testbed(
                sandboxes,
                candidate.config,
                vm,
                console,
                None,
                f"candidate {candidate.name!r}: ",
                runtime=runtime,
            ),
        )

    return run


def read_candidates(items: list[str], *, baseline: bool) -> list[Candidate]:
    """``--candidates [NAME=]FILE`` (and the baseline first, with ``--baseline``).

    An item that is an existing file is a path, whatever it holds; else
    ``NAME=FILE`` where NAME is a plain name (letters, digits, ``.``, ``_``,
    ``-``); else a path. A name defaults to the file's stem.
    """
    from .validation.candidates import BASELINE, NAME_PATTERN, Candidate

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
    candidates: list[str],
    baseline: bool,
    sandboxes: int,
    repeat: int,
    profile: Path | None,
    calibrate_from: list[Path] | None,
    measured_dir: Path | None,
    trace_out: Path | None,
    threshold: float,
    min_spearman: float,
    vm: bool,
    as_json: bool,
    calibration_sandboxes: int | None = None,
    calibration_runs: int = 3,
    order_seed: int = 0,
    executor: str = "compiled",
    runtime: str = "threads",
) -> None:
    """Rank tuned configs on this host (or on recorded runs) and by the model.

    Runs ``repeat`` storms of ``sandboxes`` per candidate, interleaved
    (:func:`~bootstorm.validation.candidates.measure_candidates`), or reads
    ``measured_dir/<candidate>-run<k>.jsonl[.gz]``; predicts each under the
    node's profile (as :func:`validate_storm` gets it); prints a table per
    candidate and the Spearman of the two rankings. Exit 1 if that is below
    ``min_spearman`` (or undefined) or a makespan is off by more than
    ``threshold``.
    """
    from .validation.candidates import (
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
    _check_profile_source(profile, calibrate_from, "--measured-dir" if measured_dir else None)
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
            "in --trace-out; name it NAME=FILE"
        )
    console = _console()
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
    local = _node_profile(
        profile=profile,
        calibrate_from=calibrate_from,
        size=calibration_sandboxes or max(2, sandboxes // 2),
        runs=calibration_runs,
        vm=vm,
        console=console,
        as_json=as_json,
        executor=executor,
        runtime=runtime,
        calibration_path=None
        if trace_out is None
        else lambda k: run_path(trace_out, "calibration", k + 1),
    )
    if measured_dir is None:
        traces = measure_candidates(
            chosen,
            sandboxes=sandboxes,
            repeats=repeat,
            vm=vm,
            run_storm=interruptible_runner(console, runtime=runtime),
            order_seed=order_seed,
            on_run=lambda c, r, t: _ran(console, as_json, trace_out, c, r, repeat, t),
        )
    with console.status("simulating each candidate's storm …"):
        comparison = compare_candidates(traces, chosen, local, executor=executor)
    _report_candidates(comparison, console, as_json, threshold, min_spearman)


def _ran(
    console: Console,
    as_json: bool,
    trace_out: Path | None,
    candidate: Candidate,
    r: int,
    repeat: int,
    trace: Trace,
) -> None:
    """After each storm: keep its trace at once, and say how long it took."""
    from .calibration.trace_fit import StormStats
    from .traces import write_trace
    from .validation.candidates import run_path

    where = ""
    if trace_out is not None:
        path = run_path(trace_out, candidate.name, r + 1)
        write_trace(trace, path)
        where = f" → {path}"
    if not as_json:
        try:
            took = f"makespan {StormStats.of(trace).makespan_s:.3f} s"
        except ValueError as exc:
            took = str(exc)
        console.print(f"round {r + 1}/{repeat}: {candidate.name}: {took}{where}")


def _shown(mapping: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in mapping.items()) or "-"


def _report_candidates(
    comparison: CandidateComparison,
    console: Console,
    as_json: bool,
    threshold: float,
    min_spearman: float,
) -> None:
    records = comparison.records()
    rho, rho_mean = comparison.spearman_makespan, comparison.spearman_mean
    ranked = not math.isnan(rho) and rho >= min_spearman
    failed = [r["name"] for r in records if abs(r["makespan_error"]) > threshold]
    measured_best = comparison.measured_best.name
    predicted_best = comparison.predicted_best.name
    if as_json:
        payload = {
            "sandboxes": comparison.sandboxes,
            "repeats": comparison.repeats,
            "candidates": records,
            "spearman_makespan": None if math.isnan(rho) else rho,
            "spearman_mean": None if math.isnan(rho_mean) else rho_mean,
            "min_spearman": min_spearman,
            "measured_best": measured_best,
            "predicted_best": predicted_best,
            "best_agrees": comparison.best_agrees,
            "median_abs_error": comparison.median_abs_error,
            "discordant_pairs": [dataclasses.asdict(p) for p in comparison.discordant_pairs()],
            "threshold": threshold,
            "outside_threshold": failed,
            "within": ranked and not failed,
        }
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        first = comparison.rows[0]
        runs = f"median of {comparison.repeats} run{'s' if comparison.repeats > 1 else ''}"
        table = Table(
            title=f"{comparison.sandboxes} × {first.scenario.cni}: "
            f"{len(records)} candidates, predicted vs measured ({runs})"
        )
        columns = (
            "candidate",
            "pools",
            "limits",
            "makespan s\nmeasured",
            "runs s\nfastest–slowest",
            "makespan s\npredicted",
            "makespan\nerror",
            "mean s\nmeasured",
            "mean s\npredicted",
            "mean\nerror",
            "rank\nmeasured",
            "rank\npredicted",
        )
        for col in columns:
            # Names fold onto a second line in a narrow terminal; never cut to "bas…".
            if col in columns[:3]:
                table.add_column(col, justify="left", overflow="fold", min_width=8)
            else:
                table.add_column(col, justify="right")
        for r in records:
            color = "red" if r["name"] in failed else "green"
            table.add_row(
                r["name"],
                _shown(r["pools"]),
                _shown(r["limits"]),
                f"{r['measured_makespan_s']:.3f}",
                "{:.2f}–{:.2f}".format(*r["run_range_s"]),
                f"{r['predicted_makespan_s']:.3f}",
                f"[{color}]{r['makespan_error']:+.1%}[/]",
                f"{r['measured_mean_s']:.3f}",
                f"{r['predicted_mean_s']:.3f}",
                f"{r['mean_error']:+.1%}",
                str(r["measured_rank"]),
                str(r["predicted_rank"]),
            )
        console.print(table)
        spearman = (
            "undefined (all predicted or all measured makespans are equal)"
            if math.isnan(rho)
            else f"{rho:+.2f}"
        )
        best = f"the measured best ({measured_best}) is the predicted best"
        if not comparison.best_agrees:
            best = best.replace(" is ", " is not ") + f" ({predicted_best})"
        asked = f"at least {min_spearman:+.2f} asked"
        color = "green" if ranked else "red"
        by_mean = "undefined" if math.isnan(rho_mean) else f"{rho_mean:+.2f}"
        console.print(
            f"[{color}]ranking: Spearman {spearman} ({asked}); {best}[/]\n"
            f"ranking by mean startup: Spearman {by_mean}"
        )
        if pairs := comparison.discordant_pairs():

            def named(p: DiscordantPair) -> str:
                return f"{p.measured_faster} < {p.predicted_faster}"

            within = [named(p) for p in pairs if not p.separated_by_runs]
            resolved = [named(p) for p in pairs if p.separated_by_runs]
            said = (
                f"{len(pairs)} of {len(records) * (len(records) - 1) // 2} pairs ordered otherwise"
            )
            if within:
                said += f"; within the runs' own spread (their runs overlap): {', '.join(within)}"
            if resolved:
                said += f"; separated by every run, a model error: {', '.join(resolved)}"
            console.print(f"measured {said}")
        if failed:
            console.print(f"[red]makespan outside ±{threshold:.0%}: {', '.join(failed)}[/]")
    if failed or not ranked:
        raise typer.Exit(1)
