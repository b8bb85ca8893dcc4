"""A pool's integrals and levels read in slices, against the reading that
searched every event (the code before, kept here as the reference).

:meth:`PoolTimeline.ready_device_s` sums the events inside an interval only
(two binary searches, the level after an event its own ``ready`` entry) and
:meth:`PoolTimeline.ready_at` reads the levels where they are; the figures,
the windows of :func:`~bootstorm.simulator.timeline.windows` among them,
must be those of the full search to the bit. The build's groupings (pool
timelines, per-stage durations, branch ends) are checked the same way.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bootstorm.simulator._build import PoolLog, _branch_finish
from bootstorm.simulator.fast import by_stage_durations
from bootstorm.simulator.result import PoolEvent, PoolTimeline


def _old_ready_at(line: PoolTimeline, times_s: object) -> np.ndarray:
    at = np.searchsorted(line.t_s, np.asarray(times_s, dtype=np.float64), side="right")
    levels = np.concatenate(([line.initial], line.ready.astype(np.int64)))
    return levels[at]


def _old_ready_device_s(line: PoolTimeline, *, until_s: float, since_s: float = 0.0) -> float:
    if until_s <= since_s:
        return 0.0
    cut = (line.t_s > since_s) & (line.t_s < until_s)
    edges = np.concatenate(([since_s], line.t_s[cut], [until_s]))
    levels = _old_ready_at(line, edges[:-1])
    return float(np.dot(np.diff(edges), levels))


# Times on a coarse grid, so that many events share a time (a take and the
# order it starts; several starts at once) and bounds fall on events.
_times = st.lists(st.integers(0, 40).map(lambda k: k * 0.25), max_size=60)


@st.composite
def _lines(draw: st.DrawFn) -> PoolTimeline:
    t_s = np.sort(np.array(draw(_times), dtype=np.float64))
    ready = np.array(draw(st.lists(st.integers(0, 9), min_size=t_s.size, max_size=t_s.size)))
    return PoolTimeline(
        initial=draw(st.integers(0, 9)),
        memory_mib_per_device=1.0,
        t_s=t_s,
        event=np.zeros(t_s.size, dtype=np.int8),
        ready=ready.astype(np.int32),
        making=np.zeros(t_s.size, dtype=np.int32),
    )


_bounds = st.one_of(
    st.integers(-4, 44).map(lambda k: k * 0.25),
    st.floats(-1.0, 11.0, allow_nan=False),
)


@settings(max_examples=400, deadline=None)
@given(line=_lines(), a=_bounds, b=_bounds)
def test_integral_is_the_full_search_to_the_bit(line: PoolTimeline, a: float, b: float) -> None:
    for since, until in ((a, b), (b, a), (0.0, b), (a, a)):
        got = line.ready_device_s(until_s=until, since_s=since)
        want = _old_ready_device_s(line, until_s=until, since_s=since)
        assert got.hex() == want.hex(), (since, until)


@settings(max_examples=300, deadline=None)
@given(line=_lines(), times=st.lists(_bounds, max_size=12))
def test_levels_are_the_full_search(line: PoolTimeline, times: list[float]) -> None:
    got, want = line.ready_at(times), _old_ready_at(line, times)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
    for t in times[:3]:
        one = line.ready_at(t)
        assert np.ndim(one) == 0 and int(one) == int(_old_ready_at(line, t))


def test_out_of_order_events_are_read_as_before() -> None:
    """A timeline built by hand out of time order takes the old path."""
    line = PoolTimeline(
        initial=2,
        memory_mib_per_device=1.0,
        t_s=np.array([3.0, 1.0, 2.0, 2.0]),
        event=np.zeros(4, dtype=np.int8),
        ready=np.array([1, 4, 0, 3], dtype=np.int32),
        making=np.zeros(4, dtype=np.int32),
    )
    for since, until in ((0.0, 5.0), (1.0, 2.5), (1.5, 3.0)):
        want = _old_ready_device_s(line, until_s=until, since_s=since)
        assert line.ready_device_s(until_s=until, since_s=since) == want


@settings(max_examples=100, deadline=None)
@given(
    stages=st.lists(st.integers(0, 5), max_size=300),
    big=st.booleans(),
)
def test_durations_grouped_by_stage_as_by_mask(stages: list[int], big: bool) -> None:
    dur_stage = np.array(stages * (40 if big else 1), dtype=np.int64)  # big: the sort path
    dur_val = np.random.default_rng(len(stages)).random(dur_stage.size)
    got = by_stage_durations(dur_stage, dur_val, 6)
    assert len(got) == 6
    for s, d in enumerate(got):
        want = dur_val[dur_stage == s]
        assert d.tobytes() == want.tobytes()
        assert d.sum().hex() == want.sum().hex()
        if d.size:
            assert d.mean().hex() == want.mean().hex()


@settings(max_examples=150, deadline=None)
@given(
    per=st.lists(st.lists(st.integers(0, 2), max_size=4), min_size=1, max_size=30),
    shuffled=st.booleans(),
)
def test_branch_ends_as_by_scatter(per: list[list[int]], shuffled: bool) -> None:
    """Per sandbox and branch kind, the last end: one reduction per run of a
    parent (branches in sandbox order) or the scatter (any other order)."""
    parent = np.array([i for i, kinds in enumerate(per) for _ in kinds], dtype=np.int64)
    kind = np.array([k for kinds in per for k in kinds], dtype=np.int32)
    done = np.random.default_rng(parent.size).random(parent.size) * 10.0
    if shuffled and parent.size:
        order = np.random.default_rng(1).permutation(parent.size)
        parent, kind, done = parent[order], kind[order], done[order]
    program = SimpleNamespace(
        n_sandboxes=len(per),
        branch_kind=kind,
        branch_parent=parent,
        branch_names=("a", "b", "c"),
    )
    got = _branch_finish(program, done)
    kinds, first = np.unique(kind, return_index=True)
    assert list(got) == [("a", "b", "c")[k] for k in kinds[np.argsort(first)].tolist()]
    for k, name in enumerate(("a", "b", "c")):
        if name not in got:
            continue
        want = np.full(len(per), np.nan)
        np.fmax.at(want, parent[kind == k], done[kind == k])
        assert got[name].tobytes() == want.tobytes()


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.integers(0, 1), st.integers(0, 4), st.integers(0, 40)), max_size=80
    )
)
def test_empty_starts_as_by_unique(events: list[tuple[int, int, int]]) -> None:
    """The starts that found a device pool empty: sorted, once each (a
    ticket pool's misses left out), as ``np.unique`` of their tasks."""
    pool = np.array([e[0] for e in events], dtype=np.int32)
    event = np.array([e[1] for e in events], dtype=np.int8)
    task = np.array([e[2] for e in events], dtype=np.int64)
    log = PoolLog(
        t_s=np.zeros(pool.size),
        pool=pool,
        event=event,
        ready=np.zeros(pool.size, dtype=np.int32),
        making=np.zeros(pool.size, dtype=np.int32),
        task=task,
    )
    program = SimpleNamespace(pools=[SimpleNamespace(ticket=False), SimpleNamespace(ticket=True)])
    got = log.empty_starts(program)
    missed = (event == PoolEvent.MISS) & (pool == 0)
    want = np.unique(task[missed]) if missed.any() else np.zeros(0, dtype=np.int64)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
