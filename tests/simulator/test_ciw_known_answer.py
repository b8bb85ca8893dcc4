"""Known answer against an independent simulator: ``ciw`` (Palmer et al., "Ciw: An
open-source discrete event simulation library", J. Simulation 13(1), 2019).

The same arrival instants and the same service times go through both, so the
two must agree customer by customer, not only on average: for an M/M/c queue
(FIFO, ``c`` servers: a gate of ``c`` permits here) every sojourn time is the
same sum of the same floats and must be equal; for processor sharing (one
core shared equally: ciw's ``PSNode`` with unbounded capacity) the finish
times come from different orders of the same arithmetic and must agree to
floating-point tolerance. A statistical test (``test_queueing.py``) would pass
a kernel that served customers in the wrong order with the right mean; this
one does not.

``ciw`` is a test dependency (pyproject's ``test`` extra); the test skips
without it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from bootstorm.simulator import run_program
from bootstorm.simulator.reference_problems import (
    fifo_servers_program,
    processor_sharing_program,
)

ciw = pytest.importorskip("ciw")

F64 = npt.NDArray[np.float64]
SEED = 20_250_121
N = 1_500


def _gaps_and_services(
    seed: int, *, lam: float, mean_service: float, n: int = N
) -> tuple[F64, F64]:
    arrivals, services = np.random.default_rng(seed).spawn(2)
    return arrivals.exponential(1.0 / lam, size=n), services.exponential(mean_service, size=n)


def _ciw_sojourns(gaps: F64, services: F64, *, servers: float, ps: bool) -> tuple[F64, F64]:
    """Arrival and exit instants of each customer, in order of arrival."""
    # One more gap, longer than the whole run: ciw's Sequential list cycles,
    # and the customer after the last must not arrive while any is present.
    horizon = float(np.sum(gaps)) + 10.0 * float(np.sum(services))
    network = ciw.create_network(
        arrival_distributions=[ciw.dists.Sequential([*map(float, gaps), 10.0 * horizon])],
        service_distributions=[ciw.dists.Sequential([float(s) for s in services])],
        number_of_servers=[servers],
    )
    kwargs = {"node_class": ciw.PSNode} if ps else {}
    sim = ciw.Simulation(network, **kwargs)
    sim.simulate_until_max_time(horizon)
    recs = sorted(sim.get_all_records(), key=lambda r: r.id_number)
    assert len(recs) == len(gaps)
    arrival = np.array([r.arrival_date for r in recs])
    exit_ = np.array([r.exit_date for r in recs])
    return arrival, exit_


def test_mmc_fifo_sojourns_equal_ciw_customer_by_customer() -> None:
    """M/M/4 at ρ = 0.75: the same arrivals and service times through a gate of
    4 permits and through ciw's 4-server FIFO node give equal sojourn times."""
    c, lam, mu = 4, 3.0, 1.0
    gaps, services = _gaps_and_services(SEED, lam=lam, mean_service=1.0 / mu)
    arrival_s = np.cumsum(gaps)
    result = run_program(fifo_servers_program(arrival_s, services, servers=c))
    ciw_arrival, ciw_exit = _ciw_sojourns(gaps, services, servers=c, ps=False)
    np.testing.assert_array_equal(result.arrival_s, ciw_arrival)
    ours = result.finish_s - result.arrival_s
    theirs = ciw_exit - ciw_arrival
    # Some customers must have queued, or the test would not test the queue.
    assert int(np.sum(theirs - services > 1e-9)) > N // 10
    np.testing.assert_array_equal(ours, theirs)


def test_processor_sharing_sojourns_match_ciw_customer_by_customer() -> None:
    """M/M/1-PS at ρ = 0.7: one core shared equally by every job present (our
    CPU model) and ciw's processor-sharing node agree on every job's sojourn
    to floating-point tolerance."""
    lam = 0.7
    gaps, work = _gaps_and_services(SEED + 1, lam=lam, mean_service=1.0)
    arrival_s = np.cumsum(gaps)
    result = run_program(processor_sharing_program(arrival_s, work))
    ciw_arrival, ciw_exit = _ciw_sojourns(gaps, work, servers=float("inf"), ps=True)
    np.testing.assert_array_equal(result.arrival_s, ciw_arrival)
    ours = result.finish_s - result.arrival_s
    theirs = ciw_exit - ciw_arrival
    # Sharing must have happened: many jobs took longer than their own work.
    assert int(np.sum(theirs > work * 1.5)) > N // 10
    np.testing.assert_allclose(ours, theirs, rtol=0.0, atol=1e-8)
