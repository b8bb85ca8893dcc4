"""``bootstorm optimize``: search limits and pools, write a tuned config.

Registered on the app in :mod:`bootstorm.cli`; bad input raises
:class:`~bootstorm.models.ConfigError`, which the entry point turns into one
line and exit code 2.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._io import check_output_path, terminal_console, write_atomically
from ._options import (
    EXECUTOR_OPTION,
    LIFETIME_OPTION,
    check_count,
    check_finite,
    default_help,
    named_as_options,
    split_names,
)
from ._params import parse_seeds
from ._units import parse_int_list, parse_mib, parse_seconds
from .models import ConfigError
from .models.scenario import MAX_ARRIVAL_S
from .simulator import ExecutorName
from .workflows.search import DEFAULT_STORAGE

if TYPE_CHECKING:
    from .models import Scenario
    from .optimizers import StudySpec

__all__ = ["optimize_cmd"]

#: ``--jobs``: worker processes per core at most (each runs the compiled
#: simulator on all cores already; more only queue).
MAX_JOBS_PER_CORE = 4


ScenarioFileOption = Annotated[
    Path | None,
    typer.Argument(
        metavar="SCENARIO",
        help="A scenario file (or an installed example's name); options override it.",
    ),
]
ProfileOption = Annotated[
    str | None,
    typer.Option(help="Calibration profile name or YAML path." + default_help("profile")),
]
CniOption = Annotated[str | None, typer.Option(help="The CNI of the storm." + default_help("cni"))]
SandboxesOption = Annotated[
    str | None,
    typer.Option(
        help="Sandboxes started at once; several (e.g. 200,400,600): every trial runs each."
        + default_help("sandboxes"),
    ),
]
TrialsOption = Annotated[
    int, typer.Option(help="Completed trials the study should hold, over all its workers.")
]
ObjectiveOption = Annotated[
    list[str] | None,
    typer.Option(
        help="makespan, mean, p99 or memory; twice for a Pareto front."
        + default_help("makespan; memory and p99 with --workload"),
    ),
]
SamplerOption = Annotated[str, typer.Option(help="tpe, gp, cmaes, nsga2 or random.")]
MemoryBudgetOption = Annotated[
    str | None, typer.Option(help="Pooled memory at most this (8GiB, 512MiB).")
]
SloP99Option = Annotated[
    str | None, typer.Option("--slo-p99", help="p99 startup at most this (15s, 800ms).")
]
WorkloadOption = Annotated[
    Path | None,
    typer.Option(
        help="Search on this workload's starts (bootstorm workload --output) instead of a "
        "storm released at once: pools refill while starts go on, and the search chooses "
        "their targets, refill workers and whether the targets follow the start rate "
        "(objectives memory and p99; with --slo-p99: the least memory that meets it)."
    ),
]
LimitStageOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Stages whose concurrency limits to search (repeat, or comma-separated)."
        + default_help("AddCNI, Cgroup, AttachIf, StartVM"),
    ),
]
PoolKindOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Device kinds whose pool sizes to search (repeat, or comma-separated), or 'all'."
        + default_help("none; all with --workload"),
    ),
]
SeedsOption = Annotated[
    str | None,
    typer.Option(
        help="Seeds every trial runs, e.g. 0,1,2, 1001-1010 or 1-3,7."
        + default_help("the scenario's seed"),
    ),
]
RobustOption = Annotated[str, typer.Option(help="Aggregate over storms: mean or worst.")]
StorageOption = Annotated[
    str | None,
    typer.Option(
        help="A journal file, a database URL (postgresql://..., sqlite:///...) or 'memory'."
        + default_help("~/.local/state/bootstorm/studies.log"),
    ),
]
StudyNameOption = Annotated[str | None, typer.Option(help="Study name; workers share it.")]
OutputOption = Annotated[Path, typer.Option("-o", "--output", help="Write the tuned config here.")]
JobsOption = Annotated[int, typer.Option(help="Worker processes on this machine.")]
SamplerSeedOption = Annotated[
    int, typer.Option(help="Seed of the sampler; each worker adds its first trial's number.")
]
HeartbeatSOption = Annotated[
    int, typer.Option(help="Trial heartbeat; a trial silent 3x this long is retried.")
]


def optimize_cmd(
    scenario_file: ScenarioFileOption = None,
    profile: ProfileOption = None,
    cni: CniOption = None,
    sandboxes: SandboxesOption = None,
    trials: TrialsOption = 100,
    objective: ObjectiveOption = None,
    sampler: SamplerOption = "tpe",
    memory_budget: MemoryBudgetOption = None,
    slo_p99: SloP99Option = None,
    limit_stage: LimitStageOption = None,
    pool_kind: PoolKindOption = None,
    seeds: SeedsOption = None,
    robust: RobustOption = "mean",
    storage: StorageOption = None,
    study_name: StudyNameOption = None,
    output: OutputOption = Path("tuned.yaml"),
    jobs: JobsOption = 1,
    sampler_seed: SamplerSeedOption = 0,
    heartbeat_s: HeartbeatSOption = 10,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
    workload: WorkloadOption = None,
    lifetime_s: Annotated[float | None, LIFETIME_OPTION] = None,
) -> None:
    """Search per-stage concurrency limits (and pool sizes) that shorten the storm.

    With --workload: pool policies and limits for the least memory held that
    meets --slo-p99 on that traffic, and the front of memory against p99.
    """
    from .models import Scenario, load_scenario
    from .optimizers._study import MAX_HEARTBEAT_S
    from .workflows import study_spec

    # Before the search: a config with nowhere to go lost the whole search
    # (all of it, with --storage memory).
    check_output_path("output", output)
    # Workers are processes on this machine: more than a few per core only queue.
    check_count("jobs", jobs, low=1, high=MAX_JOBS_PER_CORE * (os.cpu_count() or 1))
    check_count("heartbeat_s", heartbeat_s, low=1, high=MAX_HEARTBEAT_S)
    quiet_optuna()
    # One size is the storm's; several are every trial's storms (the old --sizes).
    sizes = parse_int_list("sandboxes", sandboxes) if sandboxes is not None else ()
    size = sizes[0] if len(sizes) == 1 else None
    sizes = sizes if len(sizes) > 1 else ()
    base = load_scenario(scenario_file) if scenario_file is not None else Scenario()
    check_finite("lifetime-s", lifetime_s, low=0.0, high=MAX_ARRIVAL_S)
    given = {"profile": profile, "cni": cni, "sandboxes": size, "lifetime_s": lifetime_s}
    base = base.replace(**{k: v for k, v in given.items() if v is not None})
    stages = ",".join(split_names("limit_stage", limit_stage)) or None
    pools = ",".join(split_names("pool_kind", pool_kind)) or None
    traffic: dict[str, object] = {}
    if workload is not None:
        base, traffic = _workload_search(base, workload, sandboxes=size, sizes=sizes)
        objective = objective or ["memory", "p99"]
        pools = pools or "all"
    # The spec names its parameters; the user gave options.
    with named_as_options({"stages": "limit_stage", "pools": "pool_kind", "sizes": "sandboxes"}):
        spec = study_spec(
            base,
            trials=trials,
            objectives=tuple(objective or ()),
            sampler=sampler,
            stages=stages,
            pools=pools,
            seeds=parse_seeds(seeds) if seeds is not None else (),
            sizes=sizes,
            robust=robust,
            memory_budget_mib=(
                parse_mib("memory_budget", memory_budget) if memory_budget is not None else None
            ),
            p99_slo_s=parse_seconds("slo_p99", slo_p99) if slo_p99 is not None else None,
            storage=DEFAULT_STORAGE if storage is None else storage,
            study_name=study_name,
            sampler_seed=sampler_seed,
            heartbeat_s=heartbeat_s,
            executor=executor,
            **traffic,  # type: ignore[arg-type]
        )
    _search_and_write(spec, jobs=jobs, output=output)


def _workload_search(
    base: Scenario, path: Path, *, sandboxes: int | None, sizes: tuple[int, ...]
) -> tuple[Scenario, dict[str, object]]:
    """The storm of a workload's starts, and the study options it implies:
    refilling pools, searched up to twice the workload's largest burst."""
    from ._options import load_workload
    from .workflows import workload_scenario, workload_stats

    starts = load_workload("workload", path)
    if sandboxes is not None and sandboxes != len(starts):
        raise ConfigError(
            f"sandboxes: {sandboxes} given with a workload of {len(starts):,} starts "
            "(--workload sets the sandboxes: leave --sandboxes out)"
        )
    if sizes:
        raise ConfigError("sandboxes: one size with --workload, if any (its starts are the storm)")
    burst = workload_stats(starts).burst_max
    return workload_scenario(base, starts), {"refill": True, "max_pool": max(2 * burst, 8)}


