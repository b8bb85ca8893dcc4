"""``bootstorm demo``: all of bootstorm on embedded defaults, in under two minutes.

The default storm (400 ipvtap sandboxes on the seed-000 host), its what-ifs,
full device pooling, a small search for per-stage limits on top of the
pools, the tuned storm simulated, ``tuned.yaml`` and ``report.html``
written, and a before/after table — nothing to start, nothing to download.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ._api import simulate
from ._io import shown_text, write_atomically
from ._render import comparison_table, print_caution, print_identification, result_tables
from .models import ConfigError, Scenario

__all__ = ["run_demo"]


def run_demo(
    console: Console, *, sandboxes: int, trials: int, output_dir: Path, report: bool = True
) -> None:
    import optuna

    from ._render_optimize import config_summary
    from .optimizers import SearchSpace, StudySpec, optimize
    from .report import write_report

    base = Scenario(cni="ipvtap", sandboxes=sandboxes, profile="paper-000")
    # Where the results go is checked before the storms and the search run.
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"output_dir: cannot make {shown_text(str(output_dir))} ({reason})"
        ) from None
    n = base.sandboxes
    result = simulate(base)
    console.print(result_tables(base, result))

    pooled = base.replace(pools={"netns": n, "vport": 1, "ipvtap": n})
    what_ifs = [
        ("ipvtap (default)", base),
        ("no network", base.replace(cni="no-network")),
        ("veth", base.replace(cni="veth")),
        ("ipvtap + 2 QoS rules", base.replace(qos_rules=2)),
        ("ipvtap, all devices pooled", pooled),
    ]
    rows = [(label, result if s == base else simulate(s)) for label, s in what_ifs]
    console.print(comparison_table(f"what-ifs, {n} sandboxes", rows))
    print_caution(console, *(s for _, s in what_ifs))

    # Per-stage limits on top of the pools (seed 000 §5.2 + §5.1): a small TPE search.
    from .models import load_profile

    space = SearchSpace.default(cni=pooled.cni, sandboxes=n, profile=load_profile(pooled.profile))
    spec = StudySpec(scenario=pooled, space=space, trials=trials, storage=None, study_name="demo")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with Progress(
        TextColumn("[bold]searching per-stage limits"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as progress:
        task = progress.add_task("search", total=trials, best="")

        def on_trial(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
            values = [t.value for t in study.trials if t.value is not None]
            best = f"best makespan {min(values):.2f} s" if values else ""
            progress.update(task, completed=len(values), best=best)

        found = optimize(spec, callbacks=[on_trial])
    # The whole config (the pools and the limits found on them): applied to the
    # default storm, as a node agent applies it, it is the storm the search predicted.
    tuned_config = found.tuned_config()
    tuned = base.replace(config=tuned_config)
    tuned_result = simulate(tuned, record=True)
    final = [
        ("ipvtap (default)", result),
        ("pooled", rows[-1][1]),
        ("pooled + tuned limits", tuned_result),
    ]
    console.print(comparison_table("before / after", final))
    console.print(config_summary(tuned_config), soft_wrap=True)
    known = print_caution(console, tuned)
    unidentified = print_identification(console, tuned, result=tuned_result)
    config_path = output_dir / "tuned.yaml"
    write_atomically(config_path, tuned_config.to_yaml())
    console.print(f"tuned config written to [bold]{config_path}[/] (PUT it to a node agent)")
    if report:
        report_path = output_dir / "report.html"
        write_report(
            report_path,
            title=f"{n} × ipvtap on paper-000, pooled, tuned limits",
            recording=tuned_result.recording,
            result=tuned_result,
            unidentified=unidentified,
            facts=[
                ("before (default)", f"{result.makespan_s:.2f} s"),
                ("pooled", f"{rows[-1][1].makespan_s:.2f} s"),
                ("limits", ", ".join(f"{k}={v}" for k, v in tuned_config.limits.items())),
                ("pools", ", ".join(f"{k}={v}" for k, v in tuned_config.pools.items())),
            ],
            caveats=known,
        )
        console.print(f"report written to [bold]{report_path}[/] (opens offline)")
