"""The ``bootstorm`` command line (typer + rich).

Bad input ends with one line on stderr naming the field and the value, and
exit code 2; no traceback.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from ._io import check_output_path, shown_name, shown_text, terminal_console, write_atomically
from ._options import EXECUTOR_OPTION, RUNTIME_OPTION, RuntimeName
from .models import ConfigError
from .simulator import ExecutorName

if TYPE_CHECKING:
    from rich.console import Console
    from typer import _click as click  # typer's vendored click

    from .models import Scenario

__all__ = ["app", "main"]

#: Commands whose modules load only when they run or show their own help
#: (`bootstorm --help` stays under 0.3 s): name -> (module, attribute, short help).
#: An attribute ending in ``_app`` is a command group (a typer app).
_LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "optimize": (
        "._cli_optimize",
        "optimize_cmd",
        "Search per-stage limits (and pool sizes) that shorten the storm; write tuned.yaml.",
    ),
    "sweep": ("._cli_sweep", "sweep_cmd", "Run a what-if grid in parallel on Dask."),
    "dataplane": (
        "._cli_dataplane",
        "dataplane_cmd",
        "Per-flow throughput ceiling, aggregate throughput, CPU and IRQ/softirq rates.",
    ),
    "testbed": ("._cli_testbed", "testbed_app", "Real boot storms on this host (root)."),
    "agent": (
        "._cli_agent",
        "agent_app",
        "The node agent: stage permits, device pools, tuned config.",
    ),
    "config": ("._cli_agent", "config_app", "Tuned configs on nodes."),
}


def _load_command(name: str) -> click.Command:
    module_name, attribute, short_help = _LAZY_COMMANDS[name]
    target = getattr(importlib.import_module(module_name, __package__), attribute)
    command: click.Command
    if isinstance(target, typer.Typer):
        target.rich_markup_mode = None  # the plain help of the main app
        # A group even with one subcommand (`agent serve`, `config push`):
        # get_command would collapse a one-command app into that command.
        command = typer.main.get_group(target)
    else:
        holder = typer.Typer(rich_markup_mode=None, add_completion=False)
        holder.command(name)(target)
        command = typer.main.get_command(holder)
    command.name = name
    command.short_help = short_help
    return command


class _LazyGroup(TyperGroup):
    """The main app's group: the commands of :data:`_LAZY_COMMANDS` are
    listed from the table and imported only when one of them is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in _LAZY_COMMANDS if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_COMMANDS and cmd_name not in self.commands:
            self.add_command(_load_command(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, self.commands[name].get_short_help_str(limit=formatter.width - 18))
            for name in super().list_commands(ctx)
            if not self.commands[name].hidden
        ]
        rows += [(n, h) for n, (_, _, h) in _LAZY_COMMANDS.items() if n not in self.commands]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _console() -> Console:
    return terminal_console()


app = typer.Typer(
    cls=_LazyGroup,
    name="bootstorm",
    help="Predict and shorten boot storms of secure containers.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Click's plain help: typer's rich help imports rich.markdown and
    # rich.traceback (0.1 s of `bootstorm --help`'s 0.3 s budget).
    rich_markup_mode=None,
    # Every option's default in its help, even where it is the scenario's.
    context_settings={"show_default": True, "max_content_width": 100},
)
log = logging.getLogger("bootstorm")


#: ``demo --sandboxes``: the demo records its tuned storm on SimPy for the
#: report (400 sandboxes: a second or two); a larger storm is for `simulate`
#: and `optimize`.
MAX_DEMO_SANDBOXES = 10_000
#: ``demo --trials``: the demo is a quick look (50 trials, seconds); a search
#: of thousands is ``bootstorm optimize``, which keeps its study.
MAX_DEMO_TRIALS = 1_000
#: ``calibrate --max-evaluations``: the fits converge in 100-200 (the
#: defaults, 150 and 160); each evaluation simulates every fitted storm.
MAX_FIT_EVALUATIONS = 10_000
#: ``calibrate --bootstrap``: a percentile interval wants ~1 000 resamples
#: (Efron and Tibshirani, 1993, §13.3); each is a refit of the storm.
MAX_BOOTSTRAP = 1_000