def quiet_optuna() -> None:
    """Optuna's INFO line per trial off: the progress bar says as much."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)


def _search_and_write(spec: StudySpec, *, jobs: int, output: Path) -> None:
    """Run the study under a progress bar, print what it chose and write it."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ._render import print_caution, print_identification
    from ._render_optimize import before_after_table, config_summary, config_table, pareto_table
    from .workflows import choose_config, run_search

    console = terminal_console()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as progress:
        task = progress.add_task(f"optimize {spec.study_name}", total=spec.trials, best="")
        run = run_search(
            spec,
            jobs=jobs,
            on_progress=lambda done, best: progress.update(task, completed=done, best=best),
        )
    result = run.result
    console.print(
        f"study [bold]{spec.study_name}[/] in {run.storage}: {result.completed} completed "
        f"trials, {result.feasible} feasible"
    )
    if run.ran_here == 0 and jobs == 1:
        # Resumed a finished study: say so, rather than show its old answer as new.
        console.print(
            f"[yellow]note: the study already held {result.completed} completed trials, so "
            f"none ran now; --trials {spec.trials + 100} searches 100 more, or choose another "
            "--study-name[/]"
        )
    chosen = choose_config(run)
    if len(spec.objectives) > 1:
        console.print(pareto_table(result))
        console.print(
            f"writing the front's best {spec.objectives[0]} point (trial {chosen.trial.number})"
        )
    tuned_config = chosen.tuned_config
    console.print(config_table(tuned_config))
    console.print(before_after_table(result, chosen.trial))
    console.print(config_summary(tuned_config), soft_wrap=True)
    predicted = tuned_config.origin.predicted if tuned_config.origin is not None else {}
    if predicted:
        base = spec.scenario
        console.print(
            f"predicted for {base.sandboxes} × {base.cni} (seed {base.seed}) with it: "
            f"makespan {predicted['makespan_s']:.2f} s, startup mean {predicted['mean_s']:.2f} s, "
            f"p99 {predicted['p99_s']:.2f} s",
        )
    print_caution(console, chosen.known)
    print_identification(console, chosen.identification)
    for f in chosen.decisions:
        console.print(f"[yellow]caution: {escape(f.line())}[/]")
    write_atomically(output, tuned_config.to_yaml())
    console.print(
        f"tuned config written to [bold]{output}[/] — apply it with "
        f"`bootstorm simulate --config {output}`"
    )
