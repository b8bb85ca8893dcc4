"""``bootstorm report``: one self-contained HTML report of a what-if, a
recorded storm or a study."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._io import check_output_path, terminal_console
from ._options import check_input_file, default_help, scenario_from_options
from ._params import short_repr
from .models import ConfigError

if TYPE_CHECKING:
    from .models import Scenario

__all__ = ["report_cmd"]


SourceOption = Annotated[
    list[str] | None,
    typer.Argument(
        help="A scenario YAML or an installed example's name (simulated), a trace "
        "(.jsonl[.gz], measured or simulated), a sweep's table (bootstorm sweep --output: "
        ".csv or .parquet), or a study: its journal file (optimize's "
        "default: ~/.local/state/bootstorm/studies.log, with --study-name) or an Optuna "
        "storage URL (sqlite:///study.db, postgresql://...). Several scenarios: one page "
        "that compares them. Default: the scenario the options describe."
    ),
]
OutputOption = Annotated[Path, typer.Option("-o", "--output", help="The HTML file.")]
StudyNameOption = Annotated[
    str | None, typer.Option(help="The study in the storage (if it holds several).")
]
CniOption = Annotated[str | None, typer.Option(help="As for simulate." + default_help("cni"))]
SandboxesOption = Annotated[
    int | None, typer.Option(help="As for simulate." + default_help("sandboxes"))
]
ProfileOption = Annotated[
    str | None, typer.Option(help="As for simulate." + default_help("profile"))
]
WorkloadOption = Annotated[
    Path | None,
    typer.Option(
        help="Report the scenario on this workload's starts (bootstorm workload --output): "
        "starts per second, pool levels, p99 per window, memory held."
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        help="A tuned config (bootstorm optimize --output): with --workload applied to its "
        "traffic; otherwise the scenario before and after it, side by side."
    ),
]


def report_cmd(
    sources: SourceOption = None,
    output: OutputOption = Path("report.html"),
    study_name: StudyNameOption = None,
    cni: CniOption = None,
    sandboxes: SandboxesOption = None,
    profile: ProfileOption = None,
    workload: WorkloadOption = None,
    config: ConfigOption = None,
) -> None:
    """Write one self-contained HTML report (opens offline): timeline, stage
    breakdown, locks, CPU; for a study, its history and Pareto front; for a
    workload (or a study searched on one), its traffic timeline."""
    from .report import write_report

    check_output_path("output", output)
    title: str
    kw: dict[str, Any]
    given = list(sources or ())
    source = given[0] if given else None
    is_study = source is not None and ("://" in source or source.endswith(".log"))
    recorded = source is not None and source.endswith((".jsonl", ".jsonl.gz"))
    swept = source is not None and source.endswith((".csv", ".parquet"))
    if swept and len(given) == 1 and config is None and workload is None:
        assert source is not None
        title, kw = _swept(Path(source))
        write_report(output, title=title, **kw)
        terminal_console().print(
            f"report written to [bold]{output}[/] (self-contained; open it in a browser)"
        )
        return
    if len(given) > 1 or (config is not None and workload is None):
        if is_study or recorded or swept or any(_not_a_scenario(x) for x in given):
            raise ConfigError(
                f"source: several sources (or --config without --workload) compare scenarios, "
                f"but got {', '.join(given)}"
            )
        if workload is not None:
            raise ConfigError("workload: one scenario on a workload at a time")
        check_input_file("config", config)
        title, kw = _compared(given, config, cni=cni, sandboxes=sandboxes, profile=profile)
        write_report(output, title=title, **kw)
        terminal_console().print(
            f"report written to [bold]{output}[/] (self-contained; open it in a browser)"
        )
        return
    if workload is not None and (is_study or recorded):
        raise ConfigError("workload: for a scenario only (a study brings its own workload)")
    check_input_file("config", config)
    if is_study:
        assert source is not None
        title, kw = _study(source, study_name)
    elif workload is not None:
        title, kw = _traffic(
            source, workload, config, cni=cni, sandboxes=sandboxes, profile=profile
        )
    elif recorded:
        assert source is not None
        title, kw = _recorded(Path(source))
    else:
        from .workflows import what_if

        scenario = scenario_from_options(
            Path(source) if source is not None else None,
            cni=cni,
            sandboxes=sandboxes,
            profile=profile,
        )
        what = what_if(scenario, record=True, executor="simpy")
        title = scenario_title(scenario)
        kw = {
            "recording": what.result.recording,
            "result": what.result,
            "caveats": what.known.misses,
            "unidentified": what.identification.cautions,
            "stale": what.identification.stale,
            # Each unidentified cost at both ends: the storms the cautions ran.
            "sensitivity": what.tornado,
        }
    write_report(output, title=title, **kw)
    terminal_console().print(
        f"report written to [bold]{output}[/] (self-contained; open it in a browser)"
    )


def _study(source: str, study_name: str | None) -> tuple[str, dict[str, Any]]:
    """A study's title and report sections, from its journal or storage URL."""
    import optuna

    from .calibration import caveats
    from .optimizers import searched_scenario
    from .optimizers._storage import open_storage

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
    kw: dict[str, Any] = {
        "study": study,
        "facts": [("trials", str(len(study.trials)))],
        "caveats": caveats(searched) if searched is not None else (),
    }
    chosen = _chosen_traffic_trial(study)
    if chosen is not None:
        from .simulator.timeline import windows
        from .workflows import DEFAULT_WINDOW_S, what_if

        trial, scenario = chosen
        result = what_if(scenario).result
        kw["traffic"] = (result, windows(result, window_s=DEFAULT_WINDOW_S))
        kw["facts"].append(("traffic timeline", f"trial {trial} (least memory that is feasible)"))
    return f"study {study.study_name}", kw


