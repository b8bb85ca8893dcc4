"""The paper-001 profile against seed 001: its fit rows (S1-1 to S1-3, and the
part of S1-4 moved to fit) and, never fitted, the predict rows S1-4 to S1-10.

Every number is judged on its mean over the ten check seeds 1001-1010, which
the fit (seeds 0-4, common random numbers) never used
(``bootstorm.calibration.check``: the same rows ``bootstorm calibrate --check``
prints). Each test names the rows it checks and so their kind
(``checks_rows``): *fit*, *predict*, *identity* (follows arithmetically from
fitted rows, so it is no evidence: FastIOV's −65.7% against vanilla is
1 − 1.391·4.0/16.2) or *mechanism*. Tolerances are PAPER-TARGETS.md's: fit
rows ±5%; a predicted number within ±15% (a reduction near 100% on what it
leaves); a trend in the right direction and order. A row whose standard error
across the seeds exceeds its tolerance is untestable at this size (a skip that
says so). A row the model misses is a strict xfail, ``raises=AssertionError``,
with the measured numbers, so the suite fails the day it starts to hold and a
crash is never taken for the expected miss.
"""

from __future__ import annotations

from functools import cache

import pytest
from paper_rows import PaperRows

from bootstorm import simulate
from bootstorm.calibration import FIT_TOLERANCE, known_miss
from bootstorm.calibration.rows import checks_rows
from bootstorm.models import Scenario, load_profile
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


#: Checks that miss on the mean of seeds 1001-1010 (``calibrate --check``), by
#: ``key:label``, with the registry entry that says why.
ROWS = PaperRows(
    "paper-001",
    sandboxes=N,
    expected_miss={
        "S1-2/mean:vanilla dma-ram share of average": "S1-2/shares",
        "S1-2/p99:vanilla dma-ram share of p99": "S1-2/shares",
        "S1-2/mean:vanilla virtiofs share of average": "S1-2/shares",
        "S1-2/p99:vanilla virtiofs share of p99": "S1-2/shares",
        "S1-2/mean:vanilla dma-image share of average": "S1-2/shares",
        "S1-2/mean:vanilla vfio-devset share of average": "S1-2/shares",
        "S1-2/p99:vanilla vf-driver share of p99": "S1-2/shares",
        "S1-4/vf-time:VF-related time left by FastIOV (paper: 3.9%)": "S1-4/vf-time",
        "S1-4/p99:FastIOV over no-network, p99": "S1-4/p99",
        "S1-5/eager-zero:fastiov-eager-zero vs vanilla, average": "S1-5/eager-zero",
        "S1-7/at-10:FastIOV vs vanilla at 10, average": "S1-7/at-10",
        "S1-10/makespan:FastIOV vs ipvtap, makespan": "S1-10/makespan",
    },
)


@pytest.mark.parametrize("key", ROWS.params())
@checks_rows(
    "S1-1",
    "S1-2/mean",
    "S1-2/p99",
    "S1-3",
    "S1-4/fastiov-vs-none",
    "S1-4/avg-vs-vanilla",
    "S1-4/vanilla-vs-none",
    "S1-4/p99-vs-vanilla",
    "S1-4/vf-time",
    "S1-4/p99",
    "S1-4/vanilla-p99",
    "S1-5/ablations",
    "S1-5/no-skip",
    "S1-5/eager-zero",
    "S1-6",
    "S1-9/at-200",
    "S1-9/at-10",
    "S1-7/at-10",
    "S1-10/makespan",
)
def test_row_on_the_mean_of_ten_unseen_seeds(key: str) -> None:
    check = ROWS.checks[key]
    if check.row.kind == "fit":
        assert check.row.tolerance_rel in (FIT_TOLERANCE,) or check.row.at_least
    ROWS.judge(key)


@checks_rows("S1-3")
def test_s1_3_zeroing_is_over_93_percent_of_dma_mapping() -> None:
    (key,) = [k for k in ROWS.keys if k.startswith("S1-3")]
    assert min(ROWS.checks[key].per_seed) > 0.93


# -- S1-4: what the result exposes ----------------------------------------------------


@checks_rows("S1-4/ready")
def test_s1_4_first_network_use_stays_observable() -> None:
    """FastIOV's VF driver runs in the background: the sandbox is up before its
    NIC is, and the result says when the NIC is ready (a mechanism: the catalog
    puts the driver in a branch)."""
    fast = run("fastiov")
    assert fast.ready is not None and fast.ready.mean > fast.startup.mean
    assert "vf-driver" in fast.branches and not fast.steps["vf-driver"].on_path


