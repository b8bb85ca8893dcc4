"""The paper-001 profile against seed 001: its fit rows (S1-1 to S1-3, and the
part of S1-4 moved to fit) and, never fitted, the predict rows S1-4 to S1-10.

Tolerances are PAPER-TARGETS.md's: fit rows ±5%; a predicted number within
±15% of it (relative); a trend in the right direction and order. A row the
model misses is a strict xfail with the measured numbers, so the suite fails
the day it starts to hold.
"""

from __future__ import annotations

from functools import cache

import pytest

from bootstorm import simulate
from bootstorm.calibration import (
    FIT_TOLERANCE,
    PAPER_001_FIT,
    PREDICT_TOLERANCE,
    check_targets,
    known_miss,
)
from bootstorm.models import Scenario, load_profile
from bootstorm.models.sriov import VF_RELATED_STAGES
from bootstorm.simulator import Result

PROFILE = load_profile("paper-001")
N = 200  # seed 001's concurrency


@cache
def run(cni: str, sandboxes: int = N, memory_mib: int = 512, vcpus: float | None = None) -> Result:
    scenario = Scenario(
        cni=cni,  # type: ignore[arg-type]
        sandboxes=sandboxes,
        profile="paper-001",
        memory_mib=memory_mib,
        vcpus=vcpus,
    )
    return simulate(scenario)


def reduction(new: float, old: float) -> float:
    return 1.0 - new / old


def near(model: float, paper: float, tol: float = PREDICT_TOLERANCE) -> bool:
    return abs(model - paper) <= tol * abs(paper)


def vf_related_s(r: Result) -> float:
    """Table 1's VF-related time (steps 1, 3, 4, 5) on the startup path."""
    return sum(r.steps[s].mean_s for s in VF_RELATED_STAGES if s in r.steps and r.steps[s].on_path)


# -- fit rows ----------------------------------------------------------------------

FIT_CHECKS = {f"{c.target.id}:{c.target.label}": c for c in check_targets(PAPER_001_FIT, PROFILE)}
# The model's structure reaches these within ±22%, not ±5% (KNOWN_MISSES: S1-2/shares).
_TABLE_1_MISSES = {
    "S1-2:vanilla dma-ram share of average",
    "S1-2:vanilla dma-ram share of p99",
    "S1-2:vanilla virtiofs share of average",
    "S1-2:vanilla virtiofs share of p99",
    "S1-2:vanilla dma-image share of average",
    "S1-2:vanilla dma-image share of p99",
    "S1-2:vanilla vfio-devset share of average",
}


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(
            k,
            marks=pytest.mark.xfail(
                strict=True,
                reason=known_miss("S1-2/shares").reason,
            ),
        )
        if k in _TABLE_1_MISSES
        else k
        for k in FIT_CHECKS
    ],
)
def test_fit_rows_within_5_percent(key: str) -> None:
    check = FIT_CHECKS[key]
    assert check.target.tolerance_rel == FIT_TOLERANCE
    assert check.within, f"{key}: paper {check.target.value}, model {check.model:.4g}"


@pytest.mark.xfail(strict=True, reason=known_miss("S1-2/shares").reason)
def test_table_1_shares_within_15_percent() -> None:
    """What the model reached for every Table 1 share (mean and p99) until
    cgroup_mutex handed over as measured: the p99 tail's dma-image share fell
    to -22%."""
    for key, check in FIT_CHECKS.items():
        if key.startswith("S1-2"):
            assert abs(check.rel_error) <= 0.15, (key, check.model, check.target.value)


def test_s1_3_zeroing_is_over_93_percent_of_dma_mapping() -> None:
    (check,) = [c for k, c in FIT_CHECKS.items() if k.startswith("S1-3")]
    assert check.model > 0.93


# -- S1-4: FastIOV against vanilla and no-network ---------------------------------


def test_s1_4_fastiov_against_vanilla() -> None:
    vanilla, fast = run("sriov-vanilla"), run("fastiov")
    assert near(reduction(fast.startup.mean, vanilla.startup.mean), 0.657)
    assert near(reduction(fast.startup.p99, vanilla.startup.p99), 0.754)
    assert near(reduction(vf_related_s(fast), vf_related_s(vanilla)), 0.961)


def test_s1_4_vanilla_average_against_no_network() -> None:
    vanilla, nonet = run("sriov-vanilla"), run("no-network")
    assert near(vanilla.startup.mean / nonet.startup.mean - 1.0, 3.052)


@pytest.mark.xfail(
    strict=True,
    reason=known_miss("S1-4/p99").reason,
)
def test_s1_4_p99_against_no_network() -> None:
    vanilla, fast, nonet = run("sriov-vanilla"), run("fastiov"), run("no-network")
    assert near(fast.startup.p99 / nonet.startup.p99 - 1.0, 0.116)
    assert near(vanilla.startup.p99 / nonet.startup.p99 - 1.0, 3.545)


