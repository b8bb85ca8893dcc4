"""Keep-alive policies: which invocations find no warm sandbox and start one.

One sandbox per application, as in Azure Functions (applications are the
unit of allocation and warm-up, `AzureFunctionsDataset2019.md`) and in the
simulation of Shahrad et al., "Serverless in the Wild", USENIX ATC'20:
an invocation is **cold** when its application has no sandbox loaded at its
start; an invocation that starts while an earlier one still runs finds the
sandbox loaded (concurrency inside an application is not modelled).

- :class:`FixedKeepAlive`: the sandbox stays loaded ``keep_alive_s`` after
  the application's last execution ends.
- :class:`HybridHistogram`: the paper's hybrid histogram policy (§4.2), as
  this module implements it from its description (the paper's text was not
  at hand): per application, a histogram of idle times (an invocation's
  start minus the end of the one before) in 1-minute bins over a 4-hour
  range. After each execution the sandbox is unloaded, loaded again at the
  **pre-warm window** (the head, the 5th percentile, less a 10 % margin) and
  kept for the **keep-alive window** (to the tail, the 99th percentile, plus
  a 10 % margin); a pre-warm window of 0 keeps the sandbox loaded from the
  end of the execution. The histogram is not trusted — the sandbox is kept
  ``fallback_keep_alive_s`` (default: the range, 4 h) from the end instead —
  while it holds fewer than ``min_samples`` idle times or its bin counts'
  coefficient of variation is below ``cv_threshold`` (a flat histogram
  predicts nothing), and when more than ``max_out_of_bounds`` of the idle
  times were beyond the range. The paper forecasts those out-of-bound idle
  times with ARIMA; a fixed keep-alive stands in for it here (a time-series
  fit per application is beyond a workload reader, and these applications
  are invoked less than every 4 h: a few starts a day each).
  ``min_samples``, ``cv_threshold`` and ``max_out_of_bounds`` are this
  module's choices (10, 2, 0.5), not the paper's numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .._params import ConfigError, format_problem
from .workload import Invocations

__all__ = ["FixedKeepAlive", "HybridHistogram", "NoKeepAlive", "Policy", "cold_starts"]

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class NoKeepAlive:
    """Every invocation is a start (the rows of a CSV of start times)."""

    name: str = "none"

    def parameters(self) -> dict[str, object]:
        return {"policy": self.name}


@dataclass(frozen=True, slots=True)
class FixedKeepAlive:
    """A sandbox stays loaded ``keep_alive_s`` after its last execution ends."""

    keep_alive_s: float = 600.0
    name: str = "fixed"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.keep_alive_s) and 0 <= self.keep_alive_s <= 30 * 86400):
            raise ConfigError(
                format_problem("keep_alive", "must be in 0..30 days (in s)", self.keep_alive_s)
            )

    def parameters(self) -> dict[str, object]:
        return {"policy": self.name, "keep_alive_s": self.keep_alive_s}


@dataclass(frozen=True, slots=True)
class HybridHistogram:
    """The hybrid histogram policy of "Serverless in the Wild" (§4.2); see
    the module's docstring for what is the paper's and what is ours."""

    bin_s: float = 60.0
    range_s: float = 4 * 3600.0
    head_percentile: float = 5.0
    tail_percentile: float = 99.0
    margin: float = 0.10
    min_samples: int = 10
    cv_threshold: float = 2.0
    max_out_of_bounds: float = 0.5
    fallback_keep_alive_s: float = 4 * 3600.0
    name: str = "hybrid"

    def __post_init__(self) -> None:
        if not (
            math.isfinite(self.fallback_keep_alive_s)
            and 0 <= self.fallback_keep_alive_s <= 30 * 86400
        ):
            raise ConfigError(
                format_problem(
                    "keep_alive", "must be in 0..30 days (in s)", self.fallback_keep_alive_s
                )
            )

    @property
    def bins(self) -> int:
        return round(self.range_s / self.bin_s)

    def parameters(self) -> dict[str, object]:
        return {
            "policy": self.name,
            "bin_s": self.bin_s,
            "range_s": self.range_s,
            "head_percentile": self.head_percentile,
            "tail_percentile": self.tail_percentile,
            "margin": self.margin,
            "min_samples": self.min_samples,
            "cv_threshold": self.cv_threshold,
            "max_out_of_bounds": self.max_out_of_bounds,
            "fallback_keep_alive_s": self.fallback_keep_alive_s,
            "out_of_bounds": "fixed keep-alive (the paper: ARIMA)",
        }

    def windows(self, counts: npt.NDArray[np.int64], out_of_bounds: int) -> tuple[float, float]:
        """(pre-warm, keep-alive) in seconds after an execution ends, from an
        application's idle-time histogram ``counts`` and its count of idle
        times beyond the range."""
        inside = int(counts.sum())
        total = inside + out_of_bounds
        fallback = (0.0, self.fallback_keep_alive_s)
        if total < self.min_samples or out_of_bounds > self.max_out_of_bounds * total:
            return fallback
        mean = counts.mean()
        if mean <= 0 or counts.std() / mean < self.cv_threshold:
            return fallback
        cumulative = np.cumsum(counts)
        head_bin = int(np.searchsorted(cumulative, self.head_percentile / 100 * inside))
        tail_bin = int(np.searchsorted(cumulative, self.tail_percentile / 100 * inside))
        head = head_bin * self.bin_s * (1 - self.margin)  # the head bin's lower edge
        tail = (tail_bin + 1) * self.bin_s * (1 + self.margin)  # the tail bin's upper edge
        return head, tail - head


Policy = NoKeepAlive | FixedKeepAlive | HybridHistogram


def _groups(inv: Invocations) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """The invocations' order by application, then time, and where each
    application's run begins in it."""
    order = np.lexsort((inv.times, inv.app))
    apps = inv.app[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = apps[1:] != apps[:-1]
    return order, first


def _fixed(inv: Invocations, keep_alive_s: float) -> BoolArray:
    order, first = _groups(inv)
    times = inv.times[order]
    ends = inv.ends[order]
    # The latest end before each invocation in its application: a running
    # maximum restarted at each application (shift each group above the last).
    group = np.cumsum(first) - 1
    span = float(ends.max() - min(times.min(), 0.0)) + 1.0 if ends.size else 1.0
    shifted = ends + group * span
    latest = np.maximum.accumulate(shifted) - group * span
    previous_end = np.empty_like(latest)
    previous_end[1:] = latest[:-1]
    cold_sorted = first.copy()
    cold_sorted[~first] = times[~first] > previous_end[~first] + keep_alive_s
    cold = np.empty_like(cold_sorted)
    cold[order] = cold_sorted
    return cold


def _hybrid(inv: Invocations, policy: HybridHistogram) -> BoolArray:
    order, first = _groups(inv)
    times = inv.times[order].tolist()
    ends = inv.ends[order].tolist()
    starts_app = first.tolist()
    cold_sorted = np.zeros(order.size, dtype=bool)
    bins = policy.bins
    counts = np.zeros(bins, dtype=np.int64)
    out_of_bounds = 0
    last_end = 0.0
    loaded_from = loaded_to = 0.0
    for i, t in enumerate(times):
        if starts_app[i]:
            counts[:] = 0
            out_of_bounds = 0
            cold_sorted[i] = True
        else:
            running = t <= last_end
            cold_sorted[i] = not (running or loaded_from <= t <= loaded_to)
            if not running:
                idle = int((t - last_end) // policy.bin_s)
                if idle < bins:
                    counts[idle] += 1
                else:
                    out_of_bounds += 1
        last_end = max(last_end, ends[i]) if not starts_app[i] else ends[i]
        prewarm, keep = policy.windows(counts, out_of_bounds)
        loaded_from = last_end + prewarm if prewarm > 0 else last_end
        loaded_to = loaded_from + keep
    cold = np.empty_like(cold_sorted)
    cold[order] = cold_sorted
    return cold


def cold_starts(inv: Invocations, policy: Policy) -> BoolArray:
    """Which of ``inv``'s invocations start a sandbox under ``policy``."""
    if len(inv) == 0 or isinstance(policy, NoKeepAlive):
        return np.ones(len(inv), dtype=bool)
    if isinstance(policy, FixedKeepAlive):
        return _fixed(inv, policy.keep_alive_s)
    return _hybrid(inv, policy)
