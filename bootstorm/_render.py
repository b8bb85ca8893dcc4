"""Rich tables for results (the CLI's only output format besides JSON).

Renderers read records (:class:`~bootstorm.workflows.WhatIf` and the
outcomes of :mod:`bootstorm.workflows`); none of them simulates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from .calibration import FitReport, KnownMiss, ParameterSpread, TargetCheck
from .calibration.identify import IdentificationCaution
from .models import Scenario, ovs_reconfigure_s, qos_resend_s
from .report import lock_rows
from .simulator import Result
from .workflows import Identification, KnownMisses, WhatIf

__all__ = [
    "caveat_table",
    "comparison_table",
    "fit_spread",
    "identification_table",
    "print_caution",
    "print_identification",
    "result_tables",
    "spread_table",
    "target_table",
]


def data_table(
    title: str, columns: Sequence[str], *, label_columns: int = 1, wrap_labels: bool = True
) -> Table:
    """A table that fits 80 columns (a pipe's width, or a narrow terminal):
    numbers never wrap and headers break where they hold a newline; only the
    label columns (the first ``label_columns``) wrap, at word boundaries,
    unless ``wrap_labels`` is false (names a reader searches for)."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, collapse_padding=True)
    for k, col in enumerate(columns):
        label = k < label_columns
        t.add_column(col, justify="left" if label else "right", no_wrap=not (label and wrap_labels))
    return t


def _headline(what: WhatIf) -> Table:
    scenario, result = what.scenario, what.result
    # Escaped: "[qos 2]" would otherwise be read as rich markup and vanish.
    # No rules: a value that wraps in 80 columns still reads as one sentence.
    t = Table(
        title=escape(_title(scenario)), show_header=False, title_justify="left", box=box.SIMPLE
    )
    t.add_column(style="bold")
    t.add_column()
    s = result.startup
    t.add_row("makespan (last sandbox up)", f"{result.makespan_s:.2f} s")
    t.add_row("startup mean / p50 / p99", f"{s.mean:.2f} / {s.p50:.2f} / {s.p99:.2f} s")
    if (band := result.interval) is not None:
        # Where the node's median should fall, from how far the profile
        # missed the storms it was fitted to (its staleness is a caution).
        t.add_row(band.label, band.text())
    if result.ready is not None:
        r = result.ready
        t.add_row("ready (network usable) mean / p99", f"{r.mean:.2f} / {r.p99:.2f} s")
    cpu = result.cpu
    t.add_row(
        "CPU busy / spinning",
        f"{cpu.busy_core_s:.1f} / {cpu.spin_core_s:.2f} core-s "
        f"({cpu.utilisation:.0%} of {cpu.cores} CPUs)",
    )
    if cpu.zeroed_bytes:
        t.add_row(
            "memory zeroed",
            f"{cpu.zeroed_bytes / 2**30:,.1f} GiB ({cpu.zero_core_s:.1f} core-s)",
        )
    if result.pools:
        taken = ", ".join(f"{k} {p.taken}/{p.capacity}" for k, p in result.pools.items())
        t.add_row("pools taken", taken)
        t.add_row("pooled memory", f"{result.pool_memory_mib:,.0f} MiB")
    busiest = max(result.locks.items(), key=lambda kv: kv[1].contended_wall_s, default=None)
    if busiest is not None and busiest[1].contended_wall_s > 0.0 and result.makespan_s > 0.0:
        name, lock = busiest
        t.add_row(
            "most contended lock",
            f"{name}: waited on {lock.contended_wall_s / result.makespan_s:.0%} of the storm "
            f"(held {lock.hold_s:.1f} s)",
        )
    costs = what.profile.costs
    growth_s = ovs_reconfigure_s(scenario, costs) if costs is not None else 0.0
    if costs is not None and growth_s > 0.0:
        # The planner's warning: this term is quadratic in the vPorts.
        resend_s = qos_resend_s(scenario, costs)
        parts = [("walking their ports", growth_s - resend_s), ("re-sending QoS rules", resend_s)]
        split = ", ".join(f"{what} {s:.1f} s" for what, s in parts if s > 0.0)
        t.add_row(
            "OVS reconfiguring for vPorts ahead",
            f"{growth_s:.1f} s of ovs-vswitchd work ({split}; grows as vPorts²)",
        )
    return t


def _title(scenario: Scenario) -> str:
    extras = [f"{k}={v}" for k, v in scenario.pools.items()]
    extras += [f"limit {k}={v}" for k, v in scenario.limits.items()]
    if scenario.qos_rules:
        extras.append(f"qos {scenario.qos_rules}")
    if scenario.sg_rules:
        extras.append(f"sg {scenario.sg_rules}")
    if scenario.tenants > 1:
        extras.append(f"{scenario.tenants} tenants")
    tail = f" [{', '.join(extras)}]" if extras else ""
    return f"{scenario.sandboxes} × {scenario.cni} on {scenario.profile}{tail}"


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def _stages(result: Result) -> Table:
    """Per stage: time, share of the mean and of the p99 tail's startup (seed
    001 Table 1), and the CPU it burnt; branches nobody waits for are marked."""
    columns = (
        "stage",
        "mean\ns",
        "p99\ns",
        "% of\nmean",
        "% of\np99",
        "work\ncore-s",
        "zero\ncore-s",
        "spin\ncore-s",
    )
    t = data_table("stages", columns, wrap_labels=False)
    for name, st in result.stages.items():
        cpu = result.cpu.by_stage.get(name, {})
        step = result.steps.get(name)
        label = name if step is None or step.on_path else f"{name} (background)"
        t.add_row(
            label,
            f"{st.mean_s:.3f}",
            f"{st.p99_s:.3f}",
            _share(step.mean_share if step else None),
            _share(step.p99_share if step else None),
            f"{cpu.get('work', 0.0):.1f}",
            f"{cpu.get('zero', 0.0):.1f}",
            f"{cpu.get('spin', 0.0):.2f}",
        )
    # The waits at stage limits: with them, the shares add up to the startup.
    from .report import limit_wait_row

    waiting = limit_wait_row(result)
    if waiting is not None:
        label, mean_s, mean_share, p99_share = waiting
        t.add_row(label, f"{mean_s:.3f}", "", _share(mean_share), _share(p99_share), "", "", "")
        for name, g in result.gates.items():
            t.add_row(
                f"  at {name} (≤{g.permits})",
                f"{g.wait_s / max(result.n_sandboxes, 1):.3f}",
                *([""] * (len(columns) - 2)),
            )
    return t


def _locks(result: Result) -> Table:
    t = data_table(
        "locks",
        (
            "lock",
            "kind",
            "acqui-\nsitions",
            "con-\ntended",
            "wait s\n(sum)",
            "contended\nwall s",
            "hold\ns",
            "spin\ncore-s",
        ),
        label_columns=2,
        wrap_labels=False,
    )
    for row in lock_rows(result):
        label, kind, acq, cont, wait, wall, hold, spin = row
        t.add_row(
            label,
            kind,
            f"{acq:,}",
            f"{cont:,}",
            f"{wait:.2f}",
            f"{wall:.2f}",
            f"{hold:.2f}",
            f"{spin:.2f}",
        )
    return t


def result_tables(what: WhatIf) -> Group:
    """The storm's headline, stages and locks, and the published figures it
    rests on that the model misses."""
    parts: list[Table | str] = [_headline(what), _stages(what.result), _locks(what.result)]
    if what.known.note is not None:
        parts.append(f"[dim]limits: {escape(what.known.note)}[/]")
    known = caveat_table(*what.known.misses)
    if known is not None:
        parts.append(known)
    return Group(*parts)


def caveat_table(
    *misses: KnownMiss, concerns: Mapping[str, Sequence[str]] | None = None
) -> Table | None:
    """The published figures a what-if rests on that the model misses, one per
    row (``None`` when there are none): a planner should not read past them.
    ``concerns``: under a table of several what-ifs, the labels of those each
    miss (by key) concerns, so that "this CNI" names one."""
    if not misses:
        return None
    t = Table(
        title="[yellow]caution: the papers measured otherwise[/]",
        title_justify="left",
        show_header=False,
        box=None,
    )
    t.add_column(style="bold yellow", no_wrap=True)
    t.add_column()
    for m in misses:
        labels = (concerns or {}).get(m.key)
        which = f"[bold]for {escape(', '.join(labels))}:[/] " if labels else ""
        t.add_row(m.row, which + escape(m.says))
    # The says lines quote the reference runs that test each row, not this run.
    t.add_row(
        "", "[dim]the model's figures above are the reference runs' (seed 0; docs/fidelity.md)[/]"
    )
    return t


def print_caution(
    console: Console,
    *known: KnownMisses,
    labels: Sequence[str] | None = None,
) -> tuple[KnownMiss, ...]:
    """Print the known misses of what-ifs (each from
    :func:`bootstorm.workflows.known_misses`; nothing if none); return them.

    ``labels``: the what-ifs' labels in the table above, named beside each
    miss that concerns only some of them."""
    per = [k.misses for k in known]
    found = tuple(dict.fromkeys(m for misses in per for m in misses))
    concerns: dict[str, list[str]] | None = None
    if labels is not None and len(per) > 1:
        concerns = {}
        for m in found:
            which = [label for label, misses in zip(labels, per, strict=True) if m in misses]
            if len(which) < len(per):  # one that concerns every row needs no names
                concerns[m.key] = which
    table = caveat_table(*found, concerns=concerns)
    if table is not None:
        console.print(table)
    return found


def identification_table(
    cautions: Sequence[IdentificationCaution], *, testbed: bool = True
) -> Table | None:
    """The unidentified costs that move a what-if beyond the profile's error,
    one per row (``None`` when there are none)."""
    if not cautions:
        return None
    t = Table(
        title="[yellow]caution: this what-if rests on costs the profile never identified[/]",
        title_justify="left",
        show_header=False,
        box=None,
    )
    t.add_column(style="yellow")
    for c in cautions:
        t.add_row(escape(c.line()))
    # A node's own profile can be measured here; a paper's host cannot.
    hint = (
        "measure them (sudo bootstorm testbed measure-ops) or calibrate with storms that "
        "use them (sudo bootstorm calibrate --plan)"
        if testbed
        else "an assumption of the profile's source: read the answer within that range"
    )
    t.add_row(f"[dim]{hint}[/]")
    return t


def print_identification(console: Console, found: Identification) -> None:
    """Print the unidentified costs a what-if rests on (nothing if none),
    and whether its profile is less precise than a paper row."""
    for line in (*found.stale, *found.plugin, *found.growth, *found.traffic):
        console.print(f"[yellow]caution: {escape(line)}[/]")
    table = identification_table(found.cautions, testbed=found.testbed)
    if table is not None:
        console.print(table)
    # A fitted profile that misses its own calibration storms by more than a
    # paper row (±10%) says so under every what-if: none of its answers is closer.
    if found.imprecise:
        console.print(
            f"[yellow]caution: this profile misses its own calibration storms by up to "
            f"±{found.error_rel:.0%}; read this answer to that precision[/]"
        )


def comparison_table(
    title: str,
    rows: Sequence[tuple[str, Result]],
    baseline: int = 0,
    *,
    spread_s: tuple[float, float] | None = None,
) -> Table:
    """One row per what-if, with the change in makespan against ``rows[baseline]``.

    ``spread_s``: the baseline's makespan over several seeds (low, high); a
    what-if inside it is marked ≈, a change the model cannot tell from chance."""
    t = data_table(
        title,
        (
            "what-if",
            "makespan\ns",
            "vs\nbaseline",
            "mean\ns",
            "p99\ns",
            "RTNL con-\ntended s",
            "spin\ncore-s",
            "pool\nMiB",
        ),
    )
    base = rows[baseline][1].makespan_s
    marked = False
    for k, (label, r) in enumerate(rows):
        rtnl = r.locks.get("rtnl")
        within = (
            spread_s is not None
            and k != baseline
            and abs(r.makespan_s - base) <= spread_s[1] - spread_s[0]
        )
        marked |= within
        t.add_row(
            label,
            f"{r.makespan_s:.2f}",
            f"{(r.makespan_s - base) / base:+.1%}" + (" ≈" if within else ""),
            f"{r.startup.mean:.2f}",
            f"{r.startup.p99:.2f}",
            f"{rtnl.contended_wall_s:.2f}" if rtnl else "-",
            f"{r.cpu.spin_core_s:.2f}",
            f"{r.pool_memory_mib:,.0f}",
        )
    if marked and spread_s is not None:
        t.caption = (
            f"≈: closer to the baseline than the baseline's own runs over seeds are to "
            f"each other ({spread_s[0]:.2f}-{spread_s[1]:.2f} s): no change the model "
            "can tell from chance"
        )
        t.caption_justify = "left"
    return t


def narrow_table(title: str) -> Table:
    """A table for 80 columns: no outer edge, one space between columns; a
    first column that wraps (``ratio=1``) and numbers that do not are the
    caller's columns."""
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )


def target_table(title: str, checks: Sequence[TargetCheck], *, reference: str = "paper") -> Table:
    """Each target's value, the model's and the relative error, at 80
    columns: the row's label wraps under its key and role, the numbers never
    wrap. ``reference`` names where the targets come from: ``paper`` (a
    seed's figures) or ``measured`` (this node's own storms)."""
    t = narrow_table(title)
    t.add_column("row (role)", justify="left", min_width=16, ratio=1)
    for col in (reference, "model", "error", "toler-\nance"):
        t.add_column(col, justify="right", no_wrap=True)
    for c in checks:
        ok = "green" if c.within else "red"
        t.add_row(
            f"{escape(c.target.id)} ({c.target.role})\n[dim]{escape(c.target.label)}[/]",
            f"{c.target.value:,.4g}",
            f"{c.model:,.4g}",
            f"[{ok}]{c.rel_error:+.1%}[/]",
            f"≥ −{c.target.tolerance_rel:.0%}"
            if c.target.at_least
            else f"±{c.target.tolerance_rel:.0%}",
        )
    return t


def spread_table(title: str, spread: Sequence[ParameterSpread]) -> Table:
    """Each fitted cost and how far it could move with the fit rows barely moving."""
    t = Table(title=title, title_justify="left")
    for col in ("free parameter", "value", "× alone", "× with the others"):
        t.add_column(col, justify="left" if col == "free parameter" else "right")

    def factor(x: float) -> str:
        if x > 1e3:  # a direction the rows barely see: as good as unbounded
            return "[red]unbounded[/]"
        return f"[{'yellow' if x > 1.25 else 'green'}]{x:.3g}[/]"

    for p in spread:
        t.add_row(p.path, f"{p.value:.4g}", factor(p.alone_factor), factor(p.factor))
    return t


def fit_spread(report: FitReport) -> Group:
    """A fit's spread table and, if the rows leave directions unseen, a warning."""
    if not report.spread:
        return Group()
    rows_rel = report.spread[0].rows_rel
    parts: list[Table | str] = [
        spread_table(
            f"how far each fitted cost could move while the fit rows move by "
            f"{rows_rel:.0%} (RMS, to first order)",
            report.spread,
        )
    ]
    if report.unseen_directions:
        parts.append(
            f"[yellow]{report.unseen_directions} of {len(report.spread)} directions in the "
            "free costs are seen by no fitted row: along them the fit keeps its starting "
            "point (calibration/: FreeParameter.start)[/]"
        )
    return Group(*parts)
