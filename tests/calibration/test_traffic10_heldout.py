"""Issue 33's held-out traffic of ten minutes on this project's host
(``traces/data/cni/traffic10``, recorded 2026-11-30 by its ``record.sh``):
the CNI runtime's calibration plan (its storms twice and ``ops.json``), then
a bursty stream it never saw (a seeded MMPP, 929 starts in 600 s, each VM
stopped 5 s after it came up) on the bare node and through a node agent
that refills a pool of 10 plumbed namespaces while the sandboxes start, in
turn, twice each. The issue asks for streams of at least ten minutes; the
first held-out set (``traffic``) is five.

*Predict*: nothing held out is in the fit. Tolerances are the issue's (p99
per 60-s window within 20%, median over windows; empty-pool starts within
20%; memory held exact) where met; where not, the miss as measured is held,
with a margin, as a known miss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from validate_rows import P99_WINDOWS, plan_refit, validate_rows

from bootstorm.calibration.trace_fit import Comparison
from bootstorm.models import Profile
from bootstorm.traces.workload import read_workload

DATA = Path(__file__).resolve().parents[2] / "traces" / "data" / "cni" / "traffic10"
PROFILE = DATA / "plan" / "local.yaml"
STREAM = tuple(DATA / f"stream-run{k}.jsonl.gz" for k in (1, 2))
#: The stream through a node agent refilling a netns-veth pool of 10 (../traffic/pools.yaml).
POOLED = tuple(DATA / f"pooled-run{k}.jsonl.gz" for k in (1, 2))


def _rows(paths: tuple[Path, ...]) -> dict[str, Comparison]:
    return validate_rows(paths, Profile.from_yaml(PROFILE))


def test_the_stream_is_ten_minutes_and_in_no_fit() -> None:
    workload = read_workload(DATA / "workload-mmpp67.csv")
    assert len(workload) == 929 and workload.duration_s == 600.0
    tb = Profile.from_yaml(PROFILE).testbed
    assert tb is not None and tb.kernel_holders_pinned is False  # measured: 1.76x
    plan = sorted(p.name for p in (DATA / "plan").glob("*.jsonl.gz"))
    assert len(plan) == 16 and all(p.startswith("cni-") for p in plan)


def test_a_refilling_pool_on_the_ten_minute_stream_is_predicted_to_the_issues_numbers() -> None:
    """Through a node agent refilling a netns-veth pool of 10 (one worker),
    two runs: p99 per 60-s window 0.436 ±0.032 s measured, -17.1% predicted;
    empty-pool starts 232 against 220 (-5.2%); idle pooled device-seconds
    +0.4%. The issue asks within 20%, within 20% and exact."""
    rows = _rows(POOLED)
    assert rows[P99_WINDOWS].measured == pytest.approx(0.436, abs=0.005)
    assert abs(rows[P99_WINDOWS].rel_error) <= 0.20
    assert rows["empty-pool starts"].measured == pytest.approx(232.0)
    assert abs(rows["empty-pool starts"].rel_error) <= 0.20
    assert abs(rows["idle pooled device-s"].rel_error) <= 0.01
    assert abs(rows["startup mean_s"].rel_error) <= 0.05


def test_the_bare_ten_minute_stream_is_a_known_miss_short_of_the_node() -> None:
    """On the bare node the model is short, as on the five-minute stream
    (20-42% there over five sittings): p99 per window 0.540 ±0.019 s
    measured, -25.8% predicted; mean startup -27.6%; CPU a start -17.0%."""
    rows = _rows(STREAM)
    p99 = rows[P99_WINDOWS]
    assert p99.measured == pytest.approx(0.540, abs=0.005)
    assert -0.30 <= p99.rel_error <= -0.21
    assert rows["empty-pool starts"].measured == rows["empty-pool starts"].predicted == 0.0
    assert -0.22 <= rows["CPU busy per start_s"].rel_error <= -0.12


@pytest.mark.slow
def test_the_profile_is_the_plans_refit_byte_for_byte() -> None:
    assert plan_refit(DATA / "plan").to_yaml() == PROFILE.read_text()
