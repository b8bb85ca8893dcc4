"""``bootstorm simulate`` and ``bootstorm profiles``: one what-if, and the
built-in profiles it can stand on."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._io import check_output_path, terminal_console
from ._options import (
    LIFETIME_OPTION,
    check_finite,
    default_help,
    load_workload,
    pairs,
    pool_refill_from_options,
    scenario_from_options,
)
from .models import ConfigError
from .models.scenario import MAX_ARRIVAL_S
from .simulator import ExecutorName
from .traces.files import shown_path

if TYPE_CHECKING:
    from .models import Scenario
    from .traces.workload import Workload

__all__ = ["profiles_cmd", "simulate_cmd"]


ScenarioFileOption = Annotated[
    Path | None,
    typer.Argument(
        metavar="SCENARIO",
        help="A scenario file (or an installed example's name); options override it.",
    ),
]
CniOption = Annotated[
    str | None,
    typer.Option(
        help="no-network, veth, ipvlan, macvlan, ipvtap, macvtap, tc-routing, vhost-user, "
        "ebpf; SR-IOV (profile paper-001): sriov-vanilla, fastiov, fastiov-no-lock, "
        "fastiov-sync-vf, fastiov-no-skip, fastiov-eager-zero, prezero-10/50/100; TSoR "
        "(seed 003): tsor, tsor-dynamic-ip, tsor-qp-per-pod" + default_help("cni"),
    ),
]
SandboxesOption = Annotated[
    int | None,
    typer.Option(
        help="Sandboxes started at once." + default_help("sandboxes"),
    ),
]
ProfileOption = Annotated[
    str | None,
    typer.Option(
        help="Calibration profile name or YAML path." + default_help("profile"),
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        help="Seed of the service-time stream." + default_help("seed"),
    ),
]
PoolOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Pre-created devices, KIND=COUNT (netns, vport, ipvtap...)."
        + default_help("no pools"),
    ),
]
LimitOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Per-stage concurrency limit, STAGE=K." + default_help("no limits"),
    ),
]
RtnlPriorityOption = Annotated[
    list[str] | None,
    typer.Option(
        help="RTNL grant priority, STAGE=P (lower first)." + default_help("FIFO"),
    ),
]
QosRulesOption = Annotated[
    int | None,
    typer.Option(
        help="QoS rules per vPort." + default_help("qos_rules"),
    ),
]
SgRulesOption = Annotated[
    int | None,
    typer.Option(
        help="Security-group rules per pod." + default_help("sg_rules"),
    ),
]
TenantsOption = Annotated[
    int | None,
    typer.Option(
        help="Tenants the sandboxes are spread over." + default_help("tenants"),
    ),
]
MemoryMibOption = Annotated[
    int | None,
    typer.Option(
        help="Guest memory per sandbox, MiB." + default_help("memory_mib"),
    ),
]
CoresOption = Annotated[
    int | None,
    typer.Option(
        help="Override the profile's core count." + default_help("the profile's"),
    ),
]
VcpusOption = Annotated[
    float | None,
    typer.Option(
        help="vCPUs (CPU quota in cores) per sandbox." + default_help("the profile's"),
    ),
]
NicVfsOption = Annotated[
    int | None,
    typer.Option(
        help="VFs of the SR-IOV NIC (one per sandbox)." + default_help("the profile's"),
    ),
]
HugepagesOption = Annotated[
    bool | None,
    typer.Option(
        "--hugepages/--no-hugepages",
        help="Guest memory on hugepages (SR-IOV)." + default_help("the profile's"),
    ),
]
BackgroundFlowsOption = Annotated[
    int | None,
    typer.Option(
        help="Flows of traffic received during the storm." + default_help("background_flows"),
    ),
]
FlowGbpsOption = Annotated[
    float | None,
    typer.Option(
        help="Offered Gbps per flow." + default_help("flow_gbps"),
    ),
]
BackgroundPathOption = Annotated[
    str | None,
    typer.Option(
        help="Their data path." + default_help("the CNI's"),
    ),
]
AsJsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of tables.")
]
TraceOption = Annotated[
    Path | None, typer.Option(help="Write a Chrome trace-event JSON (open in ui.perfetto.dev).")
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(help="Apply a tuned config (bootstorm optimize --output); it overrides."),
]
WorkloadOption = Annotated[
    Path | None,
    typer.Option(
        help="Start one sandbox per start of this workload file (bootstorm workload "
        "--output), at its time, instead of all at once; --sandboxes is its number of starts."
    ),
]
WindowOption = Annotated[
    float | None,
    typer.Option(
        "--window-s",
        help="With --workload: the window of the p99 and the pool levels, s [default: 60].",
    ),
]
RefillWorkersOption = Annotated[
    int | None,
    typer.Option(
        help="Refill the pools while starts go on, with this many workers (devices made at "
        "once, all kinds together, through the same locks and CPU as the starts)."
        + default_help("no refill: pools made before the storm"),
    ),
]
FollowWindowOption = Annotated[
    float | None,
    typer.Option(
        "--follow-window-s",
        help="Pool targets follow the starts counted in this many past seconds (with the "
        "--pool counts as floors).",
    ),
]
FollowCoverOption = Annotated[
    float | None,
    typer.Option(
        "--follow-cover-s",
        help="Seconds of starts at the recent rate a following pool keeps ready.",
    ),
]
FollowMaxOption = Annotated[
    int | None,
    typer.Option("--follow-max-devices", help="The most devices a following pool's target asks."),
]
ExecutorOption = Annotated[
    ExecutorName | None,
    typer.Option(
        help="What runs the simulation: compiled (numba), simpy (the reference) or "
        "python; all three give the same numbers."
        + default_help("compiled; simpy with --trace, the only one that records spans"),
    ),
]


def simulate_cmd(
    scenario_file: ScenarioFileOption = None,
    cni: CniOption = None,
    sandboxes: SandboxesOption = None,
    profile: ProfileOption = None,
    seed: SeedOption = None,
    pool: PoolOption = None,
    limit: LimitOption = None,
    rtnl_priority: RtnlPriorityOption = None,
    qos_rules: QosRulesOption = None,
    sg_rules: SgRulesOption = None,
    tenants: TenantsOption = None,
    memory_mib: MemoryMibOption = None,
    cores: CoresOption = None,
    vcpus: VcpusOption = None,
    nic_vfs: NicVfsOption = None,
    hugepages: HugepagesOption = None,
    background_flows: BackgroundFlowsOption = None,
    flow_gbps: FlowGbpsOption = None,
    background_path: BackgroundPathOption = None,
    as_json: AsJsonOption = False,
    trace: TraceOption = None,
    config: ConfigOption = None,
    executor: ExecutorOption = None,
    workload: WorkloadOption = None,
    window_s: WindowOption = None,
    refill_workers: RefillWorkersOption = None,
    follow_window_s: FollowWindowOption = None,
    follow_cover_s: FollowCoverOption = None,
    follow_max_devices: FollowMaxOption = None,
    lifetime_s: Annotated[float | None, LIFETIME_OPTION] = None,
) -> None:
    """Simulate one boot storm and print its makespan, stages, locks and CPU.

    The defaults are the default scenario's; options override a scenario file.
    With --workload, the sandboxes start on the workload's schedule and the
    run is shown per window: p50/p99 startup, empty-pool starts, memory held.
    """
    from ._render import print_identification, result_tables
    from .workflows import what_if

    if trace is not None:
        check_output_path("trace", trace)
    refill = pool_refill_from_options(
        workers=refill_workers,
        follow_window_s=follow_window_s,
        follow_cover_s=follow_cover_s,
        follow_max_devices=follow_max_devices,
    )
    if window_s is not None and workload is None:
        raise ConfigError(
            f"window-s: goes with --workload (a storm at once has no windows), but got {window_s:g}"
        )
    window_s = 60.0 if window_s is None else window_s
    check_finite("window-s", window_s, low=1e-3, high=86_400.0 * 366)
    check_finite("lifetime-s", lifetime_s, low=0.0, high=MAX_ARRIVAL_S)
    starts = None
    if workload is not None:
        starts = load_workload("workload", workload)
        if sandboxes is not None and sandboxes != len(starts):
            raise ConfigError(
                f"sandboxes: {sandboxes} given with a workload of {len(starts):,} starts "
                "(--workload sets the sandboxes: leave --sandboxes out)"
            )
        if trace is not None:
            raise ConfigError("trace: not with --workload (a day of spans is no trace to open)")
    scenario = scenario_from_options(
        scenario_file,
        cni=cni,
        sandboxes=sandboxes,
        profile=profile,
        seed=seed,
        pools=pairs("pools", pool),
        limits=pairs("limits", limit),
        rtnl_priority=pairs("rtnl_priority", rtnl_priority),
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
        lifetime_s=lifetime_s,
    )
    if config is not None:
        scenario = scenario.replace(config=config)
    if refill is not None:
        scenario = scenario.replace(pool_refill=refill)
    if starts is not None:
        _simulate_traffic(scenario, starts, window_s=window_s, executor=executor, as_json=as_json)
        return
    if executor is None:
        # As every other command: the compiled executor, unless spans are asked for.
        executor = "simpy" if trace is not None else "compiled"
    what = what_if(scenario, record=trace is not None, executor=executor)
    if trace is not None:
        from .simulator.trace_export import write_chrome_trace

        assert what.result.recording is not None
        title = f"{scenario.sandboxes} x {scenario.cni}"
        try:
            # Atomic: a full disk leaves no half a trace, and says so in one line.
            write_chrome_trace(what.result.recording, trace, title=title)
        except OSError as exc:
            raise ConfigError(
                f"trace: {shown_path(trace)}: cannot write ({exc.strerror or exc})"
            ) from None
    if as_json:
        sys.stdout.write(json.dumps(what.to_dict()) + "\n")
        return
    console = terminal_console()
    console.print(result_tables(what))
    print_identification(console, what.identification)
    if (bg := what.background) is not None:
        console.print(
            f"background traffic on {bg.path}: {bg.delivered_gbps:.1f} Gbps "
            f"delivered, {bg.cores_taken:.2f} cores taken from the storm "
            f"({bg.softirq_cores:.2f} by IRQs and softirqs)"
        )
    if trace is not None:
        console.print(f"trace written to [bold]{trace}[/] — open it in https://ui.perfetto.dev")


def _simulate_traffic(
    scenario: Scenario, starts: Workload, *, window_s: float, executor: str | None, as_json: bool
) -> None:
    from rich.markup import escape

    from ._render_traffic import traffic_tables
    from .workflows import traffic_what_if

    what = traffic_what_if(scenario, starts, window_s=window_s, executor=executor or "compiled")
    if as_json:
        sys.stdout.write(json.dumps(what.to_dict()) + "\n")
        return
    console = terminal_console()
    console.print(traffic_tables(what))
    for line in what.cautions:
        console.print(f"[yellow]caution: {escape(line)}[/]")


def profiles_cmd() -> None:
    """List the built-in calibration profiles."""
    from .models import available_profiles

    console = terminal_console()
    for name in available_profiles():
        console.print(name)
