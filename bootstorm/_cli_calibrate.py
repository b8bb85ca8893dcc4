"""``bootstorm calibrate``: a profile fitted to a paper's rows, to recorded
storms (``--measured``) or to a calibration plan run on this node (``--plan``);
and ``--check``, every row of a built-in profile on unseen seeds."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ._io import check_output_path, terminal_console, write_atomically
from ._options import (
    EXECUTOR_OPTION,
    RUNTIME_OPTION,
    RuntimeName,
    check_count,
    check_input_file,
    check_output_dir,
    default_help,
    max_testbed_sandboxes,
    named_as_options,
    split_names,
)
from ._params import refuse_given
from .models import ConfigError
from .models.scenario import MAX_SANDBOXES
from .simulator import ExecutorName
from .workflows import DEFAULT_CHECK_SEEDS

__all__ = ["MAX_BOOTSTRAP", "MAX_FIT_EVALUATIONS", "calibrate_check", "calibrate_cmd"]

#: ``calibrate --max-evaluations``: the fits converge in 100-200 (the
#: defaults, 150 and 160); each evaluation simulates every fitted storm.
MAX_FIT_EVALUATIONS = 10_000
#: ``calibrate --bootstrap``: a percentile interval wants ~1 000 resamples
#: (Efron and Tibshirani, 1993, §13.3); each is a refit of the storm.
MAX_BOOTSTRAP = 1_000
#: Most runs of each plan storm (--plan-runs): 3 is the default and each run is a
#: real storm of up to a minute; a hundred is a day.
MAX_RUNS = 100


TargetsOption = Annotated[
    str, typer.Option(help="Published targets to fit: paper-000, -001, -002, -003, -004.")
]
WriteOption = Annotated[bool, typer.Option(help="Overwrite the built-in profile with the fit.")]
OutputOption = Annotated[
    Path | None, typer.Option("-o", "--output", help="Write the fitted profile here.")
]
CheckOnlyOption = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Check the built-in profile against every row of its paper on unseen seeds: "
        "kind, mean, seed spread, pass/miss; exit 1 on a miss not known.",
    ),
]
SeedsOption = Annotated[
    str,
    typer.Option(
        help="With --check: seeds to average over, e.g. 1001-1010, 0,1,2 or 1-3,7 (none "
        "used by the fit)."
    ),
]
MaxEvaluationsOption = Annotated[
    int,
    typer.Option(min=1, max=MAX_FIT_EVALUATIONS, help="Budget of objective evaluations."),
]
MeasuredOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--measured",
        help="Fit a local testbed profile to this recorded storm instead "
        "(repeat for several runs of one storm: pooled).",
    ),
]
BootstrapOption = Annotated[
    int,
    typer.Option(
        min=0,
        max=MAX_BOOTSTRAP,
        help="With --measured: refits on resampled sandboxes for an interval.",
    ),
]
PredictSandboxesOption = Annotated[
    int | None, typer.Option(help="With --bootstrap: the storm size to predict.")
]
MeasuredOpsOption = Annotated[
    Path | None,
    typer.Option(
        help="With --measured or --plan: costs timed alone "
        "(bootstorm testbed measure-ops --output FILE), fitted with the storms."
    ),
]
RefreshOption = Annotated[
    Path | None,
    typer.Option(
        "--refresh",
        metavar="PROFILE",
        help="Rescale this node profile to today's speed: to the storms given with "
        "--measured, or (root) to 2 storms of --plan-sandboxes run now; writes --output.",
    ),
]
PlanOption = Annotated[
    bool,
    typer.Option(
        "--plan",
        help="Root: time each operation alone, run the storms that identify every cost "
        "of the testbed catalog (sizes, peer modes, pool kinds, limits), fit them together.",
    ),
]
PlanSandboxesOption = Annotated[
    int, typer.Option(help="With --plan: the largest plan storm's size.")
]
PlanRunsOption = Annotated[int, typer.Option(help="With --plan: runs of each plan storm.")]
PoolKindOption = Annotated[
    list[str] | None,
    typer.Option(
        help="With --plan: device kinds whose pool sizes the search may try (repeat, or "
        "comma-separated)." + default_help("all the testbed's")
    ),
]
LimitStageOption = Annotated[
    list[str] | None,
    typer.Option(
        help="With --plan: stages whose concurrency limits the search may try (repeat, or "
        "comma-separated)." + default_help("AddCNI, Cgroup, AttachIf, StartVM")
    ),
]
PlanPluginOption = Annotated[
    list[str] | None,
    typer.Option(
        "--cni-plugin",
        help="With --plan (runtime cni): CNI plugins a what-if may switch to (bridge, ptp, "
        "macvlan; repeat, or comma-separated): the plan runs a storm of each but the "
        "bridge." + default_help("the bridge only"),
    ),
]
MeasureOption = Annotated[
    bool,
    typer.Option(help="With --plan: time each operation alone first (unless --measured-ops)."),
]
TraceDirOption = Annotated[
    Path | None,
    typer.Option(help="With --plan: write every storm's trace (and ops.json) here."),
]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="With --plan: print the plan, run nothing.")
]
VmOption = Annotated[bool, typer.Option(help="With --plan: QEMU microVMs in StartVM.")]
AsJsonOption = Annotated[
    bool,
    typer.Option("--json", help="With --measured or --check: one JSON object instead of tables."),
]


def calibrate_cmd(
    targets: TargetsOption = "paper-000",
    write: WriteOption = False,
    output: OutputOption = None,
    check_only: CheckOnlyOption = False,
    seeds: SeedsOption = "1001-1010",
    max_evaluations: MaxEvaluationsOption = 150,
    measured: MeasuredOption = None,
    bootstrap: BootstrapOption = 0,
    predict_sandboxes: PredictSandboxesOption = None,
    measured_ops: MeasuredOpsOption = None,
    plan: PlanOption = False,
    refresh: RefreshOption = None,
    plan_sandboxes: PlanSandboxesOption = 50,
    plan_runs: PlanRunsOption = 3,
    pool_kind: PoolKindOption = None,
    limit_stage: LimitStageOption = None,
    cni_plugin: PlanPluginOption = None,
    measure: MeasureOption = True,
    trace_dir: TraceDirOption = None,
    dry_run: DryRunOption = False,
    vm: VmOption = True,
    as_json: AsJsonOption = False,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
    runtime: Annotated[RuntimeName, RUNTIME_OPTION] = "cni",
) -> None:
    """Fit a profile to a paper's *fit* rows, to recorded storms (--measured), or
    to a calibration plan run on this node (--plan); print the per-target
    error table and what identified each cost."""
    from ._render_node import RichProgress
    from .optimizers import DEFAULT_STAGES
    from .workflows import calibrate_plan

    if output is not None:
        check_output_path("output", output)
    # Every option checked before a fit or a storm starts: --plan-runs 10**9 was
    # taken, and a FIFO as --measured-ops hung after the storms had run.
    check_count("plan_runs", plan_runs, low=1, high=MAX_RUNS)
    check_count("plan_sandboxes", plan_sandboxes, low=4, high=max_testbed_sandboxes())
    check_count("predict_sandboxes", predict_sandboxes, low=1, high=MAX_SANDBOXES)
    check_input_file("measured_ops", measured_ops)
    check_output_dir("trace_dir", trace_dir)
    for path in measured or ():
        check_input_file("measured", path)
    # An option of another mode was read and ignored: refused instead.
    if not plan:
        refuse_given(
            "goes with --plan",
            (
                ("pool-kind", pool_kind),
                ("limit-stage", limit_stage),
                ("cni-plugin", cni_plugin),
                ("dry-run", "--dry-run" if dry_run else None),
                ("trace-dir", None if refresh is not None else trace_dir),
            ),
        )
    if check_only:
        refuse_given(
            "not with --check (it fits and writes nothing)",
            (
                ("write", "--write" if write else None),
                ("output", output),
                ("measured", measured or None),
                ("measured-ops", measured_ops),
            ),
        )
    if not measured:
        refuse_given(
            "goes with --measured",
            (("bootstrap", bootstrap or None), ("predict-sandboxes", predict_sandboxes)),
        )
    if refresh is not None:
        check_input_file("refresh", refresh)
        if plan:
            raise ConfigError("refresh: give --refresh or --plan, not both")
        _calibrate_refresh(
            refresh,
            trace_paths=measured or [],
            sandboxes=plan_sandboxes,
            vm=vm,
            runtime=runtime,
            trace_dir=trace_dir,
            output=output,
            executor=executor,
            as_json=as_json,
            console=terminal_console(),
        )
        return
    if plan:
        with named_as_options(
            {"limit_stages": "limit_stage", "pool_kinds": "pool_kind", "plugins": "cni_plugin"}
        ):
            calibrate_plan(
                sandboxes=plan_sandboxes,
                runs=plan_runs,
                pool_kinds=split_names("pool_kind", pool_kind) or None,
                limit_stages=split_names("limit_stage", limit_stage) or tuple(DEFAULT_STAGES),
                measured_ops=measured_ops,
                measure=measure,
                trace_dir=trace_dir,
                output=output,
                dry_run=dry_run,
                vm=vm,
                max_evaluations=max_evaluations,
                executor=executor,
                runtime=runtime,
                plugins=split_names("cni_plugin", cni_plugin),
                progress=RichProgress(terminal_console()),
            )
        return
    if measured:
        _calibrate_traces(
            measured,
            output=output,
            measured_ops=measured_ops,
            bootstrap=bootstrap,
            predict_sandboxes=predict_sandboxes,
            max_evaluations=max_evaluations,
            executor=executor,
            as_json=as_json,
            console=terminal_console(),
        )
        return
    console = terminal_console()
    if check_only:
        raise typer.Exit(
            calibrate_check(
                targets, seeds=seeds, executor=executor, console=console, as_json=as_json
            )
        )
    _fit_paper(
        targets,
        output=output,
        write=write,
        max_evaluations=max_evaluations,
        executor=executor,
        console=console,
    )


def _fit_paper(
    targets: str,
    *,
    output: Path | None,
    write: bool,
    max_evaluations: int,
    executor: str,
    console: Console,
) -> None:
    from ._render import fit_spread, target_table
    from ._render_node import RichProgress
    from .workflows import fit_paper

    report = fit_paper(
        targets, max_evaluations=max_evaluations, executor=executor, progress=RichProgress(console)
    )
    console.print(target_table(f"{targets} fit ({report.evaluations} evaluations)", report.checks))
    console.print(fit_spread(report))
    text = report.profile.to_yaml()
    destinations = [output] if output is not None else []
    if write:
        destinations.append(
            Path(__file__).resolve().parent.parent / "models" / "profiles" / f"{targets}.yaml"
        )
    for dest in destinations:
        write_atomically(dest, text)
        console.print(f"profile written to [bold]{dest}[/]")
    for miss in report.misses:
        how = "fitted" if miss.target.weight > 0 else "not fitted (see its comment in calibration/)"
        console.print(f"[yellow]outside ±5%: {miss.target.id} {miss.target.label} ({how})[/]")
    if not report.all_within:
        raise typer.Exit(1)


def calibrate_check(
    targets: str,
    *,
    seeds: str = DEFAULT_CHECK_SEEDS,
    executor: str = "compiled",
    console: Console | None = None,
    as_json: bool = False,
) -> int:
    """``bootstorm calibrate --check [--seeds 1001-1010]``: the check's table
    (or ``--json``) of :func:`bootstorm.workflows.check_paper`. Returns the
    exit status: 1 when a row misses that ``KNOWN_MISSES`` does not name, or
    when the identity check contradicts a row's label; else 0."""
    from rich.markup import escape

    from ._render_node import RichProgress, check_notes, check_records, check_table
    from .workflows import check_paper

    console = console or terminal_console()
    check = check_paper(targets, seeds=seeds, executor=executor, progress=RichProgress(console))
    failed = bool(check.unexpected or check.mislabelled)
    unexpected = check.unexpected
    if as_json:
        sys.stdout.write(json.dumps(check_records(check)) + "\n")
        return 1 if failed else 0
    console.print(check_table(check))
    for line in check_notes(check):
        console.print(line)
    if unexpected:
        console.print(
            "[red]unexpected misses (not in KNOWN_MISSES): "
            + ", ".join(f"{c.row.key} {escape(c.row.label)}" for c in unexpected)
            + "[/]"
        )
    return 1 if failed else 0


