"""Tables of a traffic what-if (``simulate --workload``), readable at 80 columns."""

from __future__ import annotations

import math

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from ._render import data_table
from .simulator.timeline import Window, windows
from .workflows.traffic import TrafficWhatIf

__all__ = ["MAX_WINDOW_ROWS", "traffic_tables"]

#: Most rows of the per-window table: a day in minutes is 1 440 rows, which
#: nobody reads in a terminal; wider windows are shown instead (``--json``
#: has every window at the asked width).
MAX_WINDOW_ROWS = 48


def _seconds(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _headline(what: TrafficWhatIf) -> Table:
    r, s = what.result, what.scenario
    t = Table(
        title=escape(f"{s.cni} on {what.source}: {r.n_sandboxes:,} starts"),
        show_header=False,
        title_justify="left",
        box=box.SIMPLE,
    )
    t.add_column(style="bold")
    t.add_column()
    span = float(r.arrival_s.max() - r.arrival_s.min())
    t.add_row("span of the starts", f"{span:,.1f} s ({r.n_sandboxes / max(span, 1e-9):.2f}/s)")
    if s.lifetime_s is not None:
        t.add_row("VMs stopped", f"{s.lifetime_s:g} s after each came up (during the run)")
    t.add_row(
        "startup p50 / p99 / max",
        f"{r.startup.p50:.2f} / {r.startup.p99:.2f} / {r.startup.max:.2f} s",
    )
    t.add_row(
        f"p99 per {what.window_s:g}-s window",
        f"median {_seconds(what.p99_window_median_s)} s, worst {_seconds(what.p99_window_max_s)} s",
    )
    if r.pools:
        t.add_row("starts that found a pool empty", f"{r.empty_starts:,} of {r.n_sandboxes:,}")
        t.add_row(
            "memory held by idle devices",
            f"peak {what.peak_memory_mib:,.1f} MiB, mean {r.pool_mean_memory_mib:,.1f} MiB, "
            f"{what.memory_mib_h:,.2f} MiB·h",
        )
        refill = what.refill
        if refill.made:
            t.add_row(
                "refills",
                f"{refill.made:,} devices made"
                + (f", {refill.trimmed:,} removed" if refill.trimmed else "")
                + f"; {refill.rtnl_acquisitions:,} of "
                f"{refill.rtnl_total:,} RTNL acquisitions ({refill.rtnl_share:.0%}); "
                f"RTNL contended {refill.rtnl_contended_s:,.1f} s in all",
            )
        else:
            t.add_row("refills", "none (pools made before the starts, never refilled)")
    return t


def _pools(what: TrafficWhatIf) -> Table:
    t = data_table(
        "pools", ["kind", "at start", "taken", "empty", "made", "peak\nMiB", "mean\nMiB", "MiB·h"]
    )
    for kind, p in what.result.pools.items():
        t.add_row(
            kind,
            f"{p.capacity:,}",
            f"{p.taken:,}",
            f"{p.empty_starts:,}",
            f"{p.made:,}",
            f"{p.peak_memory_mib:,.1f}",
            f"{p.mean_memory_mib:,.1f}",
            f"{p.memory_mib_h:,.2f}",
        )
    return t


def shown_windows(
    what: TrafficWhatIf, *, max_rows: int = MAX_WINDOW_ROWS
) -> tuple[float, tuple[Window, ...]]:
    """The window width shown and its windows: ``what``'s own, or a whole
    multiple of it wide enough for at most ``max_rows`` rows."""
    if len(what.windows) <= max_rows:
        return what.window_s, what.windows
    factor = math.ceil(len(what.windows) / max_rows)
    width = what.window_s * factor
    return width, windows(what.result, window_s=width)


def _windows(what: TrafficWhatIf) -> Table:
    width, rows = shown_windows(what)
    title = f"per {width:g}-s window (by arrival)"
    if width != what.window_s:
        title += f"; --json has every {what.window_s:g}-s one"
    t = data_table(
        title, ["from s", "starts", "p50 s", "p99 s", "empty", "made", "ready", "MiB held"]
    )
    for w in rows:
        t.add_row(
            f"{w.start_s:,.0f}",
            f"{w.starts:,}",
            _seconds(w.p50_s),
            _seconds(w.p99_s),
            f"{w.empty_starts:,}",
            f"{w.made:,}",
            f"{w.ready:,}",
            f"{w.memory_mib:,.1f}",
        )
    return t


def traffic_tables(what: TrafficWhatIf) -> Group:
    """The headline, the pools and the windows of a traffic what-if."""
    parts: list[Table] = [_headline(what)]
    if what.result.pools:
        parts.append(_pools(what))
    parts.append(_windows(what))
    return Group(*parts)
