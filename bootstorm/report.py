"""One self-contained HTML report of a storm (simulated or measured) or a study.

The report holds Plotly figures with plotly.js embedded once, so the file
opens offline and can be mailed to a colleague:

- the **timeline**: one row per sandbox, one colour per stage (seed 001 Fig. 4);
- the **stage breakdown**: mean time per stage and its share of the mean
  and of the p99 tail's startup (seed 001 Table 1, seed 000 Fig. 6);
- **lock statistics**: acquisitions, waits and holds per lock, and the
  tasks waiting for each lock over the storm;
- the **CPU timeline**: busy and spinning cores, and the memory bandwidth
  zeroing takes (seed 000 Fig. 10c);
- for an Optuna **study**: the optimisation history, parameter importances
  and, with two objectives, the Pareto front;
- for **traffic** (starts on a workload's schedule, pools that refill): starts
  per second, each pool's ready devices, p50/p99 startup per window and the
  memory the idle devices held, on one time axis.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import html
import os
import warnings
import zlib
from collections.abc import Mapping, Sequence
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._io import write_atomically
from .simulator import LockStats, Recording, Result

if TYPE_CHECKING:
    from .calibration import KnownMiss
    from .calibration.tornado import Tornado
    from .simulator.timeline import Window
    from .traces import Trace

__all__ = [
    "ReportSections",
    "best_trials",
    "breakdown_figure",
    "candidate_stages_figure",
    "candidates_figure",
    "cpu_figure",
    "dataplane_figure",
    "limit_wait_row",
    "lock_figure",
    "lock_rows",
    "lock_table_html",
    "lock_waiters",
    "lock_waits_figure",
    "memory_p99_figure",
    "report_html",
    "show_static_images",
    "stage_colour",
    "stage_comparison_figure",
    "study_figures",
    "timeline_figure",
    "tornado_figure",
    "trace_facts",
    "trace_title",
    "traffic_figure",
    "write_report",
]

#: Points per pool-level line in the traffic figure: enough for a day in
#: 30-s steps without a page of megabytes.
MAX_LEVEL_POINTS = 3000

# Enough rows to see the shape of a storm without a multi-megabyte page.
MAX_TIMELINE_ROWS = 200
_PALETTE = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#E45756",
    "#72B7B2",
    "#B279A2",
    "#FF9DA6",
    "#9D755D",
    "#BAB0AC",
    "#EECA3B",
)


#: The stages of every CNI family in one order, each with its colour for
#: good: the timeline, the breakdown, the comparisons and the notebooks
#: colour a stage alike (by position they gave NetNS one colour in a storm
#: and another in a pooled one, where NetNS drops out).
_STAGE_ORDER = (
    "NetNS",
    "AddCNI",
    "Cgroup",
    "AttachIf",
    "StartVM",
    "dma-ram",
    "dma-image",
    "vfio-devset",
    "vf-driver",
)


def stage_colour(stage: str) -> str:
    """The colour of ``stage`` in every figure (a stage of no family's list,
    a branch or a wait: a colour of its name, the same in every run)."""
    base = stage.removesuffix(" (background)")
    if base in _STAGE_ORDER:
        return _PALETTE[_STAGE_ORDER.index(base)]
    if base == LIMIT_WAIT_LABEL:
        return _PALETTE[-1]
    return _PALETTE[zlib.crc32(base.encode()) % len(_PALETTE)]


def _go() -> Any:
    import plotly.graph_objects as go

    return go


def timeline_figure(recording: Recording, *, max_rows: int = MAX_TIMELINE_ROWS) -> Any:
    """One row per sandbox (an even sample past ``max_rows``), one colour per stage."""
    go = _go()
    frame = recording.stage_frame()
    sandboxes = np.sort(frame["sandbox"].unique())
    if sandboxes.size > max_rows:
        keep = sandboxes[np.linspace(0, sandboxes.size - 1, max_rows).astype(int)]
        frame = frame[frame["sandbox"].isin(keep)]
    fig = go.Figure()
    stages = list(dict.fromkeys(frame["stage"]))
    for stage in stages:
        part = frame[frame["stage"] == stage]
        fig.add_trace(
            go.Bar(
                name=stage,
                orientation="h",
                y=part["sandbox"],
                x=part["duration_s"],
                base=part["begin_s"],
                marker_color=stage_colour(stage),
                marker_opacity=np.where(part["branch"], 0.45, 1.0),
                hovertemplate=f"sandbox %{{y}}<br>{html.escape(stage)}: "
                "%{base:.3f} s + %{x:.3f} s<extra></extra>",
            )
        )
    fig.update_layout(
        title="Timeline: one row per sandbox, one colour per stage (faded: in the background)",
        barmode="overlay",
        xaxis_title="time since the burst, s",
        yaxis_title="sandbox",
        yaxis_autorange="reversed",
        height=max(400, min(900, 4 * frame["sandbox"].nunique() + 150)),
        bargap=0.1,
    )
    return fig


def _stage_table(
    recording: Recording, result: Result | None
) -> list[tuple[str, float, float | None, float | None]]:
    """(stage, mean s, share of mean, share of the p99 tail); with per-stage
    limits, the time spent waiting for admission is a row of its own, so the
    shares add up to the whole startup."""
    if result is not None:
        rows: list[tuple[str, float, float | None, float | None]] = [
            (name, st.mean_s, st.mean_share, st.p99_share) for name, st in result.steps.items()
        ]
        waiting = limit_wait_row(result)
        if waiting is not None:
            rows.append(waiting)
        return rows
    frame = recording.stage_frame()
    per = frame.pivot_table(index="sandbox", columns="stage", values="duration_s", aggfunc="sum")
    per = per.fillna(0.0)
    ends = frame.groupby("sandbox")["end_s"].max()
    latency = ends.to_numpy()
    tail = latency >= np.percentile(latency, 99.0)
    rows = []
    for stage in dict.fromkeys(frame["stage"]):
        times = per[stage].reindex(ends.index).to_numpy()
        rows.append(
            (
                str(stage),
                float(times.mean()),
                float(times.mean() / latency.mean()),
                float(times[tail].mean() / latency[tail].mean()),
            )
        )
    return rows


#: The label of the time a sandbox spends in no stage: at a per-stage limit.
LIMIT_WAIT_LABEL = "waiting at stage limits"


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


def limit_wait_row(result: Result) -> tuple[str, float, float | None, float | None] | None:
    """The startup spent waiting for admission to a limited stage, as a stage
    row (label, mean s, share of mean, share of the p99 tail); ``None``
    without limits. Stages run back to back, so what their shares leave of
    the startup is the wait at the gates between them."""
    if not result.gates:
        return None
    shared = [st for st in result.steps.values() if st.on_path and st.mean_share is not None]
    mean_s = sum(g.wait_s for g in result.gates.values()) / max(result.n_sandboxes, 1)
    mean_share = max(0.0, 1.0 - sum(st.mean_share or 0.0 for st in shared))
    p99_share = max(0.0, 1.0 - sum(st.p99_share or 0.0 for st in shared))
    return (LIMIT_WAIT_LABEL, mean_s, mean_share, p99_share)


def breakdown_figure(recording: Recording, result: Result | None = None) -> Any:
    go = _go()
    rows = _stage_table(recording, result)
    on_path = set() if result is None else {n for n, st in result.steps.items() if st.on_path}
    on_path.add(LIMIT_WAIT_LABEL)
    names = [r[0] if result is None or r[0] in on_path else f"{r[0]} (background)" for r in rows]
    fig = go.Figure(
        [
            go.Bar(
                name="mean s",
                x=names,
                y=[r[1] for r in rows],
                marker_color=[stage_colour(r[0]) for r in rows],
                text=[
                    "" if r[2] is None else f"{r[2]:.1%} of mean, {r[3]:.1%} of p99" for r in rows
                ],
                textposition="outside",
            )
        ]
    )
    fig.update_layout(
        title="Stage breakdown: mean time, share of the mean and of the p99 tail's startup",
        xaxis_title="stage (and the waits at stage limits)" if result and result.gates else "stage",
        yaxis_title="mean time in the stage, s",
        showlegend=False,
    )
    return fig


def stage_comparison_figure(results: Mapping[str, Result]) -> Any:
    """Mean time per stage, stacked, one bar per what-if (seed 000 Fig. 6)."""
    go = _go()
    stages: list[str] = []
    for r in results.values():
        stages += [n for n, st in r.steps.items() if st.on_path and n not in stages]
    fig = go.Figure()
    for stage in stages:
        fig.add_trace(
            go.Bar(
                name=stage,
                x=list(results),
                y=[r.steps[stage].mean_s if stage in r.steps else 0.0 for r in results.values()],
                marker_color=stage_colour(stage),
            )
        )
    fig.update_layout(
        barmode="stack",
        title="Mean startup by stage",
        xaxis_title="what-if",
        yaxis_title="mean time per sandbox, s",
    )
    return fig


#: The columns of ``bootstorm sweep --output``'s table a report reads: the
#: grid's parameters, then each point's figures.
SWEEP_PARAMETERS = ("sandboxes", "cni", "memory_mib", "pools", "seed")
SWEEP_FIGURES = ("makespan_s", "mean_s", "p99_s")


def sweep_figure(frame: Any) -> Any:
    """A sweep's points (``bootstorm sweep --output``): makespan and p99
    startup against the sandboxes started, one line per combination of the
    other parameters (CNI, guest memory, pools), the median over seeds with
    their range as error bars."""
    go = _go()
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("makespan", "p99 startup"))
    others = ["cni", "memory_mib", "pools"]
    for k, (key, group) in enumerate(frame.groupby(others, sort=False)):
        label = f"{key[0]}, {key[1]} MiB, pools {key[2]}"
        by_size = group.groupby("sandboxes")
        color = _PALETTE[k % len(_PALETTE)]
        for col, metric in enumerate(("makespan_s", "p99_s"), start=1):
            med = by_size[metric].median()
            low, high = by_size[metric].min(), by_size[metric].max()
            fig.add_trace(
                go.Scatter(
                    x=med.index.tolist(),
                    y=med.tolist(),
                    name=label,
                    legendgroup=label,
                    showlegend=col == 1,
                    line_color=color,
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": (high - med).tolist(),
                        "arrayminus": (med - low).tolist(),
                    },
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="sandboxes started at once")
    fig.update_yaxes(title_text="makespan, s", row=1, col=1)
    fig.update_yaxes(title_text="p99 startup, s", row=1, col=2)
    fig.update_layout(title="The sweep's points (median over seeds; bars: their range)")
    return fig


def sweep_table_html(frame: Any) -> str:
    """Every point of a sweep, its parameters and figures, as an HTML table."""
    cols = [*SWEEP_PARAMETERS, *SWEEP_FIGURES]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    rows = []
    for record in frame[cols].to_dict("records"):
        cells = "".join(
            f"<td>{record[c]:.3f}</td>"
            if c in SWEEP_FIGURES
            else f"<td>{html.escape(str(record[c]))}</td>"
            for c in cols
        )
        rows.append(f"<tr>{cells}</tr>")
    return f"<table class='facts'><tr>{head}</tr>{''.join(rows)}</table>"


def dataplane_figure(frames: Mapping[str, Any]) -> Any:
    """Aggregate throughput against flows, one line per data path, and the
    CPU it costs by kind (from :func:`bootstorm.dataplane_sweep` frames)."""
    go = _go()
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("throughput", "CPU"))
    for k, (label, frame) in enumerate(frames.items()):
        color = _PALETTE[k % len(_PALETTE)]
        fig.add_trace(
            go.Scatter(x=frame.index, y=frame["aggregate_gbps"], name=label, line_color=color),
            row=1,
            col=1,
        )
        cpu = frame[["irq_cores", "softirq_cores", "system_cores", "user_cores"]].sum(axis=1)
        fig.add_trace(
            go.Scatter(
                x=frame.index, y=cpu, name=f"{label} CPU", line_color=color, line_dash="dot"
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="flows")
    fig.update_yaxes(title_text="aggregate Gbps", row=1, col=1)
    fig.update_yaxes(title_text="cores (irq + softirq + system + user)", row=1, col=2)
    fig.update_layout(title="Data plane: throughput and CPU against flows")
    return fig


_TABLE_ROW_PX = 28


def _lock_rows(
    recording: Recording, result: Result | None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(header, rows) of the lock statistics: a simulated storm's from its
    result, a measured one's (kernel waits only) from its recording."""
    rows: list[tuple[Any, ...]]
    if result is not None:
        rows = [tuple(row) for row in lock_rows(result)]
        header = [
            "lock",
            "kind",
            "acquisitions",
            "contended",
            "wait s (sum)",
            "contended wall s",
            "hold s",
            "spin core-s",
        ]
    else:
        # A measured storm: the kernel reports waits (contention), not holds.
        frame = recording.lock_frame()
        waits = frame[frame["what"] == "wait"]
        rows = [
            (lock, len(part), float(part["duration_s"].sum()), float(part["duration_s"].max()))
            for lock, part in waits.groupby("lock")
        ]
        rows.sort(key=lambda r: -r[2])
        header = ["lock", "waits", "wait s (sum)", "longest wait s"]
    return header, rows