def _calibrate_refresh(
    profile_path: Path,
    *,
    trace_paths: list[Path],
    sandboxes: int,
    vm: bool,
    runtime: str,
    trace_dir: Path | None,
    output: Path | None,
    executor: str,
    as_json: bool,
    console: Console,
) -> None:
    """``calibrate --refresh``: the factor, each storm's errors before and
    after (or ``--json``), and the refreshed profile written to ``--output``."""
    from ._render import narrow_table
    from ._render_node import RichProgress
    from .workflows import refresh_node_profile

    done = refresh_node_profile(
        profile_path,
        trace_paths=trace_paths,
        sandboxes=sandboxes,
        vm=vm,
        runtime=runtime,
        trace_dir=trace_dir,
        executor=executor,
        progress=RichProgress(console),
    )
    if output is not None:
        write_atomically(output, done.profile.to_yaml())
    if as_json:
        payload = {
            "profile": str(profile_path),
            "scale": done.scale,
            "at_bound": done.at_bound,
            "storms": [
                {
                    "storm": e.storm,
                    "makespan_error_before": e.makespan_before,
                    "makespan_error_after": e.makespan_after,
                    "mean_error_before": e.mean_before,
                    "mean_error_after": e.mean_after,
                }
                for e in done.storms
            ],
            "output": None if output is None else str(output),
        }
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    table = narrow_table(f"{profile_path.name}: time costs ×{done.scale:g}, predicted vs measured")
    table.add_column("storm", justify="left", min_width=16, ratio=1)
    for column in ("makespan before", "after", "mean before", "after"):
        table.add_column(column, justify="right", no_wrap=True)
    for e in done.storms:
        table.add_row(
            e.storm,
            f"{e.makespan_before:+.1%}",
            f"{e.makespan_after:+.1%}",
            f"{e.mean_before:+.1%}",
            f"{e.mean_after:+.1%}",
        )
    console.print(table)
    if done.at_bound:
        console.print(
            "[yellow]caution: the factor hit its bound (×0.5 or ×2): more than this node's "
            "speed changed; refit it (sudo bootstorm calibrate --plan)[/]"
        )
    if output is not None:
        console.print(f"refreshed profile written to [bold]{output}[/]")
    else:
        console.print("nothing written: give --output FILE to keep the refreshed profile")


