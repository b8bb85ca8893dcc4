"""Command-line options several commands share, and what they parse into."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from ._params import format_problem, short_repr
from .models import ConfigError

if TYPE_CHECKING:
    from .models import PoolRefill, Scenario
    from .traces.workload import Workload

__all__ = [
    "CNI_WRAPPER_OPTION",
    "EXECUTOR_OPTION",
    "LIFETIME_OPTION",
    "RUNTIME_OPTION",
    "SCENARIO_DEFAULTS",
    "RuntimeName",
    "check_address",
    "check_cni_wrapper",
    "check_count",
    "check_directory",
    "check_finite",
    "check_input_file",
    "check_url",
    "default_help",
    "load_workload",
    "named_as_options",
    "pairs",
    "pool_refill_from_options",
    "scenario_from_options",
    "split_names",
    "testbed_arrivals",
]

#: The testbed's runtimes: ``threads`` (the harness's thread per sandbox does
#: the kernel operations) and ``cni`` (real CNI plugins and a shim process per
#: sandbox, as containerd and Kata start one).
RuntimeName = Literal["threads", "cni"]
#: A real storm on a workload's schedule: how long each VM lives.
LIFETIME_OPTION = typer.Option(
    "--lifetime-s",
    help="With --workload: stop each sandbox's VM this many seconds after it came up, so "
    "that a long workload holds a bounded number of VMs [default: until the storm ends].",
    show_default=False,
)
#: ``--cni-wrapper``, shared by ``testbed run`` and ``validate``.
CNI_WRAPPER_OPTION = typer.Option(
    help="[none|bootstorm-cni] bootstorm-cni: exec the CNI plugin through bootstorm-cni "
    "(runtime cni, needs --agent), as a node's conflist puts it in the startup path: "
    "it takes AddCNI's permit from the agent (docs/agent.md).",
)


def check_cni_wrapper(cni_wrapper: str, *, agent: str | None) -> None:
    """``--cni-wrapper``'s value and its agent, before any storm."""
    from typing import get_args

    from .validation.testbed.options import StormOptions

    # The names the testbed takes, read from its options (one list, one place).
    names = get_args(StormOptions.model_fields["cni_wrapper"].annotation)
    if cni_wrapper not in names:
        raise ConfigError(
            f"cni_wrapper: expected {' or '.join(names)}, but got {short_repr(cni_wrapper)}"
        )
    if cni_wrapper != "none" and agent is None:
        raise ConfigError(
            f"cni_wrapper: {cni_wrapper!r} takes AddCNI's permit from a node agent: "
            "give one with --agent URL"
        )


RUNTIME_OPTION = typer.Option(
    help="How the testbed starts a sandbox: cni (real CNI plugin binaries and a shim "
    "process per sandbox, as containerd + Kata; needs containernetworking-plugins) or "
    "threads (one Python thread per sandbox doing the kernel operations)."
)

#: ``--executor``: what runs the simulated storms (see bootstorm.simulator.executors);
#: annotate it as ``ExecutorName`` so that typer offers (and checks) the names.
EXECUTOR_OPTION = typer.Option(
    help="What runs the simulations: compiled (numba), simpy (the reference; "
    "records spans) or python. All three give the same numbers."
)


#: The default scenario's values, shown in ``simulate --help`` (its options
#: default to "not given", so that a scenario file's values stand);
#: tests/bootstorm/test_cli.py holds them equal to ``Scenario()``'s.
SCENARIO_DEFAULTS: dict[str, object] = {
    "cni": "ipvtap",
    "sandboxes": 400,
    "profile": "paper-000",
    "seed": 0,
    "qos_rules": 0,
    "sg_rules": 0,
    "tenants": 1,
    "memory_mib": 512,
    "background_flows": 0,
    "flow_gbps": 1.0,
}


def default_help(field_or_text: str) -> str:
    """`` [default: X]`` for a help text: a scenario field's default, or the text."""
    shown = SCENARIO_DEFAULTS.get(field_or_text, field_or_text)
    return f"  [default: {shown}]"


def pairs(field: str, items: list[str] | None) -> dict[str, int]:
    """Parse ``NAME=INT`` options; a bad one is a :class:`ConfigError`."""
    from ._io import shown_name, shown_text

    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"{field}: expected NAME=COUNT, but got {short_repr(item)}")
        if name in out:  # the last one kept, silently, was not what was asked
            raise ConfigError(
                f"{field}.{shown_name(name)}: given twice ({out[name]}, {shown_text(value)})"
            )
        try:
            out[name] = int(value)
        except ValueError:
            raise ConfigError(
                f"{field}.{shown_name(name)}: expected an integer, but got {shown_text(value)}"
            ) from None
    return out


