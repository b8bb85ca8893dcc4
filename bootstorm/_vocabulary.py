"""The command line's one vocabulary: each concept's option name, value syntax
and unit, the same in every command that takes it, and the old spellings
that still parse for one release.

``tests/bootstorm/test_vocabulary.py`` walks every command's options against
:data:`CONCEPTS`: an option spelled as a concept's canonical name is in that
concept's commands, of its declared kind; an old spelling is hidden where it
still parses; every command in :data:`WRITES_FILE` has ``-o/--output``.

:func:`install_aliases` gives a command its old spellings when the CLI loads
it (``bootstorm.cli``): each one a hidden option onto the canonical one's
value, which prints one deprecation line when used.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from typer import _click as click  # typer's vendored click

__all__ = [
    "CONCEPTS",
    "UNIT_SUFFIXES",
    "WRITES_FILE",
    "Alias",
    "Concept",
    "Form",
    "aliases_of",
    "install_aliases",
]

#: What an option's value is on the command line: ``int`` ``float`` ``str``
#: ``path`` (one value), ``flag`` (``--x`` or ``--x/--no-x``), ``choice`` (one
#: of fixed names), ``positional`` (an argument, not an option).
Kind = Literal["int", "float", "str", "path", "flag", "choice", "positional"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Form:
    """How a group of commands takes a concept: the value's kind and syntax."""

    commands: tuple[str, ...]
    """Command paths as typed after ``bootstorm``: ``"tune"``, ``"testbed run"``."""
    kind: Kind
    syntax: str
    """The value as the help writes it: ``COUNT``, ``KIND=COUNT``, ``1001-1010 or 0,1,2``."""
    repeatable: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Alias:
    """An old spelling of a concept's option, hidden, kept for one release."""

    old: str
    commands: tuple[str, ...]
    """The commands where ``old`` was an option: only there does it still parse."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Concept:
    """One thing the command line names, and how every command names it."""

    name: str
    option: str
    """The canonical spelling: ``--trials``, or ``SCENARIO`` for a positional argument."""
    forms: tuple[Form, ...]
    """Usually one; a second only where a command takes several values of the
    concept (a sweep's sizes) or a differently typed one, and ``why`` says so."""
    help: str
    short: str | None = None
    unit: str = ""
    aliases: tuple[Alias, ...] = ()
    optional: bool = False
    """Left out, the command does without it (no config, no file written):
    there is no default to show."""
    why: str = ""
    """Why the concept keeps a name apart from a near namesake (``--repeats``
    and ``--plan-runs``), or takes two forms."""

    @property
    def commands(self) -> tuple[str, ...]:
        return tuple(c for form in self.forms for c in form.commands)

    def form_of(self, command: str) -> Form | None:
        return next((f for f in self.forms if command in f.commands), None)


_COUNT = "COUNT"
_SCENARIO_READERS = ("simulate", "optimize", "sweep")

#: Every concept more than one command names, or that once had another name.
CONCEPTS: tuple[Concept, ...] = (
    Concept(
        name="scenario",
        option="SCENARIO",
        forms=(Form(commands=_SCENARIO_READERS, kind="positional", syntax="FILE or example name"),),
        help="A scenario file (or an installed example's name); options override it.",
        aliases=(Alias(old="--scenario", commands=("optimize", "sweep")),),
    ),
    Concept(
        name="sandboxes",
        option="--sandboxes",
        forms=(
            Form(
                commands=("simulate", "demo", "report", "validate", "tune", "testbed run"),
                kind="int",
                syntax=_COUNT,
            ),
            Form(commands=("optimize", "sweep"), kind="str", syntax="COUNT[,COUNT...]"),
        ),
        help="Sandboxes started at once.",
        aliases=(Alias(old="--sizes", commands=("optimize",)),),
        why="optimize and sweep run several storm sizes (every trial on each; one grid "
        "axis): there it takes a comma-separated list, one size being the other "
        "commands' form.",
    ),
    Concept(
        name="cni",
        option="--cni",
        forms=(
            Form(commands=("simulate", "report", "optimize"), kind="str", syntax="NAME"),
            Form(commands=("sweep",), kind="str", syntax="NAME[,NAME...]"),
        ),
        help="The CNI (or SR-IOV variant) of the storm.",
        why="A sweep's grid axis: a comma-separated list.",
    ),
    Concept(
        name="cni-plugin",
        option="--cni-plugin",
        forms=(
            Form(commands=("testbed run", "agent serve"), kind="str", syntax="NAME"),
            Form(commands=("calibrate",), kind="str", syntax="NAME[,NAME...]", repeatable=True),
        ),
        help="The real CNI plugin binary (bridge, ptp, ...), host-local IPAM.",
        aliases=(Alias(old="--cni", commands=("agent serve",)),),
        why="--cni names a modelled CNI (ipvtap, veth); a plugin binary is another thing. "
        "calibrate --plan takes the plugins a what-if may switch to: repeat, or a comma list.",
    ),
    Concept(
        name="cni-bin-dir",
        option="--cni-bin-dir",
        forms=(
            Form(
                commands=("testbed run", "agent serve", "agent install-cni"),
                kind="path",
                syntax="DIR",
            ),
        ),
        help="The node's CNI plugin directory.",
        aliases=(Alias(old="--bin-dir", commands=("agent install-cni",)),),
    ),
    Concept(
        name="profile",
        option="--profile",
        forms=(
            Form(
                commands=("simulate", "report", "optimize", "sweep", "dataplane", "testbed chrome"),
                kind="str",
                syntax="NAME or FILE",
            ),
            Form(commands=("validate", "tune"), kind="path", syntax="FILE"),
        ),
        help="A calibration profile: a built-in name or a YAML file.",
        why="validate and tune run storms on this node: they take its own fitted "
        "profile's file, never a published host's name.",
    ),
    Concept(
        name="pool",
        option="--pool",
        forms=(
            Form(commands=("simulate",), kind="str", syntax="KIND=COUNT", repeatable=True),
            Form(
                commands=("sweep",),
                kind="str",
                syntax="none, full or KIND=COUNT[,KIND=COUNT...]",
                repeatable=True,
            ),
        ),
        help="Pre-created devices: KIND=COUNT.",
        why="Sets a pool's size. --pool-kind (a kind whose size a search tries) is "
        "another thing. A sweep's --pool is one grid point per value, so one value "
        "holds a whole set of pools.",
    ),
    Concept(
        name="pool-kind",
        option="--pool-kind",
        forms=(
            Form(
                commands=("calibrate", "tune", "optimize"),
                kind="str",
                syntax="KIND[,KIND...] or all",
                repeatable=True,
            ),
        ),
        help="Device kinds whose pool sizes the search tries.",
        aliases=(Alias(old="--pools", commands=("optimize",)),),
        why="Not --pool: that one sets a size, this one lets a search choose it.",
    ),
    Concept(
        name="limit",
        option="--limit",
        forms=(Form(commands=("simulate",), kind="str", syntax="STAGE=COUNT", repeatable=True),),
        help="A per-stage concurrency limit: STAGE=COUNT.",
        why="Sets a limit. --limit-stage (a stage whose limit a search tries) is another thing.",
    ),
    Concept(
        name="limit-stage",
        option="--limit-stage",
        forms=(
            Form(
                commands=("calibrate", "tune", "optimize"),
                kind="str",
                syntax="STAGE[,STAGE...]",
                repeatable=True,
            ),
        ),
        help="Stages whose concurrency limits the search tries.",
        aliases=(Alias(old="--stages", commands=("optimize",)),),
    ),
    Concept(
        name="trials",
        option="--trials",
        forms=(Form(commands=("demo", "optimize", "tune"), kind="int", syntax=_COUNT),),
        help="Trials of the search on the model.",
        aliases=(Alias(old="--budget", commands=("tune",)),),
        why="calibrate's --max-evaluations counts a fit's objective evaluations, not a "
        "search's trials.",
    ),
    Concept(
        name="repeats",
        option="--repeats",
        forms=(
            Form(commands=("validate", "tune", "testbed measure-ops"), kind="int", syntax=_COUNT),
        ),
        help="How many times each storm (or operation) is run for real.",
        aliases=(Alias(old="--repeat", commands=("validate",)),),
        why="Not --plan-runs: tune takes both, the rounds of its candidates' storms and "
        "the runs of each calibration plan storm.",
    ),
    Concept(
        name="plan-runs",
        option="--plan-runs",
        forms=(Form(commands=("calibrate", "tune"), kind="int", syntax=_COUNT),),
        help="Runs of each calibration plan storm.",
        aliases=(Alias(old="--runs", commands=("calibrate",)),),
        why="validate's --calibration-runs and --calibration-sandboxes size the one storm "
        "it fits a profile to first, not a plan's storms.",
    ),
    Concept(
        name="plan-sandboxes",
        option="--plan-sandboxes",
        forms=(Form(commands=("calibrate", "tune"), kind="int", syntax=_COUNT),),
        help="The largest calibration plan storm's size.",
    ),
    Concept(
        name="seeds",
        option="--seeds",
        forms=(
            Form(
                commands=("calibrate", "optimize", "sweep"),
                kind="str",
                syntax="1001-1010, 0,1,2 or 1-3,7",
            ),
        ),
        help="Seeds: a range, a list or both (bootstorm._units.parse_seeds).",
        why="--seed is one seed, of one storm.",
    ),
    Concept(
        name="seed",
        option="--seed",
        forms=(Form(commands=("simulate", "dataplane", "workload"), kind="int", syntax="INT"),),
        help="The seed of the run's random streams.",
    ),
    Concept(
        name="slo-p99",
        optional=True,
        option="--slo-p99",
        forms=(Form(commands=("optimize", "tune"), kind="str", syntax="DURATION"),),
        help="p99 startup at most this (15s, 800ms).",
        unit="a duration with its unit (ms, s, min, h); a bare number is seconds",
        aliases=(Alias(old="--p99-slo", commands=("optimize", "tune")),),
    ),
    Concept(
        name="memory-budget",
        optional=True,
        option="--memory-budget",
        forms=(Form(commands=("optimize",), kind="str", syntax="SIZE"),),
        help="Pooled memory at most this (8GiB, 512MiB).",
        unit="a size with its unit (KiB..TiB, KB..TB); a bare number is MiB",
    ),
    Concept(
        name="memory-mib",
        option="--memory-mib",
        forms=(
            Form(commands=("simulate",), kind="int", syntax="MIB"),
            Form(commands=("sweep",), kind="str", syntax="MIB[,MIB...]"),
        ),
        help="Guest memory per sandbox, MiB.",
        unit="MiB",
        why="A sweep's grid axis: a comma-separated list.",
    ),
    Concept(
        name="output",
        optional=True,
        option="--output",
        short="-o",
        forms=(
            Form(
                commands=(
                    "calibrate",
                    "report",
                    "tune",
                    "optimize",
                    "sweep",
                    "workload",
                    "testbed chrome",
                    "testbed measure-ops",
                ),
                kind="path",
                syntax="FILE",
            ),
        ),
        help="The file the command writes.",
    ),
    Concept(
        name="trace-dir",
        optional=True,
        option="--trace-dir",
        forms=(Form(commands=("calibrate", "tune", "validate"), kind="path", syntax="DIR"),),
        help="Write every real storm's trace into this folder.",
        aliases=(Alias(old="--trace-out", commands=("validate",)),),
    ),
    Concept(
        name="workload",
        optional=True,
        option="--workload",
        forms=(
            Form(
                commands=("simulate", "report", "validate", "tune", "optimize", "testbed run"),
                kind="path",
                syntax="FILE",
            ),
        ),
        help="A workload file (bootstorm workload -o): one sandbox per start, at its time.",
    ),
    Concept(
        name="config",
        optional=True,
        option="--config",
        forms=(
            Form(
                commands=("simulate", "report", "validate", "testbed run", "agent serve"),
                kind="path",
                syntax="FILE",
            ),
        ),
        help="A tuned config (bootstorm optimize -o).",
    ),
    Concept(
        name="measured-ops",
        optional=True,
        option="--measured-ops",
        forms=(Form(commands=("calibrate", "tune"), kind="path", syntax="FILE"),),
        help="Costs timed alone (bootstorm testbed measure-ops -o).",
    ),
    Concept(
        name="json",
        option="--json",
        forms=(
            Form(
                commands=(
                    "simulate",
                    "calibrate",
                    "validate",
                    "dataplane",
                    "workload",
                    "testbed run",
                    "testbed measure-ops",
                    "config push",
                ),
                kind="flag",
                syntax="",
            ),
        ),
        help="Print JSON instead of tables.",
    ),
    Concept(
        name="executor",
        option="--executor",
        forms=(
            Form(
                commands=("simulate", "calibrate", "validate", "optimize", "sweep"),
                kind="choice",
                syntax="compiled|simpy|python",
            ),
        ),
        help="What runs the simulations.",
    ),
    Concept(
        name="runtime",
        option="--runtime",
        forms=(
            Form(
                commands=("calibrate", "validate", "tune", "testbed run"),
                kind="choice",
                syntax="threads|cni",
            ),
        ),
        help="How the testbed starts a sandbox.",
    ),
    Concept(
        name="vm",
        option="--vm",
        forms=(
            Form(
                commands=("calibrate", "validate", "tune", "testbed run", "testbed measure-ops"),
                kind="flag",
                syntax="",
            ),
        ),
        help="QEMU microVMs in StartVM.",
    ),
    Concept(
        name="agent",
        optional=True,
        option="--agent",
        forms=(Form(commands=("validate", "testbed run"), kind="str", syntax="URL"),),
        help="Admit the stages through this node agent.",
    ),
    Concept(
        name="token-file",
        option="--token-file",
        forms=(
            Form(commands=("validate", "testbed run", "agent serve"), kind="path", syntax="FILE"),
        ),
        help="The agent's bearer token.",
    ),
    Concept(
        name="lifetime-s",
        option="--lifetime-s",
        forms=(
            Form(
                commands=("simulate", "optimize", "validate", "tune", "testbed run"),
                kind="float",
                syntax="S",
            ),
        ),
        help="With --workload: each VM's life after it came up.",
        unit="s",
    ),
    Concept(
        name="window-s",
        option="--window-s",
        forms=(Form(commands=("simulate", "tune"), kind="float", syntax="S"),),
        help="With --workload: the window of the p99.",
        unit="s",
    ),
    Concept(
        name="report",
        optional=True,
        option="--report",
        forms=(
            Form(commands=("validate", "tune"), kind="path", syntax="FILE"),
            Form(commands=("demo",), kind="flag", syntax=""),
        ),
        help="Also write an HTML report here.",
        why="demo writes its files into --output-dir: there --report/--no-report says "
        "whether report.html is one of them.",
    ),
    Concept(
        name="candidates",
        option="--candidates",
        forms=(
            Form(commands=("validate",), kind="str", syntax="[NAME=]FILE", repeatable=True),
            Form(commands=("tune",), kind="int", syntax=_COUNT),
        ),
        help="The tuned configs run for real and ranked.",
        optional=True,
        why="validate is given its candidates (files); tune picks its own from its "
        "search, and is told how many.",
    ),
    Concept(
        name="trace",
        option="--trace",
        forms=(Form(commands=("simulate", "validate", "testbed run"), kind="path", syntax="FILE"),),
        help="Write the storm's trace here.",
        optional=True,
        why="written, never read: a recorded storm given to read is --measured.",
    ),
    Concept(
        name="measured",
        option="--measured",
        forms=(
            Form(commands=("validate", "calibrate"), kind="path", syntax="FILE", repeatable=True),
        ),
        help="A recorded storm to read (repeat for runs of one storm, pooled).",
        optional=True,
        aliases=(Alias(old="--trace", commands=("calibrate",)),),
    ),
    Concept(
        name="dry-run",
        option="--dry-run",
        forms=(Form(commands=("calibrate", "config push"), kind="flag", syntax=""),),
        help="Print what would run; run nothing.",
    ),
)

#: Units an option's name may end in: its value is a bare number in that
#: unit (or, in a list form of the table, comma-separated numbers). A value
#: that carries its own unit (``15s``, ``8GiB``) goes to an option named
#: without one (``--slo-p99``, ``--memory-budget``).
UNIT_SUFFIXES: tuple[str, ...] = ("-s", "-mib", "-gbps", "-bytes")

#: Commands whose product is a file: each takes ``-o/--output``. The others
#: print their product; files some of them write beside it have names of
#: their own (``--trace``, ``--report``, ``--trace-dir``; demo's
#: ``--output-dir`` takes the folder of its two files).
WRITES_FILE: tuple[str, ...] = next(c for c in CONCEPTS if c.name == "output").commands


def aliases_of(command: str) -> list[tuple[Alias, Concept]]:
    """The old spellings that still parse in ``command`` (a path such as ``testbed run``)."""
    return [(a, c) for c in CONCEPTS for a in c.aliases if command in a.commands]


def install_aliases(command: click.Command, path: str) -> None:
    """Give ``command`` (``path`` after ``bootstorm``) its old spellings: each a
    hidden option of the canonical one's type, whose value, when given, goes
    to the canonical option's parameter after one line on stderr."""
    from typer.core import TyperOption

    pairs = aliases_of(path)
    if not pairs or command.callback is None:
        return
    moved: dict[str, tuple[str, str, str]] = {}  # alias parameter -> (old, canonical param, shown)
    for n, (alias, concept) in enumerate(pairs):
        target = _canonical_param(command, concept)
        taken = any(alias.old in p.opts + p.secondary_opts for p in command.params)
        if target is None or taken:
            # The table and the command disagree: tests/bootstorm/test_vocabulary.py says how.
            continue
        name = f"vocabulary_alias_{n}"
        command.params.append(
            TyperOption(
                param_decls=[alias.old, name],
                type_descriptor=target.type_descriptor,  # type: ignore[attr-defined]
                default=None,
                multiple=target.multiple,
                hidden=True,
                show_default=False,
                help=f"Old spelling of {concept.option}.",
            )
        )
        shown = (
            concept.option if concept.option.startswith("-") else f"the {concept.option} argument"
        )
        moved[name] = (alias.old, target.name or "", shown)
    if moved:
        command.callback = _moving(command.callback, moved)


def _canonical_param(command: click.Command, concept: Concept) -> click.Parameter | None:
    for param in command.params:
        if concept.option in param.opts or (
            concept.option == "SCENARIO" and param.param_type_name == "argument"
        ):
            return param
    return None


def _moving(
    callback: Callable[..., Any], moved: dict[str, tuple[str, str, str]]
) -> Callable[..., Any]:
    """``callback`` taking the aliases' values as their canonical parameters'."""
    from typer._click.core import ParameterSource
    from typer._click.exceptions import UsageError
    from typer._click.globals import get_current_context

    def call(**params: Any) -> Any:
        ctx = get_current_context()
        for name, (old, target, shown) in moved.items():
            value = params.pop(name, None)
            if value is None or value in ((), []):
                continue
            # One line, then on as if the new name were given: scripts keep working.
            sys.stderr.write(f"{old} is now {shown}; the old name goes in the next release\n")
            if ctx.get_parameter_source(target) is ParameterSource.COMMANDLINE:
                raise UsageError(f"{old} and {shown} are one option: give {shown} only", ctx)
            params[target] = value
        return callback(**params)

    return call
