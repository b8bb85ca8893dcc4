"""``bootstorm sweep``: a what-if grid on Dask, as a table and a CSV or Parquet file."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from ._io import check_output_path, terminal_console
from ._options import EXECUTOR_OPTION
from ._units import parse_int_list
from .models import ConfigError
from .simulator import ExecutorName

__all__ = ["sweep_cmd"]


#: Most points in one sweep. Each is a storm (~0.1-1 s compiled at 400
#: sandboxes), and the grid is a cross product that a few long lists make
#: astronomical (5 axes of 1 000 values: 10¹⁵ points, built before any runs).
MAX_SWEEP_POINTS = 10_000
#: Most values on one axis (``--sandboxes 1,2,...``).
MAX_AXIS_VALUES = 1_000


def _axis(field: str, values: tuple[object, ...]) -> tuple[object, ...]:
    if len(values) > MAX_AXIS_VALUES:
        raise ConfigError(f"{field}: at most {MAX_AXIS_VALUES} values, but got {len(values)}")
    return values


def _write_frame(frame: object, path: Path) -> None:
    """CSV or Parquet by extension, written beside ``path`` and renamed over it."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ConfigError(f"output: expected a .csv or .parquet file, but got {str(path)!r}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    os.close(fd)
    try:
        if suffix == ".csv":
            frame.to_csv(tmp, index=False)  # type: ignore[attr-defined]
        else:
            frame.to_parquet(tmp, index=False)  # type: ignore[attr-defined]
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sweep_cmd(
    scenario_file: Annotated[
        Path | None, typer.Option("--scenario", help="Base scenario YAML.")
    ] = None,
    sandboxes: Annotated[str | None, typer.Option(help="Storm sizes, e.g. 100,200,400.")] = None,
    cni: Annotated[str | None, typer.Option(help="CNIs, e.g. ipvtap,veth.")] = None,
    memory_mib: Annotated[str | None, typer.Option(help="Guest memory, e.g. 512,2048.")] = None,
    pool: Annotated[
        list[str] | None,
        typer.Option(help="Pools per point: none, full or KIND=N,KIND=N (repeatable)."),
    ] = None,
    seeds: Annotated[str | None, typer.Option(help="Seeds, e.g. 0,1,2.")] = None,
    profile: Annotated[str | None, typer.Option(help="Calibration profile name or path.")] = None,
    scheduler: Annotated[
        str | None, typer.Option(help="A running Dask scheduler (tcp://host:8786).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            # A process each on this machine: more than a few per core only queue.
            min=1,
            max=4 * (os.cpu_count() or 1),
            help="LocalCluster worker processes (default: one per core).",
        ),
    ] = None,
    output: Annotated[Path | None, typer.Option(help="Write the table: .csv or .parquet.")] = None,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
) -> None:
    """Run a what-if grid in parallel on Dask and print one row per point."""
    console = terminal_console()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ._render import print_caution
    from ._render_optimize import frame_table
    from .calibration import caveat_rows
    from .models import Scenario
    from .optimizers._sweep import SweepGrid, sweep
    from .workflows import known_misses

    if output is not None and output.suffix.lower() not in (".csv", ".parquet"):
        raise ConfigError(f"output: expected a .csv or .parquet file, but got {str(output)!r}")
    if output is not None:
        check_output_path("output", output)
    base = Scenario.from_yaml(scenario_file) if scenario_file is not None else Scenario()
    if profile is not None:
        base = base.replace(profile=profile)
    axes = {
        "sandboxes": _axis(
            "sandboxes", parse_int_list("sandboxes", sandboxes) if sandboxes else ()
        ),
        "cnis": _axis("cni", tuple(c.strip() for c in cni.split(",")) if cni else ()),
        "memory_mib": _axis(
            "memory_mib", parse_int_list("memory_mib", memory_mib) if memory_mib else ()
        ),
        "pools": _axis("pool", tuple(pool or ())),
        "seeds": _axis("seeds", parse_int_list("seeds", seeds) if seeds else ()),
    }
    points = math.prod(max(len(v), 1) for v in axes.values())
    if points > MAX_SWEEP_POINTS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in axes.items() if v)
        raise ConfigError(
            f"sweep: {sizes} make {points:,} points; at most {MAX_SWEEP_POINTS:,} in one sweep"
        )
    grid = SweepGrid(base=base, **axes)
    total = len(grid.points())
    with Progress(
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as progress:
        task = progress.add_task("sweep", total=total)
        frame = sweep(
            grid,
            scheduler=scheduler,
            workers=workers,
            on_done=lambda done, _total: progress.update(task, completed=done),
            executor=executor,
        )
    # Rows come back in grid order: each point's known misses, by row id.
    scenarios = [scenario for scenario, _pool in grid.points()]
    frame["caveats"] = [caveat_rows(s) for s in scenarios]
    console.print(frame_table(f"sweep: {total} storms", frame))
    print_caution(console, *(known_misses(s) for s in scenarios))
    if output is not None:
        _write_frame(frame, output)
        console.print(f"table written to [bold]{output}[/]")
