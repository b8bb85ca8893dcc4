"""The paper-004 profile against seed 004: its fit rows (S4-1, S4-2) and,
never fitted, the predict rows S4-3 to S4-5, the Linux overlay's single
flows, overlay against native per flow count (Fig. 3), native UDP's flat
line (Fig. 5), small packets' rates and CPU (Figs. 7-9) and IRQ rates
(Fig. 11).

Tolerances are PAPER-TARGETS.md's: fit rows ±5%; a predicted number within
±15% (relative); a trend in the right direction and order. A row the model
misses is a strict xfail with the measured numbers, so the suite fails the
day it starts to hold.
"""

from __future__ import annotations

from functools import cache

import pytest
from paper_rows import PaperRows

from bootstorm.calibration import (
    FIT_TOLERANCE,
    PAPER_004_FIT,
    PREDICT_TOLERANCE,
    TargetCheck,
    check_targets,
    known_miss,
)
from bootstorm.calibration.rows import checks_rows
from bootstorm.models import load_profile
from bootstorm.models.dataplane import Traffic
from bootstorm.models.softirq import DataplaneResult, solve_on_profile

PROFILE = load_profile("paper-004")


@cache
def run(
    path: str, flows: int = 1, proto: str = "tcp", message: int | None = None
) -> DataplaneResult:
    traffic = Traffic(path=path, flows=flows, proto=proto, message_bytes=message)  # type: ignore[arg-type]
    return solve_on_profile(PROFILE, traffic)


def near(model: float, paper: float, tol: float = PREDICT_TOLERANCE) -> bool:
    return abs(model - paper) <= tol * abs(paper)


# -- fit rows ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "check", check_targets(PAPER_004_FIT, PROFILE), ids=lambda c: c.target.label
)
def test_fit_rows_within_5_percent(check: TargetCheck) -> None:
    assert check.within, f"{check.target.label}: {check.model:.4g} vs {check.target.value}"
    assert check.target.tolerance_rel == FIT_TOLERANCE


def test_fit_is_reproducible_from_its_start() -> None:
    """`bootstorm calibrate --targets paper-004 --write` gives the profile on disk."""
    from bootstorm.calibration import fit_paper_004

    assert fit_paper_004().profile == PROFILE


# -- the rows that are one number, on the mean of ten unseen seeds' draws ----------------

#: ``calibrate --check --targets paper-004``'s rows: the loads drawn at each
#: check seed (RSS hashes, placements); one flow is the same at every seed.
ROWS = PaperRows(
    "paper-004",
    sandboxes=0,
    expected_miss={
        "S4-5/rate:64 B UDP packet rate, overlay / native": "S4-5/rate",
        "S4-1/linux-overlay:single TCP flow, Linux overlay (Gbps)": "S4-1/linux-overlay",
        "S4-2/linux-overlay:single UDP flow, Linux overlay (Gbps)": "S4-2/linux-overlay",
        "S4-Fig11/irq:overlay 64 B IRQs, UDP / TCP": "S4-Fig11/irq",
    },
)


@pytest.mark.parametrize("key", ROWS.params())
def test_row_on_the_mean_of_ten_unseen_seeds(key: str) -> None:
    ROWS.judge(key)


# -- S4-3: overlay TCP 1 → 6 flows x4 (6.4 → 25 Gbps); native ≈37 Gbps with 2 flows ----


def test_s4_3_overlay_scales_about_4x_from_1_to_6_flows() -> None:
    ratio = run("docker-overlay", 6).aggregate_gbps / run("docker-overlay", 1).aggregate_gbps
    assert 1.0 < ratio < 6.0  # sublinear: RSS puts flows on shared cores
    assert near(ratio, 4.0), f"x{ratio:.2f} vs x4"


def test_s4_3_overlay_6_flows_25_gbps() -> None:
    """RSS collisions and flows whose softirq chains land on the two
    hyperthreads of one physical core (seed 004's 10 cores x 2 threads)."""
    gbps = run("docker-overlay", 6).aggregate_gbps
    assert near(gbps, 25.0), f"{gbps:.1f} vs 25"


def test_s4_3_native_reaches_about_37_gbps_with_2_flows() -> None:
    gbps = run("native", 2).aggregate_gbps
    assert near(gbps, 37.0), f"{gbps:.1f} vs 37"
    assert run("native", 6).aggregate_gbps <= 40.0


# -- S4-4: at equal 40 Gbps (80 flows), overlay uses ≈2.5x the CPU of native ------------


def _cpu_per_gbps(path: str) -> float:
    r = run(path, 80)
    return r.cpu_total_cores / r.aggregate_gbps


def test_s4_4_overlay_costs_more_cpu_than_native() -> None:
    assert _cpu_per_gbps("docker-overlay") > 1.5 * _cpu_per_gbps("native")


def test_s4_4_overlay_cpu_about_2_5x_native() -> None:
    """Every cost on the softirq CPU is linear in packets and bytes, fixed by
    the single-flow fit at ~3.7x per bit; what brings it down is a cost both
    paths pay alike and that grows with flows: at 80 flows (5 per RSS queue)
    nearly every poll wakes each of its flows' receivers, which sleep between
    deliveries (context_switch_s, measured, not fitted)."""
    overlay, native = run("docker-overlay", 80), run("native", 80)
    assert overlay.wakeups_per_s > 3 * run("docker-overlay", 1).wakeups_per_s
    per_gbit = [r.wakeups_per_s / r.aggregate_gbps for r in (overlay, native)]
    assert near(per_gbit[0], per_gbit[1], 0.1)  # alike per Gbit: same frames, same polls
    assert near(_cpu_per_gbps("docker-overlay") / _cpu_per_gbps("native"), 2.5)