#: The default scenario's values, shown in ``simulate --help`` (its options
#: default to "not given", so that a scenario file's values stand);
#: tests/bootstorm/test_cli.py holds them equal to ``Scenario()``'s.
SCENARIO_DEFAULTS: dict[str, object] = {
    "cni": "ipvtap",
    "sandboxes": 400,
    "profile": "paper-000",
    "seed": 0,
    "qos_rules": 0,
    "sg_rules": 0,
    "tenants": 1,
    "memory_mib": 512,
    "background_flows": 0,
    "flow_gbps": 1.0,
}


def _default(field_or_text: str) -> str:
    """`` [default: X]`` for a help text: a scenario field's default, or the text."""
    shown = SCENARIO_DEFAULTS.get(field_or_text, field_or_text)
    return f"  [default: {shown}]"


def _pairs(field: str, items: list[str] | None) -> dict[str, int]:
    """Parse ``NAME=INT`` options; a bad one is a :class:`ConfigError`."""
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"{field}: expected NAME=COUNT, but got {item!r}")
        try:
            out[name] = int(value)
        except ValueError:
            raise ConfigError(
                f"{field}.{shown_name(name)}: expected an integer, but got {shown_text(value)}"
            ) from None
    return out


def _scenario(scenario_file: Path | None, **overrides: Any) -> Scenario:
    """The file's scenario (or the default) with the options laid over it;
    ``NAME=COUNT`` options override the file's map key by key."""
    from .models import Scenario

    base = Scenario.from_yaml(scenario_file) if scenario_file is not None else Scenario()
    given = {k: v for k, v in overrides.items() if v is not None and v != {}}
    for key, value in given.items():
        if isinstance(value, dict):
            given[key] = {**getattr(base, key), **value}
    return base.replace(**given) if given else base


