"""Rich rendering of the node workflows (:mod:`bootstorm.workflows`): their
progress as it happens, and their outcomes as tables."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .models import Profile
from .workflows import (
    CandidatesCompared,
    CandidateValidation,
    Identification,
    PaperCheck,
    PlanDesigned,
    ProfileFitted,
    StormValidation,
    Tone,
    TrafficTuneOutcome,
    describe_config,
)

__all__ = [
    "RichProgress",
    "candidates_table",
    "check_table",
    "identification_summary",
    "print_candidate_validation",
    "print_profile_identification",
    "print_storm_validation",
    "print_testbed_storm",
    "storm_validation_table",
    "testbed_storm_record",
    "traffic_tune_table",
]

_TONE_STYLE: dict[str, str | None] = {
    "plain": None,
    "dim": "dim",
    "strong": None,
    "good": "green",
    "warn": "yellow",
    "bad": "red",
}


class RichProgress:
    """A workflow's progress on a rich console: steps as rules, waits as a
    status line (shown only on a terminal), notes as lines, outcomes as tables."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def step(self, title: str) -> None:
        self.console.rule(escape(title))

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[Callable[[str], None]]:
        with self.console.status(escape(text)) as status:
            yield lambda new: status.update(escape(new))

    def note(self, text: str, *, tone: Tone = "plain") -> None:
        style = _TONE_STYLE[tone]
        if tone == "strong":
            # A file written: the path in bold, as every command says it.
            head, sep, path = text.rpartition(" to ")
            if sep:
                self.console.print(f"{escape(head)} to [bold]{escape(path)}[/]")
                return
        self.console.print(f"[{style}]{escape(text)}[/]" if style else escape(text))

    def show(self, outcome: object) -> None:
        show(outcome, self.console)


@functools.singledispatch
def show(outcome: object, console: Console) -> None:
    """Render an intermediate outcome of a workflow (one per record type)."""
    raise TypeError(f"no renderer for {type(outcome).__name__}")


@show.register
def _(outcome: PlanDesigned, console: Console) -> None:
    plan = outcome.plan
    t = Table(title=f"calibration plan: {len(plan.storms)} storm(s) × {outcome.runs} run(s)")
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


@show.register
def _(outcome: ProfileFitted, console: Console) -> None:
    from ._render import target_table

    console.print(target_table(outcome.title, outcome.report.checks, reference="measured"))
    print_profile_identification(console, outcome.report.profile)


@show.register
def _(outcome: CandidatesCompared, console: Console) -> None:
    console.print(candidates_table(outcome.title, outcome.comparison))


@show.register
def _(outcome: TrafficTuneOutcome, console: Console) -> None:
    console.print(traffic_tune_table(outcome))


