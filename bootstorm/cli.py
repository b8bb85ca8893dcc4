"""The ``bootstorm`` command line (typer + rich): the registry of commands.

Each command lives in a module of its own (``_cli_<command>.py``), loaded
only when it runs or shows its help (`bootstorm --help` stays under 0.3 s
and loads none of them): it parses its options, calls a workflow
(:mod:`bootstorm.workflows`) and renders the outcome. No command module
imports another.

Bad input ends with one line on stderr naming the field and the value, and
exit code 2; no traceback.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

import typer
from typer.core import TyperGroup

from ._io import shown_text, terminal_console
from .models import ConfigError

if TYPE_CHECKING:
    from typer import _click as click  # typer's vendored click

__all__ = ["app", "main"]


class LazyCommand(NamedTuple):
    """A command of the registry: where it lives and what ``--help`` says of it."""

    module: str
    attribute: str
    """A function (one command) or a typer app (a group, when it ends in ``_app``)."""
    help: str
    summarise: bool = False
    """``help`` is the command's whole first paragraph, cut to the width
    (click's short help), rather than a line written for the listing."""


#: Every command, in the order ``bootstorm --help`` lists them; their modules
#: load only when one is asked for.
COMMANDS: dict[str, LazyCommand] = {
    "simulate": LazyCommand(
        "._cli_simulate",
        "simulate_cmd",
        "Simulate one boot storm and print its makespan, stages, locks and CPU.",
        summarise=True,
    ),
    "demo": LazyCommand(
        "._cli_demo",
        "demo_cmd",
        "The default storm (ipvtap on the seed-000 host), its what-ifs, pooling, a "
        "small search for per-stage limits; writes tuned.yaml and report.html.",
        summarise=True,
    ),
    "calibrate": LazyCommand(
        "._cli_calibrate",
        "calibrate_cmd",
        "Fit a profile to a paper's *fit* rows, to recorded storms (--measured), or "
        "to a calibration plan run on this node (--plan); print the per-target "
        "error table and what identified each cost.",
        summarise=True,
    ),
    "report": LazyCommand(
        "._cli_report",
        "report_cmd",
        "Write one self-contained HTML report (opens offline): timeline, stage "
        "breakdown, locks, CPU; for a study, its history and Pareto front.",
        summarise=True,
    ),
    "validate": LazyCommand(
        "._cli_validate",
        "validate_cmd",
        "Run the storm on this host (root), simulate it, print predicted vs measured.",
        summarise=True,
    ),
    "tune": LazyCommand(
        "._cli_tune",
        "tune_cmd",
        "Root: calibrate this node, search pools and limits on its model, run the "
        "best candidates and the baseline for real, and write the config that was "
        "measured faster than the baseline (and none otherwise).",
        summarise=True,
    ),
    "profiles": LazyCommand(
        "._cli_simulate", "profiles_cmd", "List the built-in calibration profiles.", summarise=True
    ),
    "optimize": LazyCommand(
        "._cli_optimize",
        "optimize_cmd",
        "Search per-stage limits (and pool sizes) that shorten the storm; write tuned.yaml.",
    ),
    "sweep": LazyCommand("._cli_sweep", "sweep_cmd", "Run a what-if grid in parallel on Dask."),
    "dataplane": LazyCommand(
        "._cli_dataplane",
        "dataplane_cmd",
        "Per-flow throughput ceiling, aggregate throughput, CPU and IRQ/softirq rates.",
    ),
    "workload": LazyCommand(
        "._cli_workload",
        "workload_cmd",
        "Read a workload (Azure Functions traces, start times, an MMPP); print and "
        "write one node's sandbox starts.",
    ),
    "testbed": LazyCommand("._cli_testbed", "testbed_app", "Real boot storms on this host (root)."),
    "agent": LazyCommand(
        "._cli_agent", "agent_app", "The node agent: stage permits, device pools, tuned config."
    ),
    "config": LazyCommand("._cli_agent", "config_app", "Tuned configs on nodes."),
}

#: The packages of the optional ``node`` extra (pyproject's), by import name:
#: the testbed's and the agent's. A command that finds one missing says which
#: extra to install, in one line (``sweep`` says it of Dask the same way);
#: tests/test_packaging.py holds this table to pyproject's.
_EXTRA_OF = {
    "aiohttp": "node",
    "httpx": "node",
    "prometheus_client": "node",
    "pyroute2": "node",
}


def _load_command(name: str) -> click.Command:
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(entry.module, __package__), entry.attribute)
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
    _install_aliases(command, name)
    if not entry.summarise:
        command.short_help = entry.help
    return command


