"""``bootstorm testbed``: real boot storms on this host (root), and the leftovers sweep."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.table import Table

from ._io import check_output_path, terminal_console
from ._options import (
    CNI_WRAPPER_OPTION,
    LIFETIME_OPTION,
    RuntimeName,
    check_cni_wrapper,
    check_count,
    check_directory,
    check_finite,
    check_url,
    default_help,
    testbed_arrivals,
)
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


#: Largest microVM guest (MiB): 1 TiB per sandbox is past any host a storm
#: of several runs on; 10**20 was handed to QEMU.
MAX_VM_MEMORY_MIB = 1 << 20
#: Most kernel lock spans kept in a trace: a span is ~150 bytes in memory and
#: on disk, so 10**7 is ~1.5 GB already; more is not a trace to read.
MAX_LOCK_SPANS = 10_000_000


#: Sandboxes of a storm started at once when neither --sandboxes nor --workload is given.
DEFAULT_SANDBOXES = 8

RunSandboxesOption = Annotated[
    int | None,
    typer.Option(
        help="Sandboxes started at once [default: 8]; with --workload, one per start "
        "(leave it out, or give the workload's number of starts).",
        show_default=False,
    ),
]
RunWorkloadOption = Annotated[
    Path | None,
    typer.Option(
        help="Start the sandboxes on this workload's schedule (a .csv workload file "
        "from bootstorm workload -o): one sandbox per start, at its time after the "
        "storm's origin; its startup counts from that time.",
    ),
]
RunLifetimeOption = Annotated[float | None, LIFETIME_OPTION]
RunConfigOption = Annotated[
    Path | None,
    typer.Option(
        help="Tuned config YAML: stage limits, and pools made before the storm: netns; "
        "veth or tap for that endpoint; netns-veth (a namespace made with its veth "
        "peer inside: no move when taken; taken first, the others serve the rest).",
    ),
]
RunTraceOption = Annotated[
    Path | None, typer.Option(help="Write the trace here (JSON Lines; .gz compresses).")
]
RunChromeOption = Annotated[
    Path | None, typer.Option(help="Also write a Chrome trace for ui.perfetto.dev.")
]
RunEndpointOption = Annotated[
    str,
    typer.Option(
        help="The endpoint AddCNI makes: veth (a pair, then a tap and tc redirects in "
        "AttachIf), tap (the VMM's NIC itself) or macvtap (on one shared parent link).",
    ),
]
RunPeerInNetnsOption = Annotated[
    bool,
    typer.Option(
        "--peer-in-netns/--peer-moved",
        help="Create the veth peer inside the namespace, or on the host and move it.",
    ),
]
RunNetprioIfpriomapOption = Annotated[
    bool,
    typer.Option(
        "--netprio-ifpriomap",
        help="Write net_prio ifpriomap in Cgroup. Changes kernel-wide cgroup socket "
        "matching until reboot; needs a mounted v1 net_prio hierarchy.",
    ),
]
RunVmOption = Annotated[
    bool, typer.Option("--vm/--no-vm", help="QEMU microVM in StartVM (if available).")
]
RunVmMemoryMibOption = Annotated[int, typer.Option(help="Guest memory per microVM, MiB.")]
RunMemPreallocOption = Annotated[
    bool, typer.Option("--mem-prealloc", help="QEMU zeroes all guest memory up front.")
]
RunKernelTraceOption = Annotated[
    bool,
    typer.Option("--kernel-trace/--no-kernel-trace", help="Collect lock contention spans."),
]
RunSoftirqsOption = Annotated[bool, typer.Option(help="Also collect softirq spans.")]
RunMaxLockSpansOption = Annotated[
    int | None, typer.Option(help="Keep at most this many kernel lock spans in the trace.")
]
RunAgentOption = Annotated[
    str | None,
    typer.Option(
        help="Admit stages and take devices through this node agent (URL); its token "
        "from --token-file or BOOTSTORM_AGENT_TOKEN."
    ),
]
RunTokenFileOption = Annotated[
    Path | None,
    typer.Option(
        help="File holding the agent's bearer token." + default_help("$BOOTSTORM_AGENT_TOKEN")
    ),
]
RunRuntimeOption = Annotated[
    RuntimeName,
    typer.Option(
        help="threads: each sandbox's thread does its kernel operations in-process "
        "(netlink). cni: as containerd + Kata: real CNI plugins exec'd for AddCNI, one "
        "shim process per sandbox for AttachIf and StartVM (it validates closer to its "
        "model, docs/testbed.md).",
    ),
]
RunCniBinDirOption = Annotated[
    Path | None,
    typer.Option(
        help="CNI plugin directory (runtime cni)." + default_help("/usr/lib/cni, else /opt/cni/bin")
    ),
]
RunCniPluginOption = Annotated[
    str,
    typer.Option(help="[bridge|ptp|macvlan|ipvlan] The CNI plugin (runtime cni), host-local IPAM."),
]
RunCniChainOption = Annotated[
    str,
    typer.Option(
        help="Plugins chained after it, comma-separated, in order (runtime cni): "
        "tuning, bandwidth (e.g. tuning,bandwidth)." + default_help("none"),
    ),
]
RunCniCheckOption = Annotated[
    bool, typer.Option("--cni-check", help="CNI CHECK after each ADD (runtime cni).")
]
RunCniWrapperOption = Annotated[str, CNI_WRAPPER_OPTION]
RunCniWrapperEveryOption = Annotated[
    int,
    typer.Option(
        help="With --cni-wrapper: only one sandbox in N goes through it (0, N, 2N, ...); the "
        "others exec the plugin themselves, so that 2 compares the wrapper's ADD with the "
        "plain plugin's in the same storm.",
    ),
]
RunAsJsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of tables.")
]


@testbed_app.command("run")
def run_cmd(
    sandboxes: RunSandboxesOption = None,
    workload: RunWorkloadOption = None,
    lifetime_s: RunLifetimeOption = None,
    config: RunConfigOption = None,
    trace: RunTraceOption = None,
    chrome: RunChromeOption = None,
    endpoint: RunEndpointOption = "veth",
    peer_in_netns: RunPeerInNetnsOption = True,
    netprio_ifpriomap: RunNetprioIfpriomapOption = False,
    vm: RunVmOption = True,
    vm_memory_mib: RunVmMemoryMibOption = 64,
    mem_prealloc: RunMemPreallocOption = False,
    kernel_trace: RunKernelTraceOption = True,
    softirqs: RunSoftirqsOption = False,
    max_lock_spans: RunMaxLockSpansOption = None,
    agent: RunAgentOption = None,
    token_file: RunTokenFileOption = None,
    runtime: RunRuntimeOption = "cni",
    cni_bin_dir: RunCniBinDirOption = None,
    cni_plugin: RunCniPluginOption = "bridge",
    cni_chain: RunCniChainOption = "",
    cni_check: RunCniCheckOption = False,
    cni_wrapper: RunCniWrapperOption = "none",
    cni_wrapper_every: RunCniWrapperEveryOption = 1,
    as_json: RunAsJsonOption = False,
) -> None:
    """Start SANDBOXES sandboxes at once, or on a workload's schedule, and print
    makespan, startup, stages and RTNL contention."""
    from pydantic import ValidationError

    from ._render_node import RichProgress, print_testbed_storm, testbed_storm_record
    from .models import TunedConfig
    from .traces import write_trace
    from .validation.recording import write_chrome_trace
    from .validation.testbed import StormOptions
    from .validation.testbed.options import MAX_SCHEDULE_S
    from .workflows import agent_admission, run_storm_here

    console = terminal_console()
    # Everything the storm's end needs is checked before it starts: a storm
    # of minutes was lost to a missing folder for its trace.
    if trace is not None:
        check_output_path("trace", trace)
    if chrome is not None:
        check_output_path("chrome", chrome)
    check_directory("cni_bin_dir", cni_bin_dir)
    check_url("agent", agent)
    check_count("vm_memory_mib", vm_memory_mib, low=16, high=MAX_VM_MEMORY_MIB)
    check_count("max_lock_spans", max_lock_spans, low=0, high=MAX_LOCK_SPANS)
    check_finite("lifetime_s", lifetime_s, low=0.0, high=MAX_SCHEDULE_S)
    arrival_s = testbed_arrivals(workload, sandboxes) if workload is not None else None
    if arrival_s is not None:
        sandboxes = len(arrival_s)
    elif sandboxes is None:
        sandboxes = DEFAULT_SANDBOXES
    if runtime == "cni" and not peer_in_netns:
        raise ConfigError(
            "peer_in_netns: --peer-moved applies to runtime threads only (runtime cni: the "
            "CNI plugin makes the endpoint)"
        )
    tuned = TunedConfig.from_yaml(config) if config is not None else None
    try:
        options = StormOptions(
            sandboxes=sandboxes,
            arrival_s=arrival_s,
            lifetime_s=lifetime_s,
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
            cni_wrapper=cast(Any, cni_wrapper),
            cni_wrapper_every=cni_wrapper_every,
        )
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None
    check_cni_wrapper(cni_wrapper, agent=agent)
    admission = agent_admission(agent, token_file, tuned) if agent is not None else None
    result = run_storm_here(options, admission=admission, progress=RichProgress(console))
    if trace is not None:
        write_trace(result.trace, trace)
    if chrome is not None:
        write_chrome_trace(chrome, result.trace, title=f"testbed {options.sandboxes} sandboxes")
    if as_json:
        record = testbed_storm_record(result)
        sys.stdout.write(json.dumps(record, allow_nan=False, default=str) + "\n")
    else:
        print_testbed_storm(console, result, trace=trace, chrome=chrome)
    if result.failures:
        raise typer.Exit(1)


ChromeTraceOption = Annotated[Path, typer.Argument(help="A recorded trace (.jsonl or .jsonl.gz).")]
ChromeOutputOption = Annotated[
    Path | None, typer.Option("-o", "--output", help="Chrome trace JSON to write (.gz compresses).")
]
#: OUTPUT after the trace, where -o's file was given before issue 37: kept,
#: hidden, for one release.
ChromeOldOutputArgument = Annotated[
    Path | None, typer.Argument(metavar="OUTPUT", hidden=True, show_default=False)
]
ChromeSimulateCniOption = Annotated[
    str | None,
    typer.Option(
        "--simulate",
        help="Also simulate this CNI with the trace's sandbox and core counts, side by side.",
    ),
]
ChromeProfileOption = Annotated[str, typer.Option(help="Profile of the simulation.")]


@testbed_app.command("chrome")
def chrome_cmd(
    trace: ChromeTraceOption,
    old_output: ChromeOldOutputArgument = None,
    output: ChromeOutputOption = None,
    simulate_cni: ChromeSimulateCniOption = None,
    profile: ChromeProfileOption = "paper-000",
) -> None:
    """Open a recorded storm (and, with --simulate, a simulated one) in ui.perfetto.dev."""
    from ._api import simulate
    from .models import Scenario
    from .traces import TraceFormatError, read_trace
    from .validation.recording import write_chrome_trace

    if old_output is not None:
        if output is not None:
            raise ConfigError(
                f"output: give -o {output} only (OUTPUT after the trace is its old place)"
            )
        sys.stderr.write(
            "OUTPUT after the trace is now -o/--output; the old place goes in the next release\n"
        )
        output = old_output
    if output is None:
        raise ConfigError("output: give the Chrome trace to write: -o FILE")
    check_output_path("output", output, inputs={"trace": trace})
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
    # Microseconds (a growth per lease held) keep three digits too.
    return f"{x_s * 1e3:,.3f}" if x_s == 0.0 or x_s >= 1e-5 else f"{x_s * 1e3:.3g}"


MeasureRepeatsOption = Annotated[
    int, typer.Option(help="Timed repetitions of each operation (after the warm-up).")
]
MeasureWarmupOption = Annotated[
    int, typer.Option(help="Repetitions of each operation run first and discarded.")
]
MeasureVmOption = Annotated[
    bool,
    typer.Option(
        "--vm/--no-vm",
        help="Time vm_spawn/vm_up on a QEMU microVM (if available), or on the "
        "StartVM fallback process.",
    ),
]
MeasureOutputOption = Annotated[
    Path | None,
    typer.Option("-o", "--output", help="Write the timings here (JSON), whole or not at all."),
]
MeasureAsJsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of tables.")
]
MeasureSettleOption = Annotated[
    float,
    typer.Option(
        "--settle-s",
        help="Wait up to this long for a quiet host before each operation's block (s).",
    ),
]
MeasurePoolDevicesOption = Annotated[
    int,
    typer.Option(
        help="Devices of each kind per batch when measuring a pooled device's memory "
        "(0: do not measure it)."
    ),
]
MeasurePoolRoundsOption = Annotated[
    int, typer.Option(help="Batches of each kind measured (after one discarded).")
]
MeasureFloodLinksOption = Annotated[
    int,
    typer.Option(
        help="New sandbox links each round of the bridge flood makes, on a bridge of "
        "400 ports and on an empty one (0: do not measure it)."
    ),
]

MeasureStretchRoundsOption = Annotated[
    int,
    typer.Option(
        help="Rounds timing how RTNL's holds stretch when the holder's core is shared "
        "(0: do not measure it; the fit then goes by the kernel's build)."
    ),
]


# The defaults are literals (the testbed's modules are imported only when the
# command runs); test_cli_testbed.py holds each to the testbed's constant.
@testbed_app.command("measure-ops")
def measure_ops_cmd(
    repeats: MeasureRepeatsOption = 30,
    warmup: MeasureWarmupOption = 3,
    vm: MeasureVmOption = True,
    output: MeasureOutputOption = None,
    as_json: MeasureAsJsonOption = False,
    settle_s: MeasureSettleOption = 10.0,
    pool_devices: MeasurePoolDevicesOption = 200,
    pool_rounds: MeasurePoolRoundsOption = 5,
    flood_links: MeasureFloodLinksOption = 30,
    stretch_rounds: MeasureStretchRoundsOption = 7,
) -> None:
    """Time each testbed operation alone (serial, idle host), measure the memory a
    pooled device holds, and derive the catalog's costs."""
    from ._io import write_atomically
    from ._render_node import RichProgress
    from .calibration.measured_ops import testbed_costs_from
    from .models.tuned import MAX_POOL_SIZE
    from .traces.operations import MAX_BRIDGE_PORTS
    from .validation.testbed.ops import MAX_SETTLE_S
    from .workflows.storms import (
        MAX_MEASURE_REPEATS,
        check_measure_options,
        measure_operations_here,
    )

    check_measure_options(repeats=repeats, warmup=warmup)
    check_finite("settle-s", settle_s, low=0.0, high=MAX_SETTLE_S)
    check_count("pool-devices", pool_devices, low=0, high=MAX_POOL_SIZE)
    check_count("pool-rounds", pool_rounds, low=1, high=MAX_MEASURE_REPEATS)
    check_count("flood-links", flood_links, low=0, high=MAX_BRIDGE_PORTS)
    check_count("stretch-rounds", stretch_rounds, low=0, high=MAX_MEASURE_REPEATS)
    if output is not None:
        check_output_path("output", output)
    console = terminal_console()
    times = measure_operations_here(
        repeats=repeats,
        warmup=warmup,
        vm=vm,
        settle_s=settle_s,
        pool_devices=pool_devices,
        pool_rounds=pool_rounds,
        flood_links=flood_links,
        stretch_rounds=stretch_rounds,
        progress=RichProgress(console),
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
            # Per device, MiB: what the catalog's testbed.pool_device_mib takes.
            "pool_memory": {
                m.kind: {"median_mib": m.median_mib, "q25_mib": m.q25_mib, "q75_mib": m.q75_mib}
                for m in times.pool_memory
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
    if times.pool_memory:
        first = times.pool_memory[0]
        memory = Table(
            title=f"memory of one pooled device: batches of {first.devices}, "
            f"{first.rounds} rounds after {first.warmup} warm-up"
        )
        memory.add_column("kind")
        for column in ("median KiB", "q25 KiB", "q75 KiB", "MemAvailable KiB", "Slab KiB"):
            memory.add_column(column, justify="right")
        for m in times.pool_memory:
            memory.add_row(
                m.kind,
                *(
                    f"{x * 1024:,.1f}"
                    for x in (
                        m.median_mib,
                        m.q25_mib,
                        m.q75_mib,
                        m.per_device_mib(figure="mem_available_drop_kib"),
                        m.per_device_mib(figure="slab_growth_kib"),
                    )
                ),
            )
        console.print(memory)
    derived = Table(title="derived testbed costs (ms; a pooled device's memory MiB; a ratio x)")
    # Folded, never cut: a cost's name is what a profile's source names.
    derived.add_column("testbed.", overflow="fold")
    for column in ("value", "low", "high"):
        derived.add_column(column, justify="right")
    derived.add_column("how")
    for path, c in costs.items():
        # Each in its own unit: seconds shown as ms, MiB and ratios as they are.
        shown = (
            (f"{x:.4f} MiB" for x in (c.value, c.low, c.high))
            if c.unit == "MiB"
            else (f"{x:.2f}x" for x in (c.value, c.low, c.high))
            if c.unit == "x"
            else (_op_ms(x) for x in (c.value, c.low, c.high))
        )
        derived.add_row(path.removeprefix("testbed."), *shown, c.how)
    console.print(derived)
    for note in times.notes:
        console.print(f"[dim]note: {note}[/]")
    if output is not None:
        console.print(f"timings written to [bold]{output}[/]")