def test_s1_4_first_network_use_stays_observable() -> None:
    """FastIOV's VF driver runs in the background: the sandbox is up before its
    NIC is, and the result says when the NIC is ready."""
    fast = run("fastiov")
    assert fast.ready is not None and fast.ready.mean > fast.startup.mean
    assert "vf-driver" in fast.branches and not fast.steps["vf-driver"].on_path


# -- S1-5: ablations --------------------------------------------------------------

ABLATIONS = {
    "fastiov-no-lock": 0.218,
    "fastiov-sync-vf": 0.403,
    "fastiov-no-skip": 0.582,
    "fastiov-eager-zero": 0.437,
}


@pytest.mark.parametrize(
    "cni",
    [
        pytest.param(
            "fastiov-eager-zero",
            marks=pytest.mark.xfail(
                strict=True,
                reason=known_miss("S1-5/eager-zero").reason,
            ),
        ),
        "fastiov-no-lock",
        "fastiov-sync-vf",
        "fastiov-no-skip",
    ],
)
def test_s1_5_ablation_reductions(cni: str) -> None:
    vanilla = run("sriov-vanilla")
    assert near(reduction(run(cni).startup.mean, vanilla.startup.mean), ABLATIONS[cni])


def test_s1_5_every_optimisation_contributes() -> None:
    vanilla, fast = run("sriov-vanilla"), run("fastiov")
    full = reduction(fast.startup.mean, vanilla.startup.mean)
    for cni in ABLATIONS:
        assert 0.0 < reduction(run(cni).startup.mean, vanilla.startup.mean) < full, cni
    # Ordered as in the paper: L cuts least, then A, D, S.
    order = sorted(ABLATIONS, key=lambda c: run(c).startup.mean, reverse=True)
    assert order[:2] == ["fastiov-no-lock", "fastiov-sync-vf"]


# -- S1-6: pre-zeroing ------------------------------------------------------------


def test_s1_6_fastiov_against_prezeroing() -> None:
    fast = run("fastiov")
    pre = {p: run(f"prezero-{p}").startup.mean for p in (10, 50, 100)}
    assert near(reduction(fast.startup.mean, pre[100]), 0.564)
    assert pre[10] > pre[50] > pre[100]


# -- S1-7: concurrency ------------------------------------------------------------


def _cut(n: int, **kw: object) -> float:
    return reduction(
        run("fastiov", n, **kw).startup.mean,  # type: ignore[arg-type]
        run("sriov-vanilla", n, **kw).startup.mean,  # type: ignore[arg-type]
    )


def test_s1_7_reduction_grows_with_concurrency() -> None:
    cuts = [_cut(n) for n in (10, 50, 100, 200)]
    assert cuts == sorted(cuts)
    assert near(cuts[-1], 0.656)


@pytest.mark.xfail(
    strict=True,
    reason=known_miss("S1-7/at-10").reason,
)
def test_s1_7_reduction_at_10() -> None:
    assert near(_cut(10), 0.467)


# -- S1-8: memory per sandbox -----------------------------------------------------


def _growth(cni: str) -> float:
    return run(cni, 50, 2048).startup.mean / run(cni, 50, 512).startup.mean - 1.0


def test_s1_8_fastiov_is_less_sensitive_to_memory() -> None:
    assert _growth("sriov-vanilla") > _growth("fastiov") >= 0.0


@pytest.mark.xfail(
    strict=True,
    reason=known_miss("S1-8/memory").reason,
)
def test_s1_8_numbers() -> None:
    assert near(_growth("sriov-vanilla"), 0.605)
    assert near(_growth("fastiov"), 0.215)


# -- S1-9: the node divided among N sandboxes --------------------------------------


def _divided(n: int) -> float:
    host = PROFILE.host
    return _cut(n, memory_mib=int(host.memory_gib * 1024 / n), vcpus=host.cores / n)


def test_s1_9_reductions_at_200_and_10() -> None:
    assert near(_divided(200), 0.657)
    assert near(_divided(10), 0.795)


def test_s1_9_reduction_rises_as_sandboxes_fall() -> None:
    assert _divided(10) > _divided(200)


# -- S1-10: against the ipvtap software CNI ---------------------------------------


def test_s1_10_fastiov_starts_faster_than_ipvtap() -> None:
    fast, ipvtap = run("fastiov"), run("ipvtap")
    assert fast.makespan_s < ipvtap.makespan_s and fast.startup.mean < ipvtap.startup.mean


@pytest.mark.xfail(
    strict=True,
    reason=known_miss("S1-10/makespan").reason,
)
def test_s1_10_numbers() -> None:
    fast, ipvtap = run("fastiov"), run("ipvtap")
    assert near(reduction(fast.makespan_s, ipvtap.makespan_s), 0.413)
    assert near(reduction(fast.startup.mean, ipvtap.startup.mean), 0.318)


@pytest.mark.slow
def test_the_built_in_profile_is_the_fit_byte_for_byte() -> None:
    """`bootstorm calibrate --targets paper-001 --write` reproduces the file."""
    from importlib import resources

    from bootstorm.calibration import fit_paper_001

    report = fit_paper_001()
    ref = resources.files("bootstorm.models").joinpath("profiles/paper-001.yaml")
    assert report.profile.to_yaml() == ref.read_text()