def _chosen_traffic_trial(study: Any) -> tuple[int, Scenario] | None:
    """For a study searched on a workload's starts: the trial ``optimize``
    writes (the feasible one best by the first objective) and its storm; None
    for a study of a storm released at once, or with no feasible trial."""
    from optuna.trial import TrialState

    from .optimizers import trial_scenario
    from .optimizers._study import _SPEC_ATTR, _recorded_scenario

    record = study.user_attrs.get(_SPEC_ATTR)
    if record is None:
        return None
    scenario = _recorded_scenario(study.study_name, record)
    if scenario.arrival_s is None:
        return None
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if all(c <= 0.0 for c in t.system_attrs.get("constraints", ()))
    ]
    if not done:
        return None
    best = min(done, key=lambda t: (t.values[0], t.number))
    return best.number, trial_scenario(scenario, best)


def _traffic(
    source: str | None,
    workload: Path,
    config: Path | None,
    **options: Any,
) -> tuple[str, dict[str, Any]]:
    """A scenario on a workload's starts: its title and report sections."""
    from ._options import load_workload
    from .workflows import traffic_what_if

    starts = load_workload("workload", workload)
    if options.get("sandboxes") is not None:
        raise ConfigError("sandboxes: not with --workload (its starts are the sandboxes)")
    scenario = scenario_from_options(Path(source) if source is not None else None, **options)
    if config is not None:
        scenario = scenario.replace(config=config)
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
    ]
    title = f"{scenario.cni} on {what.source} ({scenario.profile})"
    return title, {"result": r, "facts": facts, "traffic": (r, what.windows)}


def _recorded(path: Path) -> tuple[str, dict[str, Any]]:
    """A recorded storm's title and report sections."""
    from .traces import read_trace
    from .traces.files import shown_path
    from .validation.recording import to_recording

    trace = read_trace(path)
    if not trace.spans:
        # A header alone (a storm that recorded nothing): no timeline or stage
        # breakdown to draw, where percentiles of no latency raised IndexError.
        raise ConfigError(
            f"source: {shown_path(path)} holds no stage spans (a header only); nothing to report"
        )
    from .report import trace_facts, trace_title

    facts = trace_facts(trace, name=path.name)
    return trace_title(trace), {"recording": to_recording(trace), "facts": facts}


def _not_a_scenario(source: str) -> bool:
    return "://" in source or source.endswith((".log", ".jsonl", ".jsonl.gz"))


def scenario_title(scenario: Any) -> str:
    """A scenario in a line: size, CNI, profile, and its pools and limits."""
    from .models.tuned import settings_line

    head = f"{scenario.sandboxes} × {scenario.cni} on {scenario.profile}"
    settings = settings_line(pools=scenario.pools, limits=scenario.limits)
    return f"{head}, {settings}" if settings else head


def _swept(path: Path) -> tuple[str, dict[str, Any]]:
    """A sweep's table (``bootstorm sweep --output``) and its report's title."""
    import pandas as pd

    from .report import SWEEP_FIGURES, SWEEP_PARAMETERS

    check_input_file("source", path)
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except ImportError as exc:
        raise ConfigError(f"source: {path}: reading parquet needs {exc.name}") from None
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"source: {path}: not a table ({short_repr(str(exc))})") from None
    for column in (*SWEEP_PARAMETERS, *SWEEP_FIGURES):
        if column not in frame.columns:
            raise ConfigError(f"source: {path}: not a sweep's table (no column {column!r})")
    if frame.empty:
        raise ConfigError(f"source: {path}: a sweep's table without a point")
    for column in SWEEP_FIGURES:
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna() | (values < 0)
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise ConfigError(
                f"source: {path}: row {row + 1}: {column} must be a number >= 0, "
                f"but got {short_repr(str(frame[column].iloc[row]))}"
            )
        frame[column] = values
    return f"sweep of {len(frame)} points ({path.name})", {"sweep": frame}


def _compared(
    sources: list[str], config: Path | None, **options: Any
) -> tuple[str, dict[str, Any]]:
    """Several scenarios (or one before and after a config): their headline
    figures side by side, the change against the first, stages stacked."""
    from .workflows import what_if

    what_ifs: dict[str, Any] = {}
    if config is not None:
        base = scenario_from_options(Path(sources[0]) if sources else None, **options)
        labelled = [("before", base), (f"after {Path(config).stem}", base.replace(config=config))]
    else:
        labelled = [(Path(x).stem, scenario_from_options(Path(x), **options)) for x in sources]
    seen: dict[str, int] = {}
    for label, scenario in labelled:
        seen[label] = seen.get(label, 0) + 1
        key = label if seen[label] == 1 else f"{label} ({seen[label]})"
        what_ifs[key] = (scenario, what_if(scenario))
    first = next(iter(what_ifs))
    title = f"{len(what_ifs)} what-ifs compared against {first}"
    return title, {
        "compared": {k: (scenario_title(s), w.result) for k, (s, w) in what_ifs.items()},
        "caveats": tuple(dict.fromkeys(m for _, w in what_ifs.values() for m in w.known.misses)),
    }
