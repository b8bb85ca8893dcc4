"""``bootstorm tune``: the whole loop on this node, shown step by step
(the loop itself is :func:`bootstorm.workflows.tune`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._io import terminal_console
from ._options import (
    LIFETIME_OPTION,
    RUNTIME_OPTION,
    RuntimeName,
    default_help,
    named_as_options,
    split_names,
)
from .models import ConfigError

if TYPE_CHECKING:
    from .traces.workload import Workload

__all__ = ["tune_cmd"]


SandboxesOption = Annotated[
    int | None,
    typer.Option(
        help="The storm to shorten: sandboxes at once [default: 150; not with --workload].",
        show_default=False,
    ),
]
WorkloadOption = Annotated[
    Path | None,
    typer.Option(
        help="Tune for this workload's traffic (bootstorm workload -o) instead of a storm "
        "released at once: search pool policies and limits for the least memory held that "
        "meets --slo-p99, then run the best, a peak-burst pool and the baseline for real on "
        "its schedule through a node agent that refills its pools.",
    ),
]
SloOption = Annotated[
    str | None,
    typer.Option("--slo-p99", help="With --workload: p99 startup at most this (15s, 800ms)."),
]
WindowOption = Annotated[
    float | None,
    typer.Option(
        "--window-s",
        help="With --workload: the window of p99 per window [default: 60].",
        show_default=False,
    ),
]
TrialsOption = Annotated[int, typer.Option(help="TPE trials of the search on the model.")]
CandidatesOption = Annotated[
    int, typer.Option(help="The best configs of the search to run for real.")
]
RepeatsOption = Annotated[
    int, typer.Option(help="Rounds of real storms (each runs every config once).")
]
ProfileOption = Annotated[
    Path | None,
    typer.Option(
        help="The node's fitted profile YAML." + default_help("fitted here first, as --plan does")
    ),
]
MeasuredOpsOption = Annotated[
    Path | None, typer.Option(help="Costs timed alone (testbed measure-ops --output).")
]
PlanSandboxesOption = Annotated[
    int | None,
    typer.Option(help="The largest plan storm's size." + default_help("a third of the storm")),
]
PlanRunsOption = Annotated[int, typer.Option(help="Runs of each plan storm.")]
PoolKindOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Device kinds whose pool sizes to search (repeat, or comma-separated)."
        + default_help("all the testbed's"),
    ),
]
LimitStageOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Stages whose concurrency limits to search (repeat, or comma-separated)."
        + default_help("AddCNI, Cgroup, AttachIf, StartVM"),
    ),
]
OutputOption = Annotated[
    Path, typer.Option("-o", "--output", help="The tuned config (only if measured faster).")
]
TraceDirOption = Annotated[
    Path | None, typer.Option(help="Write every storm's trace and the profiles here.")
]
ReportOption = Annotated[
    Path | None, typer.Option(help="An HTML report of predicted against measured.")
]
VmOption = Annotated[bool, typer.Option(help="QEMU microVMs in StartVM.")]


def tune_cmd(
    sandboxes: SandboxesOption = None,
    trials: TrialsOption = 60,
    candidates: CandidatesOption = 3,
    repeats: RepeatsOption = 5,
    profile: ProfileOption = None,
    measured_ops: MeasuredOpsOption = None,
    plan_sandboxes: PlanSandboxesOption = None,
    plan_runs: PlanRunsOption = 3,
    pool_kind: PoolKindOption = None,
    limit_stage: LimitStageOption = None,
    output: OutputOption = Path("tuned.yaml"),
    trace_dir: TraceDirOption = None,
    report: ReportOption = None,
    vm: VmOption = True,
    runtime: Annotated[RuntimeName, RUNTIME_OPTION] = "cni",
    workload: WorkloadOption = None,
    slo_p99: SloOption = None,
    lifetime_s: Annotated[float | None, LIFETIME_OPTION] = None,
    window_s: WindowOption = None,
) -> None:
    """Root: calibrate this node, search pools and limits on its model, run the
    best candidates and the baseline for real, and write the config that was
    measured faster than the baseline (and none otherwise).

    With --workload and --slo-p99: the config that met the SLO for real on
    that traffic at the least memory held by idle pooled devices.
    """
    from ._render_node import RichProgress
    from .optimizers import DEFAULT_STAGES
    from .workflows import DEFAULT_WINDOW_S, tune, tune_traffic

    traffic = workload is not None or slo_p99 is not None
    if traffic:
        workload_starts, slo_s = _traffic_options(
            workload=workload,
            slo_p99=slo_p99,
            sandboxes=sandboxes,
            lifetime_s=lifetime_s,
            window_s=window_s,
        )
    else:
        for name, value in (("lifetime-s", lifetime_s), ("window-s", window_s)):
            if value is not None:
                raise ConfigError(f"{name}: goes with --workload")
    sandboxes = 150 if sandboxes is None else sandboxes
    _check_options(
        sandboxes=2 if traffic else sandboxes,
        trials=trials,
        candidates=candidates,
        repeats=repeats,
        plan_sandboxes=plan_sandboxes,
        plan_runs=plan_runs,
        profile=profile,
        measured_ops=measured_ops,
        output=output,
        report=report,
        trace_dir=trace_dir,
    )
    # What both loops take, every option checked before the first storm.
    loop = {
        "trials": trials,
        "candidates": candidates,
        "repeats": repeats,
        "profile_path": profile,
        "measured_ops": measured_ops,
        "plan_sandboxes": plan_sandboxes,
        "plan_runs": plan_runs,
        "pool_kinds": split_names("pool_kind", pool_kind) or None,
        "limit_stages": split_names("limit_stage", limit_stage) or tuple(DEFAULT_STAGES),
        "output": output,
        "trace_dir": trace_dir,
        "report": report,
        "vm": vm,
        "progress": RichProgress(terminal_console()),
        "runtime": runtime,
    }
    with named_as_options({"limit_stages": "limit_stage", "pool_kinds": "pool_kind"}):
        if traffic:
            tune_traffic(
                workload=workload_starts,
                slo_p99_s=slo_s,
                lifetime_s=lifetime_s,
                window_s=DEFAULT_WINDOW_S if window_s is None else window_s,
                **loop,  # type: ignore[arg-type]
            )
        else:
            tune(sandboxes=sandboxes, **loop)  # type: ignore[arg-type]


def _traffic_options(
    *,
    workload: Path | None,
    slo_p99: str | None,
    sandboxes: int | None,
    lifetime_s: float | None,
    window_s: float | None,
) -> tuple[Workload, float]:
    """``--workload W --slo-p99 S``'s own options, checked, and the workload
    read: its starts and the SLO in seconds."""
    from ._options import check_finite, load_workload, testbed_arrivals
    from ._units import parse_seconds
    from .optimizers import MAX_SLO_S
    from .validation.testbed.options import MAX_SCHEDULE_S

    if workload is None:
        raise ConfigError("slo-p99: goes with --workload (the SLO of that traffic)")
    if slo_p99 is None:
        raise ConfigError("slo-p99: --workload needs the p99 startup to meet (--slo-p99 15s)")
    slo_s = parse_seconds("slo_p99", slo_p99)
    if not 0 < slo_s <= MAX_SLO_S:
        raise ConfigError(f"slo_p99: must be a duration > 0 and at most a day, but got {slo_p99!r}")
    check_finite("lifetime_s", lifetime_s, low=0.0, high=MAX_SCHEDULE_S)
    check_finite("window_s", window_s, low=1e-3, high=MAX_SCHEDULE_S)
    if sandboxes is not None:
        raise ConfigError(
            f"sandboxes: {sandboxes} given with --workload (its starts are the storm: "
            "leave --sandboxes out)"
        )
    testbed_arrivals(workload, None)  # a schedule the testbed can run, or one line
    return load_workload("workload", workload), slo_s


#: Most TPE trials of tune's search on the model (--trials): 60 is the
#: default and a trial is a simulated storm (ms to s); 10**20 was taken.
MAX_TUNE_TRIALS = 100_000
#: Most candidates or rounds of real storms (each a storm of up to a minute).
MAX_TUNE_RUNS = 100


def _check_options(
    *,
    sandboxes: int,
    trials: int,
    candidates: int,
    repeats: int,
    plan_sandboxes: int | None,
    plan_runs: int,
    profile: Path | None,
    measured_ops: Path | None,
    output: Path,
    report: Path | None,
    trace_dir: Path | None,
) -> None:
    """Every option checked before the node is calibrated (the first storm):
    --trials 10**20, a plan of 0 sandboxes or an output with no folder
    were found after the calibration storms, or never."""
    from ._io import check_output_path
    from ._options import check_count, check_input_file, check_output_dir, max_testbed_sandboxes

    check_count("sandboxes", sandboxes, low=2, high=max_testbed_sandboxes())
    check_count("trials", trials, low=1, high=MAX_TUNE_TRIALS)
    check_count("candidates", candidates, low=1, high=MAX_TUNE_RUNS)
    check_count("repeats", repeats, low=1, high=MAX_TUNE_RUNS)
    check_count("plan_sandboxes", plan_sandboxes, low=4, high=max_testbed_sandboxes())
    check_count("plan_runs", plan_runs, low=1, high=MAX_TUNE_RUNS)
    check_input_file("profile", profile)
    check_input_file("measured_ops", measured_ops)
    check_output_path("output", output)
    if report is not None:
        check_output_path("report", report)
    check_output_dir("trace_dir", trace_dir)
