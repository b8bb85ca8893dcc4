"""``bootstorm dataplane``: throughput ceilings and CPU of a traffic load."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ._io import terminal_console
from ._params import short_repr

# The model loads when a command runs, not when the CLI is built (`--help`).
from .models import ConfigError
from .models._names import PATH_NAMES
from .models.scenario import MAX_BACKGROUND_FLOWS

if TYPE_CHECKING:
    from .models.softirq import DataplaneResult

__all__ = ["completion_table", "dataplane_cmd", "dataplane_table", "parse_flows"]


def parse_flows(text: str) -> list[int]:
    """``"1,2,4,6"`` as flow counts; a bad item is a :class:`ConfigError`."""
    out = []
    for item in text.split(","):
        try:
            n = int(item)
        except ValueError:
            raise ConfigError(
                f"flows: expected integers separated by commas, but got {short_repr(text)}"
            ) from None
        if not 1 <= n <= MAX_BACKGROUND_FLOWS:
            # The storm's bound on flows: 10**9 flows ran for minutes (one
            # placement draw per flow) before anything was shown.
            raise ConfigError(
                f"flows: each count must be in 1..{MAX_BACKGROUND_FLOWS:,}, but got {n}"
            )
        out.append(n)
        if len(out) > MAX_FLOW_COUNTS:
            raise ConfigError(f"flows: at most {MAX_FLOW_COUNTS} counts, but got more")
    return out


#: Most flow counts in one ``--flows`` (a row each): a table, not a sweep.
MAX_FLOW_COUNTS = 1_000


def dataplane_table(title: str, results: list[DataplaneResult]) -> Table:
    """One row per traffic load: throughput, CPU by kind, IRQ and softirq rates."""
    from rich import box

    # Headers over lines of at most 8 characters, numbers that never wrap and
    # one space between columns: eleven columns fit 80 (a pipe's width).
    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
        collapse_padding=True,
    )
    for col in (
        "flows",
        "ceiling\nper flow\nGbps",
        "per\nflow\nGbps",
        "total\nGbps",
        "spread",
        "irq\ncores",
        "softirq\ncores",
        "system\ncores",
        "user\ncores",
        "IRQ\nper s",
        "softirq\nper s",
    ):
        t.add_column(col, justify="right", no_wrap=True)
    for r in results:
        t.add_row(
            str(r.traffic.flows),
            f"{r.per_flow_ceiling_gbps:.2f}",
            f"{r.per_flow_gbps:.2f}",
            f"{r.aggregate_gbps:.2f}",
            f"{r.flow_spread:.2f}x",
            f"{r.cpu_irq_cores:.2f}",
            f"{r.cpu_softirq_cores:.2f}",
            f"{r.cpu_system_cores:.2f}",
            f"{r.cpu_user_cores:.2f}",
            f"{r.irq_per_s:,.0f}",
            f"{r.softirq_per_s:,.0f}",
        )
    return t


def completion_table(results: list[DataplaneResult]) -> Table | None:
    """Flow completion times per traffic load (``None`` without ``flow_bytes``)."""
    from rich import box

    done = [r for r in results if r.fct_p50_s is not None and r.fct_p99_s is not None]
    if not done:
        return None
    title = f"flow completion, {done[0].traffic.flow_bytes:,} bytes per flow, all at once"
    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
        min_width=len(title),
    )
    for col in ("flows", "p50 ms", "p99 ms"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in done:
        assert r.fct_p50_s is not None and r.fct_p99_s is not None
        t.add_row(str(r.traffic.flows), f"{r.fct_p50_s * 1e3:,.2f}", f"{r.fct_p99_s * 1e3:,.2f}")
    return t


def dataplane_cmd(
    profile: Annotated[str, typer.Option(help="Profile with a `dataplane` section.")] = "paper-004",
    path: Annotated[
        str, typer.Option(help=f"Receive data path: {', '.join(PATH_NAMES)}.")
    ] = "docker-overlay",
    flows: Annotated[str, typer.Option(help="Flow counts, comma-separated.")] = "1,2,4,6",
    proto: Annotated[str, typer.Option(help="tcp or udp.")] = "tcp",
    message_bytes: Annotated[
        int | None,
        typer.Option(help="Bytes per send/recv.  [default: 128 KiB TCP, 8 KiB UDP]"),
    ] = None,
    flow_gbps: Annotated[float | None, typer.Option(help="Offered Gbps per flow.")] = None,
    flow_bytes: Annotated[
        int | None,
        typer.Option(help="Bytes per flow: adds its completion times (p50, p99)."),
    ] = None,
    placement: Annotated[
        str, typer.Option(help="random, pinned-apart or pinned-together.")
    ] = "random",
    seed: Annotated[int, typer.Option(help="Seed of the RSS and placement draws.")] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per line instead of a table.")
    ] = False,
) -> None:
    """Per-flow throughput ceiling, aggregate throughput, CPU and IRQ/softirq rates."""
    from ._render import print_caution
    from .calibration import caveats
    from .models import load_profile
    from .models.dataplane import Traffic
    from .models.softirq import solve_on_profile
    from .workflows import known_misses

    prof = load_profile(profile)
    # Every load built (so validated) before the first is solved.
    loads = [
        Traffic(
            path=path,  # validated by Traffic
            proto=proto,
            flows=n,
            message_bytes=message_bytes,
            flow_gbps=flow_gbps,
            flow_bytes=flow_bytes,
            placement=placement,
            seed=seed,
        )
        for n in parse_flows(flows)
    ]
    results = [solve_on_profile(prof, traffic) for traffic in loads]
    if as_json:
        for r in results:
            known = [m.to_dict() for m in caveats(r.traffic)]
            sys.stdout.write(
                json.dumps({"profile": prof.name, **r.to_dict(), "caveats": known}) + "\n"
            )
        return
    console = terminal_console()
    console.print(dataplane_table(f"{path} {proto} on {prof.name}", results))
    completion = completion_table(results)
    if completion is not None:
        console.print(completion)
    print_caution(console, *(known_misses(r.traffic) for r in results))
