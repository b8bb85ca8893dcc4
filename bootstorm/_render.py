"""Rich tables for results (the CLI's only output format besides JSON)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from .calibration import FitReport, KnownMiss, ParameterSpread, TargetCheck, caveats
from .calibration.identify import IdentificationCaution
from .models import Profile, Scenario, Traffic, load_profile, ovs_reconfigure_s, qos_resend_s
from .simulator import LockStats, Result

__all__ = [
    "caveat_table",
    "comparison_table",
    "fit_spread",
    "identification_table",
    "lock_rows",
    "print_caution",
    "print_identification",
    "result_tables",
    "spread_table",
    "target_table",
]


def _headline(scenario: Scenario, result: Result) -> Table:
    # Escaped: "[qos 2]" would otherwise be read as rich markup and vanish.
    t = Table(title=escape(_title(scenario)), show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    s = result.startup
    t.add_row("makespan (last sandbox up)", f"{result.makespan_s:.2f} s")
    t.add_row("startup mean / p50 / p99", f"{s.mean:.2f} / {s.p50:.2f} / {s.p99:.2f} s")
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
    costs = load_profile(scenario.profile).costs
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
    t = Table(title="stages", title_justify="left")
    columns = (
        "stage",
        "mean s",
        "p99 s",
        "% of mean",
        "% of p99",
        "CPU work core-s",
        "zero core-s",
        "spin core-s",
    )
    for col in columns:
        t.add_column(col, justify="left" if col == "stage" else "right")
    for name, st in result.stages.items():
        cpu = result.cpu.by_stage.get(name, {})
        step = result.steps.get(name)
        label = name if step is None or step.on_path else f"{name} (in background)"
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
    for name, g in result.gates.items():
        t.add_row(
            f"  admission to {name} (≤{g.permits})",
            f"{g.wait_s / max(g.entries, 1):.3f}",
            *([""] * (len(columns) - 2)),
        )
    return t


LockRow = tuple[str, str, int, int, float, float, float, float]


def lock_rows(result: Result) -> list[LockRow]:
    """(lock, kind, acquisitions, contended, wait s, contended wall s, hold s,
    spin core-s) of each lock taken; a family of one lock per object
    ("vfio_vf/17") is one row."""
    groups: dict[str, list[LockStats]] = {}
    for name, lk in result.locks.items():
        if lk.acquisitions:
            family = name.split("/", 1)[0]
            groups.setdefault(f"{family}/* " if "/" in name else name, []).append(lk)
    rows = []
    for name, group in groups.items():
        label = f"{name}({len(group)} locks)" if name.endswith(" ") else name
        rows.append(
            (
                label,
                group[0].kind,
                sum(g.acquisitions for g in group),
                sum(g.contended for g in group),
                sum(g.wait_s for g in group),
                max(g.contended_wall_s for g in group),
                sum(g.hold_s for g in group),
                sum(g.spin_core_s for g in group),
            )
        )
    return rows


def _locks(result: Result) -> Table:
    t = Table(title="locks", title_justify="left")
    for col in (
        "lock",
        "kind",
        "acquisitions",
        "contended",
        "wait s (sum)",
        "contended wall s",
        "hold s",
        "spin core-s",
    ):
        t.add_column(col, justify="left" if col in ("lock", "kind") else "right")
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


def result_tables(scenario: Scenario, result: Result) -> Group:
    parts: list[Table] = [_headline(scenario, result), _stages(result), _locks(result)]
    known = caveat_table(*caveats(scenario))
    if known is not None:
        parts.append(known)
    return Group(*parts)


def caveat_table(*misses: KnownMiss) -> Table | None:
    """The published figures a what-if rests on that the model misses, one per
    row (``None`` when there are none): a planner should not read past them."""
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
        t.add_row(m.row, escape(m.says))
    return t


def print_caution(console: Console, *whats: Scenario | Traffic) -> tuple[KnownMiss, ...]:
    """Print the known misses ``whats`` rest on (nothing if none); return them."""
    known: tuple[KnownMiss, ...] = caveats(*whats)
    table = caveat_table(*known)
    if table is not None:
        console.print(table)
    return known


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


def print_identification(
    console: Console,
    scenario: Scenario,
    *,
    result: Result | None = None,
    profile: Profile | None = None,
) -> tuple[IdentificationCaution, ...]:
    """Print the unidentified costs that move ``scenario`` beyond its profile's
    error (nothing if none); return them. ``result``: the what-if already
    simulated (same seed), so it is not run again."""
    from .calibration.identify import DEFAULT_ERROR_REL, identification_of, whatif_cautions

    prof = profile if profile is not None else load_profile(scenario.profile)
    found: tuple[IdentificationCaution, ...] = whatif_cautions(scenario, profile=prof, base=result)
    table = identification_table(found, testbed=prof.testbed is not None)
    if table is not None:
        console.print(table)
    error = identification_of(prof).error_rel
    # A fitted profile that misses its own storms by more than a paper row
    # (±10%) says so under every what-if: none of its answers is closer.
    if prof.identification is not None and error > DEFAULT_ERROR_REL:
        console.print(
            f"[yellow]caution: this profile misses its own calibration storms by up to "
            f"±{error:.0%}; read this answer to that precision[/]"
        )
    return found


def comparison_table(title: str, rows: Sequence[tuple[str, Result]], baseline: int = 0) -> Table:
    """One row per what-if, with the change in makespan against ``rows[baseline]``."""
    t = Table(title=title, title_justify="left")
    for col in (
        "what-if",
        "makespan s",
        "vs baseline",
        "mean s",
        "p99 s",
        "RTNL contended wall s",
        "spin core-s",
        "pool MiB",
    ):
        t.add_column(col, justify="left" if col == "what-if" else "right")
    base = rows[baseline][1].makespan_s
    for label, r in rows:
        rtnl = r.locks.get("rtnl")
        t.add_row(
            label,
            f"{r.makespan_s:.2f}",
            f"{(r.makespan_s - base) / base:+.1%}",
            f"{r.startup.mean:.2f}",
            f"{r.startup.p99:.2f}",
            f"{rtnl.contended_wall_s:.2f}" if rtnl else "-",
            f"{r.cpu.spin_core_s:.2f}",
            f"{r.pool_memory_mib:,.0f}",
        )
    return t


def target_table(title: str, checks: Sequence[TargetCheck]) -> Table:
    """Published value, model value and relative error of each target."""
    t = Table(title=title, title_justify="left")
    for col in ("row", "target", "role", "paper", "model", "error", "tolerance"):
        t.add_column(col, justify="left" if col in ("row", "target", "role") else "right")
    for c in checks:
        ok = "green" if c.within else "red"
        t.add_row(
            c.target.id,
            c.target.label,
            c.target.role,
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