def traffic_tune_table(outcome: TrafficTuneOutcome) -> Table:
    """Each config run on the workload: predicted and measured p99, empty-pool
    starts and memory held, and how many runs met the SLO. Five narrow
    columns (two figures to a cell), so that it reads whole at 80 columns."""
    from .workflows.tuning_traffic import describe_refill

    def pair(p: float | None, m: float | None, fmt: str) -> str:
        shown = ["—" if v is None else format(v, fmt) for v in (p, m)]
        return f"{shown[0]} / {shown[1]}"

    t = Table(
        title=f"predicted / measured on the workload (p99 SLO {outcome.slo_p99_s:g} s)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    t.add_column("config", overflow="fold")
    t.add_column("p99 s", justify="right")
    t.add_column("empty starts", justify="right")
    t.add_column("MiB held", justify="right")
    t.add_column("met SLO", justify="right")
    for r in outcome.rows:
        name = f"[bold]{r.name}[/]" if r.name == outcome.chosen else r.name
        settings = "\n".join(filter(None, (describe_config(r.config), describe_refill(r.config))))
        t.add_row(
            f"{name}\n[dim]{escape(settings)}[/]",
            pair(r.predicted.p99_s, r.measured.p99_s, ".3f"),
            pair(r.predicted.empty_starts, r.measured.empty_starts, ".0f"),
            pair(r.predicted.memory_mib, r.measured.memory_mib, ".1f"),
            f"{r.runs_meeting_slo} of {len(r.run_p99_s)}",
        )
    return t


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def identification_summary(profile: Profile) -> Table:
    """Each free cost: measured, fitted or unidentified, its range and what
    identified it (under its name, whole: it wraps at 80 columns, never cut)."""
    ident = profile.identification
    from ._render import narrow_table

    t = narrow_table(
        f"what identified each cost (the profile's own error ±{ident.error_rel:.0%})"
        if ident is not None
        else "no identification recorded"
    )
    t.add_column("cost (identified by)", justify="left", min_width=20, ratio=1)
    t.add_column("status", justify="left", no_wrap=True)
    t.add_column("ms", justify="right", no_wrap=True)
    t.add_column("range (ms)", justify="right", no_wrap=True)
    if ident is None:
        return t
    assert profile.testbed is not None
    colour = {"measured": "green", "fitted": "cyan", "unidentified": "yellow"}
    for path, e in ident.costs.items():
        value = float(getattr(profile.testbed, path.split(".", 1)[1]))
        t.add_row(
            f"{escape(path.removeprefix('testbed.'))}\n[dim]{escape(e.by)}[/]",
            f"[{colour[e.status]}]{e.status}[/]",
            _ms(value),
            f"{_ms(e.low)}…{_ms(e.high)}",
        )
    return t


def print_profile_identification(console: Console, profile: Profile) -> None:
    """What identified each cost of a fitted profile, and the directions no
    storm or measurement saw."""
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


_STATUS_COLOUR = {"pass": "green", "known miss": "yellow", "MISS": "red", "untestable": "magenta"}


def check_table(check: PaperCheck) -> Table:
    """``calibrate --check``: every row's kind, the model's mean over the
    seeds, their spread and the status; 80 columns (a pipe's width): the
    row's label wraps under its key, the numbers never wrap."""
    seeds = check.seeds
    span = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    t = Table(
        title=f"{check.targets}: mean of {len(seeds)} seed(s) ({span}) against the papers",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
        collapse_padding=True,
    )
    # A long row key folds onto a second line ("S2-3/bridge-toge…" was cut).
    t.add_column("row (kind)", justify="left", min_width=16, ratio=1, overflow="fold")
    for col in ("paper", "model\nmean", "seeds\nmin…max", "error", "± se"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("toler-\nance", justify="right")
    t.add_column("status", justify="left", min_width=6)
    for c in check.checks:
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
    return t


#: Below this many standard errors between a passing row's error and its
#: tolerance's edge, another draw of as many unseen seeds can put it on
#: either side (S0-1 at +4.8% of ±5%).
EDGE_SE = 2.0


def check_notes(check: PaperCheck) -> list[str]:
    """``calibrate --check``'s lines under the table: each declared derivation's
    verdict (identity or not, mechanically), rows the seeds cannot move, rows
    at their tolerance's edge, and labels the verdict contradicts."""
    lines: list[str] = []
    derived = [c for c in check.checks if c.row.derived_from is not None]
    if derived:
        lines.append(
            "identity check: each relation on the paper's values of the rows it uses, "
            "against the model's mean; within the row's tolerance, the fitted rows "
            "alone give the row (identity), else it is a prediction:"
        )
    for c in derived:
        d = c.row.derived_from
        assert d is not None and c.derived is not None and c.derived_model is not None
        err = c.derived_error or 0.0
        verdict = "determined: identity" if c.determined else "not determined: predict"
        colour = "green" if c.label_holds else "red"
        lines.append(
            f"  {c.row.key} ({c.row.kind}): {escape(d.formula)} = {c.derived:,.4g} "
            f"(on the model's rows {c.derived_model:,.4g}); model {c.mean:,.4g}, "
            f"{err:+.1%} of ±{c.row.tolerance_rel:.0%}: [{colour}]{verdict}[/]"
        )
    fixed = sorted({c.row.key for c in check.checks if c.deterministic})
    if fixed:
        lines.append(
            "the same at every seed (one flow: every core alike; a count the catalog "
            "sets; a p99 of many pairs' completion times, which lands on the same rate "
            f"level): {', '.join(fixed)}"
        )
    edge = [
        c
        for c in check.checks
        if c.status == "pass" and c.row.kind == "fit" and c.edge_se < EDGE_SE
    ]
    for c in edge:
        lines.append(
            f"[yellow]at its tolerance's edge: {c.row.key} {escape(c.row.label)} "
            f"{c.rel_error:+.1%} of ±{c.row.tolerance_rel:.0%}, {c.edge_se:.1f} standard "
            f"errors ({c.se_rel:.1%}) inside: other unseen seeds can put it on either side[/]"
        )
    for c in check.mislabelled:
        lines.append(
            f"[red]mislabelled: {c.row.key} is labelled {c.row.kind} but the identity "
            f"check finds it {'determined' if c.determined else 'not determined'}[/]"
        )
    return lines


def check_records(check: PaperCheck) -> dict[str, Any]:
    """The ``calibrate --check --json`` object."""
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
            "deterministic": c.deterministic,
            "edge_se": None if math.isinf(c.edge_se) else c.edge_se,
            "derived_from": None
            if c.row.derived_from is None
            else {
                "formula": c.row.derived_from.formula,
                "uses": list(c.row.derived_from.uses),
                "from_paper": c.derived,
                "from_model": c.derived_model,
                "error": c.derived_error,
                "determined": c.determined,
            },
            "label_holds": c.label_holds,
        }
        for c in check.checks
    ]
    return {"targets": check.targets, "seeds": list(check.seeds), "rows": rows}


