"""The one-at-a-time sensitivity to a profile's unidentified costs (calibration/tornado.py)."""

from __future__ import annotations

import math

import pytest

from bootstorm import simulate
from bootstorm.calibration.identify import sensitivities
from bootstorm.calibration.tornado import Tornado, tornado
from bootstorm.models import Identification, Profile, Scenario, UnseenDirection, load_profile

STORM = Scenario(cni="veth", sandboxes=20, profile="paper-000")


def _assumed(*paths: str, factor: float = 2.0) -> Profile:
    """paper-000 with only ``paths`` unidentified, each ×/÷ ``factor``."""
    unseen = [
        UnseenDirection(weights={p: 1.0}, span_log=math.log(factor), by="assumption: a test")
        for p in paths
    ]
    ident = Identification(error_rel=0.1, unseen=unseen)
    return load_profile("paper-000").model_copy(update={"identification": ident})


@pytest.fixture(scope="module")
def three() -> Tornado:
    # The kata-agent handshake (0.5 s a sandbox) against host-local IPAM (5 ms),
    # and the pooling agent's round trip, which a storm without pools never makes.
    prof = _assumed("costs.ipam_s", "costs.vm_boot_sleep_s", "costs.pool_fetch_s")
    return tornado(STORM, profile=prof, seed=3)


def test_the_cost_that_dominates_has_the_longest_bar(three: Tornado) -> None:
    first, second = three.bars
    assert first.costs == "costs.vm_boot_sleep_s" and second.costs == "costs.ipam_s"
    assert three.swing_s(first) > 10 * three.swing_s(second)
    assert three.swing_s(first, "p99") > 10 * three.swing_s(second, "p99")
    # Halving the sleep shortens the storm, doubling it lengthens it.
    low, high = first.makespan_s
    assert low < three.makespan_s < high
    assert first.factor == pytest.approx(2.0)


def test_a_cost_the_storm_does_not_use_has_no_bar(three: Tornado) -> None:
    assert "costs.pool_fetch_s" not in {b.costs for b in three.bars}


def test_the_base_is_the_storm_on_its_seed_and_the_ends_replay_it(three: Tornado) -> None:
    base = simulate(STORM, seed=3, executor="compiled")
    assert three.makespan_s == base.makespan_s and three.p99_s == base.startup.p99
    prof = _assumed("costs.ipam_s", "costs.vm_boot_sleep_s", "costs.pool_fetch_s")
    again = tornado(STORM, profile=prof, seed=3, base=base)
    assert again == three  # the same seed, the same bits; a given base is not run again


def test_its_ends_are_the_cautions_ends() -> None:
    """A bar and a caution about the same cost never disagree."""
    prof = _assumed("costs.vm_boot_sleep_s")
    (bar,) = tornado(STORM, profile=prof, seed=1).bars
    (moved,) = sensitivities(STORM, profile=prof, seed=1)
    base = simulate(STORM, seed=1, executor="compiled").makespan_s
    assert tuple((m - base) / base for m in bar.makespan_s) == pytest.approx(moved.headline_rel)


def test_swing_names_its_metrics(three: Tornado) -> None:
    with pytest.raises(ValueError, match="metric: one of makespan, mean, p99"):
        three.swing_s(three.bars[0], "p50")


def test_a_what_ifs_cautions_and_tornado_run_the_ends_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`report` and the demo read both off one what-if: its unidentified
    costs' ends are run once (they were run twice, once per use)."""
    from bootstorm.calibration import identify
    from bootstorm.workflows import WhatIf

    prof = _assumed("costs.ipam_s", "costs.vm_boot_sleep_s")
    base = simulate(STORM, seed=3, executor="compiled")
    ran: list[int] = []
    real = identify._summaries

    def counted(storms, seed, executor):  # type: ignore[no-untyped-def]
        ran.append(len(storms))
        return real(storms, seed, executor)

    monkeypatch.setattr(identify, "_summaries", counted)
    what = WhatIf(scenario=STORM, result=base, profile=prof, seed=3)
    cautions = what.identification.cautions
    bars = what.tornado.bars
    assert ran == [4]  # two costs, both ends, once; the base is the what-if's own
    assert what.tornado == tornado(STORM, profile=prof, seed=3, base=base)
    assert {c.costs for c in cautions} <= {b.costs for b in bars}