def _cell(v: Any) -> str:
    return f"{v:,.3f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def lock_figure(recording: Recording, result: Result | None = None) -> Any:
    """The lock statistics as a Plotly table (for notebooks; the report has an HTML table)."""
    go = _go()
    header, rows = _lock_rows(recording, result)
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [[] for _ in header]
    cells = [[_cell(v) for v in col] for col in columns]
    fig = go.Figure(
        [
            go.Table(
                header={"values": header, "height": _TABLE_ROW_PX * 2},
                cells={"values": cells, "height": _TABLE_ROW_PX},
            )
        ]
    )
    # Plotly's default margins (100 px above, 80 below) would leave a
    # 30-px-per-row box no room for the rows: the figure is sized to them.
    fig.update_layout(
        title="Locks",
        margin={"t": 40, "b": 10, "l": 10, "r": 10},
        height=40 + 10 + _TABLE_ROW_PX * (2 + max(len(rows), 1)) + 20,
    )
    return fig


def lock_table_html(recording: Recording, result: Result | None = None) -> str:
    """The lock statistics as an HTML table: every row shows, whatever the page's size."""
    header, rows = _lock_rows(recording, result)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    if not rows:
        body = f"<tr><td colspan='{len(header)}'>no lock was taken</td></tr>"
    return f"<table class='data locks'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


