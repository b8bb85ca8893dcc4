"""Quantities with units on the command line: ``8GiB``, ``512MiB``, ``15s``, ``250ms``."""

from __future__ import annotations

import math
import re

from ._params import short_repr
from .models import ConfigError

__all__ = ["parse_int_list", "parse_mib", "parse_seconds"]

_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")

_MIB = float(1 << 20)
#: Binary units as written, and decimal ones at their decimal value: "8GB"
#: is 8e9 bytes (7 629 MiB), not read as 8 GiB, and no longer refused.
_MIB_PER = {
    "": 1.0,
    "kib": 1 / 1024,
    "mib": 1.0,
    "gib": 1024.0,
    "tib": 1024.0**2,
    "kb": 1e3 / _MIB,
    "mb": 1e6 / _MIB,
    "gb": 1e9 / _MIB,
    "tb": 1e12 / _MIB,
}
_S_PER = {"": 1.0, "ms": 1e-3, "s": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}


def _parse(field: str, text: str, units: dict[str, float], what: str) -> float:
    match = _NUMBER_UNIT.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in units:
        raise ConfigError(f"{field}: expected {what}, but got {short_repr(text)}")
    value = float(match.group(1)) * units[unit]
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{field}: must be positive, but got {short_repr(text)}")
    return value


def parse_mib(field: str, text: str) -> float:
    """``8GiB`` → 8192.0 MiB, ``8GB`` → 7629.39 MiB; a bare number is MiB.
    Units: KiB, MiB, GiB, TiB and KB, MB, GB, TB (powers of 1000)."""
    return _parse(
        field, text, _MIB_PER, "a memory size such as 8GiB (KiB, MiB, GiB, TiB; KB, MB, GB, TB)"
    )


def parse_seconds(field: str, text: str) -> float:
    """``15s`` → 15.0; ``250ms`` → 0.25; a bare number is seconds."""
    return _parse(field, text, _S_PER, "a duration such as 15s (ms, s, min, h)")


def parse_int_list(field: str, text: str) -> tuple[int, ...]:
    """``200,400,600`` → (200, 400, 600); a value twice is refused (each is
    a storm of a sweep or of every trial: twice would weigh it double)."""
    out: list[int] = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            raise ConfigError(
                f"{field}: expected comma-separated integers, but got {short_repr(item.strip())}"
            ) from None
        if value in out:
            raise ConfigError(f"{field}: {value} given twice (got {short_repr(text)})")
        out.append(value)
    return tuple(out)
