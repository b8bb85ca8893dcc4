"""The workload loop: invocations (a trace or the MMPP) → one node's sandbox
starts under a keep-alive policy → the stream's statistics.

Order of the steps: the node's share of applications and the window are
taken first (as the trace is read); the policy decides cold starts on the
trace's own clock (keep-alive is a platform's property, not the storm's);
then times are shifted to start at 0 and divided by ``compress``. The
policy's state starts empty at the window's start: each application's first
invocation in the window is cold.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .._params import ConfigError, InstanceOf, Maybe, Rules, Satisfies, format_problem, validate
from ..traces.keepalive import FixedKeepAlive, HybridHistogram, NoKeepAlive, Policy, cold_starts
from ..traces.workload import (
    Invocations,
    MmppParameters,
    Workload,
    check_share,
    check_window,
    mmpp,
    read_trace_file,
    select,
)

__all__ = ["WorkloadOutcome", "WorkloadStats", "make_policy", "workload", "workload_stats"]

#: Starts within this many seconds of the previous one belong to its burst.
BURST_GAP_S = 1.0
#: Largest time compression: 10**6 turns a day into a tenth of a second.
MAX_COMPRESS = 1e6


@dataclass(frozen=True, slots=True)
class WorkloadStats:
    """A start stream's statistics (seconds of the compressed stream)."""

    starts: int
    invocations: int
    cold_fraction: float
    """Starts over invocations (1 for a stream of starts)."""
    duration_s: float
    mean_per_s: float
    max_per_s_60s: float
    """The busiest 60-s window's mean rate (windows aligned on 0)."""
    peak_per_s: int
    """The most starts in one second (aligned on 0)."""
    bursts: int
    """Runs of starts each within 1 s of the one before."""
    burst_max: int
    burst_p99: float
    functions: int
    """Functions with at least one start."""


@dataclass(frozen=True, slots=True)
class WorkloadOutcome:
    workload: Workload
    stats: WorkloadStats


def workload_stats(w: Workload) -> WorkloadStats:
    """Starts per second (mean, busiest minute, peak second), bursts (starts
    within :data:`BURST_GAP_S` of each other) and the cold fraction."""
    n = len(w)
    duration = max(w.duration_s, float(w.starts[-1]) if n else 0.0)
    if n == 0:
        return WorkloadStats(0, w.invocations, 0.0, duration, 0.0, 0.0, 0, 0, 0, 0.0, 0)
    per_second = np.bincount(np.floor(w.starts).astype(np.int64))
    per_minute = np.bincount(np.floor(w.starts / 60.0).astype(np.int64))
    new_burst = np.ones(n, dtype=bool)
    new_burst[1:] = np.diff(w.starts) > BURST_GAP_S
    sizes = np.diff(np.append(np.flatnonzero(new_burst), n))
    return WorkloadStats(
        starts=n,
        invocations=w.invocations,
        cold_fraction=n / w.invocations if w.invocations else 1.0,
        duration_s=duration,
        mean_per_s=n / duration if duration > 0 else math.inf,
        max_per_s_60s=float(per_minute.max()) / 60.0,
        peak_per_s=int(per_second.max()),
        bursts=int(sizes.size),
        burst_max=int(sizes.max()),
        burst_p99=float(np.percentile(sizes, 99)),
        functions=int(np.unique(w.function).size),
    )


def make_policy(name: str, keep_alive_s: float | None) -> Policy:
    """``none``, ``fixed`` (``keep_alive_s``, default 10 min) or ``hybrid``
    (``keep_alive_s``: its fallback, default 4 h)."""
    if name == "none":
        return NoKeepAlive()
    if name == "fixed":
        return FixedKeepAlive(600.0 if keep_alive_s is None else keep_alive_s)
    if name == "hybrid":
        if keep_alive_s is None:
            return HybridHistogram()
        return HybridHistogram(fallback_keep_alive_s=keep_alive_s)
    raise ConfigError(format_problem("policy", "must be one of none, fixed, hybrid", name))


