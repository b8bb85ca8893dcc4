"""``bootstorm sweep``: a what-if grid on Dask, as a table and a CSV or Parquet file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ._options import EXECUTOR_OPTION
from ._units import parse_int_list
from .models import ConfigError
from .simulator import ExecutorName

__all__ = ["sweep_cmd"]

console = Console()
if not console.is_terminal:
    console = Console(width=160)


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
        int | None, typer.Option(help="LocalCluster worker processes (default: one per core).")
    ] = None,
    output: Annotated[Path | None, typer.Option(help="Write the table: .csv or .parquet.")] = None,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
) -> None:
    """Run a what-if grid in parallel on Dask and print one row per point."""
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

    if output is not None and output.suffix.lower() not in (".csv", ".parquet"):
        raise ConfigError(f"output: expected a .csv or .parquet file, but got {str(output)!r}")
    base = Scenario.from_yaml(scenario_file) if scenario_file is not None else Scenario()
    if profile is not None:
        base = base.replace(profile=profile)
    grid = SweepGrid(
        base=base,
        sandboxes=parse_int_list("sandboxes", sandboxes) if sandboxes else (),
        cnis=tuple(c.strip() for c in cni.split(",")) if cni else (),
        memory_mib=parse_int_list("memory_mib", memory_mib) if memory_mib else (),
        pools=tuple(pool or ()),
        seeds=parse_int_list("seeds", seeds) if seeds else (),
    )
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
    print_caution(console, *scenarios)
    if output is not None:
        _write_frame(frame, output)
        console.print(f"table written to [bold]{output}[/]")