# -- S4-5: softirqs ≈3x IRQs in the overlay; small UDP: overlay ≈50% of native packet rate --


def test_s4_5_overlay_softirqs_about_3x_irqs() -> None:
    """Structural: seed 004 gives the path (one IRQ, three softirqs); the model
    adds only that softirqs stop merging on a saturated core."""
    r = run("docker-overlay", 1, "udp", 64)
    assert near(r.softirq_per_s / r.irq_per_s, 3.0)
    native = run("native", 1, "udp", 64)
    assert native.softirq_per_s == pytest.approx(native.irq_per_s)


def _small_udp_ratio() -> float:
    return (
        run("docker-overlay", 1, "udp", 64).messages_per_s
        / run("native", 1, "udp", 64).messages_per_s
    )


def test_s4_5_overlay_packet_rate_below_native() -> None:
    assert 0.3 < _small_udp_ratio() < 1.0


def test_s4_5_native_small_udp_is_receiver_bound() -> None:
    """S4-5's rate (a fit: ±5% of 50% in the row test above, a known miss at
    55%) rests on this. Native 64-byte UDP is bound by its receiver: iperf3's receive pass
    (a ``select()`` over its three descriptors and a ``read()`` per datagram,
    ``dataplane.syscall_s`` = 1.53 us, measured and recorded before this row
    was computed with it) is dearer than the native softirq's ~1.2 us per
    packet, while the overlay's softirq chain (~2.8 us) stays its bound. With
    ``read()`` alone (0.45 us, the former 0.5 us assumption) the ratio was
    0.419: both flows were softirq-bound and the overlay inherited 8 KB UDP's
    cost ratio. Seed 004's own reading agrees: the overlay reaches half the
    rate "with lower CPU usage" (Fig. 10), as a receiver-bound native run
    burns a whole CPU in its receiver. The row holds for a pass between about
    1.18 and 1.59 us (refitted at each): the measured runs, 1.52-1.55 us on an
    AMD guest, sit near the top, and a KPTI-era Intel host pays more per
    system call, so this pass is narrow. That choice, among measured costs
    after each was computed against the row, makes S4-5 a fit."""
    native, overlay = run("native", 1, "udp", 64), run("docker-overlay", 1, "udp", 64)
    assert native.cpu_system_cores == pytest.approx(1.0)  # the receiver is the bound
    assert native.cpu_softirq_cores < 0.9 < overlay.cpu_softirq_cores


def _cpu_cores(r: DataplaneResult) -> float:
    return r.cpu_irq_cores + r.cpu_softirq_cores + r.cpu_system_cores + r.cpu_user_cores


def test_s4_5_overlay_half_the_rate_with_lower_cpu() -> None:
    """Seed 004 §3.2 (Figs. 9 and 10): the overlay's lower packet rate comes
    "with lower CPU usage" on the receiver. A direction, not a number."""
    native, overlay = run("native", 1, "udp", 64), run("docker-overlay", 1, "udp", 64)
    assert _cpu_cores(overlay) < _cpu_cores(native)


# -- the Linux overlay (VXLAN alone), seed 004 §3.2: 6.5 Gbps TCP, 4.7 UDP ----------------


def test_linux_overlay_a_what_if_prints_its_caution() -> None:
    """Missed by +159% / +35%, these printed no caution before (issue 36)."""
    from bootstorm.calibration import caveats

    for proto, key in (("tcp", "S4-1/linux-overlay"), ("udp", "S4-2/linux-overlay")):
        keys = [m.key for m in caveats(Traffic(path="linux-overlay", proto=proto))]  # type: ignore[arg-type]
        assert key in keys, (proto, keys)


@checks_rows("S4-1/linux-overlay")
@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason=known_miss("S4-1/linux-overlay").reason
)
def test_linux_overlay_single_tcp_flow_6_5_gbps() -> None:
    gbps = run("linux-overlay").per_flow_ceiling_gbps
    assert near(gbps, 6.5), f"{gbps:.1f} vs 6.5"


# -- small packets, Figs. 7-9 ---------------------------------------------------------


def _rate_ratio(path: str, proto: str, message: int) -> float:
    return (
        run(path, 1, proto, message).messages_per_s
        / run("native", 1, proto, message).messages_per_s
    )


@checks_rows("S4-Fig7/gap-widens")
def test_s4_fig7_tcp_overlay_gap_widens_with_packet_size() -> None:
    """Seed 004 Fig. 7: a bit worse than native from 64 B to 1 KB, "the gap
    becomes wider as the packet size increases" (to 8 KB)."""
    ratios = [_rate_ratio("docker-overlay", "tcp", m) for m in (64, 1024, 4096, 8192)]
    assert ratios[0] <= 1.0 + 1e-9
    assert ratios[-1] < ratios[1] and ratios[-1] < 0.75 * ratios[0], ratios


@checks_rows("S4-Fig8/lower-cpu")
@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason=known_miss("S4-Fig8/lower-cpu").reason
)
def test_s4_fig8_small_tcp_overlay_uses_less_cpu() -> None:
    overlay, native = run("docker-overlay", 1, "tcp", 64), run("native", 1, "tcp", 64)
    assert _cpu_cores(overlay) < _cpu_cores(native)


@checks_rows("S4-Fig9/order")
def test_s4_fig9_linux_overlay_between_docker_overlay_and_native() -> None:
    """64 B UDP: "The Linux overlay case performs better than the Docker
    overlay but still worse than the native"."""
    docker, linux = (_rate_ratio(p, "udp", 64) for p in ("docker-overlay", "linux-overlay"))
    assert docker < linux < 1.0, (docker, linux)
