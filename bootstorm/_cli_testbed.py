"""``bootstorm testbed``: real boot storms on this host (root), and the leftovers sweep."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.table import Table

from ._io import terminal_console
from .models import ConfigError
from .models._errors import format_validation_error

__all__ = ["testbed_app"]

testbed_app = typer.Typer(
    name="testbed",
    help="Real boot storms on this host (root): netns, veth, cgroup, tap + tc, microVM.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1e3:,.1f}"


@testbed_app.command("run")
def run_cmd(
    sandboxes: Annotated[int, typer.Option(help="Sandboxes started at once.")] = 8,
    config: Annotated[
        Path | None,
        typer.Option(
            help="Tuned config YAML: stage limits, and pools made before the storm: netns; "
            "veth or tap for that endpoint; netns-veth (a namespace made with its veth "
            "peer inside: no move when taken; taken first, the others serve the rest).",
        ),
    ] = None,
    trace: Annotated[
        Path | None, typer.Option(help="Write the trace here (JSON Lines; .gz compresses).")
    ] = None,
    chrome: Annotated[
        Path | None, typer.Option(help="Also write a Chrome trace for ui.perfetto.dev.")
    ] = None,
    endpoint: Annotated[
        str,
        typer.Option(
            help="The endpoint AddCNI makes: veth (a pair, then a tap and tc redirects in "
            "AttachIf), tap (the VMM's NIC itself) or macvtap (on one shared parent link).",
        ),
    ] = "veth",
    peer_in_netns: Annotated[
        bool,
        typer.Option(
            "--peer-in-netns/--peer-moved",
            help="Create the veth peer inside the namespace, or on the host and move it.",
        ),
    ] = True,
    netprio_ifpriomap: Annotated[
        bool,
        typer.Option(
            "--netprio-ifpriomap",
            help="Write net_prio ifpriomap in Cgroup. Changes kernel-wide cgroup socket "
            "matching until reboot; needs a mounted v1 net_prio hierarchy.",
        ),
    ] = False,
    vm: Annotated[
        bool, typer.Option("--vm/--no-vm", help="QEMU microVM in StartVM (if available).")
    ] = True,
    vm_memory_mib: Annotated[int, typer.Option(help="Guest memory per microVM, MiB.")] = 64,
    mem_prealloc: Annotated[
        bool, typer.Option("--mem-prealloc", help="QEMU zeroes all guest memory up front.")
    ] = False,
    kernel_trace: Annotated[
        bool,
        typer.Option("--kernel-trace/--no-kernel-trace", help="Collect lock contention spans."),
    ] = True,
    softirqs: Annotated[bool, typer.Option(help="Also collect softirq spans.")] = False,
    max_lock_spans: Annotated[
        int | None, typer.Option(help="Keep at most this many kernel lock spans in the trace.")
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            help="Admit stages and take devices through this node agent (URL); its token "
            "from --token-file or BOOTSTORM_AGENT_TOKEN."
        ),
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option(help="File holding the agent's bearer token.")
    ] = None,
    runtime: Annotated[
        str,
        typer.Option(
            help="[threads|cni] threads: each sandbox's thread does its kernel operations "
            "in-process (netlink). cni: as containerd + Kata: real CNI plugins exec'd for "
            "AddCNI, one shim process per sandbox for AttachIf and StartVM (the default: "
            "it validates closer to its model, docs/testbed.md).",
        ),
    ] = "cni",
    cni_bin_dir: Annotated[
        Path | None,
        typer.Option(
            help="CNI plugin directory (runtime cni); default /usr/lib/cni, else /opt/cni/bin."
        ),
    ] = None,
    cni_plugin: Annotated[
        str,
        typer.Option(
            help="[bridge|ptp|macvlan|ipvlan] The CNI plugin (runtime cni), host-local IPAM."
        ),
    ] = "bridge",
    cni_chain: Annotated[
        str,
        typer.Option(
            help="Plugins chained after it, comma-separated, in order (runtime cni): "
            "tuning, bandwidth (e.g. tuning,bandwidth).",
        ),
    ] = "",
    cni_check: Annotated[
        bool, typer.Option("--cni-check", help="CNI CHECK after each ADD (runtime cni).")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
) -> None:
    """Start SANDBOXES sandboxes at once and print makespan, startup, stages and RTNL contention."""
    from pydantic import ValidationError

    from ._render_node import RichProgress
    from .models import TunedConfig
    from .traces import write_trace
    from .validation.recording import write_chrome_trace
    from .validation.testbed import StormOptions, summarize
    from .workflows import agent_admission, run_storm_here

    console = terminal_console()
    tuned = TunedConfig.from_yaml(config) if config is not None else None
    try:
        options = StormOptions(
            sandboxes=sandboxes,
            endpoint=cast(Any, endpoint),  # StormOptions validates the name
            peer="in-netns" if peer_in_netns else "moved",
            netprio_ifpriomap=netprio_ifpriomap,
            vm=vm,
            vm_memory_mib=vm_memory_mib,
            mem_prealloc=mem_prealloc,
            kernel_trace=kernel_trace,
            softirqs=softirqs,
            max_lock_spans=max_lock_spans,
            config=tuned,
            # StormOptions validates the names (one line naming field and value).
            runtime=cast(Any, runtime),
            cni_bin_dir=cni_bin_dir,
            cni_plugin=cast(Any, cni_plugin),
            cni_chain=tuple(p.strip() for p in cni_chain.split(",") if p.strip()),
            cni_check=cni_check,
        )
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None
    admission = agent_admission(agent, token_file, tuned) if agent is not None else None
    result = run_storm_here(options, admission=admission, progress=RichProgress(console))
    if trace is not None:
        write_trace(result.trace, trace)
    if chrome is not None:
        write_chrome_trace(chrome, result.trace, title=f"testbed {sandboxes} sandboxes")
    s = summarize(result.trace)
    h = result.trace.header
    if as_json:
        payload = {
            "run": result.run,
            "header": h.model_dump(mode="json"),
            # No sandbox completed: the statistics are null, not NaN (not JSON).
            **{
                k: None if isinstance(v, float) and math.isnan(v) else v
                for k, v in dataclasses.asdict(s).items()
            },
            "failures": list(result.failures),
        }
        sys.stdout.write(json.dumps(payload, allow_nan=False, default=str) + "\n")
        if result.failures:
            raise typer.Exit(1)
        return
    table = Table(
        title=f"testbed storm {result.run}: {sandboxes} × {h.scenario.cni}, {h.scenario.vm}"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("completed", f"{s.completed} / {s.sandboxes}")
    table.add_row("makespan", f"{_ms(s.makespan_s)} ms")
    table.add_row(
        "startup mean / p50 / p99",
        f"{_ms(s.startup_mean_s)} / {_ms(s.startup_p50_s)} / {_ms(s.startup_p99_s)} ms",
    )
    for stage, mean in s.stage_mean_s.items():
        table.add_row(f"  {stage} mean", f"{_ms(mean)} ms")
    if h.kernel_trace is not None:
        table.add_row("RTNL contention: waits", str(s.rtnl.waits))
        table.add_row("RTNL contention: total wait", f"{_ms(s.rtnl.wait_s)} ms")
        table.add_row("  of it by sandbox threads", f"{s.rtnl.sandbox_waits} waits")
        for name in ("cgroup_mutex", "css_set_lock"):
            if name in s.locks:
                lk = s.locks[name]
                table.add_row(f"{name} contention", f"{lk.waits} waits, {_ms(lk.wait_s)} ms")
    console.print(table)
    for note in h.notes:
        console.print(f"[dim]note: {note}[/]")
    if trace is not None:
        console.print(f"trace written to [bold]{trace}[/]")
    if chrome is not None:
        console.print(
            f"Chrome trace written to [bold]{chrome}[/] — open it in https://ui.perfetto.dev"
        )
    if result.failures:
        for failure in result.failures[:10]:
            console.print(f"[red]sandbox {failure}[/]")
        raise typer.Exit(1)


@testbed_app.command("chrome")
def chrome_cmd(
    trace: Annotated[Path, typer.Argument(help="A recorded trace (.jsonl or .jsonl.gz).")],
    output: Annotated[Path, typer.Argument(help="Chrome trace JSON to write (.gz compresses).")],
    simulate_cni: Annotated[
        str | None,
        typer.Option(
            "--simulate",
            help="Also simulate this CNI with the trace's sandbox and core counts, side by side.",
        ),
    ] = None,
    profile: Annotated[str, typer.Option(help="Profile of the simulation.")] = "paper-000",
) -> None:
    """Open a recorded storm (and, with --simulate, a simulated one) in ui.perfetto.dev."""
    from ._api import simulate
    from .models import Scenario
    from .traces import TraceFormatError, read_trace
    from .validation.recording import write_chrome_trace

    try:
        measured = read_trace(trace)
    except (TraceFormatError, OSError) as exc:
        raise ConfigError(str(exc)) from None
    recording = None
    if simulate_cni is not None:
        host = measured.header.host
        scenario = Scenario(
            cni=simulate_cni,
            sandboxes=measured.header.scenario.sandboxes,
            profile=profile,
            cores=host.cores if host is not None else None,
        )
        recording = simulate(scenario, record=True).recording
    write_chrome_trace(output, measured, simulated=recording, title=trace.name)
    terminal_console().print(
        f"Chrome trace written to [bold]{output}[/] — open it in https://ui.perfetto.dev"
    )


@testbed_app.command("sweep-leftovers")
def sweep_cmd() -> None:
    """Remove what killed testbed runs left (bst- namespaces, links, cgroups, shims and
    VMs, CNI state, tracefs instances)."""
    from .validation.testbed import sweep_leftovers

    if os.geteuid() != 0:
        raise ConfigError("testbed: sweep-leftovers needs root")
    report = sweep_leftovers()
    console = terminal_console()
    if not report.total:
        console.print("nothing left over")
        return
    kinds = ("processes", "netns", "links", "cgroups", "cni", "tracefs", "registry", "workdirs")
    for kind in kinds:
        items = getattr(report, kind)
        if items:
            console.print(f"removed {len(items)} {kind}: {', '.join(map(str, items[:8]))}")


def _op_ms(x_s: float) -> str:
    return f"{x_s * 1e3:,.3f}"


@testbed_app.command("measure-ops")
def measure_ops_cmd(
    repeats: Annotated[
        int, typer.Option(help="Timed repetitions of each operation (after the warm-up).")
    ] = 30,
    warmup: Annotated[
        int, typer.Option(help="Repetitions of each operation run first and discarded.")
    ] = 3,
    vm: Annotated[
        bool,
        typer.Option(
            "--vm/--no-vm",
            help="Time vm_spawn/vm_up on a QEMU microVM (if available), or on the "
            "StartVM fallback process.",
        ),
    ] = True,
    output: Annotated[
        Path | None, typer.Option(help="Write the timings here (JSON), whole or not at all.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
) -> None:
    """Time each testbed operation alone (serial, idle host) and derive the catalog's costs."""
    from ._io import write_atomically
    from ._render_node import RichProgress
    from .calibration.measured_ops import testbed_costs_from
    from .workflows.storms import check_measure_options, measure_operations_here

    check_measure_options(repeats=repeats, warmup=warmup)
    if output is not None and not output.resolve().parent.is_dir():
        raise ConfigError(f"output: no directory {output.resolve().parent} to write {output.name}")
    console = terminal_console()
    times = measure_operations_here(
        repeats=repeats, warmup=warmup, vm=vm, progress=RichProgress(console)
    )
    costs = testbed_costs_from(times)
    if output is not None:
        write_atomically(output, times.to_json())
    if as_json:
        payload = {
            "times": json.loads(times.to_json()),
            "summary": {
                t.name: {"median_s": t.median_s, "q25_s": t.q25_s, "q75_s": t.q75_s}
                for t in times.timings
            },
            "costs": {path: dataclasses.asdict(c) for path, c in costs.items()},
        }
        sys.stdout.write(json.dumps(payload, allow_nan=False) + "\n")
        return
    host = times.host
    table = Table(
        title=f"operations alone: {times.repeats} repeats after {times.warmup} warm-up, "
        f"{host.kernel}, {host.cores} cores, VM: {times.vm_mode}"
    )
    table.add_column("operation")
    for column in ("median ms", "q25 ms", "q75 ms"):
        table.add_column(column, justify="right")
    for t in times.timings:
        table.add_row(t.name, _op_ms(t.median_s), _op_ms(t.q25_s), _op_ms(t.q75_s))
    console.print(table)
    derived = Table(title="derived testbed costs")
    derived.add_column("cost")
    for column in ("value ms", "low ms", "high ms"):
        derived.add_column(column, justify="right")
    derived.add_column("how")
    for path, c in costs.items():
        derived.add_row(path, _op_ms(c.value), _op_ms(c.low), _op_ms(c.high), c.how)
    console.print(derived)
    for note in times.notes:
        console.print(f"[dim]note: {note}[/]")
    if output is not None:
        console.print(f"timings written to [bold]{output}[/]")
