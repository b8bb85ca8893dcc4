"""Command-line options several commands share, and what they parse into."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from .models import ConfigError

if TYPE_CHECKING:
    from .models import Scenario

__all__ = [
    "EXECUTOR_OPTION",
    "RUNTIME_OPTION",
    "SCENARIO_DEFAULTS",
    "RuntimeName",
    "default_help",
    "pairs",
    "scenario_from_options",
]

#: The testbed's runtimes: ``threads`` (the harness's thread per sandbox does
#: the kernel operations) and ``cni`` (real CNI plugins and a shim process per
#: sandbox, as containerd and Kata start one).
RuntimeName = Literal["threads", "cni"]
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
            raise ConfigError(f"{field}: expected NAME=COUNT, but got {item!r}")
        try:
            out[name] = int(value)
        except ValueError:
            raise ConfigError(
                f"{field}.{shown_name(name)}: expected an integer, but got {shown_text(value)}"
            ) from None
    return out


def scenario_from_options(scenario_file: Path | None, **overrides: Any) -> Scenario:
    """The file's scenario (or the default) with the options laid over it;
    ``NAME=COUNT`` options override the file's map key by key."""
    from .models import Scenario

    base = Scenario.from_yaml(scenario_file) if scenario_file is not None else Scenario()
    given = {k: v for k, v in overrides.items() if v is not None and v != {}}
    for key, value in given.items():
        if isinstance(value, dict):
            given[key] = {**getattr(base, key), **value}
    return base.replace(**given) if given else base