#: Slices of the storm the lock-waits figure averages its waiters over: a
#: 400-sandbox storm has 20 000 RTNL waits, 40 000 steps per lock drawn one
#: by one; 400 slices show its shape at a tenth of a page's pixels each.
LOCK_WAIT_BINS = 400


def _lock_family(name: str) -> str:
    """A lock's row in the figures: a family of one lock per object
    (``vfio_vf/17``) is one (``vfio_vf/*``), as in :func:`lock_rows`."""
    return f"{name.split('/', 1)[0]}/*" if "/" in name else name


def lock_waiters(
    recording: Recording, *, bins: int = LOCK_WAIT_BINS
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The tasks waiting for each lock over the storm, from the recorded
    waits (each a begin and an end): the slices' midpoints (s since the
    burst) and, per lock with any wait, the mean number of waiters over each
    slice (its wait-seconds in the slice over the slice's length; exact, not
    sampled: a spike shorter than a slice lowers its height, never vanishes).
    Locks by wait-seconds, largest first; none when no task waited."""
    waits: dict[str, list[tuple[float, float]]] = {}
    for lock, _task, _stage, is_hold, begin, end in recording.lock_spans:
        if not is_hold and end > begin:
            waits.setdefault(_lock_family(recording.lock_names[lock]), []).append((begin, end))
    ends = [e for *_, e in recording.stage_spans] + [e for w in waits.values() for _, e in w]
    horizon = max(ends, default=0.0)
    if not waits or horizon <= 0.0:
        return np.zeros(0), {}
    edges = np.linspace(0.0, horizon, bins + 1)
    out: dict[str, np.ndarray] = {}
    for name, spans in sorted(waits.items(), key=lambda kv: -sum(e - b for b, e in kv[1])):
        pairs = np.asarray(spans, dtype=np.float64)
        times = np.concatenate([pairs[:, 0], pairs[:, 1]])
        step = np.concatenate([np.ones(len(pairs)), -np.ones(len(pairs))])
        order = np.argsort(times, kind="stable")
        times, waiting = times[order], np.cumsum(step[order])
        # The waiters are a step function: its integral is piecewise linear
        # between events, so interpolating it at the slices' edges is exact.
        area = np.concatenate([[0.0], np.cumsum(waiting[:-1] * np.diff(times))])
        out[name] = np.diff(np.interp(edges, times, area)) / np.diff(edges)
    return (edges[:-1] + edges[1:]) / 2, out


#: Locks the lock-waits figure draws, those waited on longest: a measured
#: storm's kernel saw waits on forty locks, most of them a few microseconds
#: once (``spinlock@__d_lookup``), and forty lines hide the two that matter.
MAX_WAIT_LINES = 8


def lock_waits_figure(
    recording: Recording, *, bins: int = LOCK_WAIT_BINS, max_locks: int = MAX_WAIT_LINES
) -> Any | None:
    """Tasks waiting for each lock over the storm (:func:`lock_waiters`), one
    colour per lock, the ``max_locks`` waited on longest; ``None`` when no
    task waited for a lock."""
    go = _go()
    mid, every = lock_waiters(recording, bins=bins)
    if not every:
        return None
    waiters = dict(list(every.items())[:max_locks])
    left = len(every) - len(waiters)
    slice_ms = 1e3 * float(mid[1] - mid[0]) if mid.size > 1 else 2e3 * float(mid[0])
    fig = go.Figure()
    for k, (name, line) in enumerate(waiters.items()):
        fig.add_trace(
            go.Scatter(
                x=mid,
                y=line,
                name=name,
                mode="lines",
                line={"shape": "hv", "color": _PALETTE[k % len(_PALETTE)]},
                hovertemplate=f"{html.escape(name)}: %{{y:.1f}} waiting at %{{x:.2f}} s"
                "<extra></extra>",
            )
        )
    fig.update_layout(
        title="Lock waits over time: tasks waiting for each lock"
        + (f" (the {len(waiters)} waited on longest; {left} more in the table)" if left else ""),
        xaxis_title="time since the burst, s",
        yaxis_title=f"tasks waiting (mean over {slice_ms:.3g} ms)",
        legend_title_text="lock",
    )
    return fig


def cpu_figure(recording: Recording) -> Any:
    go = _go()
    frame = recording.cpu_frame()
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=frame["time_s"], y=frame["busy_cores"], name="busy cores", line_shape="hv")
    )
    fig.add_trace(
        go.Scatter(x=frame["time_s"], y=frame["spin_cores"], name="spinning cores", line_shape="hv")
    )
    if (frame["zero_gib_s"] > 0).any():
        fig.add_trace(
            go.Scatter(
                x=frame["time_s"],
                y=frame["zero_gib_s"],
                name="zeroing, GiB/s",
                line_shape="hv",
                yaxis="y2",
            )
        )
        fig.update_layout(yaxis2={"title": "GiB/s", "overlaying": "y", "side": "right"})
    fig.update_layout(
        title=f"CPU: busy and spinning cores of {recording.cores}",
        xaxis_title="time since the burst, s",
        yaxis_title="cores",
    )
    return fig


#: The tornado's two ends: the cost divided by its factor, and multiplied.
_LOW_END_COLOUR, _HIGH_END_COLOUR = _PALETTE[0], _PALETTE[3]


def tornado_figure(tornado: Tornado) -> Any:
    """One row per unidentified cost (largest makespan swing on top): the
    makespan and the p99 startup with the cost at each end of its plausible
    range, bars from the value under the profile (the dashed line)."""
    go = _go()
    from plotly.subplots import make_subplots

    bars = tornado.bars
    labels = [f"{b.costs} (×/÷{b.factor:.3g})" for b in bars]
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=("makespan", "p99 startup"),
    )
    for col, (metric, base) in enumerate(
        (("makespan", tornado.makespan_s), ("p99", tornado.p99_s)), start=1
    ):
        for end, name, colour in (
            (0, "the cost ÷ its factor", _LOW_END_COLOUR),
            (1, "the cost × its factor", _HIGH_END_COLOUR),
        ):
            values = [(b.makespan_s if metric == "makespan" else b.p99_s)[end] for b in bars]
            fig.add_trace(
                go.Bar(
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    orientation="h",
                    y=labels,
                    x=[v - base for v in values],
                    base=base,
                    marker_color=colour,
                    opacity=0.85,
                    customdata=[(v, (v - base) / base if base else 0.0) for v in values],
                    hovertemplate="%{y}<br>" + name + ": %{customdata[0]:.3f} s "
                    "(%{customdata[1]:+.1%})<extra></extra>",
                ),
                row=1,
                col=col,
            )
        fig.add_vline(
            x=base,
            line_dash="dash",
            line_color="#444",
            annotation_text=f"as profiled {base:.2f} s",
            annotation_position="top",
            row=1,
            col=col,
        )
    fig.update_xaxes(title_text="makespan, s", row=1, col=1)
    fig.update_xaxes(title_text="p99 startup, s", row=1, col=2)
    fig.update_yaxes(autorange="reversed", title_text="unidentified cost (its range)", row=1, col=1)
    fig.update_layout(
        title="Sensitivity to the costs the profile never identified<br><sup>the what-if "
        "with one cost at each end of its plausible range, the others as profiled; "
        "longest bar on top</sup>",
        barmode="overlay",
        height=160 + 26 * max(len(bars), 1),
        legend={"orientation": "h", "y": -0.15 if len(bars) > 4 else -0.4},
    )
    return fig


def _tornado_section(tornado: Tornado) -> Any:
    """The tornado chart, or a line saying no unidentified cost moves the what-if."""
    from .calibration.tornado import NEGLIGIBLE_S

    if tornado.bars:
        return tornado_figure(tornado)
    return (
        "<p>No cost the profile never identified moves this what-if "
        f"(by more than {NEGLIGIBLE_S * 1e6:g} µs).</p>"
    )


def _value(trial: Any, *, k: int) -> float:
    return float(trial.values[k])


def study_figures(study: Any) -> list[Any]:
    """Optuna's own Plotly figures: the Pareto front (two objectives), the
    history of each objective, and parameter importances."""
    return [fig for _, fig in _study_sections(study) if not isinstance(fig, str)]


#: The unit of each objective ``bootstorm optimize`` minimises (its metric names).
METRIC_UNITS = {"makespan": "s", "mean": "s", "p99": "s", "memory": "MiB"}
#: Trials past this quantile of an objective are off the chart (their count
#: is in the title): one trial with a limit of 1 takes 40 times the best,
#: and drawn to scale it flattens every other point onto the axis.
_SHOWN_QUANTILE = 0.9


def _with_unit(name: str) -> str:
    unit = METRIC_UNITS.get(name)
    return f"{name}, {unit}" if unit else name


def _shown_range(values: Sequence[float]) -> tuple[tuple[float, float], int]:
    """The axis range that shows the good part of ``values`` (from the best
    to a little past the 90th percentile), and how many values lie beyond it."""
    data = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if data.size == 0:
        return (0.0, 1.0), 0
    low, high = float(data.min()), float(np.quantile(data, _SHOWN_QUANTILE))
    pad = 0.05 * (high - low) if high > low else 0.05 * max(abs(high), 1.0)
    upper = high + pad
    return (low - pad, upper), int((data > upper).sum())


def _off_chart(title: str, hidden: int) -> str:
    if not hidden:
        return title
    return f"{title} ({hidden} trial{'s' if hidden > 1 else ''} off the chart, above)"


def best_trials(study: Any) -> list[Any]:
    """The study's best: with one objective, its best feasible trial; with
    several, the Pareto front of its feasible trials (a trial no other is as
    good as on every objective and better on one), by the first objective."""
    from .optimizers import trial_feasible

    done = [t for t in study.trials if t.state.name == "COMPLETE" and trial_feasible(t)]
    signs = [1.0 if d.name == "MINIMIZE" else -1.0 for d in study.directions]

    def key(t: Any) -> tuple[float, ...]:
        return tuple(s * v for s, v in zip(signs, t.values, strict=True))

    if len(signs) == 1:
        return sorted(done, key=lambda t: (key(t), t.number))[:1]

    def dominated(t: Any) -> bool:
        mine = key(t)
        return any(
            all(x <= y for x, y in zip(key(o), mine, strict=True)) and key(o) != mine for o in done
        )

    return sorted((t for t in done if not dominated(t)), key=lambda t: (key(t), t.number))


def _param(name: str) -> str:
    """A searched parameter as a column: ``limit_AddCNI`` as ``limit AddCNI``."""
    return name.replace("_", " ", 1)


def _best_html(study: Any, names: Sequence[str]) -> str:
    """The best config (one objective) or the Pareto front's configs (two):
    each trial's objectives, with units, and its searched values."""
    best = best_trials(study)
    if not best:
        return "<p>No completed trial met the study's constraints.</p>"
    params = sorted({p for t in best for p in t.params})
    head = ["trial", *(_with_unit(n) for n in names), *(_param(p) for p in params)]
    rows = [
        (
            t.number,
            *(f"{v:,.3f}" for v in t.values),
            *(_cell(t.params[p]) if p in t.params else "—" for p in params),
        )
        for t in best
    ]
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in row) + "</tr>" for row in rows
    )
    return f"<table class='data best'><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _study_sections(study: Any) -> list[tuple[str, Any]]:
    import optuna.visualization as vis

    sections: list[tuple[str, Any]] = []
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    if not complete:
        return sections
    names = study.metric_names or [f"objective {k}" for k in range(len(study.directions))]
    labels = [_with_unit(n) for n in names]
    multi = len(names) > 1
    best = best_trials(study)
    if multi:
        heading = f"Pareto front: the {len(best)} best configs, by {names[0]}"
    else:
        heading = f"Best config: trial {best[0].number}" if best else "Best config"
    sections.append((heading, _best_html(study, names)))
    if multi:
        front = vis.plot_pareto_front(study, target_names=labels)
        (x_range, x_hidden), (y_range, y_hidden) = (
            _shown_range([t.values[k] for t in complete]) for k in (0, 1)
        )
        front.update_layout(
            title=_off_chart("Pareto front", max(x_hidden, y_hidden)),
            xaxis={"title": {"text": labels[0]}, "range": list(x_range)},
            yaxis={"title": {"text": labels[1]}, "range": list(y_range)},
        )
        sections.append(("Pareto front", front))
    for k, name in enumerate(names):
        # One objective: Optuna's own target, which draws the best-so-far line too.
        history = vis.plot_optimization_history(
            study,
            target=functools.partial(_value, k=k) if multi else None,
            target_name=labels[k],
        )
        y_range, hidden = _shown_range([t.values[k] for t in complete])
        history.update_layout(
            title=_off_chart(f"Optimization history: {name}", hidden),
            xaxis={"title": {"text": "trial number"}},
            yaxis={"title": {"text": labels[k]}, "range": list(y_range)},
        )
        sections.append((f"History: {name}", history))
    if len(complete) >= 5 and len(complete[0].params) >= 2:
        target = functools.partial(_value, k=0) if multi else None
        # Too little variation to rank the parameters: leave the figure out.
        with contextlib.suppress(RuntimeError, ValueError), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Optuna's note on the target's sign
            importances = vis.plot_param_importances(study, target=target, target_name=names[0])
            importances.update_layout(
                xaxis={"title": {"text": f"share of the variance in {labels[0]}"}},
                yaxis={"title": {"text": "searched parameter"}},
            )
            sections.append((f"Parameter importances for {names[0]}", importances))
    return sections


