"""``bootstorm optimize``: search limits and pools, write a tuned config.

Registered on the app in :mod:`bootstorm.cli`; bad input raises
:class:`~bootstorm.models.ConfigError`, which the entry point turns into one
line and exit code 2.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._io import terminal_console, write_atomically
from ._options import EXECUTOR_OPTION
from ._units import parse_int_list, parse_mib, parse_seconds
from .models import ConfigError
from .simulator import ExecutorName

if TYPE_CHECKING:
    from optuna.study import Study
    from optuna.trial import FrozenTrial
    from rich.console import Console

    from .models import Scenario, TunedConfig

__all__ = ["optimize_cmd"]


DEFAULT_STORAGE = "default"
"""``--storage``'s default: the Optuna journal file :func:`default_study_storage`
names. A journal costs a trial a tenth of the simulation where SQLite cost
six times it; ``sqlite:///study.db`` still opens a study kept there before."""


def default_study_storage() -> Path:
    """The journal file every study of this user goes to unless ``--storage`` says
    otherwise: ``$XDG_STATE_HOME/bootstorm/studies.log`` (``~/.local/state/...``).

    Not the working directory: a search run from a notebook's folder, a
    checkout or ``/tmp`` is found again by the next one, and nothing lands
    beside the user's files unasked. Studies in it are told apart by name.
    """
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "bootstorm" / "studies.log"