@app.command("simulate")
def simulate_cmd(
    scenario_file: Annotated[
        Path | None, typer.Argument(help="Scenario YAML; options override it.")
    ] = None,
    cni: Annotated[
        str | None,
        typer.Option(
            help="no-network, veth, ipvlan, macvlan, ipvtap, macvtap, tc-routing, vhost-user, "
            "ebpf; SR-IOV (profile paper-001): sriov-vanilla, fastiov, fastiov-no-lock, "
            "fastiov-sync-vf, fastiov-no-skip, fastiov-eager-zero, prezero-10/50/100"
            + _default("cni"),
        ),
    ] = None,
    sandboxes: Annotated[
        int | None,
        typer.Option(
            help="Sandboxes started at once." + _default("sandboxes"),
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="Calibration profile name or YAML path." + _default("profile"),
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the service-time stream." + _default("seed"),
        ),
    ] = None,
    pool: Annotated[
        list[str] | None,
        typer.Option(
            help="Pre-created devices, KIND=COUNT (netns, vport, ipvtap...)."
            + _default("no pools"),
        ),
    ] = None,
    limit: Annotated[
        list[str] | None,
        typer.Option(
            help="Per-stage concurrency limit, STAGE=K." + _default("no limits"),
        ),
    ] = None,
    rtnl_priority: Annotated[
        list[str] | None,
        typer.Option(
            help="RTNL grant priority, STAGE=P (lower first)." + _default("FIFO"),
        ),
    ] = None,
    qos_rules: Annotated[
        int | None,
        typer.Option(
            help="QoS rules per vPort." + _default("qos_rules"),
        ),
    ] = None,
    sg_rules: Annotated[
        int | None,
        typer.Option(
            help="Security-group rules per pod." + _default("sg_rules"),
        ),
    ] = None,
    tenants: Annotated[
        int | None,
        typer.Option(
            help="Tenants the sandboxes are spread over." + _default("tenants"),
        ),
    ] = None,
    memory_mib: Annotated[
        int | None,
        typer.Option(
            help="Guest memory per sandbox, MiB." + _default("memory_mib"),
        ),
    ] = None,
    cores: Annotated[
        int | None,
        typer.Option(
            help="Override the profile's core count." + _default("the profile's"),
        ),
    ] = None,
    vcpus: Annotated[
        float | None,
        typer.Option(
            help="vCPUs (CPU quota in cores) per sandbox." + _default("the profile's"),
        ),
    ] = None,
    nic_vfs: Annotated[
        int | None,
        typer.Option(
            help="VFs of the SR-IOV NIC (one per sandbox)." + _default("the profile's"),
        ),
    ] = None,
    hugepages: Annotated[
        bool | None,
        typer.Option(
            "--hugepages/--no-hugepages",
            help="Guest memory on hugepages (SR-IOV)." + _default("the profile's"),
        ),
    ] = None,
    background_flows: Annotated[
        int | None,
        typer.Option(
            help="Flows of traffic received during the storm." + _default("background_flows"),
        ),
    ] = None,
    flow_gbps: Annotated[
        float | None,
        typer.Option(
            help="Offered Gbps per flow." + _default("flow_gbps"),
        ),
    ] = None,
    background_path: Annotated[
        str | None,
        typer.Option(
            help="Their data path." + _default("the CNI's"),
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
    trace: Annotated[
        Path | None, typer.Option(help="Write a Chrome trace-event JSON (open in ui.perfetto.dev).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="Apply a tuned config (bootstorm optimize --output); it overrides."),
    ] = None,
    executor: Annotated[
        ExecutorName | None,
        typer.Option(
            help="What runs the simulation: compiled (numba), simpy (the reference) or "
            "python; all three give the same numbers."
            + _default("compiled; simpy with --trace, the only one that records spans"),
        ),
    ] = None,
) -> None:
    """Simulate one boot storm and print its makespan, stages, locks and CPU.

    The defaults are the default scenario's; options override a scenario file.
    """
    from ._api import simulate
    from ._render import print_identification, result_tables
    from .calibration.identify import identification_of, whatif_cautions
    from .models import load_profile

    if trace is not None:
        check_output_path("trace", trace)
    scenario = _scenario(
        scenario_file,
        cni=cni,
        sandboxes=sandboxes,
        profile=profile,
        seed=seed,
        pools=_pairs("pools", pool),
        limits=_pairs("limits", limit),
        rtnl_priority=_pairs("rtnl_priority", rtnl_priority),
        qos_rules=qos_rules,
        sg_rules=sg_rules,
        tenants=tenants,
        memory_mib=memory_mib,
        cores=cores,
        vcpus=vcpus,
        nic_vfs=nic_vfs,
        hugepages=hugepages,
        background_flows=background_flows,
        flow_gbps=flow_gbps,
        background_path=background_path,
    )
    if config is not None:
        scenario = scenario.replace(config=config)
    if executor is None:
        # As every other command: the compiled executor, unless spans are asked for.
        executor = "simpy" if trace is not None else "compiled"
    result = simulate(scenario, record=trace is not None, executor=executor)
    if trace is not None:
        from .simulator.trace_export import write_chrome_trace

        assert result.recording is not None
        write_chrome_trace(result.recording, trace, title=f"{scenario.sandboxes} x {scenario.cni}")
    from ._cli_dataplane import background_summary

    background = background_summary(scenario)
    if as_json:
        payload = {"scenario": scenario.model_dump(mode="json"), **result.to_dict()}
        payload["startup_s"] = {k: payload["startup_s"][k] for k in ("mean", "p50", "p99", "max")}
        from ._render import caveats_for

        payload["caveats"] = [m.to_dict() for m in caveats_for(scenario, result)[0]]
        payload["unidentified"] = [
            c.to_dict() for c in whatif_cautions(scenario, base=result, executor=executor)
        ]
        payload["profile_error_rel"] = identification_of(load_profile(scenario.profile)).error_rel
        if background is not None:
            payload["background"] = background
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    _console().print(result_tables(scenario, result))
    print_identification(_console(), scenario, result=result)
    if background is not None:
        _console().print(
            f"background traffic on {background['path']}: {background['delivered_gbps']:.1f} Gbps "
            f"delivered, {background['cores_taken']:.2f} cores taken from the storm "
            f"({background['softirq_cores']:.2f} by IRQs and softirqs)"
        )
    if trace is not None:
        _console().print(f"trace written to [bold]{trace}[/] — open it in https://ui.perfetto.dev")


@app.command()
def demo(
    sandboxes: Annotated[
        int, typer.Option(min=1, max=MAX_DEMO_SANDBOXES, help="Sandboxes in the storm.")
    ] = 400,
    trials: Annotated[
        # A quick look: 50 trials (bootstorm._cli_demo.DEMO_TRIALS, the S0-9
        # reference search) take seconds; a real search is `bootstorm optimize`.
        int, typer.Option(min=1, max=MAX_DEMO_TRIALS, help="Trials of the limit search.")
    ] = 50,
    output_dir: Annotated[Path, typer.Option(help="Where tuned.yaml and report.html go.")] = Path(
        "."
    ),
    report: Annotated[bool, typer.Option(help="Write report.html.")] = True,
) -> None:
    """The default storm (ipvtap on the seed-000 host), its what-ifs, pooling, a
    small search for per-stage limits; writes tuned.yaml and report.html."""
    from ._cli_demo import run_demo

    run_demo(_console(), sandboxes=sandboxes, trials=trials, output_dir=output_dir, report=report)


@app.command()
def calibrate(
    targets: Annotated[
        str, typer.Option(help="Published targets to fit: paper-000, -001, -002, -004.")
    ] = "paper-000",
    write: Annotated[
        bool, typer.Option(help="Overwrite the built-in profile with the fit.")
    ] = False,
    output: Annotated[Path | None, typer.Option(help="Write the fitted profile here.")] = None,
    check_only: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Check the built-in profile against every row of its paper on unseen seeds: "
            "kind, mean, seed spread, pass/miss; exit 1 on a miss not known.",
        ),
    ] = False,
    seeds: Annotated[
        str,
        typer.Option(
            help="With --check: seeds to average over, e.g. 1001-1010 (none used by the fit)."
        ),
    ] = "1001-1010",
    max_evaluations: Annotated[
        int,
        typer.Option(min=1, max=MAX_FIT_EVALUATIONS, help="Budget of objective evaluations."),
    ] = 150,
    trace: Annotated[
        list[Path] | None,
        typer.Option(
            help="Fit a local testbed profile to this recorded storm instead "
            "(repeat for several runs of one storm: pooled)."
        ),
    ] = None,
    bootstrap: Annotated[
        int,
        typer.Option(
            min=0,
            max=MAX_BOOTSTRAP,
            help="With --trace: refits on resampled sandboxes for an interval.",
        ),
    ] = 0,
    predict_sandboxes: Annotated[
        int | None, typer.Option(help="With --bootstrap: the storm size to predict.")
    ] = None,
    measured_ops: Annotated[
        Path | None,
        typer.Option(
            help="With --trace or --plan: costs timed alone "
            "(bootstorm testbed measure-ops --output FILE), fitted with the storms."
        ),
    ] = None,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Root: time each operation alone, run the storms that identify every cost "
            "of the testbed catalog (sizes, peer modes, pool kinds, limits), fit them together.",
        ),
    ] = False,
    plan_sandboxes: Annotated[
        int, typer.Option(help="With --plan: the largest plan storm's size.")
    ] = 50,
    runs: Annotated[int, typer.Option(help="With --plan: runs of each plan storm.")] = 3,
    pool_kind: Annotated[
        list[str] | None,
        typer.Option(
            help="With --plan: pool kinds the search may use (default: all the testbed's)."
        ),
    ] = None,
    limit_stage: Annotated[
        list[str] | None,
        typer.Option(
            help="With --plan: stages the search may limit (default: the four of seed 000)."
        ),
    ] = None,
    measure: Annotated[
        bool,
        typer.Option(help="With --plan: time each operation alone first (unless --measured-ops)."),
    ] = True,
    trace_dir: Annotated[
        Path | None,
        typer.Option(help="With --plan: write every storm's trace (and ops.json) here."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --plan: print the plan, run nothing.")
    ] = False,
    vm: Annotated[bool, typer.Option(help="With --plan: QEMU microVMs in StartVM.")] = True,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="With --trace or --check: one JSON object instead of tables."),
    ] = False,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
    runtime: Annotated[RuntimeName, RUNTIME_OPTION] = "cni",
) -> None:
    """Fit a profile to a paper's *fit* rows, to recorded storms (--trace), or
    to a calibration plan run on this node (--plan); print the per-target
    error table and what identified each cost."""
    if output is not None:
        check_output_path("output", output)
    if plan:
        from ._cli_calibrate import calibrate_plan
        from .optimizers import DEFAULT_STAGES

        calibrate_plan(
            sandboxes=plan_sandboxes,
            runs=runs,
            pool_kinds=tuple(pool_kind) if pool_kind else None,
            limit_stages=tuple(limit_stage or DEFAULT_STAGES),
            measured_ops=measured_ops,
            measure=measure,
            trace_dir=trace_dir,
            output=output,
            dry_run=dry_run,
            vm=vm,
            max_evaluations=max_evaluations,
            executor=executor,
            runtime=runtime,
        )
        return
    if trace:
        from ._cli_calibrate import calibrate_traces

        calibrate_traces(
            trace,
            output=output,
            measured_ops=measured_ops,
            bootstrap=bootstrap,
            predict_sandboxes=predict_sandboxes,
            max_evaluations=max_evaluations,
            executor=executor,
            as_json=as_json,
        )
        return
    from ._render import fit_spread, target_table
    from .calibration import TARGET_SETS

    if targets not in TARGET_SETS:
        known = ", ".join(TARGET_SETS)
        raise ConfigError(f"targets: unknown target set {targets!r}; known: {known}")
    target_set = TARGET_SETS[targets]
    if check_only:
        from ._cli_calibrate import calibrate_check

        raise typer.Exit(
            calibrate_check(
                targets, seeds=seeds, executor=executor, console=_console(), as_json=as_json
            )
        )
    with _console().status(f"fitting {targets} …") as status:
        report = target_set.fit(
            max_evaluations=max_evaluations,
            executor=executor,
            on_evaluation=lambda n, cost: status.update(
                f"fitting {targets} … evaluation {n}, cost {cost:.4g}"
            ),
        )
    _console().print(
        target_table(f"{targets} fit ({report.evaluations} evaluations)", report.checks)
    )
    _console().print(fit_spread(report))
    text = report.profile.to_yaml()
    destinations = [output] if output is not None else []
    if write:
        destinations.append(
            Path(__file__).resolve().parent.parent / "models" / "profiles" / f"{targets}.yaml"
        )
    for dest in destinations:
        write_atomically(dest, text)
        _console().print(f"profile written to [bold]{dest}[/]")
    for miss in report.misses:
        how = "fitted" if miss.target.weight > 0 else "not fitted (see its comment in calibration/)"
        _console().print(f"[yellow]outside ±5%: {miss.target.id} {miss.target.label} ({how})[/]")
    if not report.all_within:
        raise typer.Exit(1)


