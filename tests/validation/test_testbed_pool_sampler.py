"""The driver's pool sampler: an agent's pool levels asked on a thread while
a storm runs (the trace's ``pool_level`` records), a failed ask skipped and
counted, the thread ended when the storm is (no root: a fake admission)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from bootstorm.traces import PoolLevelSample
from bootstorm.validation.testbed import StormOptions
from bootstorm.validation.testbed.admission import PoolLevelNow, PoolSampling
from bootstorm.validation.testbed.driver import PoolSampler


class FakeAgentPools:
    """An admission's pool levels: the netns pool empties by one per ask
    and refills, the tap pool is kept at nothing; every ``fail_every``-th
    ask fails as an unreachable agent would."""

    def __init__(self, *, fail_every: int = 0) -> None:
        self.fail_every = fail_every
        self.asks = 0
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def pool_levels(self) -> Sequence[PoolLevelNow]:
        with self._lock:
            self.asks += 1
            n = self.asks
        self.threads.add(threading.current_thread().name)
        if self.fail_every and n % self.fail_every == 0:
            raise ConnectionError("agent unreachable\nsecond line")
        return (
            PoolLevelNow(kind="netns", ready=n % 4, making=1, target=4),
            PoolLevelNow(kind="tap", ready=0, making=0, target=0),  # no pool: not written
            PoolLevelNow(kind="veth", ready=2),  # holding some, target unknown: written
        )


def test_a_fake_agent_admission_is_pool_sampling() -> None:
    assert isinstance(FakeAgentPools(), PoolSampling)


def test_the_sampler_records_each_pooled_kind_every_interval_until_stopped() -> None:
    pools = FakeAgentPools()
    sampler = PoolSampler(pools, interval_s=0.02)
    before = time.monotonic()
    sampler.start()
    assert pools.asks == 1  # the first sample is taken before start() returns
    time.sleep(0.3)
    sampler.stop()
    after = time.monotonic()
    asks = pools.asks
    samples = sampler.samples
    # About one ask per 20 ms over 0.3 s, the first and a last one besides.
    assert 5 <= asks <= 0.3 / 0.02 + 3
    assert len(samples) == 2 * asks  # netns and veth; tap is no pool
    assert {s.kind for s in samples} == {"netns", "veth"}
    assert all(isinstance(s, PoolLevelSample) for s in samples)
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)
    assert before <= samples[0].t_s and samples[-1].t_s <= after  # the trace's clock
    netns = [s for s in samples if s.kind == "netns"]
    assert [s.ready for s in netns] == [n % 4 for n in range(1, asks + 1)]
    assert all((s.making, s.target) == (1, 4) for s in netns)
    veth = [s for s in samples if s.kind == "veth"]
    assert all(s.making is None and s.target is None for s in veth)
    assert sampler.note() is None
    # The thread is over: no ask after stop(), and stop() again is nothing.
    time.sleep(0.1)
    assert pools.asks == asks
    sampler.stop()
    assert pools.asks == asks
    assert not any(t.name == "pool-sampler" for t in threading.enumerate())


def test_a_failed_ask_is_skipped_and_counted_in_one_note() -> None:
    pools = FakeAgentPools(fail_every=2)
    sampler = PoolSampler(pools, interval_s=0.01)
    sampler.start()
    time.sleep(0.15)
    sampler.stop()
    assert sampler.failed == pools.asks // 2 >= 2
    assert sampler.asked == pools.asks
    assert len(sampler.samples) == 2 * (pools.asks - sampler.failed)
    note = sampler.note()
    assert note is not None and "\n" not in note
    assert note.startswith(f"pool levels: {sampler.failed} of {sampler.asked} samples failed")
    assert "ConnectionError: agent unreachable" in note


def test_the_sampler_asks_on_its_own_thread_and_stops_without_a_last_ask() -> None:
    pools = FakeAgentPools()
    sampler = PoolSampler(pools, interval_s=5.0)
    sampler.start()
    time.sleep(0.05)
    started = time.monotonic()
    sampler.stop(last=False)  # an interrupted storm: no last sample
    assert time.monotonic() - started < 1.0  # not a whole interval
    assert pools.asks == 1 and pools.threads == {threading.current_thread().name}
    with pytest.raises(RuntimeError, match="started already"):
        sampler.start()


def test_storm_options_bound_the_sampling_interval() -> None:
    assert StormOptions().pool_sample_s == 0.2
    assert StormOptions(pool_sample_s=0.05).pool_sample_s == 0.05
    for bad in (0.0, 0.001, 11.0, float("nan")):
        with pytest.raises(ValueError, match="pool_sample_s"):
            StormOptions(pool_sample_s=bad)