def _names(field: str, text: str | None, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if text.strip() == "all":
        return allowed
    for n in names:
        if n not in allowed:
            raise ConfigError(f"{field}: unknown name {n!r}; known: {', '.join(allowed)}")
    if not names:
        raise ConfigError(f"{field}: expected comma-separated names, but got {text!r}")
    return names


def optimize_cmd(
    scenario_file: Annotated[
        Path | None, typer.Option("--scenario", help="Scenario YAML; options override it.")
    ] = None,
    profile: Annotated[str | None, typer.Option(help="Calibration profile name or path.")] = None,
    cni: Annotated[str | None, typer.Option(help="The CNI of the storm.")] = None,
    sandboxes: Annotated[int | None, typer.Option(help="Sandboxes started at once.")] = None,
    trials: Annotated[
        int, typer.Option(help="Completed trials the study should hold, over all its workers.")
    ] = 100,
    objective: Annotated[
        list[str] | None,
        typer.Option(help="makespan, mean, p99 or memory; twice for a Pareto front."),
    ] = None,
    sampler: Annotated[str, typer.Option(help="tpe, gp, cmaes, nsga2 or random.")] = "tpe",
    memory_budget: Annotated[
        str | None, typer.Option(help="Pooled memory at most this (8GiB, 512MiB).")
    ] = None,
    p99_slo: Annotated[str | None, typer.Option(help="p99 startup at most this (15s).")] = None,
    stages: Annotated[
        str | None, typer.Option(help="Stages to limit, comma-separated (default: seed 000's 4).")
    ] = None,
    pools: Annotated[
        str | None, typer.Option(help="Device kinds whose pool sizes to search, or 'all'.")
    ] = None,
    seeds: Annotated[str | None, typer.Option(help="Seeds every trial runs, e.g. 0,1,2.")] = None,
    sizes: Annotated[
        str | None, typer.Option(help="Storm sizes every trial runs, e.g. 200,400,600.")
    ] = None,
    robust: Annotated[str, typer.Option(help="Aggregate over storms: mean or worst.")] = "mean",
    storage: Annotated[
        str,
        typer.Option(
            help="A journal file (default: ~/.local/state/bootstorm/studies.log), "
            "a database URL (postgresql://..., sqlite:///...) or 'memory'."
        ),
    ] = DEFAULT_STORAGE,
    study_name: Annotated[str | None, typer.Option(help="Study name; workers share it.")] = None,
    output: Annotated[Path, typer.Option(help="Write the tuned config here.")] = Path("tuned.yaml"),
    jobs: Annotated[int, typer.Option(help="Worker processes on this machine.")] = 1,
    sampler_seed: Annotated[
        int, typer.Option(help="Seed of the sampler; each worker adds its first trial's number.")
    ] = 0,
    heartbeat_s: Annotated[
        int, typer.Option(help="Trial heartbeat; a trial silent 3x this long is retried.")
    ] = 10,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
) -> None:
    """Search per-stage concurrency limits (and pool sizes) that shorten the storm."""
    console = terminal_console()
    import optuna
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ._render import print_caution, print_identification
    from ._render_optimize import before_after_table, config_summary, config_table, pareto_table
    from .models import Scenario, load_profile, scenario_pool_kinds, scenario_stages
    from .optimizers import Constraints, Metrics, SearchSpace, StudySpec, optimize
    from .workflows import identification, known_misses

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)
    base = Scenario.from_yaml(scenario_file) if scenario_file is not None else Scenario()
    given = {"profile": profile, "cni": cni, "sandboxes": sandboxes}
    base = base.replace(**{k: v for k, v in given.items() if v is not None})
    size_list = parse_int_list("sizes", sizes) if sizes else ()
    space = SearchSpace.default(
        cni=base.cni,
        sandboxes=max((*size_list, base.sandboxes)),
        profile=load_profile(base.profile),
        stages=_names("stages", stages, scenario_stages(base.cni)),
        pool_kinds_searched=_names("pools", pools, scenario_pool_kinds(base.cni)) or (),
    )
    if storage == DEFAULT_STORAGE:
        journal = default_study_storage()
        try:
            journal.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(
                f"storage: cannot make {str(journal.parent)!r} ({e.strerror}); "
                "name a journal file with --storage"
            ) from None
        storage = str(journal)
    spec = StudySpec(
        scenario=base,
        space=space,
        objectives=tuple(objective or ("makespan",)),
        sampler=sampler,
        trials=trials,
        seeds=parse_int_list("seeds", seeds) if seeds else (),
        sizes=size_list,
        robust=robust,  # checked by the evaluator
        constraints=Constraints(
            memory_budget_mib=parse_mib("memory_budget", memory_budget) if memory_budget else None,
            p99_slo_s=parse_seconds("p99_slo", p99_slo) if p99_slo else None,
        ),
        storage=None if storage == "memory" else storage,
        study_name=study_name,
        sampler_seed=sampler_seed,
        heartbeat_interval_s=heartbeat_s,
        executor=executor,
    )
    spec.evaluator()  # bad seeds, sizes or robust fail here, before the study is made

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as progress:
        task = progress.add_task(f"optimize {spec.study_name}", total=trials, best="")

        # Completed trials already looked at (this worker's and the others'), and
        # the best feasible value among them: each trial is judged once, not
        # once per later trial (that was 45 000 judgements in 300 trials).
        judged: set[int] = set()
        best_value = [math.inf]
        ran_here = [0]

        def on_trial(study: Study, trial: FrozenTrial) -> None:
            ran_here[0] += 1
            done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            best = ""
            if len(spec.objectives) == 1:
                for t in done:
                    if t.number in judged:
                        continue
                    judged.add(t.number)
                    if t.value is not None and spec.constraints.feasible(
                        Metrics(**t.user_attrs["metrics"])
                    ):
                        best_value[0] = min(best_value[0], t.value)
                if best_value[0] < math.inf:
                    best = f"best {spec.objectives[0]} {best_value[0]:.3f}"
            progress.update(task, completed=min(len(done), trials), best=best)

        result = optimize(spec, jobs=jobs, callbacks=[on_trial])

    console.print(
        f"study [bold]{spec.study_name}[/] in {storage}: {result.completed} completed trials, "
        f"{result.feasible} feasible"
    )
    if ran_here[0] == 0 and jobs == 1:
        # Resumed a finished study: say so, rather than show its old answer as new.
        console.print(
            f"[yellow]note: the study already held {result.completed} completed trials, so "
            f"none ran now; --trials {trials + 100} searches 100 more, or choose another "
            "--study-name[/]"
        )
    if not result.best:
        raise ConfigError(
            "constraints: no trial met the memory budget and p99 SLO; "
            "relax them or search more trials"
        )
    chosen = result.best[0]
    if len(spec.objectives) > 1:
        console.print(pareto_table(result))
        console.print(
            f"writing the front's best {spec.objectives[0]} point (trial {chosen.number})"
        )
    # The whole config a node takes: the storm's own limits, pools and RTNL
    # priority under the searched values, and what it predicts for this storm.
    tuned_config = result.tuned_config(chosen)
    console.print(config_table(tuned_config))
    console.print(before_after_table(result, chosen))
    console.print(config_summary(tuned_config), soft_wrap=True)
    predicted = tuned_config.origin.predicted if tuned_config.origin is not None else {}
    if predicted:
        console.print(
            f"predicted for {base.sandboxes} × {base.cni} (seed {base.seed}) with it: "
            f"makespan {predicted['makespan_s']:.2f} s, startup mean {predicted['mean_s']:.2f} s, "
            f"p99 {predicted['p99_s']:.2f} s",
            soft_wrap=True,
        )
    tuned = base.replace(config=tuned_config)
    print_caution(console, known_misses(tuned))
    print_identification(console, identification(tuned))
    _print_decision(console, base, tuned_config)
    write_atomically(output, tuned_config.to_yaml())
    console.print(
        f"tuned config written to [bold]{output}[/] — apply it with "
        f"`bootstorm simulate --config {output}`"
    )


def _print_decision(console: Console, base: Scenario, config: TunedConfig) -> None:
    """Flag the chosen config if its gain over the baseline changes sign
    along a cost the profile never identified: the model cannot decide it."""
    from rich.markup import escape

    from .calibration.identify import decision_cautions
    from .models import load_profile

    flags = decision_cautions(
        {"the tuned config": base.replace(config=config)},
        baseline=base,
        profile=load_profile(base.profile),
    )
    for f in flags:
        console.print(f"[yellow]caution: {escape(f.line())}[/]")