@app.command()
def report(
    source: Annotated[
        str | None,
        typer.Argument(
            help="A scenario YAML (simulated), a trace (.jsonl[.gz], measured or simulated), "
            "or a study: its journal file (optimize's default: "
            "~/.local/state/bootstorm/studies.log, with --study-name) or an Optuna "
            "storage URL (sqlite:///study.db, postgresql://...). "
            "Default: the scenario the options describe."
        ),
    ] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="The HTML file.")] = Path(
        "report.html"
    ),
    study_name: Annotated[
        str | None, typer.Option(help="The study in the storage (if it holds several).")
    ] = None,
    cni: Annotated[str | None, typer.Option(help="As for simulate.")] = None,
    sandboxes: Annotated[int | None, typer.Option(help="As for simulate.")] = None,
    profile: Annotated[str | None, typer.Option(help="As for simulate.")] = None,
) -> None:
    """Write one self-contained HTML report (opens offline): timeline, stage
    breakdown, locks, CPU; for a study, its history and Pareto front."""
    from ._api import simulate
    from ._render import caveats_for
    from .calibration import caveats
    from .calibration.identify import whatif_cautions
    from .report import write_report

    check_output_path("output", output)
    title: str
    kw: dict[str, Any] = {}
    if source is not None and ("://" in source or source.endswith(".log")):
        import optuna

        from .optimizers._storage import open_storage

        if "://" not in source and not Path(source).is_file():
            raise ConfigError(f"source: no study journal at {source!r}")
        storage = open_storage(source)
        if study_name is None:
            names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
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
                f"study: cannot load {study_name or '(the only study)'} from {source}: {exc}"
            ) from None
        from .optimizers import searched_scenario

        title = f"study {study.study_name}"
        searched = searched_scenario(study)
        kw = {
            "study": study,
            "facts": [("trials", str(len(study.trials)))],
            "caveats": caveats(searched) if searched is not None else (),
        }
    elif source is not None and source.endswith((".jsonl", ".jsonl.gz")):
        from .traces import read_trace
        from .validation.recording import to_recording

        trace = read_trace(Path(source))
        h = trace.header
        title = f"{h.scenario.sandboxes} × {h.scenario.cni} ({h.source})"
        facts = [("trace", Path(source).name), ("source", h.source)]
        if h.host is not None:
            facts.append(("host", f"{h.host.cores} CPUs, kernel {h.host.kernel}"))
        kw = {"recording": to_recording(trace), "facts": facts}
    else:
        scenario = _scenario(
            Path(source) if source is not None else None,
            cni=cni,
            sandboxes=sandboxes,
            profile=profile,
        )
        result = simulate(scenario, record=True)
        title = f"{scenario.sandboxes} × {scenario.cni} on {scenario.profile}"
        kw = {
            "recording": result.recording,
            "result": result,
            "caveats": caveats_for(scenario, result)[0],
            "unidentified": whatif_cautions(scenario, base=result),
        }
    write_report(output, title=title, **kw)
    _console().print(f"report written to [bold]{output}[/] (self-contained; open it in a browser)")