def _trace_settings(trace: Trace) -> str:
    """The pools and limits a measured storm ran with, in a line ("" for none)."""
    from .models.tuned import settings_line

    h = trace.header
    pools = dict(h.scenario.pools) or (dict(h.config.pools) if h.config is not None else {})
    limits = dict(h.config.limits) if h.config is not None else {}
    return str(settings_line(pools=pools, limits=limits))


def trace_title(trace: Trace) -> str:
    """A measured storm in a line: size, variant, source, pools and limits."""
    h = trace.header
    head = f"{h.scenario.sandboxes} × {h.scenario.cni} ({h.source})"
    settings = _trace_settings(trace)
    return f"{head}, {settings}" if settings else head


def trace_facts(trace: Trace, *, name: str | None = None) -> list[tuple[str, str]]:
    """The headline of a measured storm, as a simulated one's: what ran
    (sandboxes, runtime, host, the config in force), its makespan and
    mean/p50/p99 startup (:func:`bootstorm.validation.testbed.summarize`:
    a sandbox's startup from its own arrival), the CPU it kept busy."""
    from .validation.testbed.summary import summarize

    h = trace.header
    facts = [] if name is None else [("trace", name)]
    sc = h.scenario
    summary = summarize(trace)
    done = (
        f"{summary.sandboxes:,}"
        if summary.completed == summary.sandboxes
        else f"{summary.sandboxes:,} ({summary.completed:,} completed every stage)"
    )
    runtime = f"{sc.runtime} ({sc.cni}), VM {sc.vm}" + (
        ", through a node agent" if sc.through_agent else ""
    )
    source = h.source
    if h.created_at is not None:
        at = h.created_at.astimezone(UTC) if h.created_at.tzinfo else h.created_at
        source += f", recorded {at:%Y-%m-%d %H:%M} UTC"
    facts += [
        ("source", source),
        ("sandboxes", done),
        ("runtime", runtime),
    ]
    if h.host is not None:
        host = h.host
        machine = f"{host.hostname}: " if host.hostname else ""
        cpu = f" ({host.cpu_model})" if host.cpu_model else ""
        facts.append(
            (
                "host",
                f"{machine}{host.cores} CPUs{cpu}, {host.memory_mib:,} MiB, kernel {host.kernel}",
            )
        )
    facts.append(("pools and limits", _trace_settings(trace) or "none"))
    if summary.completed:
        facts += [
            ("makespan (last sandbox up)", f"{summary.makespan_s:.2f} s"),
            (
                "startup mean / p50 / p99",
                f"{summary.startup_mean_s:.2f} / {summary.startup_p50_s:.2f} / "
                f"{summary.startup_p99_s:.2f} s",
            ),
        ]
    if h.busy_core_s is not None:
        facts.append(("CPU busy (whole host)", f"{h.busy_core_s:.1f} core-s"))
    if summary.schedule_span_s:
        facts.append(("arrivals spread over", f"{summary.schedule_span_s:.2f} s"))
    return facts


