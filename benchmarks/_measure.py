"""Timing on a shared 2-core machine: interleaved repeats, medians, spreads, paired ratios.

A best-of or a single sample moves with whatever else the machine runs (a
testbed storm, another benchmark): the 10 000-sandbox row once read 198 ms
under load and 72-79 ms quiet. So every figure here is the median of
repeats taken in turn with the figure it is compared to (A B A B ...), its
spread is the interquartile range, and a ratio is the median of the ratios
within each repeat, whose two sides saw the same load.
"""

from __future__ import annotations

import gc
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Figure",
    "interleaved",
    "paired_ratio",
    "process_wall_s",
    "python_wall",
    "row",
    "table_header",
]


@dataclass(frozen=True, slots=True)
class Figure:
    """Repeated samples of one figure (seconds unless said otherwise)."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> tuple[float, float]:
        """The interquartile range (the samples' range when fewer than 4)."""
        if len(self.samples) < 4:
            return min(self.samples), max(self.samples)
        q = statistics.quantiles(self.samples, n=4)
        return q[0], q[2]

    def show(self, scale: float = 1e3, unit: str = "ms", digits: int = 2) -> str:
        lo, hi = self.spread
        return (
            f"{self.median * scale:.{digits}f} {unit} "
            f"({lo * scale:.{digits}f}-{hi * scale:.{digits}f})"
        )


def interleaved(
    runs: Mapping[str, Callable[[], object]],
    *,
    repeats: int,
    warmup: int = 1,
    self_timed: frozenset[str] = frozenset(),
) -> dict[str, Figure]:
    """Time each of ``runs`` ``repeats`` times, one of each in turn.

    The runs named in ``self_timed`` return their own seconds (a program that
    times its loop, without its process start), which are taken instead.
    """
    for _ in range(warmup):
        for run in runs.values():
            run()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            gc.collect()
            t0 = time.perf_counter()
            out = run()
            took = time.perf_counter() - t0
            samples[name].append(float(out) if name in self_timed else took)  # type: ignore[arg-type]
    return {name: Figure(tuple(xs)) for name, xs in samples.items()}


def paired_ratio(value: Figure, anchor: Figure) -> Figure:
    """``value / anchor`` within each repeat (both taken under the same load)."""
    return Figure(tuple(v / a for v, a in zip(value.samples, anchor.samples, strict=True)))


def process_wall_s(argv: Sequence[str]) -> float:
    """Wall time of a whole command, interpreter start included."""
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t0


def python_wall(code: str) -> Callable[[], float]:
    """A run of ``python -c code`` for :func:`interleaved`."""
    return lambda: process_wall_s([sys.executable, "-c", code])


def table_header() -> str:
    return (
        "| figure | value: median (IQR) | anchor | anchor: median (IQR) | ratio (IQR) | goal |\n"
        "|---|---|---|---|---|---|"
    )


def row(
    figure: str,
    value: str,
    anchor: str,
    anchor_value: str,
    ratio: Figure | str,
    goal: str,
) -> str:
    shown = ratio if isinstance(ratio, str) else ratio.show(scale=1.0, unit="x", digits=2)
    return f"| {figure} | {value} | {anchor} | {anchor_value} | {shown} | {goal} |"
