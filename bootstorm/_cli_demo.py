"""``bootstorm demo``: all of bootstorm on embedded defaults, in under two minutes.

The default storm (400 ipvtap sandboxes on the seed-000 host), its what-ifs,
full device pooling, a small search for per-stage limits on top of the
pools, the tuned storm simulated, ``tuned.yaml`` and ``report.html``
written, and a before/after table — nothing to start, nothing to download.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ._api import simulate
from ._io import shown_text, terminal_console, write_atomically
from ._render import comparison_table, print_caution, print_identification, result_tables
from .models import ConfigError, Scenario
from .workflows import WhatIf, known_misses, what_if

__all__ = ["DEMO_TRIALS", "SPREAD_SEEDS", "demo_cmd", "run_demo"]

#: The demo's search: the reference search of the S0-9 rows it is checked
#: against (50 TPE trials), so that the caution under it quotes a search like it.
DEMO_TRIALS = 50
#: The seeds besides the scenario's that show how far the baseline moves by
#: chance alone (the "≈" of the what-if table).
SPREAD_SEEDS = (1, 2, 3, 4)
#: numba's first compile of the simulator on this project's 2-core host (18-28 s
#: for the whole first demo; simulator/fast.py), and the time past which the
#: first storm must have compiled rather than loaded the cache (about 0.5 s).
COMPILE_S = 20
COMPILED_NOW_S = 5.0


#: ``demo --sandboxes``: the demo records its tuned storm on SimPy for the
#: report (400 sandboxes: a second or two); a larger storm is for `simulate`
#: and `optimize`.
MAX_DEMO_SANDBOXES = 10_000
#: ``demo --trials``: the demo is a quick look (50 trials, seconds); a search
#: of thousands is ``bootstorm optimize``, which keeps its study.
MAX_DEMO_TRIALS = 1_000


SandboxesOption = Annotated[
    int, typer.Option(min=1, max=MAX_DEMO_SANDBOXES, help="Sandboxes in the storm.")
]
TrialsOption = Annotated[
    # A quick look: 50 trials (bootstorm._cli_demo.DEMO_TRIALS, the S0-9
    # reference search) take seconds; a real search is `bootstorm optimize`.
    int, typer.Option(min=1, max=MAX_DEMO_TRIALS, help="Trials of the limit search.")
]
OutputDirOption = Annotated[Path, typer.Option(help="Where tuned.yaml and report.html go.")]
ReportOption = Annotated[bool, typer.Option(help="Write report.html.")]


def demo_cmd(
    sandboxes: SandboxesOption = 400,
    trials: TrialsOption = 50,
    output_dir: OutputDirOption = Path("."),
    report: ReportOption = True,
) -> None:
    """The default storm (ipvtap on the seed-000 host), its what-ifs, pooling, a
    small search for per-stage limits; writes tuned.yaml and report.html."""
    run_demo(
        terminal_console(), sandboxes=sandboxes, trials=trials, output_dir=output_dir, report=report
    )


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
    started = time.perf_counter()
    # numba compiles the simulator on the first run after an install (its
    # cache then loads in about 0.5 s): say so before the wait, not after.
    with console.status(
        "simulating the default storm (the first run after an install compiles the "
        f"simulator: about {COMPILE_S} s, once) …"
    ):
        base_what = what_if(base, executor="compiled")
    result = base_what.result
    took_s = time.perf_counter() - started
    if took_s > COMPILED_NOW_S:
        console.print(
            f"[dim]compiled the simulator in {took_s:.0f} s (once per install; "
            "cached for the next run)[/]"
        )
    console.print(result_tables(base_what))

    pooled = base.replace(pools={"netns": n, "vport": 1, "ipvtap": n})
    what_ifs = [
        ("ipvtap (default)", base),
        ("no network", base.replace(cni="no-network")),
        ("veth", base.replace(cni="veth")),
        # ipvtap's pods share one vPort per tenant: its QoS rules are set once,
        # and ovs-vswitchd applies them beside the storm, not in any sandbox's way.
        ("ipvtap + 2 QoS rules (one shared vPort)", base.replace(qos_rules=2)),
        ("ipvtap, all devices pooled", pooled),
    ]
    rows = [
        (label, result if s == base else simulate(s, executor="compiled")) for label, s in what_ifs
    ]
    # What the model cannot tell apart: the same storm on other seeds.
    spread = [result.makespan_s] + [
        simulate(base, seed=seed, executor="compiled").makespan_s for seed in SPREAD_SEEDS
    ]
    console.print(
        comparison_table(f"what-ifs, {n} sandboxes", rows, spread_s=(min(spread), max(spread)))
    )
    print_caution(
        console,
        *(known_misses(s, r) for (_, s), (_, r) in zip(what_ifs, rows, strict=True)),
        labels=[label for label, _ in what_ifs],
    )

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
    tuned_result = simulate(tuned, record=True)  # SimPy: the report's timeline needs spans
    final = [
        ("ipvtap (default)", result),
        ("pooled", rows[-1][1]),
        ("pooled + tuned limits", tuned_result),
    ]
    console.print(comparison_table("before / after", final))
    console.print(config_summary(tuned_config), soft_wrap=True)
    known = print_caution(console, known_misses(tuned, tuned_result))
    # One set of storms at the unidentified costs' ends: the cautions and the tornado.
    tuned_what = WhatIf(scenario=tuned, result=tuned_result, profile=load_profile(tuned.profile))
    unidentified = tuned_what.identification
    print_identification(console, unidentified)
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
            unidentified=unidentified.cautions,
            facts=[
                ("before (default)", f"{result.makespan_s:.2f} s"),
                ("pooled", f"{rows[-1][1].makespan_s:.2f} s"),
                ("limits", ", ".join(f"{k}={v}" for k, v in tuned_config.limits.items())),
                ("pools", ", ".join(f"{k}={v}" for k, v in tuned_config.pools.items())),
            ],
            caveats=known,
            sensitivity=tuned_what.tornado,
        )
        console.print(f"report written to [bold]{report_path}[/] (opens offline)")