def _headline(result: Result | None, facts: Sequence[tuple[str, str]]) -> str:
    rows = list(facts)
    if result is not None:
        s = result.startup
        rows += [
            ("makespan (last sandbox up)", f"{result.makespan_s:.2f} s"),
            ("startup mean / p50 / p99", f"{s.mean:.2f} / {s.p50:.2f} / {s.p99:.2f} s"),
            *(
                [(result.interval.label, result.interval.text())]
                if result.interval is not None
                else []
            ),
            (
                "CPU busy / spinning",
                f"{result.cpu.busy_core_s:.1f} / {result.cpu.spin_core_s:.2f} core-s",
            ),
        ]
        if result.ready is not None:
            rows.append(
                (
                    "ready (network usable) mean / p99",
                    f"{result.ready.mean:.2f} / {result.ready.p99:.2f} s",
                )
            )
        if result.pool_memory_mib:
            rows.append(("pooled memory", f"{result.pool_memory_mib:,.0f} MiB"))
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table class='facts'>{body}</table>"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; }
table.facts { border-collapse: collapse; }
table.facts th { text-align: left; padding: 4px 16px 4px 0; font-weight: 600; }
table.facts td { text-align: right; padding: 4px 0; font-variant-numeric: tabular-nums; }
table.data { border-collapse: collapse; margin: 0.5em 0; }
table.data th { text-align: right; padding: 4px 10px; border-bottom: 2px solid #888; }
table.data td { text-align: right; padding: 3px 10px; border-bottom: 1px solid #ddd;
  font-variant-numeric: tabular-nums; }
table.data th:first-child, table.data td:first-child { text-align: left; }
div.caution { border-left: 4px solid #d9a400; padding: 0 1em; background: #fff8e1; }
footer { margin-top: 3em; color: #777; font-size: 0.85em; }
pre.config { background: #f6f6f6; padding: 0.8em 1em; overflow-x: auto; }
"""


def _caution(misses: Sequence[KnownMiss]) -> str:
    if not misses:
        return ""
    items = "".join(f"<li><b>{html.escape(m.row)}</b>: {html.escape(m.says)}</li>" for m in misses)
    return (
        "<div class='caution'><h2>Caution: the papers measured otherwise</h2>"
        f"<ul>{items}</ul></div>"
    )


def _unidentified(cautions: Sequence[Any]) -> str:
    if not cautions:
        return ""
    items = "".join(f"<li>{html.escape(c.line())}</li>" for c in cautions)
    return (
        "<div class='caution'><h2>Caution: costs the profile never identified move this "
        f"what-if</h2><ul>{items}</ul><p>Measure them (<code>sudo bootstorm testbed "
        "measure-ops</code>) or calibrate with storms that use them (<code>sudo bootstorm "
        "calibrate --plan</code>).</p></div>"
    )


def _table(title: str, head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A titled HTML table of ``rows`` (cells escaped)."""
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in row) + "</tr>" for row in rows
    )
    return f"<h2>{html.escape(title)}</h2><table class='facts'><tr>{cells}</tr>{body}</table>"


def _candidates(rows: Sequence[Any]) -> str:
    """Every candidate, ranked by its measured makespan: its settings, each
    run's makespan beside the median (their spread, not the median alone),
    the prediction and its error, mean and p99 startup."""
    if not rows:
        return ""
    ranked = sorted(rows, key=lambda r: r.measured_makespan_s)
    return _table(
        "Candidates, ranked by measured makespan: predicted against measured on real storms",
        (
            "rank",
            "config",
            "settings",
            "makespan (s) measured: median [each run]",
            "predicted",
            "error",
            "mean startup (s) measured",
            "predicted",
            "error",
            "p99 (s) measured",
            "predicted",
        ),
        [
            (
                k,
                r.name,
                _describe(r.candidate.config),
                f"{r.measured_makespan_s:.3f} ["
                + ", ".join(f"{x:.2f}" for x in r.run_makespans_s)
                + "]",
                f"{r.predicted_makespan_s:.3f}",
                f"{r.makespan_error:+.1%}",
                f"{r.measured_mean_s:.3f}",
                f"{r.predicted_mean_s:.3f}",
                f"{r.mean_error:+.1%}",
                f"{r.measured_p99_s:.3f}",
                f"{r.predicted_p99_s:.3f}",
            )
            for k, r in enumerate(ranked, start=1)
        ],
    )


def candidates_figure(rows: Sequence[Any]) -> Any:
    """Each candidate's runs (dots) and their median (a bar) against the
    model's prediction (a diamond), ranked by the measured median."""
    go = _go()
    ranked = sorted(rows, key=lambda r: r.measured_makespan_s)
    names = [r.name for r in ranked]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            name="measured (median of the runs)",
            x=names,
            y=[r.measured_makespan_s for r in ranked],
            marker_color=_PALETTE[8],
        )
    )
    runs_x = [r.name for r in ranked for _ in r.run_makespans_s]
    runs_y = [x for r in ranked for x in r.run_makespans_s]
    fig.add_trace(
        go.Scatter(
            name="each run",
            x=runs_x,
            y=runs_y,
            mode="markers",
            marker={"color": _PALETTE[0], "size": 8},
        )
    )
    fig.add_trace(
        go.Scatter(
            name="predicted",
            x=names,
            y=[r.predicted_makespan_s for r in ranked],
            mode="markers",
            marker={"color": _PALETTE[1], "symbol": "diamond", "size": 12},
        )
    )
    fig.update_layout(
        title="Makespan of each candidate: every run, the median and the prediction",
        xaxis_title="candidate (fastest measured first)",
        yaxis_title="makespan, s",
    )
    return fig


