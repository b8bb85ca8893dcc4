"""``bootstorm validate``: a model of this host against a real storm, or
whether the model ranks tuned configs as the host does (``--candidates``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._io import check_output_path, terminal_console
from ._options import (
    CNI_WRAPPER_OPTION,
    EXECUTOR_OPTION,
    LIFETIME_OPTION,
    RUNTIME_OPTION,
    RuntimeName,
    check_cni_wrapper,
    check_finite,
    default_help,
    testbed_arrivals,
)
from ._params import refuse_given
from .models import ConfigError
from .simulator import ExecutorName

if TYPE_CHECKING:
    from .workflows import CandidateValidation

__all__ = ["validate_cmd"]


#: Sandboxes of the storm when neither --sandboxes nor --workload says.
DEFAULT_SANDBOXES = 100
SandboxesOption = Annotated[
    int | None,
    typer.Option(
        help=f"Sandboxes the testbed starts at once [default: {DEFAULT_SANDBOXES}]; with "
        "--workload, its starts (leave it out or give their number).",
        show_default=False,
    ),
]
ConfigOption = Annotated[
    Path | None, typer.Option(help="Tuned config: stage limits and pools, both sides.")
]
CandidatesOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Rank tuned configs instead: [NAME=]FILE, repeat (NAME: the file's stem if "
        "left out). Runs --repeats storms of each, interleaved (each round every "
        "candidate once, in a shuffled order), or reads --measured-dir; prints measured "
        "against predicted per candidate and the Spearman of the two rankings."
    ),
]
BaselineOption = Annotated[
    bool,
    typer.Option(
        "--baseline/--no-baseline",
        help="With --candidates: rank the storm without a config too, as 'baseline'.",
    ),
]
ProfileOption = Annotated[
    Path | None,
    typer.Option(
        help="The node's fitted profile YAML."
        + default_help("fitted first, to --calibrate-from or to calibration storms")
    ),
]
CalibrateFromOption = Annotated[
    list[Path] | None,
    typer.Option(
        help="Fit the node's profile to this recorded storm first (repeat: several runs)."
    ),
]
MeasuredOption = Annotated[
    list[Path] | None,
    typer.Option(
        help="Compare this recorded storm instead of running one (repeat: several runs "
        "of one storm, pooled; the makespan is their median)."
    ),
]
MeasuredDirOption = Annotated[
    Path | None,
    typer.Option(
        help="With --candidates: compare the runs recorded here instead of running any "
        "(DIR/<candidate>-run<k>.jsonl.gz, as --trace-dir writes them; every run found)."
    ),
]
RepeatsOption = Annotated[
    int | None,
    typer.Option(
        help="Run the storm this many times and compare the median."
        + default_help("1; 3 per candidate with --candidates")
    ),
]
CalibrationSandboxesOption = Annotated[
    int | None,
    typer.Option(
        help="Without --profile or --calibrate-from: the size of the storms the node's "
        "profile is fitted to first, without the config." + default_help("half of --sandboxes")
    ),
]
CalibrationRunsOption = Annotated[
    int, typer.Option(help="Without --profile or --calibrate-from: how many of them.")
]
TraceOption = Annotated[Path | None, typer.Option(help="Write the measured storm here.")]
TraceDirOption = Annotated[
    Path | None,
    typer.Option(
        help="With --candidates: write every run's trace as "
        "DIR/<candidate>-run<k>.jsonl.gz (k from 1), as each storm ends."
    ),
]
ThresholdOption = Annotated[
    float,
    typer.Option(
        help="Exit 1 if makespan, mean or p99 is off by more (0.15 = 15%); with "
        "--candidates: if any candidate's makespan is."
    ),
]
MinSpearmanOption = Annotated[
    float,
    typer.Option(
        help="With --candidates: exit 1 if the Spearman of predicted against measured "
        "makespan is lower, or undefined (the model predicts them all equal)."
    ),
]
VmOption = Annotated[bool, typer.Option("--vm/--no-vm", help="QEMU microVMs in StartVM.")]
AgentOption = Annotated[
    str | None, typer.Option(help="Admit the testbed's stages through this node agent.")
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(help="The agent's bearer token." + default_help("$BOOTSTORM_AGENT_TOKEN")),
]
AsJsonOption = Annotated[bool, typer.Option("--json", help="One JSON object.")]
WorkloadOption = Annotated[
    Path | None,
    typer.Option(
        help="Start the storm's sandboxes on this workload's schedule (bootstorm workload -o; "
        "one sandbox per start) and compare it as traffic: p99 per 60-s window, empty-pool "
        "takes, idle pooled device-seconds."
    ),
]
LifetimeOption = Annotated[float | None, LIFETIME_OPTION]
ReportOption = Annotated[
    Path | None,
    typer.Option(
        help="With --candidates: an HTML report of each candidate's settings, every run "
        "against the prediction, the ranking and the stages measured beside predicted."
    ),
]


def validate_cmd(
    sandboxes: SandboxesOption = None,
    config: ConfigOption = None,
    candidates: CandidatesOption = None,
    baseline: BaselineOption = True,
    profile: ProfileOption = None,
    calibrate_from: CalibrateFromOption = None,
    measured: MeasuredOption = None,
    measured_dir: MeasuredDirOption = None,
    repeats: RepeatsOption = None,
    calibration_sandboxes: CalibrationSandboxesOption = None,
    calibration_runs: CalibrationRunsOption = 3,
    trace: TraceOption = None,
    trace_dir: TraceDirOption = None,
    threshold: ThresholdOption = 0.15,
    min_spearman: MinSpearmanOption = 0.9,
    vm: VmOption = True,
    agent: AgentOption = None,
    token_file: TokenFileOption = None,
    as_json: AsJsonOption = False,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
    runtime: Annotated[RuntimeName, RUNTIME_OPTION] = "cni",
    workload: WorkloadOption = None,
    lifetime_s: LifetimeOption = None,
    report: ReportOption = None,
    cni_wrapper: Annotated[str, CNI_WRAPPER_OPTION] = "none",
) -> None:
    """Run the storm on this host (root), simulate it, print predicted vs measured.

    With --workload: the storm starts on the workload's schedule, and is
    compared as traffic (p99 per window, empty-pool starts, pooled memory).

    With --candidates: whether the model ranks tuned configs as this host
    does. Run them here (root), or give --measured-dir DIR (no root) with
    --profile or --calibrate-from.
    """
    from ._render_node import (
        RichProgress,
        candidate_validation_records,
        print_candidate_validation,
        print_storm_validation,
    )
    from .workflows import (
        SilentProgress,
        check_profile_source,
        check_validate_options,
        identification,
        validate_candidates,
        validate_storm,
    )

    arrival_s = None
    if workload is not None:
        from .validation.testbed.options import MAX_SCHEDULE_S

        check_finite("lifetime-s", lifetime_s, low=0.0, high=MAX_SCHEDULE_S)
        if candidates:
            raise ConfigError("workload: not with --candidates (one config on a schedule)")
        if measured or measured_dir is not None:
            raise ConfigError(
                "workload: not with --measured (a recorded storm brings its own schedule: "
                "--measured alone compares one recorded on a workload as traffic)"
            )
        arrival_s = testbed_arrivals(workload, sandboxes)
        sandboxes = len(arrival_s)
    elif lifetime_s is not None:
        raise ConfigError("lifetime-s: goes with --workload")
    if measured:
        refuse_given(
            "not with --measured (the recorded storms are read, as many as given, each with "
            "its size)",
            (("sandboxes", sandboxes), ("repeats", repeats)),
        )
    if sandboxes is None:
        sandboxes = DEFAULT_SANDBOXES
    if report is not None:
        if not candidates:
            raise ConfigError("report: goes with --candidates (a ranking of configs)")
        check_output_path("report", report)
    check_cni_wrapper(cni_wrapper, agent=agent)
    check_validate_options(
        candidates=candidates,
        config=config,
        measured=measured,
        measured_dir=measured_dir,
        trace=trace,
        trace_out=trace_dir,
        agent=agent,
    )
    # Which profile, before any file is opened: two sources is the line to see.
    reads = "--measured-dir" if measured_dir is not None else "--measured" if measured else None
    check_profile_source(profile, calibrate_from, reads)
    _check_options(
        sandboxes=sandboxes,
        repeats=repeats,
        calibration_sandboxes=calibration_sandboxes,
        calibration_runs=calibration_runs,
        threshold=threshold,
        min_spearman=min_spearman,
        agent=agent,
        token_file=token_file,
        trace=trace,
        files={
            "config": [config] if config is not None else [],
            "profile": [profile] if profile is not None else [],
            "calibrate_from": list(calibrate_from or ()),
            "measured": list(measured or ()),
        },
        runs_storms=not measured and measured_dir is None,
    )
    console = terminal_console()
    # --json prints one object: no progress lines around it.
    progress = SilentProgress() if as_json else RichProgress(console)
    if candidates:
        ranked = validate_candidates(
            candidates=candidates,
            baseline=baseline,
            sandboxes=sandboxes,
            repeat=3 if repeats is None else repeats,
            profile=profile,
            calibrate_from=calibrate_from,
            measured_dir=measured_dir,
            trace_out=trace_dir,
            threshold=threshold,
            min_spearman=min_spearman,
            vm=vm,
            calibration_sandboxes=calibration_sandboxes,
            calibration_runs=calibration_runs,
            executor=executor,
            runtime=runtime,
            progress=progress,
        )
        if as_json:
            sys.stdout.write(json.dumps(candidate_validation_records(ranked)) + "\n")
        else:
            print_candidate_validation(console, ranked)
        if report is not None:
            _write_candidates_report(report, ranked, quiet=as_json, console=console)
        if not ranked.within:
            raise typer.Exit(1)
        return
    outcome = validate_storm(
        sandboxes=sandboxes,
        config=config,
        profile=profile,
        calibrate_from=calibrate_from,
        measured=measured,
        trace_out=trace,
        threshold=threshold,
        vm=vm,
        agent=agent,
        token_file=token_file,
        repeat=1 if repeats is None else repeats,
        calibration_sandboxes=calibration_sandboxes,
        calibration_runs=calibration_runs,
        executor=executor,
        runtime=runtime,
        progress=progress,
        arrival_s=arrival_s,
        lifetime_s=lifetime_s,
        cni_wrapper=cni_wrapper,
    )
    if as_json:
        sys.stdout.write(json.dumps(outcome.to_dict()) + "\n")
    else:
        found = identification(outcome.scenario, profile=outcome.profile)
        print_storm_validation(console, outcome, found)
    if outcome.failed:
        raise typer.Exit(1)


#: Most storms of one validation (--repeats, --calibration-runs): each is a real
#: storm of up to a minute, per candidate; a hundred is hours already.
MAX_VALIDATE_RUNS = 100
#: Largest --threshold (a relative error). A huge one is how a caller says
#: "never fail on the error, rank only" (the tests pass 1000); past a million
#: it can only be a typo or an overflow.
MAX_THRESHOLD = 1e6


def _check_options(
    *,
    sandboxes: int,
    repeats: int | None,
    calibration_sandboxes: int | None,
    calibration_runs: int,
    threshold: float,
    min_spearman: float,
    agent: str | None,
    token_file: Path | None,
    trace: Path | None,
    files: dict[str, list[Path]],
    runs_storms: bool,
) -> None:
    """Every option checked before the first (calibration) storm: a size of
    0 or 10**9, a NaN Spearman, an agent's empty URL, a FIFO as its token
    file or a trace with no folder were found only after minutes of storms."""
    from ._options import (
        check_count,
        check_finite,
        check_input_file,
        check_url,
        max_testbed_sandboxes,
    )

    if runs_storms:
        check_count("sandboxes", sandboxes, low=1, high=max_testbed_sandboxes())
    check_count("repeats", repeats, low=1, high=MAX_VALIDATE_RUNS)
    check_count("calibration_runs", calibration_runs, low=1, high=MAX_VALIDATE_RUNS)
    check_count("calibration_sandboxes", calibration_sandboxes, low=2, high=max_testbed_sandboxes())
    check_finite("threshold", threshold, low=0.0, high=MAX_THRESHOLD)
    check_finite("min_spearman", min_spearman, low=-1.0, high=1.0)
    check_url("agent", agent)
    if token_file is not None:
        # Read now (bounded, one token, never echoed), not after the
        # calibration storms; agent_admission reads it again for the storm.
        from .traces.files import read_token_file

        read_token_file(token_file, field="token_file")
    if trace is not None:
        check_output_path("trace", trace)
    for field, paths in files.items():
        for path in paths:
            check_input_file(field, path)


def _write_candidates_report(
    path: Path, ranked: CandidateValidation, *, quiet: bool, console: Any
) -> None:
    """``validate --candidates --report``: the ranking as ``tune --report`` shows it."""
    from .report import write_report

    c = ranked.comparison
    write_report(
        path,
        title=f"bootstorm validate: {len(c.rows)} configs at {c.sandboxes} sandboxes",
        facts=[
            ("runs per config", str(c.repeats)),
            ("Spearman (makespan)", f"{c.spearman_makespan:+.2f}"),
            ("Spearman (mean startup)", f"{c.spearman_mean:+.2f}"),
            ("measured best", c.measured_best.name),
            ("predicted best", c.predicted_best.name),
        ],
        candidates=c.rows,
    )
    if not quiet:
        console.print(f"report written to [bold]{path}[/]")