@app.command()
def validate(
    sandboxes: Annotated[int, typer.Option(help="Sandboxes the testbed starts at once.")] = 100,
    config: Annotated[
        Path | None, typer.Option(help="Tuned config: stage limits and pools, both sides.")
    ] = None,
    candidates: Annotated[
        list[str] | None,
        typer.Option(
            help="Rank tuned configs instead: [NAME=]FILE, repeat (NAME defaults to the "
            "file's stem). Runs --repeat storms of each, interleaved (each round every "
            "candidate once, in a shuffled order), or reads --measured-dir; prints measured "
            "against predicted per candidate and the Spearman of the two rankings."
        ),
    ] = None,
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline/--no-baseline",
            help="With --candidates: rank the storm without a config too, as 'baseline'.",
        ),
    ] = True,
    profile: Annotated[Path | None, typer.Option(help="The node's fitted profile YAML.")] = None,
    calibrate_from: Annotated[
        list[Path] | None,
        typer.Option(
            help="Fit the node's profile to this recorded storm first (repeat: several runs)."
        ),
    ] = None,
    measured: Annotated[
        list[Path] | None,
        typer.Option(
            help="Compare this recorded storm instead of running one (repeat: several runs "
            "of one storm, pooled; the makespan is their median)."
        ),
    ] = None,
    measured_dir: Annotated[
        Path | None,
        typer.Option(
            help="With --candidates: compare the runs recorded here instead of running any "
            "(DIR/<candidate>-run<k>.jsonl.gz, as --trace-out writes them; every run found)."
        ),
    ] = None,
    repeat: Annotated[
        int | None,
        typer.Option(
            help="Run the storm this many times and compare the median (default: 1; "
            "3 per candidate with --candidates)."
        ),
    ] = None,
    calibration_sandboxes: Annotated[
        int | None,
        typer.Option(
            help="Without --profile or --calibrate-from: the size of the storms the node's "
            "profile is fitted to first, without the config (default: half of --sandboxes)."
        ),
    ] = None,
    calibration_runs: Annotated[
        int, typer.Option(help="Without --profile or --calibrate-from: how many of them.")
    ] = 3,
    trace: Annotated[Path | None, typer.Option(help="Write the measured storm here.")] = None,
    trace_out: Annotated[
        Path | None,
        typer.Option(
            help="With --candidates: write every run's trace as "
            "DIR/<candidate>-run<k>.jsonl.gz (k from 1), as each storm ends."
        ),
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(
            help="Exit 1 if makespan, mean or p99 is off by more (0.15 = 15%); with "
            "--candidates: if any candidate's makespan is."
        ),
    ] = 0.15,
    min_spearman: Annotated[
        float,
        typer.Option(
            help="With --candidates: exit 1 if the Spearman of predicted against measured "
            "makespan is lower, or undefined (the model predicts them all equal)."
        ),
    ] = 0.9,
    vm: Annotated[bool, typer.Option("--vm/--no-vm", help="QEMU microVMs in StartVM.")] = True,
    agent: Annotated[
        str | None, typer.Option(help="Admit the testbed's stages through this node agent.")
    ] = None,
    token_file: Annotated[Path | None, typer.Option(help="The agent's bearer token.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
    runtime: Annotated[RuntimeName, RUNTIME_OPTION] = "cni",
) -> None:
    """Run the storm on this host (root), simulate it, print predicted vs measured.

    With --candidates: whether the model ranks tuned configs as this host
    does. Run them here (root), or give --measured-dir DIR (no root) with
    --profile or --calibrate-from.
    """
    from ._cli_validate import check_validate_options, validate_candidates, validate_storm

    check_validate_options(
        candidates=candidates,
        config=config,
        measured=measured,
        measured_dir=measured_dir,
        trace=trace,
        trace_out=trace_out,
        agent=agent,
    )
    if candidates:
        validate_candidates(
            candidates=candidates,
            baseline=baseline,
            sandboxes=sandboxes,
            repeat=3 if repeat is None else repeat,
            profile=profile,
            calibrate_from=calibrate_from,
            measured_dir=measured_dir,
            trace_out=trace_out,
            threshold=threshold,
            min_spearman=min_spearman,
            vm=vm,
            as_json=as_json,
            calibration_sandboxes=calibration_sandboxes,
            calibration_runs=calibration_runs,
            executor=executor,
            runtime=runtime,
        )
        return
    validate_storm(
        sandboxes=sandboxes,
        config=config,
        profile=profile,
        calibrate_from=calibrate_from,
        measured=measured,
        trace_out=trace,
        threshold=threshold,
        vm=vm,
        as_json=as_json,
        agent=agent,
        token_file=token_file,
        repeat=1 if repeat is None else repeat,
        calibration_sandboxes=calibration_sandboxes,
        calibration_runs=calibration_runs,
        executor=executor,
        runtime=runtime,
    )


@app.command()
def tune(
    sandboxes: Annotated[int, typer.Option(help="The storm to shorten: sandboxes at once.")] = 150,
    budget: Annotated[int, typer.Option(help="TPE trials of the search on the model.")] = 60,
    candidates: Annotated[
        int, typer.Option(help="The best configs of the search to run for real.")
    ] = 3,
    repeats: Annotated[
        int, typer.Option(help="Rounds of real storms (each runs every config once).")
    ] = 5,
    profile: Annotated[
        Path | None,
        typer.Option(help="The node's profile; default: calibrate it here first (--plan)."),
    ] = None,
    measured_ops: Annotated[
        Path | None, typer.Option(help="Costs timed alone (testbed measure-ops --output).")
    ] = None,
    plan_sandboxes: Annotated[
        int | None, typer.Option(help="The largest plan storm (default: a third of the storm).")
    ] = None,
    plan_runs: Annotated[int, typer.Option(help="Runs of each plan storm.")] = 3,
    pool_kind: Annotated[
        list[str] | None, typer.Option(help="Pool kinds to search (default: the testbed's).")
    ] = None,
    limit_stage: Annotated[
        list[str] | None,
        typer.Option(help="Stages to limit (default: AddCNI, Cgroup, AttachIf, StartVM)."),
    ] = None,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="The tuned config (only if measured faster).")
    ] = Path("tuned.yaml"),
    trace_dir: Annotated[
        Path | None, typer.Option(help="Write every storm's trace and the profiles here.")
    ] = None,
    report: Annotated[
        Path | None, typer.Option(help="An HTML report of predicted against measured.")
    ] = None,
    vm: Annotated[bool, typer.Option(help="QEMU microVMs in StartVM.")] = True,
    runtime: Annotated[RuntimeName, RUNTIME_OPTION] = "cni",
) -> None:
    """Root: calibrate this node, search pools and limits on its model, run the
    best candidates and the baseline for real, and write the config that was
    measured faster than the baseline (and none otherwise)."""
    from ._cli_tune import tune as run_tune
    from .optimizers import DEFAULT_STAGES

    run_tune(
        sandboxes=sandboxes,
        trials=budget,
        candidates=candidates,
        repeats=repeats,
        profile_path=profile,
        measured_ops=measured_ops,
        plan_sandboxes=plan_sandboxes,
        plan_runs=plan_runs,
        pool_kinds=tuple(pool_kind) if pool_kind else None,
        limit_stages=tuple(limit_stage or DEFAULT_STAGES),
        output=output,
        trace_dir=trace_dir,
        report=report,
        vm=vm,
        console=_console(),
        runtime=runtime,
    )


