"""Pools that refill while starts go on: a scenario's ``pool_refill`` in its program.

Every family builds its plans with :class:`~bootstorm.simulator.Pooled`
steps (take a ready device, else make one). With a
:class:`~bootstorm.models.PoolRefill`, :func:`with_refill` adds after each
pooled step a refill branch per pooled kind the step may take: a refill
worker's turn (:class:`~bootstorm.simulator.Refill`) that makes a device
with the very steps a start that finds the pool empty runs (the same RTNL
holds, CPU and daemon round trips) if the kind's ready devices plus those
being made are below its target. The branches run inside one gate of
``concurrency`` permits, the refill workers, and count as the stage
:data:`REFILL`. That is the node agent's loop
(``validation/agent/_pools.py``), so the model and the agent refill alike.
A family may say how its worker makes a device (the testbed's is the node
agent: its own GIL, no call to itself) and what removing one costs (a
surplus above a target that fell, removed by the workers one after
another before any making; without, it goes at once, for nothing).

A rate-following pool (``follow_rate``) sets its target at each start
(:class:`~bootstorm.simulator.Retarget` before the pooled step) from the
starts in the window before it (:func:`pool_targets`, the rule of
:func:`~bootstorm.models.follow_rate_target` that the agent also calls).
The model counts a start at its arrival; the agent counts it when the
sandbox asks for its first pooled device, a stage later: the model's target
moves that much earlier.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from ..simulator import (
    Async,
    CyclicPlans,
    Hold,
    Pooled,
    Refill,
    Retarget,
    SandboxPlan,
    Step,
)
from .tuned import FollowRate, PoolRefill

__all__ = ["REFILL", "follow_rate_targets", "pool_targets", "refill_copies", "with_refill"]

#: The refill workers' gate, and the stage their branches count as.
REFILL = "pool-refill"


def pool_targets(
    arrival_s: npt.ArrayLike | None,
    *,
    sandboxes: int,
    pools: Mapping[str, int],
    refill: PoolRefill,
) -> dict[str, npt.NDArray[np.int64]]:
    """Each pooled kind's target at each sandbox's start (sandbox order).

    Without ``follow_rate`` the targets are the ``pools`` entries. With it,
    sandbox ``i``'s start sets ``follow_rate_target(starts, ...)``, where
    ``starts`` counts the starts in the window ending at its arrival, itself
    and the starts before it at the same time included (the order the
    executors start them: by time, then by sandbox).
    """
    rule = refill.follow_rate
    if rule is None:
        return {k: np.full(sandboxes, n, dtype=np.int64) for k, n in pools.items() if n > 0}
    times = np.zeros(sandboxes) if arrival_s is None else np.asarray(arrival_s, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    ordered = times[order]
    # Starts at or before this one that are still inside the window (t - window, t].
    since = np.searchsorted(ordered, ordered - rule.window_s, side="right")
    in_window = np.arange(1, sandboxes + 1, dtype=np.int64) - since
    # The rule per distinct count (a handful), not per start; the counts
    # found by marks, not by np.unique's sort of a day's million starts.
    present = np.bincount(in_window)  # every count >= 1: the start itself
    counts = np.flatnonzero(present)
    index = np.zeros(present.size, dtype=np.int64)
    index[counts] = np.arange(counts.size)
    where = index[in_window]
    out = {}
    for kind, floor in pools.items():
        if floor <= 0:
            continue
        per_count = follow_rate_targets(counts, rule=rule, floor=floor)
        target = np.empty(sandboxes, dtype=np.int64)
        target[order] = per_count[where.reshape(-1)]
        out[kind] = target
    return out


def follow_rate_targets(
    starts: npt.NDArray[np.int64], *, rule: FollowRate, floor: int
) -> npt.NDArray[np.int64]:
    """:func:`~bootstorm.models.follow_rate_target` (the agent's rule) at
    each count of ``starts``, as arrays: the same float operations in the
    same order, so the same targets (``tests/models/test_refill.py``). A
    search's hour of bursty starts has a thousand distinct counts a trial,
    and the rule called on each was a tenth of the search."""
    wanted = np.ceil(starts * rule.cover_s / rule.window_s - 1e-9)
    targets: npt.NDArray[np.int64] = np.maximum(floor, np.minimum(rule.max_devices, wanted)).astype(
        np.int64
    )
    return targets


def refill_copies(
    targets: Mapping[str, npt.NDArray[np.int64]],
    *,
    arrival_s: npt.ArrayLike | None,
    initial: Mapping[str, int],
) -> int:
    """Turns a start's refill branch needs: one for the device it took, plus
    the most any kind's target rose at one start (in start order)."""
    if not targets:
        return 1
    if all(not t.size or (int(t.min()) == int(t.max()) == initial[k]) for k, t in targets.items()):
        return 1  # static targets, the pools' sizes: no start raises one (no sort needed)
    n = len(next(iter(targets.values())))
    times = np.zeros(n) if arrival_s is None else np.asarray(arrival_s, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    rise = 0
    for kind, target in targets.items():
        ordered = np.concatenate(([initial[kind]], target[order]))
        rise = max(rise, int(np.diff(ordered).max(initial=0)))
    return 1 + rise


def with_refill(
    plans: Sequence[SandboxPlan],
    *,
    pooled: Collection[str],
    follow: bool,
    copies: int,
    work: Callable[[str, tuple[Step, ...]], tuple[Step, ...]] | None = None,
    remove: Mapping[str, tuple[Step, ...]] | None = None,
) -> Sequence[SandboxPlan]:
    """``plans`` with a refill branch after each pooled step, for each kind of
    ``pooled`` it may take (its own and any nested in its creation: a
    ``netns-veth`` falls back to the ``netns`` pool), and with ``follow`` a
    :class:`Retarget` of each such kind before it. ``work``: how the worker
    makes a device of a kind, given the steps of a start that found the
    pool empty (the family's; None: the same steps); ``remove``: by kind, what the
    worker's removal of a surplus device costs (a kind absent: the surplus
    goes at once, for nothing)."""
    removals = dict(remove or {})
    memo: dict[SandboxPlan, SandboxPlan] = {}

    def plan(p: SandboxPlan) -> SandboxPlan:
        done = memo.get(p)
        if done is None:
            done = memo[p] = tuple(
                replace(stage, steps=_steps(stage.steps, pooled, follow, copies, work, removals))
                for stage in p
            )
        return done

    if isinstance(plans, CyclicPlans):
        cycled: Sequence[SandboxPlan] = CyclicPlans(
            [plan(p) for p in plans.plans], sandboxes=len(plans)
        )
        return cycled
    return [plan(p) for p in plans]


def _steps(
    steps: tuple[Step, ...],
    pooled: Collection[str],
    follow: bool,
    copies: int,
    work: Callable[[str, tuple[Step, ...]], tuple[Step, ...]] | None,
    removals: Mapping[str, tuple[Step, ...]],
) -> tuple[Step, ...]:
    out: list[Step] = []
    for step in steps:
        kinds = [k for k in _pool_kinds(step) if k in pooled] if isinstance(step, Pooled) else []
        if not kinds:
            out.append(step)
            continue
        if follow:
            out.extend(Retarget(k) for k in kinds)
        out.append(step)
        for kind in kinds:
            make = _creation(step, kind)
            if work is not None:
                make = work(kind, make)
            turn = Refill(kind, create=make, copies=copies, remove=removals.get(kind))
            out.append(Async(REFILL, (turn,), gate=REFILL))
    return tuple(out)


def _pool_kinds(step: Step) -> list[str]:
    """The pools ``step`` may take from, outermost first."""
    if isinstance(step, Pooled):
        found = [step.pool]
        for inner in (*step.create, *step.fetch, *step.create_next, *step.fetch_next):
            found += [k for k in _pool_kinds(inner) if k not in found]
        return found
    if isinstance(step, Hold):
        return [k for inner in step.body for k in _pool_kinds(inner)]
    return []


def _creation(step: Pooled, kind: str) -> tuple[Step, ...]:
    """What making a device of ``kind`` costs: the creation of the pooled step
    that takes it, with any pool nested in it replaced by its own creation
    (a refill worker makes, it does not take). A making that goes on into
    the next stage is made whole: the worker has no stages."""
    if step.pool == kind:
        return _unpooled((*step.create, *step.create_next))
    for inner in (*step.create, *step.create_next):
        if isinstance(inner, Pooled) and kind in _pool_kinds(inner):
            return _creation(inner, kind)
    raise ValueError(f"pool {kind!r} is not taken in {step!r}")  # pragma: no cover


def _unpooled(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    out: list[Step] = []
    for step in steps:
        if isinstance(step, Pooled):
            out.extend(_unpooled((*step.create, *step.create_next)))
        elif isinstance(step, Hold):
            out.append(replace(step, body=_unpooled(step.body)))
        else:
            out.append(step)
    return tuple(out)