def _calibrate_traces(
    trace_paths: list[Path],
    *,
    output: Path | None,
    measured_ops: Path | None,
    bootstrap: int,
    predict_sandboxes: int | None,
    max_evaluations: int,
    executor: str,
    as_json: bool,
    console: Console,
) -> None:
    """``calibrate --measured``: the error table and what identified each cost
    (or ``--json``), and with ``--bootstrap`` an interval of a prediction."""
    from ._render import target_table
    from ._render_node import RichProgress, print_profile_identification
    from .workflows import bootstrap_interval, fit_traces

    progress = RichProgress(console)
    fit = fit_traces(
        trace_paths,
        measured_ops=measured_ops,
        max_evaluations=max_evaluations,
        executor=executor,
        progress=progress,
    )
    report = fit.report
    if output is not None:
        write_atomically(output, report.profile.to_yaml())
    if as_json:
        ident = report.profile.identification
        payload = {
            "rows": [
                {
                    "row": c.target.label,
                    "fitted": c.target.weight > 0,
                    "measured": c.target.value,
                    "model": c.model,
                    "rel_error": c.rel_error,
                }
                for c in report.checks
            ],
            "identification": ident.model_dump(mode="json") if ident is not None else None,
            "output": str(output) if output is not None else None,
        }
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    console.print(
        target_table(
            f"local profile vs {fit.name} ({report.evaluations} evaluations)",
            report.checks,
            reference="measured",
        )
    )
    print_profile_identification(console, report.profile)
    family = report.profile.sources.get("service_family", "lognormal (no choice stated)")
    console.print(f"service times: {family.removeprefix('the recorded storm: ')}")
    if output is not None:
        console.print(f"profile written to [bold]{output}[/]")
    if bootstrap:
        interval = bootstrap_interval(
            fit,
            resamples=bootstrap,
            predict_sandboxes=predict_sandboxes,
            executor=executor,
            progress=progress,
        )
        i = interval.interval
        console.print(
            f"predicted makespan of {interval.sandboxes} sandboxes: {i.point:.2f} s "
            f"({i.level:.0%} bootstrap interval {i.low:.2f} … {i.high:.2f} s)"
        )
