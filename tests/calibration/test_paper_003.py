"""The paper-003 profile against seed 003 (TSoR): its fit rows (S3-1, S3-2,
S3-5's single connection), the rows that follow from them, and the startup
mechanisms the paper describes without a number (S3-M).

Each test names its rows (``checks_rows``): *fit* (±5%), *predict* (±15%,
never fitted), *identity* (arithmetic of fit rows, checked mechanically by
``calibrate --check``: no evidence) or *mechanism* (true by construction).
A row the model misses is a strict xfail whose reason is its
``KNOWN_MISSES`` entry, so the suite fails the day it starts to hold.
"""

from __future__ import annotations

import pytest
from paper_rows import PaperRows

from bootstorm.calibration import (
    FIT_TOLERANCE,
    PAPER_003_FIT,
    PREDICT_TOLERANCE,
    TargetCheck,
    check_targets,
    known_miss,
)
from bootstorm.calibration.rows import checks_rows
from bootstorm.calibration.tsor_dataplane import MESSAGE_64K
from bootstorm.models import load_profile
from bootstorm.models import rdma as m

PROFILE = load_profile("paper-003")
RDMA = m.rdma_costs(PROFILE)


# -- fit rows ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "check", check_targets(PAPER_003_FIT, PROFILE), ids=lambda c: c.target.label
)
@checks_rows("S3-1", "S3-2", "S3-2/vs-host", "S3-5/set-rps")
def test_fit_rows_within_5_percent(check: TargetCheck) -> None:
    assert check.within, f"{check.target.label}: {check.model:.4g} vs {check.target.value}"
    assert check.target.tolerance_rel == FIT_TOLERANCE


def test_the_built_in_profile_is_the_fit_byte_for_byte() -> None:
    """`bootstorm calibrate --targets paper-003 --write` gives the profile on disk."""
    from bootstorm.calibration import fit_paper_003

    assert fit_paper_003().profile == PROFILE


# -- every row that is one number, on the mean of ten unseen seeds ---------------------

#: ``calibrate --check --targets paper-003``'s rows. The data plane is no
#: simulation (the same at every seed); S3-M/no-device is a storm.
ROWS = PaperRows(
    "paper-003",
    sandboxes=200,
    expected_miss={
        "S3-5/rps-vs-host:Redis SET RPS against host-mode runC": "S3-5/rps-vs-host",
        "S3-6/throughput:Node.js 64 KB document vs host runC (network only)": "S3-6/throughput",
        "S3-7/txn-put:etcd txn-put RPS vs host runC (network only)": "S3-7/txn-put",
    },
)


@pytest.mark.parametrize("key", ROWS.params())
@checks_rows(
    "S3-1",
    "S3-2",
    "S3-2/vs-host",
    "S3-3",
    "S3-4/vs-host",
    "S3-4/qp",
    "S3-5/set-rps",
    "S3-5/set-p95",
    "S3-5/get-3",
    "S3-5/latency-vs-host",
    "S3-5/rps-vs-host",
    "S3-6/throughput",
    "S3-7/txn-put",
    "S3-M/no-device",
)
def test_row_on_the_mean_of_ten_unseen_seeds(key: str) -> None:
    check = ROWS.checks[key]
    if check.row.kind == "fit":
        assert check.row.tolerance_rel == FIT_TOLERANCE
    ROWS.judge(key)


# -- S3-3: ~linear, 100 Gbps with 3 connections ----------------------------------------


@checks_rows("S3-3")
def test_s3_3_linear_until_the_link() -> None:
    """The trend: n connections give n x one connection until RoCEv2's goodput
    caps them (3 of 34.3 Gbps pass it); the one service core never binds."""
    one = m.single_connection_gbps(RDMA, MESSAGE_64K)
    assert m.multi_connection_gbps(RDMA, MESSAGE_64K, 2) == pytest.approx(2 * one)
    capped = [m.multi_connection_gbps(RDMA, MESSAGE_64K, n) for n in (3, 4, 8)]
    assert capped == [pytest.approx(m.wire_goodput_gbps(RDMA))] * 3
    assert MESSAGE_64K * 8 / RDMA.service_per_message_s / 1e9 > 100.0
    assert abs(capped[0] - 100.0) <= PREDICT_TOLERANCE * 100.0


# -- S3-4: connection setup ----------------------------------------------------------------


@checks_rows("S3-4/vs-host", "S3-4/qp")
def test_s3_4_pre_established_connections_make_connect_cheap() -> None:
    """A TSoR connect is one round trip of its own small messages; a QP made per
    connection would cost the paper's several ms, far past a TCP handshake."""
    assert m.connect_s(RDMA) < 0.5 * m.host_connect_s(RDMA)
    assert PROFILE.tsor is not None
    assert PROFILE.tsor.qp_setup_s > 10 * m.host_connect_s(RDMA)


# -- S3-5: Redis -----------------------------------------------------------------------------


@checks_rows("S3-5/get-3")
def test_s3_5_three_connections_queue_at_redis() -> None:
    """Not 3 x 42 K (126 K, +17% of the paper's 108 K): the single-threaded
    server and the services' cores queue (exact mean-value analysis)."""
    one, three = m.closed_loop_rps(RDMA, 1), m.closed_loop_rps(RDMA, 3)
    assert 2.0 * one < three < 3.0 * one
    assert abs(three - 108_000) <= PREDICT_TOLERANCE * 108_000


# -- S3-M: the startup path, described without a number -------------------------------------


def _assumed(*paths: str) -> list[str]:
    return [p for p in paths if PROFILE.sources[p].startswith("assumption")]


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason=known_miss("S3-M/assumed-costs").reason
)
@checks_rows("S3-M/assumed-costs")
def test_s3_m_a_tsor_start_rests_on_published_costs() -> None:
    assert not _assumed("tsor.client_register_s", "costs.vm_boot_sleep_s")


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S3-M/dynamic-ip").reason)
@checks_rows("S3-M/dynamic-ip")
def test_s3_m_ip_propagation_rests_on_a_published_cost() -> None:
    assert not _assumed("tsor.ip_propagation_s")


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S3-M/qp-per-pod").reason)
@checks_rows("S3-M/qp-per-pod")
def test_s3_m_per_pod_qp_setup_rests_on_published_costs() -> None:
    assert not _assumed("tsor.qp_setup_s", "tsor.mr_register_s")


@checks_rows("S3-M/no-device")
def test_s3_m_the_service_core_is_the_papers() -> None:
    """Seed 003 §7 gives the one number of the startup path: one core."""
    assert PROFILE.tsor is not None and PROFILE.tsor.service_cores == 1.0
    assert PROFILE.sources["tsor.service_cores"].startswith("seed 003 §7")