def _starts(inv: Invocations, policy: Policy, compress: float, **extra: object) -> Workload:
    cold = cold_starts(inv, policy)
    starts = (inv.times[cold] - inv.begin_s) / compress
    function = inv.function[cold]
    order = np.argsort(starts, kind="stable")
    return Workload(
        starts=starts[order],
        function=function[order].astype(np.int32),
        functions=inv.functions,
        source=inv.source,
        parameters={
            **inv.parameters,
            **policy.parameters(),
            "window_s": [inv.begin_s, inv.end_s],
            "compress": compress,
            **extra,
        },
        duration_s=max(inv.end_s - inv.begin_s, 0.0) / compress,
        invocations=len(inv),
        memory_mib=inv.memory_mib,
    )


_PATH = InstanceOf((str, os.PathLike), "a path")
_NUMBER = InstanceOf((int, float, np.integer, np.floating), "a number")
#: workload()'s arguments by type, before their ranges: a notebook's
#: ``node_share="0.5"`` was a TypeError inside math.isfinite.
_WORKLOAD_TYPES = Rules(
    trace=Maybe(_PATH),
    durations=Maybe(_PATH),
    memory=Maybe(_PATH),
    mmpp_parameters=Maybe(InstanceOf(MmppParameters, "an MmppParameters")),
    policy=Maybe(InstanceOf(str, "a policy name (none, fixed, hybrid)")),
    keep_alive_s=Maybe(_NUMBER),
    node_share=_NUMBER,
    window=Maybe(
        Satisfies(
            lambda w: (
                isinstance(w, tuple | list) and len(w) == 2 and all(_NUMBER.holds(t) for t in w)
            ),
            "must be (begin_s, end_s), two numbers",
        )
    ),
    compress=_NUMBER,
    seed=InstanceOf((int, np.integer), "an int"),
)


def workload(
    *,
    trace: str | os.PathLike[str] | None = None,
    durations: str | os.PathLike[str] | None = None,
    memory: str | os.PathLike[str] | None = None,
    mmpp_parameters: MmppParameters | None = None,
    policy: str | None = None,
    keep_alive_s: float | None = None,
    node_share: float = 1.0,
    window: tuple[float, float] | None = None,
    compress: float = 1.0,
    seed: int = 0,
) -> WorkloadOutcome:
    """One node's sandbox starts from ``trace`` (an Azure Functions 2019 or
    2021 file or a CSV of start times, told apart by its header) or, without
    one, from the MMPP of ``mmpp_parameters``; ``policy`` decides the cold
    starts (default: ``fixed`` for an Azure trace, ``none`` — every
    invocation a start — for start times and the MMPP)."""
    given = SimpleNamespace(
        trace=trace, durations=durations, memory=memory, mmpp_parameters=mmpp_parameters,
        policy=policy, keep_alive_s=keep_alive_s, node_share=node_share, window=window,
        compress=compress, seed=seed,
    )  # fmt: skip
    validate(given, _WORKLOAD_TYPES)
    check_share(node_share)
    check_window(window)
    if not (math.isfinite(compress) and 1.0 <= compress <= MAX_COMPRESS):
        raise ConfigError(format_problem("compress", f"must be in 1..{MAX_COMPRESS:g}", compress))
    if not 0 <= seed < 2**63:
        raise ConfigError(format_problem("seed", "must be in 0..2**63-1", seed))
    if trace is None and (durations is not None or memory is not None):
        name = "durations" if durations is not None else "memory"
        raise ConfigError(
            format_problem(name, "goes with an Azure Functions 2019 invocations file", "no trace")
        )
    if policy is not None:
        make_policy(policy, keep_alive_s)  # a bad policy before a long read
    if trace is None:
        params = mmpp_parameters or MmppParameters()
        inv = select(
            mmpp(params, np.random.default_rng(seed)), node_share=node_share, window=window
        )
    else:
        inv = read_trace_file(
            trace,
            durations_csv=durations,
            memory_csv=memory,
            seed=seed,
            node_share=node_share,
            window=window,
        )
    chosen = policy or ("fixed" if inv.source.startswith("azure") else "none")
    if chosen == "none" and keep_alive_s is not None:
        raise ConfigError(
            format_problem(
                "keep_alive", "goes with --policy fixed or hybrid (every invocation starts here)",
                keep_alive_s,
            )
        )  # fmt: skip
    w = _starts(inv, make_policy(chosen, keep_alive_s), compress, node_share=node_share, seed=seed)
    return WorkloadOutcome(workload=w, stats=workload_stats(w))