def candidate_stages_figure(rows: Sequence[Any]) -> Any:
    """Mean time per stage, stacked: measured beside predicted, per candidate."""
    go = _go()
    ranked = sorted(rows, key=lambda r: r.measured_makespan_s)
    stages: list[str] = []
    for r in ranked:
        for side in (r.measured_stage_mean_s, r.predicted_stage_mean_s):
            stages += [k for k in side if k not in stages]
    x = [
        [r.name for r in ranked for _ in ("measured", "predicted")],
        [kind for _ in ranked for kind in ("measured", "predicted")],
    ]
    fig = go.Figure()
    for stage in stages:
        y = []
        for r in ranked:
            y += [r.measured_stage_mean_s.get(stage, 0.0), r.predicted_stage_mean_s.get(stage, 0.0)]
        fig.add_trace(go.Bar(name=stage, x=x, y=y, marker_color=stage_colour(stage)))
    fig.update_layout(
        barmode="stack",
        title="Where each candidate's startup goes: mean time per stage, measured and predicted",
        yaxis_title="mean time per sandbox, s",
    )
    return fig


def _stale(lines: Sequence[str]) -> str:
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    head = "<p><b>Caution: the profile may be stale</b></p>"
    return f"<div class='caution'>{head}<ul>{items}</ul></div>"


def _compared(compared: Mapping[str, tuple[str, Result]] | None) -> str:
    """What-ifs side by side: each one's scenario and headline figures, and
    the change of each against the first."""
    if not compared:
        return ""
    first = next(iter(compared.values()))[1]

    def change(x: float, base: float) -> str:
        return f"{x:.2f} ({(x - base) / base:+.1%})" if base else f"{x:.2f}"

    return _table(
        "What-ifs compared (change against the first)",
        ("what-if", "scenario", "makespan (s)", "mean startup (s)", "p99 (s)", "pools MiB"),
        [
            (
                label,
                line,
                change(r.makespan_s, first.makespan_s),
                change(r.startup.mean, first.startup.mean),
                change(r.startup.p99, first.startup.p99),
                f"{r.pool_memory_mib:,.0f}",
            )
            for label, (line, r) in compared.items()
        ],
    )


def _chosen(chosen: tuple[str, Any] | None) -> str:
    """The config written (its YAML, as shipped to a node), or why none was."""
    if chosen is None:
        return ""
    name, config = chosen
    if config is None:
        return f"<h2>Chosen config</h2><p>{html.escape(name)}</p>"
    return (
        f"<h2>Chosen config: {html.escape(name)}</h2>"
        f"<pre class='config'>{html.escape(config.to_yaml())}</pre>"
    )


