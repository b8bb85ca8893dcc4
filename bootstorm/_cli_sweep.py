"""``bootstorm sweep``: a what-if grid on Dask, as a table and a CSV or Parquet file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from ._io import check_output_path, terminal_console
from ._options import EXECUTOR_OPTION, check_address, check_count, default_help
from ._params import parse_seeds, short_repr
from ._units import parse_int_list
from .models import ConfigError
from .models.scenario import MAX_SANDBOXES
from .simulator import ExecutorName

__all__ = ["sweep_cmd"]


def _write_frame(frame: object, path: Path) -> None:
    """CSV or Parquet by extension, written beside ``path`` and renamed over it."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ConfigError(
            f"output: expected a .csv or .parquet file, but got {short_repr(str(path))}"
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    os.close(fd)
    try:
        if suffix == ".csv":
            frame.to_csv(tmp, index=False)  # type: ignore[attr-defined]
        else:
            frame.to_parquet(tmp, index=False)  # type: ignore[attr-defined]
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):  # a full disk: one line, nothing left behind
            raise ConfigError(
                f"output: {short_repr(str(path))}: cannot write ({exc.strerror or exc})"
            ) from None
        raise


ScenarioFileOption = Annotated[
    Path | None,
    typer.Argument(
        metavar="SCENARIO",
        help="The base scenario: a file (or an installed example's name); options override it.",
    ),
]
SandboxesOption = Annotated[
    str | None,
    typer.Option(help="Sandboxes started at once, e.g. 100,200,400." + default_help("sandboxes")),
]
CniOption = Annotated[
    str | None, typer.Option(help="CNIs, e.g. ipvtap,veth." + default_help("cni"))
]
MemoryMibOption = Annotated[
    str | None,
    typer.Option(help="Guest memory per sandbox, MiB, e.g. 512,2048." + default_help("memory_mib")),
]
PoolOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Pools per point: none, full or KIND=COUNT,KIND=COUNT (repeatable)."
        + default_help("the scenario's pools")
    ),
]
SeedsOption = Annotated[
    str | None,
    typer.Option(help="Seeds, e.g. 0,1,2, 1001-1010 or 1-3,7." + default_help("seed")),
]
ProfileOption = Annotated[
    str | None,
    typer.Option(help="Calibration profile name or YAML path." + default_help("profile")),
]
SchedulerOption = Annotated[
    str | None, typer.Option(help="A running Dask scheduler (tcp://host:8786).")
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        # A process each on this machine: more than a few per core only queue.
        min=1,
        max=4 * (os.cpu_count() or 1),
        help="LocalCluster worker processes." + default_help("one per core"),
    ),
]
OutputOption = Annotated[
    Path | None, typer.Option("-o", "--output", help="Write the table: .csv or .parquet.")
]


def sweep_cmd(
    scenario_file: ScenarioFileOption = None,
    sandboxes: SandboxesOption = None,
    cni: CniOption = None,
    memory_mib: MemoryMibOption = None,
    pool: PoolOption = None,
    seeds: SeedsOption = None,
    profile: ProfileOption = None,
    scheduler: SchedulerOption = None,
    workers: WorkersOption = None,
    output: OutputOption = None,
    executor: Annotated[ExecutorName, EXECUTOR_OPTION] = "compiled",
) -> None:
    """Run a what-if grid in parallel on Dask and print one row per point."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ._render import print_caution
    from ._render_optimize import frame_table
    from .models import Scenario, load_scenario
    from .optimizers import check_sweep
    from .workflows import run_sweep, sweep_grid

    console = terminal_console()
    if output is not None and output.suffix.lower() not in (".csv", ".parquet"):
        raise ConfigError(
            f"output: expected a .csv or .parquet file, but got {short_repr(str(output))}"
        )
    if output is not None:
        check_output_path("output", output)
    check_address("scheduler", scheduler)
    base = load_scenario(scenario_file) if scenario_file is not None else Scenario()
    if profile is not None:
        base = base.replace(profile=profile)
    # Given but empty (``--sandboxes ''``) is refused, not read as "keep the base".
    sizes = parse_int_list("sandboxes", sandboxes) if sandboxes is not None else ()
    for n in sizes:
        # Checked here: a grid point's tenants follow its size, so a size of 0
        # was refused as `tenants` too, naming an option nobody gave.
        check_count("sandboxes", n, low=1, high=MAX_SANDBOXES)
    grid = sweep_grid(
        base,
        sandboxes=sizes,
        cnis=tuple(c.strip() for c in cni.split(",")) if cni is not None else (),
        memory_mib=parse_int_list("memory_mib", memory_mib) if memory_mib is not None else (),
        pools=tuple(pool or ()),
        seeds=parse_seeds(seeds) if seeds is not None else (),
    )
    check_sweep(grid)  # before the progress bar: a refusal is one line
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
        swept = run_sweep(
            grid,
            scheduler=scheduler,
            workers=workers,
            on_done=lambda done, _total: progress.update(task, completed=done),
            executor=executor,
        )
    console.print(frame_table(f"sweep: {total} storms", swept.frame))
    print_caution(console, *swept.known)
    if output is not None:
        _write_frame(swept.frame, output)
        console.print(f"table written to [bold]{output}[/]")