# -- S1-5: ablations, in order ----------------------------------------------------------

ABLATIONS = ("fastiov-no-lock", "fastiov-sync-vf", "fastiov-no-skip", "fastiov-eager-zero")


@checks_rows("S1-5/order")
def test_s1_5_every_optimisation_contributes() -> None:
    vanilla, fast = run("sriov-vanilla"), run("fastiov")
    full = reduction(fast.startup.mean, vanilla.startup.mean)
    for cni in ABLATIONS:
        assert 0.0 < reduction(run(cni).startup.mean, vanilla.startup.mean) < full, cni
    # Ordered as in the paper: L cuts least, then A, D, S.
    order = sorted(ABLATIONS, key=lambda c: run(c).startup.mean, reverse=True)
    assert order[:2] == ["fastiov-no-lock", "fastiov-sync-vf"]


# -- S1-6: pre-zeroing ------------------------------------------------------------------


@checks_rows("S1-6/order")
def test_s1_6_less_prezeroing_is_slower() -> None:
    pre = {p: run(f"prezero-{p}").startup.mean for p in (10, 50, 100)}
    assert pre[10] > pre[50] > pre[100]


# -- S1-7: concurrency ------------------------------------------------------------------


def _cut(n: int, **kw: object) -> float:
    return reduction(
        run("fastiov", n, **kw).startup.mean,  # type: ignore[arg-type]
        run("sriov-vanilla", n, **kw).startup.mean,  # type: ignore[arg-type]
    )


@checks_rows("S1-7/grows")
def test_s1_7_reduction_grows_with_concurrency() -> None:
    """The trend only: the cut at 200 is S1-4/avg-vs-vanilla's storm, an identity
    of the fitted averages (65.65%), so it is no evidence and not asserted here."""
    cuts = [_cut(n) for n in (10, 50, 100, 200)]
    assert cuts == sorted(cuts)


# -- S1-8: memory per sandbox -----------------------------------------------------------


def _growth(cni: str) -> float:
    return run(cni, 50, 2048).startup.mean / run(cni, 50, 512).startup.mean - 1.0


@checks_rows("S1-8/direction")
def test_s1_8_fastiov_is_less_sensitive_to_memory() -> None:
    assert _growth("sriov-vanilla") > _growth("fastiov") >= 0.0


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S1-8/memory").reason)
@checks_rows("S1-8/memory")
def test_s1_8_vanilla_growth() -> None:
    assert abs(_growth("sriov-vanilla") - 0.605) <= 0.15 * 0.605


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S1-8/memory").reason)
@checks_rows("S1-8/memory")
def test_s1_8_fastiov_growth() -> None:
    assert abs(_growth("fastiov") - 0.215) <= 0.15 * 0.215


# -- S1-9: the node divided among N sandboxes --------------------------------------------


def _divided(n: int) -> float:
    host = PROFILE.host
    return _cut(n, memory_mib=int(host.memory_gib * 1024 / n), vcpus=host.cores / n)


@checks_rows("S1-9/at-200")
def test_s1_9_reduction_at_200() -> None:
    """An identity by the mechanical check (calibrate --check): seed 001's
    65.7% is S1-4's cut of the fitted storm, and the model's storm of 1.3 GB
    and 0.56 vCPU per sandbox lands within 15% of that arithmetic."""
    assert abs(_divided(200) - 0.657) <= 0.15 * 0.657


@checks_rows("S1-9/at-10")
def test_s1_9_reduction_at_10() -> None:
    assert abs(_divided(10) - 0.795) <= 0.15 * 0.795


@checks_rows("S1-9/rises")
def test_s1_9_reduction_rises_as_sandboxes_fall() -> None:
    assert _divided(10) > _divided(200)


# -- S1-10: against the ipvtap software CNI ----------------------------------------------


@checks_rows("S1-10/faster")
def test_s1_10_fastiov_starts_faster_than_ipvtap() -> None:
    fast, ipvtap = run("fastiov"), run("ipvtap")
    assert fast.makespan_s < ipvtap.makespan_s and fast.startup.mean < ipvtap.startup.mean


@pytest.mark.slow
def test_the_built_in_profile_is_the_fit_byte_for_byte() -> None:
    """`bootstorm calibrate --targets paper-001 --write` reproduces the file."""
    from importlib import resources

    from bootstorm.calibration import fit_paper_001

    report = fit_paper_001()
    ref = resources.files("bootstorm.models").joinpath("profiles/paper-001.yaml")
    assert report.profile.to_yaml() == ref.read_text()
