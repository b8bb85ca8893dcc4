"""What a report shows, built from what the planner has: a what-if, several
side by side, a scenario on a workload, a recorded storm, a sweep's table or
a study. ``bootstorm report`` picks one from its arguments and writes it
(:func:`bootstorm.report.write_report`); a notebook calls the same::

    from bootstorm.workflows.reports import scenario_report
    from bootstorm.report import write_report

    r = scenario_report(Scenario(cni="ipvtap", sandboxes=400))
    write_report("report.html", title=r.title, sections=r.sections)

Each builder refuses bad input with :class:`~bootstorm.models.ConfigError`,
one line naming the field (``source``, ``study``, ``workload``) and the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._params import short_repr
from ..models import ConfigError

if TYPE_CHECKING:
    from ..models import Scenario
    from ..report import ReportSections
    from ..traces.workload import Workload

__all__ = [
    "Report",
    "compared_report",
    "recorded_report",
    "scenario_report",
    "scenario_title",
    "study_report",
    "sweep_report",
    "traffic_report",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    """A report's title and what it shows."""

    title: str
    sections: ReportSections


def scenario_title(scenario: Scenario) -> str:
    """A scenario in a line: size, CNI, profile, and its pools and limits."""
    from ..models.tuned import settings_line

    head = f"{scenario.sandboxes} × {scenario.cni} on {scenario.profile}"
    settings = settings_line(pools=scenario.pools, limits=scenario.limits)
    return f"{head}, {settings}" if settings else head


def scenario_report(scenario: Scenario) -> Report:
    """One what-if, simulated with its spans: headline, cautions, timeline,
    stages, locks, CPU, and the tornado of its unidentified costs (the
    storms its cautions ran)."""
    from ..report import ReportSections
    from .whatif import what_if

    what = what_if(scenario, record=True, executor="simpy")
    return Report(
        title=scenario_title(scenario),
        sections=ReportSections(
            recording=what.result.recording,
            result=what.result,
            caveats=what.known.misses,
            unidentified=what.identification.cautions,
            stale=what.identification.stale,
            sensitivity=what.tornado,
        ),
    )


def compared_report(labelled: Sequence[tuple[str, Scenario]]) -> Report:
    """Several what-ifs (or one before and after a config), by label: their
    headline figures side by side, the change against the first, stages
    stacked. A label given twice is numbered."""
    from ..report import ReportSections
    from .whatif import what_if

    what_ifs: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for label, scenario in labelled:
        seen[label] = seen.get(label, 0) + 1
        key = label if seen[label] == 1 else f"{label} ({seen[label]})"
        what_ifs[key] = (scenario, what_if(scenario))
    first = next(iter(what_ifs))
    return Report(
        title=f"{len(what_ifs)} what-ifs compared against {first}",
        sections=ReportSections(
            compared={k: (scenario_title(s), w.result) for k, (s, w) in what_ifs.items()},
            caveats=tuple(dict.fromkeys(m for _, w in what_ifs.values() for m in w.known.misses)),
        ),
    )


def traffic_report(scenario: Scenario, starts: Workload) -> Report:
    """A scenario on a workload's starts: starts per second, pool levels, p99
    per window, empty-pool starts, memory held."""
    from ..report import ReportSections
    from .traffic import traffic_what_if

    what = traffic_what_if(scenario, starts)
    r = what.result
    facts = [
        ("workload", f"{what.source}: {r.n_sandboxes:,} starts"),
        (f"p99 per {what.window_s:g}-s window", f"median {what.p99_window_median_s:.2f} s"),
        ("starts that found a pool empty", f"{r.empty_starts:,}"),
        (
            "memory held (mean / MiB·h)",
            f"{r.pool_mean_memory_mib:,.1f} MiB / {what.memory_mib_h:,.2f}",
        ),
        *(("caution", line) for line in what.cautions),
    ]
    return Report(
        title=f"{scenario.cni} on {what.source} ({scenario.profile})",
        sections=ReportSections(result=r, facts=facts, traffic=(r, what.windows)),
    )


def recorded_report(path: Path) -> Report:
    """A recorded storm (a trace, measured or simulated): its headline,
    timeline, stages and locks."""
    from ..report import ReportSections, trace_facts, trace_title
    from ..traces import read_trace
    from ..traces.files import shown_path
    from ..validation.recording import to_recording

    trace = read_trace(path)
    if not trace.spans:
        # A header alone (a storm that recorded nothing): no timeline or stage
        # breakdown to draw, where percentiles of no latency raised IndexError.
        raise ConfigError(
            f"source: {shown_path(path)} holds no stage spans (a header only); nothing to report"
        )
    return Report(
        title=trace_title(trace),
        sections=ReportSections(
            recording=to_recording(trace), facts=trace_facts(trace, name=path.name)
        ),
    )


