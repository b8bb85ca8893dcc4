"""Which stage a storm's time goes to, and how much of each stage is a wait
for a kernel lock: measured in a recorded storm, predicted by the model.

A planner reads the stage table to decide which stage to limit or pool; a
model whose makespan is right can still blame the wrong stage. Two figures
say whether it does:

- a stage's **share of the mean startup**: its mean time over the mean
  startup (the rest of a startup is waiting at a stage's gate);
- a stage's **lock-wait share**: of the time sandboxes spent inside it, the
  part spent waiting for RTNL or cgroup_mutex. Measured, the kernel's
  ``lock:contention_begin``/``end`` waits joined to the sandbox and stage
  whose thread or process waited (``traces/kernel``); predicted, the
  model's waits by the waiter's stage (``LockStats.wait_s_by_stage``).

A trace that kept only some of its lock spans (``--max-lock-spans``) kept the
sandboxes' waits on these locks evenly over the storm, and its note gives the
counts: the sums are scaled up by that ratio (:func:`sampled_wait_scale`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..simulator import Result
from ..traces import Trace

__all__ = [
    "ATTRIBUTION_LOCKS",
    "Attribution",
    "attribution_standard_error",
    "measured_attribution",
    "predicted_attribution",
    "runs_standard_error",
    "sampled_wait_scale",
    "sandbox_times",
    "stage_lock_waits",
]

#: The kernel locks whose waits are attributed to stages (host-local's file
#: lock is a sleep in ``flock``, not a contention tracepoint: the model's alone).
ATTRIBUTION_LOCKS: tuple[str, ...] = ("rtnl", "cgroup_mutex")

_SAMPLED = re.compile(r"(\d+) of the (\d+) rtnl, cgroup_mutex, css_set_lock waits")


def sampled_wait_scale(trace: Trace) -> float:
    """Seen over kept of the sandboxes' key-lock waits, from the trace's note
    (1 where every wait was kept)."""
    for note in trace.header.notes:
        if m := _SAMPLED.search(note):
            return int(m.group(2)) / int(m.group(1))
    return 1.0


def stage_lock_waits(trace: Trace) -> dict[tuple[str, str], float]:
    """(lock, stage) → the sandboxes' waits for that lock inside that stage,
    summed (s), scaled for sampling."""
    scale = sampled_wait_scale(trace)
    out: dict[tuple[str, str], float] = {}
    for lk in trace.locks:
        if lk.what != "wait" or lk.stage is None or lk.sandbox is None:
            continue
        if lk.lock in ATTRIBUTION_LOCKS:
            key = (lk.lock, lk.stage)
            out[key] = out.get(key, 0.0) + scale * (lk.end_s - lk.start_s)
    return out


def sandbox_times(
    trace: Trace, stages: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Per sandbox of ``trace``: its arrival, the end of its last stage, its
    time in each of ``stages`` (NaN where it never ended one), and whether
    it passed all of them."""
    n = trace.header.scenario.sandboxes
    arrival = np.full(n, trace.header.origin_s)
    for a in trace.arrivals:
        arrival[a.sandbox] = a.t_s
    end = np.full(n, np.nan)
    per_stage = {s: np.full(n, np.nan) for s in stages}
    for span in trace.spans:
        end[span.sandbox] = np.fmax(end[span.sandbox], span.end_s)
        if span.stage in per_stage:
            per_stage[span.stage][span.sandbox] = span.end_s - span.start_s
    done = ~np.isnan(end)
    for times in per_stage.values():
        done &= ~np.isnan(times)
    return arrival, end, per_stage, done


@dataclass(frozen=True, kw_only=True)
class Attribution:
    """A storm's time by stage: each stage's share of the mean startup, and
    each (lock, stage)'s wait as a share of the time inside that stage."""

    stage_share: Mapping[str, float]
    wait_share: Mapping[tuple[str, str], float]

    def rows(self) -> list[tuple[str, float]]:
        """(metric, value), in the names ``validate`` prints."""
        out = [(f"{stage} share of startup", v) for stage, v in self.stage_share.items()]
        out += [
            (f"{lock} wait in {stage}", v)
            for (lock, stage), v in self.wait_share.items()
            if stage in self.stage_share
        ]
        return out


def measured_attribution(traces: Sequence[Trace], stages: Sequence[str]) -> Attribution:
    """The attribution of one storm's recorded runs, pooled (sums over every
    run's sandboxes that passed every stage)."""
    inside = dict.fromkeys(stages, 0.0)
    waited: dict[tuple[str, str], float] = {}
    startup = 0.0
    count = 0
    for trace in traces:
        arrival, end, per_stage, done = sandbox_times(trace, stages)
        startup += float((end - arrival)[done].sum())
        count += int(done.sum())
        for s in stages:
            inside[s] += float(per_stage[s][done].sum())
        for key, w in stage_lock_waits(trace).items():
            waited[key] = waited.get(key, 0.0) + w
    return _attribution(inside, waited, startup_s=startup, count=count)


def attribution_standard_error(
    traces: Sequence[Trace], stages: Sequence[str]
) -> Attribution | None:
    """How precisely the runs measured each figure of
    :func:`measured_attribution`: each run's own figure, their sample standard
    deviation over the square root of the runs (``None`` for one run).

    A small stage's shares swing from run to run of the same storm: RTNL's
    wait in NetNS (2% of a CNI storm's startup) was 3-70% of NetNS's time over
    five runs at 150, cgroup_mutex's in Cgroup 6-49% (docs/research-log.md).
    A model within 10 points of their pooled figure cannot be told from one
    that is not; a comparison says so (:meth:`~.trace_fit.Comparison.testable`).
    """
    if len(traces) < 2:
        return None
    runs = [measured_attribution([trace], stages) for trace in traces]
    return Attribution(
        stage_share={s: runs_standard_error([r.stage_share[s] for r in runs]) for s in stages},
        wait_share={
            key: runs_standard_error([r.wait_share[key] for r in runs])
            for key in runs[0].wait_share
        },
    )


def runs_standard_error(values: Sequence[float]) -> float:
    """The standard error of one figure over the runs that measured it: the
    sample standard deviation over the square root of their count (two or
    more runs)."""
    if len(values) < 2:
        raise ValueError(f"values: a standard error needs two runs or more, got {len(values)}")
    return float(np.std(values, ddof=1) / np.sqrt(len(values)))


def predicted_attribution(result: Result, stages: Sequence[str]) -> Attribution:
    """The same figures of a simulated storm."""
    inside = {s: result.stages[s].total_s for s in stages if s in result.stages}
    waited = {
        (lock, stage): w
        for lock in ATTRIBUTION_LOCKS
        if lock in result.locks
        for stage, w in result.locks[lock].wait_s_by_stage.items()
    }
    n = result.finish_s.size
    return _attribution(inside, waited, startup_s=result.startup.mean * n, count=n)


def _attribution(
    inside: Mapping[str, float],
    waited: Mapping[tuple[str, str], float],
    *,
    startup_s: float,
    count: int,
) -> Attribution:
    mean_startup = startup_s / count if count else 0.0
    stage_share = {
        s: (t / count) / mean_startup if count and mean_startup > 0 else 0.0
        for s, t in inside.items()
    }
    wait_share = {
        (lock, s): waited.get((lock, s), 0.0) / t if t > 0 else 0.0
        for lock in ATTRIBUTION_LOCKS
        for s, t in inside.items()
    }
    return Attribution(stage_share=stage_share, wait_share=wait_share)