@app.command()
def profiles() -> None:
    """List the built-in calibration profiles."""
    from .models import available_profiles

    for name in available_profiles():
        _console().print(name)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning bad input into one line and exit 2."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    command = typer.main.get_command(app)
    from .simulator import DeadlockError, ProgramError
    from .traces import TraceFormatError

    try:
        code = command.main(args=argv, prog_name="bootstorm", standalone_mode=False)
    except (ConfigError, ProgramError, TraceFormatError) as exc:
        # A malformed scenario, profile, config or trace: what and where, no traceback.
        for line in str(exc).splitlines():
            sys.stderr.write(f"error: {line}\n")
        raise SystemExit(2) from None
    except DeadlockError as exc:
        # Sandboxes left waiting forever: a config whose limits and pools cannot
        # all be met, or a model bug. Say which sandboxes, in one line, exit 1.
        sys.stderr.write(f"error: the simulated storm deadlocked: {exc}\n")
        raise SystemExit(1) from None
    except MemoryError:
        # The storm was sized before it was built (compile_scenario); this is
        # what the estimate did not see (another process took the memory).
        from .simulator import available_memory_bytes

        available = available_memory_bytes()
        left = f" ({available >> 20:,} MiB available now)" if available is not None else ""
        sys.stderr.write(f"error: out of memory{left}; try a smaller storm\n")
        raise SystemExit(2) from None
    except OSError as exc:
        if exc.filename is None:
            raise  # not about a file the user named: a bug to see in full
        # A file named on the command line (or one a command writes beside it)
        # that cannot be read or written: which, and why.
        name = shown_text(str(exc.filename))
        sys.stderr.write(f"error: {name}: {exc.strerror or exc}\n")
        raise SystemExit(2) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        sys.stderr.write("aborted\n")
        raise SystemExit(130) from None
    except typer.TyperException as exc:  # click's usage errors, vendored by typer
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    # Without standalone mode, an Exit raised by a command comes back as its code.
    if isinstance(code, int) and code:
        raise SystemExit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