#: A candidate's figures, measured against the model's, as both tables show them.
_FIGURE_COLUMNS = (
    "makespan s\nmeasured",
    "\nmodel",
    "\nerror",
    "mean s\nmeasured",
    "\nmodel",
    "\nerror",
)


def _figure_columns(table: Table, *more: str) -> None:
    """A candidate's figures (and ``more``) as right-aligned columns that never wrap."""
    for col in (*_FIGURE_COLUMNS, *more):
        table.add_column(col, justify="right", no_wrap=True)


def candidates_table(title: str, comparison: Any) -> Table:
    """``tune``'s table: each candidate's makespan and mean startup measured
    against the model's (medians of the runs), its settings under its name;
    at 80 columns, nothing cut."""
    from ._render import narrow_table

    t = narrow_table(title)
    t.add_column("config and settings", justify="left", overflow="fold", min_width=12, ratio=1)
    _figure_columns(t)
    for r in comparison.rows:
        t.add_row(
            f"{r.name}\n[dim]{escape(describe_config(r.candidate.config))}[/]",
            f"{r.measured_makespan_s:.2f}",
            f"{r.predicted_makespan_s:.2f}",
            f"{r.makespan_error:+.1%}",
            f"{r.measured_mean_s:.2f}",
            f"{r.predicted_mean_s:.2f}",
            f"{r.mean_error:+.1%}",
        )
    return t