def _install_aliases(command: click.Command, path: str) -> None:
    """The old spellings of ``command``'s options (and its subcommands'), hidden."""
    from ._vocabulary import install_aliases

    if isinstance(command, TyperGroup):
        for sub_name, sub in command.commands.items():
            _install_aliases(sub, f"{path} {sub_name}")
    else:
        install_aliases(command, path)


class _LazyGroup(TyperGroup):
    """The main app's group: the commands of :data:`COMMANDS` are listed from
    the table and imported only when one of them is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            self.add_command(_load_command(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from typer._click.utils import make_default_short_help

        limit = formatter.width - 18
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                if self.commands[name].hidden:
                    continue
                rows.append((name, self.commands[name].get_short_help_str(limit=limit)))
                continue
            entry = COMMANDS[name]
            shown = make_default_short_help(entry.help, limit) if entry.summarise else entry.help
            rows.append((name, shown))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


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


def _warnings_and_up(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("bootstorm")
        except PackageNotFoundError:  # a source tree on sys.path, not installed
            installed = "unknown (not installed)"
        sys.stdout.write(f"bootstorm {installed}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_show_version,
        is_eager=True,
        show_default=False,
        help="Print the installed version and exit.",
    ),
) -> None:
    """Predict and shorten boot storms of secure containers."""


def _command_path(argv: list[str] | None) -> str:
    """The command a command line asks for (``agent serve``, ``validate``), for a message."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        return "bootstorm"
    path = args[0]
    if COMMANDS[path].attribute.endswith("_app") and len(args) > 1 and not args[1].startswith("-"):
        path += f" {args[1]}"  # a group's subcommand
    return path


#: Problems of one input shown in its error line; the rest are counted.
_PROBLEMS_SHOWN = 3


def _run(command: click.Command, argv: list[str] | None) -> Any:
    """``command``'s run; a package of an optional extra found missing (by the
    command's module or one it loads) is a :class:`ConfigError` naming the
    command, the package and the extra."""
    try:
        return command.main(args=argv, prog_name="bootstorm", standalone_mode=False)
    except ModuleNotFoundError as exc:
        extra = _EXTRA_OF.get(exc.name or "")
        if extra is None:
            raise  # not a package of an extra (or one of its modules): a bug to see whole
        raise ConfigError(
            f"{_command_path(argv)}: needs {exc.name}; pip install 'bootstorm[{extra}]'"
        ) from None


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning bad input into one line and exit 2."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    # Libraries that set their own loggers' levels (Dask's distributed: 30
    # INFO lines a sweep) reach the root's handler past the root's level.
    handler.addFilter(_warnings_and_up)
    logging.basicConfig(level=logging.WARNING, handlers=[handler])  # no-op if configured
    command = typer.main.get_group(app)
    from .simulator import DeadlockError, ProgramError
    from .traces import TraceFormatError
    from .workflows._errors import StormInterruptedError

    try:
        code = _run(command, argv)
    except (ConfigError, ProgramError, TraceFormatError) as exc:
        # A malformed scenario, profile, config or trace: what and where, no
        # traceback, in one line (a file's several problems joined: the first
        # few whole, then how many more).
        problems = str(exc).splitlines() or [type(exc).__name__]
        shown = "; ".join(problems[:_PROBLEMS_SHOWN])
        if len(problems) > _PROBLEMS_SHOWN:
            shown += f"; and {len(problems) - _PROBLEMS_SHOWN} more"
        sys.stderr.write(f"error: {shown}\n")
        raise SystemExit(2) from None
    except StormInterruptedError as exc:
        # Ctrl-C or SIGTERM during a real storm: its cleanup has run.
        terminal_console().print(f"[yellow]{exc}[/]")
        raise SystemExit(130) from None
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