def split_names(field: str, items: list[str] | None) -> tuple[str, ...]:
    """A repeatable names option (``--limit-stage``, ``--pool-kind``) whose
    values may each be comma-separated: ``A --x B,C`` is ``("A", "B", "C")``,
    as a comma list alone is (one syntax for lists in every command). An
    empty name (``--limit-stage ''``, ``A,,B``) is refused: it was dropped,
    and an option given only empty fell back to its default unsaid."""
    names: list[str] = []
    for item in items or ():
        for name in item.split(","):
            if not name.strip():
                raise ConfigError(
                    f"{field}: expected comma-separated names, but got {short_repr(item)}"
                )
            names.append(name.strip())
    return tuple(names)


@contextmanager
def named_as_options(options: Mapping[str, str]) -> Iterator[None]:
    """A workflow's error names its parameter (``stages: unknown name``); the
    user gave an option (``--limit-stage``): the line names the option, keyed
    here by the parameter's name (``{"stages": "limit_stage"}``)."""
    try:
        yield
    except ConfigError as exc:
        text = str(exc)
        for field, option in options.items():
            if text.startswith((f"{field}:", f"{field}[", f"{field}.")):
                raise ConfigError(option + text[len(field) :]) from None
        raise


def scenario_from_options(scenario_file: Path | None, **overrides: Any) -> Scenario:
    """The file's scenario (or the default) with the options laid over it;
    ``NAME=COUNT`` options override the file's map key by key."""
    from .models import Scenario, load_scenario

    base = load_scenario(scenario_file) if scenario_file is not None else Scenario()
    given = {k: v for k, v in overrides.items() if v is not None and v != {}}
    for key, value in given.items():
        if isinstance(value, dict):
            given[key] = {**getattr(base, key), **value}
    return base.replace(**given) if given else base


def load_workload(field: str, path: Path) -> Workload:
    """The workload file at ``path`` (``bootstorm workload --output``), read
    before any work starts; a missing file, one that is not a workload, or
    one without a start is one line naming ``field``."""
    from .traces.files import shown_path
    from .traces.workload import read_workload

    check_input_file(field, path)
    try:
        workload = read_workload(path)
    except (ConfigError, OSError, ValueError) as exc:
        raise ConfigError(f"{field}: {exc}") from None
    if len(workload) == 0:
        # A file's fault: its path first, whole, as every file error says it.
        raise ConfigError(f"{field}: {shown_path(path)}: holds no sandbox start")
    return workload


def testbed_arrivals(path: Path, sandboxes: int | None) -> tuple[float, ...]:
    """The start times of the workload file at ``path``, one per sandbox of a
    real storm, checked before it: a missing file, one that is not a
    workload, an empty one or one of more starts than a storm takes is one
    line naming ``workload`` (or ``sandboxes`` when it disagrees)."""
    from .traces.files import shown_path
    from .validation.testbed.options import MAX_SCHEDULE_S

    starts = [float(t) for t in load_workload("workload", path).starts.tolist()]
    shown = shown_path(path)
    most = max_testbed_sandboxes()
    if len(starts) > most:
        raise ConfigError(
            f"workload: {shown}: holds {len(starts):,} starts, more than the {most:,} "
            "sandboxes a storm starts"
        )
    if not 0.0 <= starts[0] <= starts[-1] <= MAX_SCHEDULE_S:
        bad = starts[0] if starts[0] < 0.0 else starts[-1]
        raise ConfigError(
            format_problem("workload", f"a start time must be in 0..{MAX_SCHEDULE_S:,.0f} s", bad)
        )
    if sandboxes is not None and sandboxes != len(starts):
        raise ConfigError(
            format_problem(
                "sandboxes",
                f"must be left out or equal the workload's {len(starts)} starts",
                sandboxes,
            )
        )
    return tuple(starts)


