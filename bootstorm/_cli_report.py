"""``bootstorm report``: one self-contained HTML report of a what-if, a
recorded storm or a study."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._io import check_output_path, terminal_console
from ._options import check_input_file, default_help, scenario_from_options
from .models import ConfigError

if TYPE_CHECKING:
    from .workflows.reports import Report

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
    from .workflows import reports

    given = list(sources or ())
    check_output_path(
        "output",
        output,
        inputs={"source": given[0] if given else None, "workload": workload, "config": config},
    )
    source = given[0] if given else None
    is_study = source is not None and ("://" in source or source.endswith(".log"))
    recorded = source is not None and source.endswith((".jsonl", ".jsonl.gz"))
    swept = source is not None and source.endswith((".csv", ".parquet"))
    report: Report
    if swept and len(given) == 1 and config is None and workload is None:
        assert source is not None
        report = reports.sweep_report(Path(source))
    elif len(given) > 1 or (config is not None and workload is None):
        if is_study or recorded or swept or any(_not_a_scenario(x) for x in given):
            raise ConfigError(
                f"source: several sources (or --config without --workload) compare scenarios, "
                f"but got {', '.join(given)}"
            )
        if workload is not None:
            raise ConfigError("workload: one scenario on a workload at a time")
        check_input_file("config", config)
        options = {"cni": cni, "sandboxes": sandboxes, "profile": profile}
        if config is not None:
            base = scenario_from_options(Path(given[0]) if given else None, **options)
            labelled = [("before", base), (f"after {config.stem}", base.replace(config=config))]
        else:
            labelled = [(Path(x).stem, scenario_from_options(Path(x), **options)) for x in given]
        report = reports.compared_report(labelled)
    else:
        if workload is not None and (is_study or recorded):
            raise ConfigError("workload: for a scenario only (a study brings its own workload)")
        check_input_file("config", config)
        if is_study:
            assert source is not None
            report = reports.study_report(source, study_name)
        elif workload is not None:
            report = _traffic(
                source, workload, config, cni=cni, sandboxes=sandboxes, profile=profile
            )
        elif recorded:
            assert source is not None
            check_input_file("source", Path(source))
            report = reports.recorded_report(Path(source))
        else:
            scenario = scenario_from_options(
                Path(source) if source is not None else None,
                cni=cni,
                sandboxes=sandboxes,
                profile=profile,
            )
            report = reports.scenario_report(scenario)
    write_report(output, title=report.title, sections=report.sections)
    terminal_console().print(
        f"report written to [bold]{output}[/] (self-contained; open it in a browser)"
    )


def _traffic(source: str | None, workload: Path, config: Path | None, **options: Any) -> Report:
    """A scenario (the options') on a workload's starts, with ``config`` applied."""
    from ._options import load_workload
    from .workflows.reports import traffic_report

    starts = load_workload("workload", workload)
    if options.get("sandboxes") is not None:
        raise ConfigError("sandboxes: not with --workload (its starts are the sandboxes)")
    scenario = scenario_from_options(Path(source) if source is not None else None, **options)
    if config is not None:
        scenario = scenario.replace(config=config)
    return traffic_report(scenario, starts)


def _not_a_scenario(source: str) -> bool:
    return "://" in source or source.endswith((".log", ".jsonl", ".jsonl.gz"))