def _traffic_candidates(rows: Sequence[Any], slo_p99_s: float | None) -> str:
    """Configs run on a workload: predicted and measured p99, empty-pool
    starts and memory held (rows as ``tune --workload`` makes them)."""
    if not rows:
        return ""

    def num(x: float | None, fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    slo = "" if slo_p99_s is None else f" (p99 SLO {slo_p99_s:g} s)"
    return _table(
        f"Configs run on the workload: predicted against measured{slo}",
        (
            "config",
            "settings",
            "p99 (s) measured",
            "predicted",
            "empty-pool starts measured",
            "predicted",
            "MiB held measured",
            "predicted",
            "runs within the SLO",
        ),
        [
            (
                r.name,
                _describe(r.config),
                num(r.measured.p99_s, ".3f"),
                num(r.predicted.p99_s, ".3f"),
                num(r.measured.empty_starts, ".0f"),
                num(r.predicted.empty_starts, ".0f"),
                num(r.measured.memory_mib, ".1f"),
                num(r.predicted.memory_mib, ".1f"),
                f"{r.runs_meeting_slo} of {len(r.run_p99_s)}",
            )
            for r in rows
        ],
    )


def _describe(config: Any) -> str:
    from .workflows import describe_config

    return str(describe_config(config))


def memory_p99_figure(rows: Sequence[Any], slo_p99_s: float) -> Any:
    """Memory held against p99 startup for each config run on a workload,
    predicted (open) and measured (filled), joined per config, with the SLO."""
    go = _go()
    fig = go.Figure()
    for r in rows:
        if r.measured.memory_mib is None or r.predicted.memory_mib is None:
            continue
        fig.add_trace(
            go.Scatter(
                x=[r.predicted.p99_s, r.measured.p99_s],
                y=[r.predicted.memory_mib, r.measured.memory_mib],
                mode="lines+markers+text",
                marker={"symbol": ["circle-open", "circle"], "size": 11},
                text=["", r.name],
                textposition="top center",
                name=r.name,
            )
        )
    fig.add_vline(x=slo_p99_s, line_dash="dash", annotation_text=f"SLO {slo_p99_s:g} s")
    fig.update_layout(
        xaxis_title="p99 startup (s): open predicted, filled measured",
        yaxis_title="memory held by idle pooled devices (MiB, mean)",
        height=420,
        margin={"t": 30},
    )
    return fig


def traffic_figure(result: Result, windows: Sequence[Window]) -> Any:
    """Starts per second, ready devices per pool, p50/p99 startup per window
    and memory held, stacked on one time axis (s from the first start)."""
    go = _go()
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=(
            "starts per second (per window)",
            "ready devices",
            "startup per window (s)",
            "memory held by idle devices (MiB)",
        ),
    )
    mid = [(w.start_s + w.end_s) / 2 for w in windows]
    rate = [w.starts / (w.end_s - w.start_s) if w.end_s > w.start_s else 0.0 for w in windows]
    fig.add_trace(go.Bar(x=mid, y=rate, name="starts/s", marker_color=_PALETTE[0]), row=1, col=1)
    end = max([result.horizon_s, *(w.end_s for w in windows)])
    grid = np.linspace(0.0, end, min(MAX_LEVEL_POINTS, max(2, len(windows) * 20)))
    for k, (kind, line) in enumerate(result.pool_timelines.items()):
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=line.ready_at(grid),
                name=f"{kind} ready",
                line={"shape": "hv", "color": _PALETTE[(k + 1) % len(_PALETTE)]},
            ),
            row=2,
            col=1,
        )
    for name, values, color in (
        ("p50", [w.p50_s for w in windows], _PALETTE[2]),
        ("p99", [w.p99_s for w in windows], _PALETTE[3]),
    ):
        fig.add_trace(
            go.Scatter(x=mid, y=values, name=name, mode="lines+markers", line={"color": color}),
            row=3,
            col=1,
        )
    fig.add_trace(
        go.Scatter(
            x=mid,
            y=[w.memory_mib for w in windows],
            name="MiB held",
            fill="tozeroy",
            line={"color": _PALETTE[4]},
        ),
        row=4,
        col=1,
    )
    fig.update_xaxes(title_text="s", row=4, col=1)
    fig.update_layout(height=900, legend={"orientation": "h"})
    return fig


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportSections:
    """What one report shows, each section drawn where it is given: the one
    typed value every producer of a report fills (``report``, ``tune``,
    ``validate``, the demo, a notebook) and :func:`report_html` draws."""

    recording: Recording | None = None
    """A storm's spans (simulated with ``record=True``, or measured): its
    timeline, stage breakdown, locks, lock waits over time and CPU."""
    result: Result | None = None
    """The storm's result: the headline figures and the stages' numbers."""
    study: Any = None
    """An Optuna study: its history, best config and Pareto front."""
    facts: Sequence[tuple[str, str]] = ()
    """(label, value) lines under the title."""
    caveats: Sequence[KnownMiss] = ()
    """The known misses the what-if rests on (:func:`bootstorm.calibration.caveats`)."""
    unidentified: Sequence[Any] = ()
    """The costs the profile never identified that move it
    (:func:`bootstorm.calibration.identify.whatif_cautions`)."""
    candidates: Sequence[Any] = ()
    """Configs measured on real storms against their predictions (rows with
    ``name``, ``measured_makespan_s``, ``predicted_makespan_s``,
    ``makespan_error``, ``measured_mean_s``, ``predicted_mean_s``,
    ``mean_error``, as ``bootstorm tune`` and ``validate --candidates`` make)."""
    traffic: tuple[Result, Sequence[Window]] | None = None
    """A run on a workload's schedule and its windows
    (:func:`bootstorm.simulator.timeline.windows`), drawn by :func:`traffic_figure`."""
    traffic_candidates: Sequence[Any] = ()
    """Configs run on a workload (``tune --workload``'s rows)."""
    slo_p99_s: float | None = None
    """The SLO ``traffic_candidates`` are drawn against (memory held against p99)."""
    chosen: tuple[str, Any] | None = None
    """The config written, as (name, TunedConfig), or (why none, None)."""
    compared: Mapping[str, tuple[str, Result]] | None = None
    """What-ifs side by side, by label, each as (its scenario in a line, its
    result): headline figures, the change against the first, stages stacked."""
    stale: Sequence[str] = ()
    """Why the profile may no longer be the node's (``Identification.stale``)."""
    sensitivity: Tornado | None = None
    """The what-if at both ends of each unidentified cost
    (:func:`bootstorm.calibration.tornado.tornado`), drawn as a tornado chart."""
    sweep: Any = None
    """A sweep's table (``bootstorm sweep --output``, a DataFrame), drawn
    point by point (:func:`sweep_figure`) and listed."""