def pool_refill_from_options(
    *,
    workers: int | None,
    follow_window_s: float | None,
    follow_cover_s: float | None,
    follow_max_devices: int | None,
) -> PoolRefill | None:
    """The :class:`~bootstorm.models.PoolRefill` the refill options describe
    (None if none is given): ``--refill-workers`` alone refills to the
    static ``--pool`` targets; any ``--follow-*`` makes the targets follow
    the start rate (the others at their defaults)."""
    from .models import FollowRate, PoolRefill
    from .models.tuned import MAX_FOLLOW_WINDOW_S, MAX_POOL_SIZE, MAX_REFILL_CONCURRENCY

    check_count("refill-workers", workers, low=1, high=MAX_REFILL_CONCURRENCY)
    check_finite("follow-window-s", follow_window_s, low=1.0, high=MAX_FOLLOW_WINDOW_S)
    check_finite("follow-cover-s", follow_cover_s, low=0.0, high=MAX_FOLLOW_WINDOW_S)
    check_count("follow-max-devices", follow_max_devices, low=0, high=MAX_POOL_SIZE)
    follow_given = {
        "window_s": follow_window_s,
        "cover_s": follow_cover_s,
        "max_devices": follow_max_devices,
    }
    follow = {k: v for k, v in follow_given.items() if v is not None}
    if workers is None and not follow:
        return None
    rule = FollowRate(**follow) if follow else None
    return PoolRefill(concurrency=1 if workers is None else workers, follow_rate=rule)


def check_count(field: str, value: int | None, *, low: int, high: int) -> None:
    """Refuse a count outside ``low..high`` before any work starts (``--runs
    0`` ran nothing for minutes; ``--repeats 10**9`` would never end)."""
    if value is not None and not low <= value <= high:
        raise ConfigError(format_problem(field, f"must be in {low}..{high:,}", value))


def check_finite(field: str, value: float | None, *, low: float, high: float) -> None:
    """Refuse a NaN, an infinity or a number outside ``low..high`` up front:
    ``nan`` compares false with everything, so a threshold of NaN passed
    every later ``<`` check and decided nothing."""
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(format_problem(field, f"must be a number in {low:g}..{high:g}", value))


def check_address(field: str, text: str | None) -> None:
    """A ``[scheme://]host:port`` address (a Dask scheduler), refused in one
    line when it cannot be one (``''`` was a ValueError traceback from Dask)."""
    match = _ADDRESS.fullmatch(text) if text is not None else None
    if text is not None and (match is None or not 0 < int(match.group(3)) <= 65535):
        # tcp only: Dask's tls:// and ucx:// need settings this command has
        # not, and another scheme was a traceback from Dask.
        raise ConfigError(
            format_problem(field, "expected a TCP address such as tcp://host:8786", text)
        )


def check_url(field: str, text: str | None) -> None:
    """An ``http(s)://host[:port][/path]`` URL (a node agent), refused up front."""
    if text is not None and not _URL.fullmatch(text):
        raise ConfigError(
            format_problem(field, "expected a URL such as http://127.0.0.1:8080", text)
        )


_ADDRESS = re.compile(r"(tcp://)?(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):([0-9]{1,5})")
_URL = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]@]+)(:[0-9]{1,5})?(/\S*)?")


def check_input_file(field: str, path: Path | None) -> None:
    """Refuse a file to read that is missing or not a regular file (a FIFO, a
    device, a directory), before any work starts: a storm ran for minutes,
    then its measured-ops FIFO hung the fit."""
    from .traces.files import check_regular_file

    if path is None:
        return
    try:
        check_regular_file(path)
    except ConfigError as exc:
        raise ConfigError(f"{field}: {exc}") from None


def check_directory(field: str, path: Path | None) -> None:
    """Refuse a directory option that names something other than a directory."""
    from .traces.files import shown_path

    if path is not None and not path.is_dir():
        raise ConfigError(f"{field}: {shown_path(path)}: not a directory")


def max_testbed_sandboxes() -> int:
    """The most sandboxes a real storm starts: ``StormOptions.sandboxes``'
    bound, read from the field (one rule, one place), for the commands that
    check their sizes before their first storm."""
    from .validation.testbed.options import StormOptions

    for rule in StormOptions.model_fields["sandboxes"].metadata:
        high = getattr(rule, "le", None)
        if isinstance(high, int):
            return high
    raise AssertionError("StormOptions.sandboxes has no upper bound")  # pragma: no cover


def check_output_dir(field: str, path: Path | None) -> None:
    """A folder a command writes into (made if missing): refused up front when
    it names a file, a FIFO or a device, or its parent folder is missing;
    traces of storms run for minutes were lost to it."""
    from .traces.files import shown_path

    if path is None:
        return
    try:
        exists = path.exists()
        is_dir = path.is_dir()
        parent = path.parent if str(path.parent) else Path(".")
        parent_ok = parent.is_dir()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{field}: {shown_path(path)}: cannot use ({reason})") from None
    if exists and not is_dir:
        raise ConfigError(f"{field}: {shown_path(path)}: not a directory")
    if not exists and not parent_ok:
        raise ConfigError(f"{field}: no directory {shown_path(parent)} to make {path.name} in")