def sweep_report(path: Path) -> Report:
    """A sweep's table (``bootstorm sweep --output``: .csv or .parquet): its
    points against the sandboxes, every point listed. A table that is not a
    sweep's is one line naming the column or the row."""
    import pandas as pd

    from ..models import CNI_NAMES
    from ..models.scenario import MAX_ARRIVAL_S, MAX_SANDBOXES
    from ..report import SWEEP_FIGURES, SWEEP_PARAMETERS, ReportSections
    from ..traces.files import check_regular_file

    try:
        check_regular_file(path)
    except ConfigError as exc:
        raise ConfigError(f"source: {exc}") from None
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except ImportError as exc:
        raise ConfigError(f"source: {path}: reading parquet needs {exc.name}") from None
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"source: {path}: not a table ({short_repr(str(exc))})") from None
    for column in (*SWEEP_PARAMETERS, *SWEEP_FIGURES):
        if column not in frame.columns:
            raise ConfigError(f"source: {path}: not a sweep's table (no column {column!r})")
        if f"{column}.1" in frame.columns:  # how pandas names a column's second time
            raise ConfigError(f"source: {path}: column {column!r} twice")
    if frame.empty:
        raise ConfigError(f"source: {path}: a sweep's table without a point")

    def refuse(bad: Any, column: str, rule: str) -> None:
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise ConfigError(
                f"source: {path}: row {row + 1}: {column} must be {rule}, "
                f"but got {short_repr(str(frame[column].iloc[row]))}"
            )

    # A figure is seconds of a storm, a size a count the simulator runs.
    for column in SWEEP_FIGURES:
        values = pd.to_numeric(frame[column], errors="coerce")
        refuse(~values.between(0.0, MAX_ARRIVAL_S), column, f"a number of 0..{MAX_ARRIVAL_S:g} s")
        frame[column] = values
    for column, low, high in (("sandboxes", 1, MAX_SANDBOXES), ("memory_mib", 1, 1 << 30)):
        values = pd.to_numeric(frame[column], errors="coerce")
        refuse(
            ~values.between(low, high) | (values % 1 != 0), column, f"a count of {low}..{high:,}"
        )
        frame[column] = values.astype("int64")
    refuse(~frame["cni"].isin(CNI_NAMES), "cni", "one of the CNIs (bootstorm profiles)")
    return Report(
        title=f"sweep of {len(frame)} points ({path.name})", sections=ReportSections(sweep=frame)
    )


def study_report(source: str, study_name: str | None = None) -> Report:
    """A study, from its journal file or an Optuna storage URL (read only):
    its history, best config and Pareto front; for a study searched on a
    workload, the traffic timeline of the trial ``optimize`` writes."""
    import optuna

    from ..calibration import caveats
    from ..optimizers import searched_scenario
    from ..optimizers._storage import open_storage
    from ..report import ReportSections

    if "://" not in source and not Path(source).is_file():
        raise ConfigError(f"source: no study journal at {short_repr(source)}")
    # Only read: a journal that may not be written opens, a damaged one is
    # read up to its damage and left as it is, a missing database is not made.
    storage = open_storage(source, read_only=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # its "study name omitted" INFO line
    if study_name is None:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        if not names:
            raise ConfigError(f"source: {source} holds no study")
        if len(names) > 1:
            shown = ", ".join(sorted(names)[:10]) + (" ..." if len(names) > 10 else "")
            raise ConfigError(
                f"study_name: {source} holds {len(names)} studies; name one with "
                f"--study-name ({shown})"
            )
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except (KeyError, ValueError) as exc:
        raise ConfigError(
            f"study: cannot load {short_repr(study_name) if study_name else '(the only study)'} "
            f"from {short_repr(source)}: {short_repr(str(exc))}"
        ) from None
    searched = searched_scenario(study)
    facts = [("trials", str(len(study.trials)))]
    traffic = None
    chosen = _chosen_traffic_trial(study)
    if chosen is not None:
        from ..simulator.timeline import windows
        from .traffic import DEFAULT_WINDOW_S
        from .whatif import what_if

        trial, scenario = chosen
        result = what_if(scenario).result
        traffic = (result, windows(result, window_s=DEFAULT_WINDOW_S))
        facts.append(("traffic timeline", f"trial {trial} (least memory that is feasible)"))
    return Report(
        title=f"study {study.study_name}",
        sections=ReportSections(
            study=study,
            facts=facts,
            caveats=caveats(searched) if searched is not None else (),
            traffic=traffic,
        ),
    )


def _chosen_traffic_trial(study: Any) -> tuple[int, Scenario] | None:
    """For a study searched on a workload's starts: the trial ``optimize``
    writes and its storm; None for a study of a storm released at once, or
    with no feasible trial."""
    from ..optimizers import feasible_best_trial

    chosen = feasible_best_trial(study)
    return None if chosen is None or chosen[1].arrival_s is None else chosen