def storm_validation_table(outcome: StormValidation) -> Table:
    """``validate``: each metric measured against predicted, the headline
    ones green or red."""
    stats = outcome.stats
    runs = f", median of {outcome.runs} runs" if outcome.runs > 1 else ""
    table = Table(title=f"{stats.sandboxes} × {stats.cni}: predicted vs measured{runs}")
    for col in ("metric", "measured", "predicted", "error"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    failed = outcome.failed
    headline = ("makespan_s", "startup mean_s", "startup p99_s")
    for name, m, p in outcome.rows:
        color = "red" if name in failed else "green" if name in headline else "white"
        # A share's standard error over the runs: a gap inside it is the node's noise.
        se = outcome.measured_se.get(name)
        measured = f"{m:.1%}" if se is None else f"{m:.1%} ±{se:.1%}"
        if name in outcome.points:
            # A share of a stage's time: both sides and the gap in points.
            error = f"{100 * outcome.errors[name]:+.0f} pts"
            table.add_row(name, measured, f"{p:.1%}", f"[{color}]{error}[/]")
        elif name in outcome.shares:
            table.add_row(name, measured, f"{p:.1%}", f"[{color}]{outcome.errors[name]:+.1%}[/]")
        else:
            measured = f"{m:.3f}" if se is None else f"{m:.3f} ±{se:.3f}"
            table.add_row(name, measured, f"{p:.3f}", f"[{color}]{outcome.errors[name]:+.1%}[/]")
    return table


def print_storm_validation(
    console: Console, outcome: StormValidation, found: Identification
) -> None:
    """``validate``: the table, the costs the profile never identified, the
    host's load, and the metrics outside the threshold."""
    from ._render import print_identification

    console.print(storm_validation_table(outcome))
    if outcome.measured_se:
        console.print(
            f"[dim]±: the standard error of a measured figure over the {outcome.runs} runs "
            "(a gap within it is the node's own spread)[/]"
        )
    if outcome.runs_to_resolve:
        needed = ", ".join(f"{name} {n}" for name, n in outcome.runs_to_resolve.items())
        console.print(
            f"[dim]runs to resolve ±{outcome.threshold:.0%}: the {outcome.runs} runs spread "
            f"wider than half of it, so a verdict there is partly the node's own spread; "
            f"about this many runs would measure each within: {needed}[/]"
        )
    print_identification(console, found)
    if outcome.stats.background_load:
        console.print(
            f"[dim]the host's load average before the storm "
            f"({outcome.stats.background_load:.1f}) "
            "is simulated as that many always-runnable tasks[/]"
        )
    if outcome.failed:
        console.print(f"[red]outside ±{outcome.threshold:.0%}: {', '.join(outcome.failed)}[/]")


def _shown(mapping: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in mapping.items()) or "-"


def candidate_validation_records(outcome: CandidateValidation) -> dict[str, Any]:
    """The ``validate --candidates --json`` object."""
    comparison = outcome.comparison
    rho, rho_mean = comparison.spearman_makespan, comparison.spearman_mean
    return {
        "sandboxes": comparison.sandboxes,
        "repeats": comparison.repeats,
        "candidates": comparison.records(),
        "spearman_makespan": None if math.isnan(rho) else rho,
        "spearman_mean": None if math.isnan(rho_mean) else rho_mean,
        "min_spearman": outcome.min_spearman,
        "measured_best": comparison.measured_best.name,
        "predicted_best": comparison.predicted_best.name,
        "best_agrees": comparison.best_agrees,
        "median_abs_error": comparison.median_abs_error,
        "discordant_pairs": [dataclasses.asdict(p) for p in comparison.discordant_pairs()],
        "threshold": outcome.threshold,
        "outside_threshold": outcome.failed,
        "within": outcome.within,
    }


def print_candidate_validation(console: Console, outcome: CandidateValidation) -> None:
    """``validate --candidates``: a row per candidate, then the rankings'
    agreement and the pairs ordered otherwise."""
    from ._render import narrow_table

    comparison = outcome.comparison
    records = comparison.records()
    rho, rho_mean = comparison.spearman_makespan, comparison.spearman_mean
    failed = outcome.failed
    first = comparison.rows[0]
    runs = f"median of {comparison.repeats} run{'s' if comparison.repeats > 1 else ''}"
    # Two tables that each fit 80 columns (twelve columns in one were cut to
    # "ma…" and "13…" when piped): the figures, then what each candidate set
    # and how its runs spread.
    figures = narrow_table(
        f"{comparison.sandboxes} × {first.scenario.cni}: "
        f"{len(records)} candidates, predicted vs measured ({runs})"
    )
    figures.add_column("candidate", justify="left", overflow="fold", min_width=10, ratio=1)
    _figure_columns(figures, "rank\nm / p")
    settings = narrow_table("their settings, and each one's runs (makespan)")
    settings.add_column("candidate", justify="left", overflow="fold", min_width=10, ratio=1)
    settings.add_column("pools", justify="left", overflow="fold", ratio=1)
    settings.add_column("limits", justify="left", overflow="fold", ratio=1)
    settings.add_column("runs s\nfastest–slowest", justify="right", no_wrap=True)
    for r in records:
        color = "red" if r["name"] in failed else "green"
        figures.add_row(
            r["name"],
            f"{r['measured_makespan_s']:.2f}",
            f"{r['predicted_makespan_s']:.2f}",
            f"[{color}]{r['makespan_error']:+.1%}[/]",
            f"{r['measured_mean_s']:.2f}",
            f"{r['predicted_mean_s']:.2f}",
            f"{r['mean_error']:+.1%}",
            f"{r['measured_rank']} / {r['predicted_rank']}",
        )
        settings.add_row(
            r["name"],
            _shown(r["pools"]),
            _shown(r["limits"]),
            "{:.2f}–{:.2f}".format(*r["run_range_s"]),
        )
    console.print(figures)
    console.print(settings)
    spearman = (
        "undefined (all predicted or all measured makespans are equal)"
        if math.isnan(rho)
        else f"{rho:+.2f}"
    )
    measured_best = comparison.measured_best.name
    predicted_best = comparison.predicted_best.name
    best = f"the measured best ({measured_best}) is the predicted best"
    if not comparison.best_agrees:
        best = best.replace(" is ", " is not ") + f" ({predicted_best})"
    asked = f"at least {outcome.min_spearman:+.2f} asked"
    color = "green" if outcome.ranked else "red"
    by_mean = "undefined" if math.isnan(rho_mean) else f"{rho_mean:+.2f}"
    console.print(
        f"[{color}]ranking: Spearman {spearman} ({asked}); {best}[/]\n"
        f"ranking by mean startup: Spearman {by_mean}"
    )
    if pairs := comparison.discordant_pairs():
        within = [
            f"{p.measured_faster} < {p.predicted_faster}" for p in pairs if not p.separated_by_runs
        ]
        resolved = [
            f"{p.measured_faster} < {p.predicted_faster}" for p in pairs if p.separated_by_runs
        ]
        said = f"{len(pairs)} of {len(records) * (len(records) - 1) // 2} pairs ordered otherwise"
        if within:
            said += f"; within the runs' own spread (their runs overlap): {', '.join(within)}"
        if resolved:
            said += f"; separated by every run, a model error: {', '.join(resolved)}"
        console.print(f"measured {said}")
    if failed:
        console.print(f"[red]makespan outside ±{outcome.threshold:.0%}: {', '.join(failed)}[/]")


def _ms_or_dash(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1e3:,.1f}"


def testbed_storm_record(result: Any) -> dict[str, Any]:
    """The ``testbed run --json`` object of a :class:`StormResult`."""
    from .validation.testbed import summarize

    s = summarize(result.trace)
    return {
        "run": result.run,
        "header": result.trace.header.model_dump(mode="json"),
        # No sandbox completed: the statistics are null, not NaN (not JSON).
        **{
            k: None if isinstance(v, float) and math.isnan(v) else v
            for k, v in dataclasses.asdict(s).items()
        },
        "failures": list(result.failures),
    }


def print_testbed_storm(
    console: Console, result: Any, *, trace: Any = None, chrome: Any = None
) -> None:
    """``testbed run``: makespan, startup, stage means and lock contention of
    a real storm, its notes, where it was written, and its failed sandboxes."""
    from .validation.testbed import summarize

    s = summarize(result.trace)
    h = result.trace.header
    ms = _ms_or_dash
    table = Table(
        title=f"testbed storm {result.run}: {s.sandboxes} × {h.scenario.cni}, {h.scenario.vm}"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("completed", f"{s.completed} / {s.sandboxes}")
    table.add_row("makespan", f"{ms(s.makespan_s)} ms")
    table.add_row(
        "startup mean / p50 / p99",
        f"{ms(s.startup_mean_s)} / {ms(s.startup_p50_s)} / {ms(s.startup_p99_s)} ms",
    )
    for stage, mean in s.stage_mean_s.items():
        table.add_row(f"  {stage} mean", f"{ms(mean)} ms")
    if s.schedule_span_s > 0.0:  # a workload's schedule (startup counts from each arrival)
        table.add_row("schedule span", f"{s.schedule_span_s:,.3f} s")
    if s.schedule_span_s > 0.0 or s.pool_takes:
        table.add_row("empty-pool starts", f"{s.empty_pool_starts} / {s.sandboxes}")
    if h.busy_core_s is not None and s.sandboxes:
        table.add_row("host CPU per start", f"{h.busy_core_s / s.sandboxes * 1e3:,.1f} ms")
    if (stops := h.vm_stops) is not None:
        # Timed alone after the storm: what a fit keeps as testbed.vm_stop_cpu_s.
        table.add_row(
            "VM stop, timed after",
            f"{stops.per_vm_s * 1e3:,.1f} ms CPU, {stops.wall_s / stops.vms * 1e3:,.1f} ms each "
            f"({stops.vms})",
        )
    if h.kernel_trace is not None:
        table.add_row("RTNL contention: waits", str(s.rtnl.waits))
        table.add_row("RTNL contention: total wait", f"{ms(s.rtnl.wait_s)} ms")
        table.add_row("  of it by sandbox threads", f"{s.rtnl.sandbox_waits} waits")
        for name in ("cgroup_mutex", "css_set_lock"):
            if name in s.locks:
                lk = s.locks[name]
                table.add_row(f"{name} contention", f"{lk.waits} waits, {ms(lk.wait_s)} ms")
    console.print(table)
    for note in h.notes:
        console.print(f"[dim]note: {note}[/]")
    if trace is not None:
        console.print(f"trace written to [bold]{trace}[/]")
    if chrome is not None:
        console.print(
            f"Chrome trace written to [bold]{chrome}[/] — open it in https://ui.perfetto.dev"
        )
    for failure in result.failures[:10]:
        console.print(f"[red]sandbox {failure}[/]")
