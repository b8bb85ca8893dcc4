"""Rich tables for searches and sweeps."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from .models import TunedConfig
from .optimizers import Metrics, OptimizeResult, TrialOutcome

__all__ = [
    "before_after_table",
    "config_summary",
    "config_table",
    "frame_table",
    "pareto_table",
    "refill_text",
]

_ROWS = (
    ("makespan", "makespan_s", "s"),
    ("startup mean", "mean_s", "s"),
    ("startup p99", "p99_s", "s"),
    ("pooled memory", "memory_mib", "MiB"),
)


def refill_text(config: TunedConfig) -> str | None:
    """How a config's pools refill, in a few words (None: made before, never refilled)."""
    policy = config.pool_refill
    if policy is None:
        return None
    workers = f"{policy.concurrency} worker{'s' if policy.concurrency > 1 else ''}"
    rule = policy.follow_rate
    if rule is None:
        return f"{workers}, static targets"
    return (
        f"{workers}, targets follow the rate: {rule.cover_s:g} s of starts "
        f"(counted over {rule.window_s:g} s, at most {rule.max_devices})"
    )


def before_after_table(result: OptimizeResult, outcome: TrialOutcome) -> Table:
    """Baseline against the chosen trial, on the search's own storms."""
    spec = result.spec
    n_storms = (len(spec.sizes) or 1) * (len(spec.seeds) or 1)
    scheduled = spec.scenario.arrival_s is not None
    storms = (
        f"the workload's {spec.scenario.sandboxes:,} starts"
        if scheduled and n_storms == 1
        else f"{n_storms} storm{'s' if n_storms > 1 else ''}, {spec.robust}"
    )
    t = Table(
        title=f"before / after (trial {outcome.number})",
        caption=storms,
        title_justify="left",
        caption_justify="left",
    )
    for col in ("metric", "before", "after", "change"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    before, after = result.baseline.as_dict(), outcome.metrics.as_dict()
    refilled = outcome.config.pool_refill is not None
    for label, key, unit in _ROWS:
        if key == "makespan_s" and scheduled:
            label = "last start up"  # the schedule's span, which no config moves much
        if key == "memory_mib" and refilled:
            label = "memory held (mean)"  # devices refill: the idle ones' mean over the run
        b, a = before[key], after[key]
        change = f"{(a - b) / b:+.1%}" if b else ("0" if a == b else "new")
        t.add_row(label, f"{b:,.2f} {unit}", f"{a:,.2f} {unit}", change)
    return t


def config_table(config: TunedConfig) -> Table:
    """The settings a tuned config carries (the searched storm's own and the searched ones)."""
    t = Table(title="best config", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    for stage, k in config.limits.items():
        t.add_row(f"limit {stage}", str(k))
    for kind, n in config.pools.items():
        t.add_row(f"pool {kind}", str(n))
    for stage, p in config.rtnl_priority.items():
        t.add_row(f"RTNL priority {stage}", str(p))
    refill = refill_text(config)
    if refill is not None:
        t.add_row("pool refill", refill)
    return t


def config_summary(config: TunedConfig) -> str:
    """One line: ``tuned config: limits AddCNI=4, Cgroup=155; pools netns=400, ...``."""

    def listed(values: dict[str, int]) -> str:
        return ", ".join(f"{k}={v}" for k, v in values.items()) or "none"

    line = f"tuned config: limits {listed(config.limits)}; pools {listed(config.pools)}"
    if config.rtnl_priority:
        line += f"; RTNL priority {listed(config.rtnl_priority)}"
    refill = refill_text(config)
    if refill is not None:
        line += f"; refill {refill}"
    return escape(line)


def _metric(m: Metrics, objective: str) -> str:
    value = m.value(objective)
    return f"{value:,.1f} MiB" if objective == "memory" else f"{value:.2f} s"


def pareto_table(result: OptimizeResult) -> Table:
    """One row per point of the Pareto front, best first objective first."""
    objectives = result.spec.objectives
    n = len(result.best)
    t = Table(title=f"Pareto front ({n} point{'' if n == 1 else 's'})", title_justify="left")
    t.add_column("trial", justify="right")
    for o in objectives:
        t.add_column(o, justify="right")
    t.add_column("limits")
    t.add_column("pools")
    for p in result.best:
        pools = ", ".join(f"{s}={k}" for s, k in p.config.pools.items()) or "-"
        refill = p.config.pool_refill
        if refill is not None:
            follow = refill.follow_rate
            how = f"follow {follow.cover_s:g} s" if follow is not None else "static"
            pools += f"; {how}, {refill.concurrency} worker{'s' if refill.concurrency > 1 else ''}"
        t.add_row(
            str(p.number),
            *(_metric(p.metrics, o) for o in objectives),
            ", ".join(f"{s}={k}" for s, k in p.config.limits.items()) or "-",
            pools,
        )
    return t


def frame_table(title: str, frame: Any) -> Table:
    """A sweep's frame as a table that reads at 80 columns, piped or not: the
    grid's dimensions that take one value in every row go to the title, the
    figures keep makespan, mean, p99, CPU and pool memory (p50 and spin are
    in the written file), headers fold onto two lines, and no cell is cut."""
    settings = ("sandboxes", "cni", "memory_mib", "pools", "seed")
    shown = {
        "sandboxes": "sand-\nboxes",
        "cni": "cni",
        "memory_mib": "memory\nMiB",
        "pools": "pools",
        "seed": "seed",
        "makespan_s": "makespan\ns",
        "mean_s": "mean\ns",
        "p99_s": "p99\ns",
        "busy_core_s": "busy\ncore-s",
        "pool_memory_mib": "pools\nMiB",
        "caveats": "caveats",
    }
    fixed = [c for c in settings if c in frame and frame[c].nunique() == 1 and len(frame) > 1]
    if fixed:
        title += " (" + ", ".join(f"{c} {frame[c].iloc[0]}" for c in fixed) + ")"
    columns = [c for c in shown if c in frame and c not in fixed]
    t = Table(title=title, title_justify="left")
    for col in columns:
        numeric = frame[col].dtype.kind in "if"
        t.add_column(shown[col], justify="right" if numeric else "left", overflow="fold")
    for row in frame[columns].itertuples(index=False):
        t.add_row(*(f"{v:,.2f}" if isinstance(v, float) else escape(str(v)) for v in row))
    return t
