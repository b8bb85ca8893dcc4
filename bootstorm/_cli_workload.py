"""``bootstorm workload``: one node's sandbox starts from a trace or the MMPP."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._io import check_output_path, terminal_console, write_atomically
from ._options import check_count, check_input_file
from ._params import format_problem, short_repr
from ._units import parse_seconds
from .models import ConfigError

if TYPE_CHECKING:
    from rich.table import Table

    from .workflows.workloads import WorkloadOutcome

__all__ = ["parse_window", "workload_cmd", "workload_table"]


def parse_window(text: str) -> tuple[float, float]:
    """``0:3600``, ``10min:2h`` → (start, end) in seconds; ``START:`` runs to the end."""
    begin, sep, end = text.partition(":")
    if not sep:
        raise ConfigError(
            format_problem("window", "expected START:END such as 0:3600 or 10min:2h", text)
        )
    start = 0.0 if begin.strip() in ("", "0") else parse_seconds("window", begin)
    stop = math.inf if end.strip() == "" else parse_seconds("window", end)
    if not stop > start:
        raise ConfigError(format_problem("window", "must end after it starts", text))
    return start, stop


def workload_table(outcome: WorkloadOutcome) -> Table:
    """The stream's statistics, two columns: reads at 80 columns."""
    from rich import box
    from rich.table import Table

    s = outcome.stats
    w = outcome.workload
    t = Table(
        title=f"Starts: {w.source}, {w.parameters.get('policy', '?')}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    t.add_column("statistic")
    t.add_column("value", justify="right", no_wrap=True)
    rows = [
        ("invocations", f"{s.invocations:,}"),
        ("sandbox starts", f"{s.starts:,}"),
        ("cold-start fraction", f"{s.cold_fraction:.3f}"),
        ("functions started", f"{s.functions:,}"),
        ("span (s)", f"{s.duration_s:,.1f}"),
        ("starts per second, mean", f"{s.mean_per_s:.3f}"),
        ("starts per second, busiest minute", f"{s.max_per_s_60s:.3f}"),
        ("starts in the peak second", f"{s.peak_per_s:,}"),
        ("bursts (starts <= 1 s apart)", f"{s.bursts:,}"),
        ("burst size, max", f"{s.burst_max:,}"),
        ("burst size, p99", f"{s.burst_p99:.1f}"),
    ]
    for name, value in rows:
        t.add_row(name, value)
    return t


def workload_cmd(
    trace: Annotated[
        Path | None,
        typer.Argument(
            help="An invocation trace .csv: Azure Functions 2019 per-minute counts "
            "(invocations_per_function_md.anon.dNN.csv), the Azure Functions 2021 "
            "invocations, or start times (a start_s column); told apart by the header. "
            "None: the MMPP."
        ),
    ] = None,
    durations: Annotated[
        Path | None,
        typer.Option(
            help="A 2019 trace's function_durations_percentiles.anon.dNN.csv "
            "(execution times), for a 2019 trace only."
        ),
    ] = None,
    memory: Annotated[
        Path | None,
        typer.Option(
            help="A 2019 trace's app_memory_percentiles.anon.dNN.csv, for a 2019 trace only."
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            help="Keep-alive policy deciding cold starts: none (every invocation starts a "
            "sandbox), fixed or hybrid (Serverless in the Wild, ATC'20).  [default: fixed "
            "for an Azure trace, none otherwise]"
        ),
    ] = None,
    keep_alive: Annotated[
        str | None,
        typer.Option(
            help="fixed: the keep-alive; hybrid: its fallback keep-alive.  "
            "[default: 10min for fixed, 4h for hybrid]"
        ),
    ] = None,
    node_share: Annotated[
        float, typer.Option(help="Share of the applications this node holds (stable hash).")
    ] = 1.0,
    window: Annotated[
        str | None,
        typer.Option(help="START:END of the trace's time to take, e.g. 0:3600 or 10min:2h."),
    ] = None,
    compress: Annotated[
        float, typer.Option(help="Divide times by this factor (>= 1) after the policy.")
    ] = 1.0,
    seed: Annotated[
        int, typer.Option(help="Seed of the MMPP and of the 2019 trace's in-minute times.")
    ] = 0,
    rate_low: Annotated[
        float | None, typer.Option(help="MMPP: quiet state's invocations per s [default: 2].")
    ] = None,
    rate_high: Annotated[
        float | None, typer.Option(help="MMPP: burst state's invocations per s [default: 40].")
    ] = None,
    mean_low: Annotated[
        float | None, typer.Option(help="MMPP: quiet state's mean sojourn, s [default: 300].")
    ] = None,
    mean_high: Annotated[
        float | None, typer.Option(help="MMPP: burst state's mean sojourn, s [default: 20].")
    ] = None,
    duration: Annotated[
        str | None, typer.Option(help="MMPP: length of the stream, e.g. 1h [default: 1h].")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the workload file (.csv) here."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the statistics as one JSON object.")
    ] = False,
) -> None:
    """Read a workload (Azure Functions 2019 or 2021 traces, start times, or
    a bursty MMPP) and print one node's sandbox starts: rate, bursts, peak."""
    from .traces.workload import MmppParameters
    from .workflows.workloads import make_policy, workload

    check_input_file("trace", trace)
    check_input_file("durations", durations)
    check_input_file("memory", memory)
    check_count("seed", seed, low=0, high=2**63 - 1)
    if output is not None:
        if output.suffix.lower() != ".csv":
            # What every reader of a workload opens: CSV text, named so.
            raise ConfigError(
                format_problem("output", "a workload file is CSV text: name it .csv", str(output))
            )
        check_output_path(
            "output", output, inputs={"trace": trace, "durations": durations, "memory": memory}
        )
    keep_alive_s = parse_seconds("keep_alive", keep_alive) if keep_alive is not None else None
    if policy is not None:
        make_policy(policy, keep_alive_s)
    window_s = parse_window(window) if window is not None else None
    mmpp_given = {
        "rate_low": rate_low,
        "rate_high": rate_high,
        "mean_low_s": mean_low,
        "mean_high_s": mean_high,
        "duration_s": parse_seconds("duration", duration) if duration is not None else None,
    }
    mmpp_given = {k: v for k, v in mmpp_given.items() if v is not None}
    if trace is not None and mmpp_given:
        name = next(iter(mmpp_given))
        raise ConfigError(
            format_problem(name, "is an MMPP parameter; give no TRACE", short_repr(str(trace)))
        )
    params = MmppParameters(**mmpp_given) if trace is None else None
    outcome = workload(
        trace=trace,
        durations=durations,
        memory=memory,
        mmpp_parameters=params,
        policy=policy,
        keep_alive_s=keep_alive_s,
        node_share=node_share,
        window=window_s,
        compress=compress,
        seed=seed,
    )
    if output is not None:
        from .traces.workload import format_workload

        if not len(outcome.workload):
            # Every command that reads a workload refuses one with no start.
            raise ConfigError(
                format_problem(
                    "output",
                    f"not written: no sandbox start on this node in the window (of "
                    f"{outcome.workload.invocations:,} invocations); take a larger --node-share "
                    "or another --window",
                    str(output),
                )
            )
        write_atomically(output, format_workload(outcome.workload))
    if as_json:
        from dataclasses import asdict

        record = {
            "source": outcome.workload.source,
            "parameters": dict(outcome.workload.parameters),
            **asdict(outcome.stats),
        }
        typer.echo(json.dumps(record, sort_keys=True))
        return
    console = terminal_console()
    console.print(workload_table(outcome))
    if output is not None:
        console.print(f"wrote {output}")