def report_html(*, title: str, sections: ReportSections | None = None, **fields: Any) -> str:
    """The report as one HTML document (plotly.js embedded once): ``title``
    and ``sections`` (:class:`ReportSections`), or the sections' fields as
    keywords. ValueError if there is nothing to draw."""
    if sections is None:
        sections = ReportSections(**fields)
    elif fields:
        raise TypeError(f"report_html: sections or its fields, not both (got {sorted(fields)})")
    s = sections
    if (
        s.recording is None
        and s.study is None
        and not s.candidates
        and s.traffic is None
        and not s.traffic_candidates
        and not s.compared
        and s.sweep is None
    ):
        raise ValueError("a report needs a recorded storm, a study, candidates, or more")
    figures: list[tuple[str, Any]] = []
    if s.sweep is not None:
        figures += [
            ("The sweep", sweep_figure(s.sweep)),
            ("Every point", sweep_table_html(s.sweep)),
        ]
    if s.compared:
        figures.append(
            (
                "Mean startup by stage",
                stage_comparison_figure({k: r for k, (_, r) in s.compared.items()}),
            )
        )
    if s.candidates:
        figures.append(
            ("Makespan: every run against the prediction", candidates_figure(s.candidates))
        )
        if any(r.measured_stage_mean_s or r.predicted_stage_mean_s for r in s.candidates):
            figures.append(
                ("Stages: measured beside predicted", candidate_stages_figure(s.candidates))
            )
    if s.traffic_candidates and s.slo_p99_s is not None:
        figures.append(
            (
                "Memory held against p99 startup",
                memory_p99_figure(s.traffic_candidates, s.slo_p99_s),
            )
        )
    if s.traffic is not None:
        figures.append(("Traffic", traffic_figure(*s.traffic)))
    if s.recording is not None:
        figures += [
            ("Timeline", timeline_figure(s.recording)),
            ("Stage breakdown", breakdown_figure(s.recording, s.result)),
            ("Locks", lock_table_html(s.recording, s.result)),
        ]
        waits = lock_waits_figure(s.recording)
        if waits is not None:
            figures.append(("Lock waits over time", waits))
        if s.recording.cpu_samples:  # a measured storm has no CPU timeline
            figures.append(("CPU", cpu_figure(s.recording)))
    if s.sensitivity is not None:
        figures.append(("Sensitivity to the unidentified costs", _tornado_section(s.sensitivity)))
    if s.study is not None:
        figures += _study_sections(s.study)
    parts = []
    plotly_js_included = False
    for heading, fig in figures:
        if isinstance(fig, str):  # an HTML table
            div = fig
        else:
            div = fig.to_html(
                full_html=False, include_plotlyjs=not plotly_js_included, default_width="100%"
            )
            plotly_js_included = True
        parts.append(f"<h2>{html.escape(heading)}</h2>\n{div}")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{_headline(s.result, s.facts)}{_caution(s.caveats)}"
        f"{_stale(s.stale)}{_unidentified(s.unidentified)}{_compared(s.compared)}{_chosen(s.chosen)}"
        f"{_candidates(s.candidates)}"
        f"{_traffic_candidates(s.traffic_candidates, s.slo_p99_s)}"
        + "\n".join(parts)
        + "<footer>bootstorm report"
        + (" — opens offline (plotly.js embedded)" if plotly_js_included else "")
        + "</footer></body></html>\n"
    )


#: Pixels across of the PNG beside each notebook figure: the width of
#: GitHub's notebook view (each figure keeps its own height).
STATIC_IMAGE_WIDTH_PX = 900


#: How long the first PNG (a blank figure) may take before the headless
#: Chromium behind it is given up on. Its start costs seconds (more on a
#: loaded 2-core host), and kaleido's server waits for its browser with no
#: timeout of its own: a browser that never comes up hung every figure
#: after it (once in this project's CI, notebook 04's first figure, 600 s).
STATIC_IMAGE_PROBE_S = 120.0


def show_static_images(
    *, width_px: int = STATIC_IMAGE_WIDTH_PX, probe_s: float = STATIC_IMAGE_PROBE_S
) -> bool:
    """In a notebook: every Plotly figure shown from now on carries a PNG
    beside its interactive form, for readers that run no plotly.js (GitHub,
    nbviewer, a notebook opened without its widgets); JupyterLab still shows
    the interactive one.

    The PNG is drawn by kaleido in a headless Chromium, kept running between
    figures (its start costs seconds, each figure then a fraction of one).
    A blank figure is drawn first: if it does not come back within
    ``probe_s`` seconds, a fresh browser is tried once more. Without kaleido
    (the ``notebooks`` extra), a Chromium to drive, or one that answers,
    figures stay interactive only and this returns False (with a warning
    for a browser that did not answer)."""
    if not probe_s > 0.0:
        raise ValueError(f"probe_s: must be > 0, but got {probe_s}")
    try:
        import kaleido

        # kaleido's own search for a browser (PATH, BROWSER_PATH, its download).
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return False
    browser = Chromium.find_browser(skip_local=False)
    if browser is None or not os.access(browser, os.X_OK):
        return False  # asked for anyway, kaleido's server would wait for it forever
    import plotly.io as pio

    # With a browser kept running, plotly passes it options it already has,
    # and says so at every figure: a notebook's output is no place for that.
    warnings.filterwarnings("ignore", message="The kopts argument is ignored", category=UserWarning)
    for _ in range(2):
        kaleido.start_sync_server(silence_warnings=True)
        if _png_answers(probe_s):
            pio.renderers["png"].width = width_px
            pio.renderers.default = "plotly_mimetype+png"
            return True
        _forget_sync_server(kaleido)
    warnings.warn(
        f"show_static_images: kaleido's Chromium ({browser}) drew no PNG within "
        f"{probe_s:g} s, twice; figures stay interactive only",
        RuntimeWarning,
        stacklevel=2,
    )
    return False


def _png_answers(timeout_s: float) -> bool:
    """Whether a blank figure's PNG comes back within ``timeout_s``: drawn on
    a daemon thread, left behind if it never does."""
    import threading

    import plotly.graph_objects as go
    import plotly.io as pio

    drawn = threading.Event()

    def draw() -> None:
        with contextlib.suppress(Exception):  # any failure is "no answer"
            pio.to_image(go.Figure(), format="png", width=16, height=16)
            drawn.set()

    threading.Thread(target=draw, name="kaleido-probe", daemon=True).start()
    return drawn.wait(timeout_s)


def _forget_sync_server(kaleido: Any) -> None:
    """Drop kaleido's sync server without waiting for it: its ``close``
    joins a thread that is stuck on a browser that never answered (and
    runs at exit too). Marked closed, the next ``start_sync_server`` makes
    a new thread and browser; the stuck one is a daemon and dies with the
    process. Relies on kaleido 1.x's ``_global_server``; without it,
    nothing to drop."""
    server = getattr(kaleido, "_global_server", None)
    if server is not None and hasattr(server, "_initialized"):
        server._initialized = False


def write_report(
    path: str | Path, *, title: str, sections: ReportSections | None = None, **fields: Any
) -> Path:
    """Write :func:`report_html` to ``path`` atomically (never a half-written file)."""
    dest = Path(path)
    write_atomically(dest, report_html(title=title, sections=sections, **fields))
    return dest
