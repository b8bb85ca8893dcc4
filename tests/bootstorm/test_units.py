"""Quantities with units on the command line: known answers."""

from __future__ import annotations

import pytest

from bootstorm._units import parse_mib, parse_seconds
from bootstorm.models import ConfigError


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("8GiB", 8192.0),
        ("512", 512.0),
        ("1.5 TiB", 1.5 * 1024 * 1024),
        # Decimal units at their decimal value ("8GB" was refused; it is not 8 GiB).
        ("8GB", 8e9 / 2**20),
        ("500MB", 500e6 / 2**20),
        ("1kb", 1e3 / 2**20),
    ],
)
def test_memory_sizes(text: str, mib: float) -> None:
    assert parse_mib("memory_budget", text) == pytest.approx(mib, rel=1e-12)


@pytest.mark.parametrize("text", ["8 parsecs", "-1GiB", "0GB", "nanGB", ""])
def test_a_bad_memory_size_names_the_field(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^memory_budget: "):
        parse_mib("memory_budget", text)


def test_durations() -> None:
    assert parse_seconds("slo", "250ms") == pytest.approx(0.25)
    assert parse_seconds("slo", "2min") == 120.0
