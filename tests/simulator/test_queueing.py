"""Known-answer tests: the kernel against queueing theory and exact schedules.

Statistical tolerance (used by every stochastic test below)
-----------------------------------------------------------
Successive customers' waits are positively correlated, so the i.i.d. standard
error σ/√n would be far too small. We use the method of batch means (Law &
Kelton, *Simulation Modeling and Analysis*, §9.5.3): after dropping a warm-up
of ``WARMUP`` customers (the run starts empty, which biases early waits low),
the remaining customers are cut into ``N_BATCHES`` = 20 contiguous batches of
m ≥ 1 400 customers. At ρ ≤ 0.75 the relaxation time of the queue, about
1/(μ(1−√ρ)²) ≈ 37–60 mean service times for M/M/1 (Morse 1955), is far
shorter than a batch, so the batch means are close to independent and normal,
and ``se = sd(batch means)/√20`` estimates the standard error of the overall
mean. We accept ``|estimate − theory| ≤ Z·se`` with ``Z = 4``: under a t
distribution with 19 degrees of freedom that is a two-sided false-alarm
probability of 8e-4 for a random seed (the seed is fixed, so each test is
deterministic). Each test also requires ``se`` to be at most a few per cent
of the theoretical value, so the tolerance cannot silently become vacuous.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from bootstorm.simulator import (
    Cpu,
    MachineSpec,
    Result,
    SandboxPlan,
    Stage,
    Zero,
    compile_program,
    run_program,
)
from bootstorm.simulator.reference_problems import (
    assert_near_theory,
    erlang_c,
    service_times,
)
from bootstorm.simulator.reference_problems import mm1 as reference_mm1
from bootstorm.simulator.reference_problems import mmc as reference_mmc

F64 = npt.NDArray[np.float64]

SEED = 20_240_601
WARMUP = 2_000


# -- helpers -------------------------------------------------------------------------------


def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Separate generators for inter-arrival and service times, from one seed."""
    arrivals, services = np.random.default_rng(seed).spawn(2)
    return arrivals, services


def _poisson_arrivals(rng: np.random.Generator, lam: float, n: int) -> F64:
    """Arrival instants of a Poisson process of rate ``lam`` (cumulative exponential gaps)."""
    return np.cumsum(rng.exponential(1.0 / lam, size=n))


def _assert_close(estimate_s: F64, theory: float, max_rel_se: float) -> None:
    """``mean(estimate_s)`` is within ``Z`` batch-means standard errors of ``theory``."""
    assert_near_theory(estimate_s, theory, max_rel_se=max_rel_se, what="estimate")


def _time_average_in_system(arrival_s: F64, finish_s: F64, t0: float, t1: float) -> float:
    """Exact ∫_{t0}^{t1} N(t) dt / (t1 − t0), N(t) = arrived but not finished by t."""
    times = np.concatenate([arrival_s, finish_s])
    steps = np.concatenate([np.ones_like(arrival_s), -np.ones_like(finish_s)])
    # At equal instants a departure is applied before an arrival; either order
    # gives the same integral, since the jump has zero width.
    order = np.lexsort((steps, times))
    times, steps = times[order], steps[order]
    n_after = np.cumsum(steps)  # N on [times[k], times[k+1])
    left = np.clip(times[:-1], t0, t1)
    right = np.clip(times[1:], t0, t1)
    return float(np.sum(n_after[:-1] * (right - left)) / (t1 - t0))


def _single_server_run(n: int, lam: float, mu: float, seed: int) -> tuple[Result, F64]:
    """M/M/1 (the reference problem's program): its result and service times."""
    program = reference_mm1(n=n, arrival_rate=lam, service_rate=mu, seed=seed).program
    return run_program(program), service_times(n=n, service_rate=mu, seed=seed)


def _multi_server_run(n: int, lam: float, mu: float, c: int, seed: int) -> tuple[Result, F64]:
    """M/M/c (the reference problem's program): its result and service times."""
    problem = reference_mmc(n=n, arrival_rate=lam, service_rate=mu, servers=c, seed=seed)
    return run_program(problem.program), service_times(n=n, service_rate=mu, seed=seed)


@pytest.fixture(scope="module")
def mm1() -> tuple[Result, F64, float, float]:
    lam, mu = 0.7, 1.0
    result, service = _single_server_run(40_000, lam, mu, SEED)
    return result, service, lam, mu


@pytest.fixture(scope="module")
def mmc() -> tuple[Result, F64, float, float, int]:
    lam, mu, c = 3.0, 1.0, 4
    result, service = _multi_server_run(40_000, lam, mu, c, SEED + 1)
    return result, service, lam, mu, c


# -- M/M/1 ----------------------------------------------------------------------------------


def test_mm1_mean_wait_and_sojourn(mm1: tuple[Result, F64, float, float]) -> None:
    """M/M/1 at ρ = 0.7: W_q = ρ/(μ−λ) and W = 1/(μ−λ) (Kleinrock, Queueing Systems I, §3.2).

    A customer's wait is its sojourn minus its own (known) service time; the
    lock's ``wait_s`` must be exactly their sum.
    """
    result, service, lam, mu = mm1
    n = result.n_sandboxes
    rho = lam / mu
    sojourn = result.startup_latency_s
    wait = sojourn - service
    stats = result.locks["server"]
    assert stats.acquisitions == n
    assert stats.wait_s == pytest.approx(float(wait.sum()), rel=1e-9)
    assert stats.max_waiters >= 1
    # The lock's own estimator wait_s/n averages over all customers; the empty
    # start biases it by O(relaxation time/n), negligible against se.
    assert stats.wait_s / n == pytest.approx(float(wait.mean()), rel=1e-9)
    _assert_close(wait, rho / (mu - lam), max_rel_se=0.05)
    _assert_close(wait[WARMUP:], rho / (mu - lam), max_rel_se=0.05)
    _assert_close(sojourn[WARMUP:], 1.0 / (mu - lam), max_rel_se=0.05)


def test_mm1_littles_law(mm1: tuple[Result, F64, float, float]) -> None:
    """Little's law L = λW (Little 1961).

    Over the whole run (from the first arrival to the last departure, empty at
    both ends) the time integral of N(t) *is* the sum of sojourns, so L̂ = λ̂·Ŵ
    holds to rounding. On a window [t0, t1] inside the run the two sides differ
    only by the customers straddling the window's edges, O(L·W) ≈ 10 s against
    ∫N ≈ L·(t1 − t0) ≈ 6·10⁴ s, so 2 % is a loose bound. L itself must also match
    the M/M/1 value ρ/(1−ρ).
    """
    result, _, lam, mu = mm1
    arrival, finish = result.arrival_s, result.finish_s
    sojourn = finish - arrival
    t_start, t_end = float(arrival.min()), float(finish.max())
    l_whole = _time_average_in_system(arrival, finish, t_start, t_end)
    lam_whole = len(arrival) / (t_end - t_start)
    assert l_whole == pytest.approx(lam_whole * float(sojourn.mean()), rel=1e-9)

    t0, t1 = float(arrival[WARMUP]), float(arrival[-WARMUP])
    inside = (arrival >= t0) & (arrival < t1)
    l_window = _time_average_in_system(arrival, finish, t0, t1)
    lam_window = int(inside.sum()) / (t1 - t0)
    assert l_window == pytest.approx(lam_window * float(sojourn[inside].mean()), rel=0.02)
    rho = lam / mu
    assert l_window == pytest.approx(rho / (1.0 - rho), rel=0.1)


# -- M/M/c ----------------------------------------------------------------------------------


def test_erlang_c_helper() -> None:
    """Erlang C for c=2, a=1: C = (1/2·2)/(1 + 1 + 1) = 1/3 (hand computation)."""
    assert erlang_c(2, 1.0) == pytest.approx(1.0 / 3.0, rel=1e-12)
    assert erlang_c(1, 0.7) == pytest.approx(0.7, rel=1e-12)  # M/M/1: P(wait) = ρ


def test_mmc_mean_waiterlang_c(mmc: tuple[Result, F64, float, float, int]) -> None:
    """M/M/4 at ρ = 0.75: W_q = C(c, a)/(cμ − λ) with a = λ/μ (Erlang C; Kleinrock §3.5)."""
    result, service, lam, mu, c = mmc
    n = result.n_sandboxes
    sojourn = result.startup_latency_s
    wait = sojourn - service
    gate = result.gates["servers"]
    assert gate.entries == n
    assert gate.permits == c
    assert gate.wait_s == pytest.approx(float(wait.sum()), rel=1e-9)
    # Probability of waiting: the fraction of customers that queued at the gate.
    # (A wait shorter than 1 µs has probability ~1e-6 here: the threshold only
    # absorbs the rounding of finish − arrival − service for those who did not wait.)
    p_wait = erlang_c(c, lam / mu)
    queued = (wait > 1e-6).astype(np.float64)
    assert gate.waited == int(queued.sum())
    _assert_close(queued[WARMUP:], p_wait, max_rel_se=0.05)
    w_q = p_wait / (c * mu - lam)
    assert gate.wait_s / n == pytest.approx(float(wait.mean()), rel=1e-9)
    _assert_close(wait, w_q, max_rel_se=0.08)
    _assert_close(wait[WARMUP:], w_q, max_rel_se=0.08)
    _assert_close(sojourn[WARMUP:], w_q + 1.0 / mu, max_rel_se=0.05)


def test_mmc_littles_law(mmc: tuple[Result, F64, float, float, int]) -> None:
    """L = λW on the M/M/4 run: exact over the whole run, within 2 % on an inner
    window; and L itself is theory's, λ·(C(c, a)/(cμ − λ) + 1/μ) (Erlang C), not
    only consistent with the run's own W."""
    result, _, lam, mu, c = mmc
    arrival, finish = result.arrival_s, result.finish_s
    sojourn = finish - arrival
    t_start, t_end = float(arrival.min()), float(finish.max())
    l_whole = _time_average_in_system(arrival, finish, t_start, t_end)
    assert l_whole == pytest.approx(len(arrival) / (t_end - t_start) * sojourn.mean(), rel=1e-9)
    t0, t1 = float(arrival[WARMUP]), float(arrival[-WARMUP])
    inside = (arrival >= t0) & (arrival < t1)
    l_window = _time_average_in_system(arrival, finish, t0, t1)
    lam_window = int(inside.sum()) / (t1 - t0)
    assert l_window == pytest.approx(lam_window * float(sojourn[inside].mean()), rel=0.02)
    l_theory = lam * (erlang_c(c, lam / mu) / (c * mu - lam) + 1.0 / mu)
    assert l_window == pytest.approx(l_theory, rel=0.05)


# -- M/G/1 processor sharing -----------------------------------------------------------------


def _hyperexponential(rng: np.random.Generator, mean: float, scv: float, n: int) -> F64:
    """Two-phase hyperexponential with balanced means and squared CV ``scv`` > 1.

    Phase i is chosen with probability p_i and has rate 2·p_i/mean, with
    p_1 = (1 + √((scv−1)/(scv+1)))/2 (Whitt 1982, "Approximating a point process
    by a renewal process"), which gives mean ``mean`` and SCV ``scv``.
    """
    p1 = 0.5 * (1.0 + math.sqrt((scv - 1.0) / (scv + 1.0)))
    phase1 = rng.random(n) < p1
    rates = np.where(phase1, 2.0 * p1 / mean, 2.0 * (1.0 - p1) / mean)
    return rng.exponential(1.0, size=n) / rates


@pytest.mark.parametrize(
    ("distribution", "max_rel_se"),
    [("deterministic", 0.05), ("uniform", 0.05), ("hyperexponential", 0.08)],
)
def test_mg1_processor_sharing_insensitivity(distribution: str, max_rel_se: float) -> None:
    """M/G/1-PS: E[T] = E[S]/(1−ρ) whatever the service distribution.

    One core shared egalitarianly is M/G/1 processor sharing, whose mean
    response time depends on the service distribution only through its mean
    (Kleinrock, Queueing Systems II, ch. 4; Sakata, Noguchi & Oizumi 1971). Also
    E[T | S = x] = x/(1−ρ), so the mean slowdown T/S is 1/(1−ρ).
    """
    n, lam, mean_s = 30_000, 0.7, 1.0
    rng_a, rng_s = _streams(SEED + 2)
    arrivals = _poisson_arrivals(rng_a, lam, n)
    if distribution == "deterministic":
        work = np.full(n, mean_s)
    elif distribution == "uniform":
        work = rng_s.uniform(0.5 * mean_s, 1.5 * mean_s, size=n)
    else:
        work = _hyperexponential(rng_s, mean_s, 4.0, n)
    plans = [(Stage("job", (Cpu(float(w)),)),) for w in work]
    program = compile_program(plans, machine=MachineSpec(cores=1), locks=[], arrival_s=arrivals)
    result = run_program(program)
    rho = lam * mean_s
    response = result.startup_latency_s
    assert result.cpu.work_core_s == pytest.approx(float(work.sum()), rel=1e-9)
    assert result.cpu.spin_core_s == 0.0
    _assert_close(response[WARMUP:], mean_s / (1.0 - rho), max_rel_se=max_rel_se)
    _assert_close((response / work)[WARMUP:], 1.0 / (1.0 - rho), max_rel_se=max_rel_se)


def _run_jobs(
    steps: Sequence[SandboxPlan], machine: MachineSpec, arrival_s: Sequence[float] | None = None
) -> Result:
    program = compile_program(steps, machine=machine, locks=[], arrival_s=arrival_s)
    return run_program(program)


def _cpu_jobs(*work_s: float) -> list[SandboxPlan]:
    return [(Stage("job", (Cpu(w),)),) for w in work_s]


def test_ps_two_jobs_one_core() -> None:
    """Jobs of 1 and 2 core-s on one core from t=0: both run at ½ until t=2
    (the short one is done), then the long one has 1 core-s left at full speed: t=3."""
    result = _run_jobs(_cpu_jobs(1.0, 2.0), MachineSpec(cores=1))
    assert result.finish_s.tolist() == [2.0, 3.0]
    assert result.makespan_s == 3.0
    assert result.cpu.busy_core_s == 3.0
    assert result.cpu.utilisation == 1.0


def test_ps_as_many_jobs_as_cores_run_at_full_speed() -> None:
    """N jobs on N cores never share: each finishes after its own work."""
    work = (0.5, 1.0, 1.5, 2.0)
    result = _run_jobs(_cpu_jobs(*work), MachineSpec(cores=4))
    assert result.finish_s.tolist() == list(work)


def test_ps_three_jobs_two_cores() -> None:
    """3 jobs of 1 core-s on 2 cores: each gets 2/3 of a core, all finish at 1/(2/3) = 1.5."""
    result = _run_jobs(_cpu_jobs(1.0, 1.0, 1.0), MachineSpec(cores=2))
    np.testing.assert_allclose(result.finish_s, [1.5, 1.5, 1.5], rtol=1e-12)
    assert result.cpu.busy_core_s == pytest.approx(3.0, rel=1e-12)


def test_ps_staggered_arrival() -> None:
    """One core; a 2 core-s job at t=0 and a 1 core-s job at t=1. The first runs alone
    for 1 s (1 core-s left), then both run at ½: after 2 s both have 0 left, t=3."""
    result = _run_jobs(_cpu_jobs(2.0, 1.0), MachineSpec(cores=1), arrival_s=[0.0, 1.0])
    np.testing.assert_allclose(result.finish_s, [3.0, 3.0], rtol=1e-12)
    np.testing.assert_allclose(result.startup_latency_s, [3.0, 2.0], rtol=1e-12)


# -- memory zeroing --------------------------------------------------------------------------

ZERO_RATE = 10e9  # bytes per core-second (MachineSpec default)
BANDWIDTH = 100e9  # bytes per second for all zeroing together (MachineSpec default)


def _zero_jobs(*n_bytes: float) -> list[SandboxPlan]:
    return [(Stage("zero", (Zero(n),)),) for n in n_bytes]


def test_zero_single_job() -> None:
    """One Zero(n) alone runs at the per-core rate c (one job cannot exceed the
    bandwidth B = 10·c): it finishes at n/c, having burnt n/c core-s."""
    machine = MachineSpec(
        cores=4, zero_bytes_per_core_s=ZERO_RATE, memory_bandwidth_bytes_s=BANDWIDTH
    )
    n = 2.5e9
    result = _run_jobs(_zero_jobs(n), machine)
    assert result.finish_s[0] == pytest.approx(n / ZERO_RATE, rel=1e-12)
    assert result.cpu.zero_core_s == pytest.approx(n / ZERO_RATE, rel=1e-12)
    assert result.cpu.work_core_s == 0.0


@pytest.mark.parametrize(("m", "cores"), [(20, 32), (12, 16), (8, 4), (30, 8)])
def test_zero_concurrent_jobs_share_bandwidth_or_cores(m: int, cores: int) -> None:
    """m equal Zero(n) jobs from t=0 each clear at min(c·min(1, cores/m), B/m) bytes/s.

    When m·c > B and cores ≥ m (the first two cases), the bandwidth binds and
    they all finish at m·n/B; with fewer cores than jobs the core share may bind
    instead (m·n/(cores·c)). A core stalled on memory stays busy, so each job
    burns its full core share for the whole time.
    """
    machine = MachineSpec(
        cores=cores, zero_bytes_per_core_s=ZERO_RATE, memory_bandwidth_bytes_s=BANDWIDTH
    )
    n = 1e9
    result = _run_jobs(_zero_jobs(*([n] * m)), machine)
    share = min(1.0, cores / m)
    rate = min(ZERO_RATE * share, BANDWIDTH / m)
    finish = n / rate
    if cores >= m:
        assert m * ZERO_RATE > BANDWIDTH
        assert finish == pytest.approx(m * n / BANDWIDTH, rel=1e-12)
    np.testing.assert_allclose(result.finish_s, np.full(m, finish), rtol=1e-9)
    assert result.cpu.zero_core_s == pytest.approx(m * share * finish, rel=1e-9)


def test_zero_and_cpu_share_one_core() -> None:
    """One core; Zero of 1 s worth (10 GB) and Cpu(2) from t=0. Both get ½ a core
    (B does not bind); the zeroing is done at t=2, the CPU job has 1 core-s left
    and finishes alone at t=3. Each burnt exactly its own demand."""
    machine = MachineSpec(
        cores=1, zero_bytes_per_core_s=ZERO_RATE, memory_bandwidth_bytes_s=BANDWIDTH
    )
    plans = [(Stage("zero", (Zero(ZERO_RATE),)),), (Stage("cpu", (Cpu(2.0),)),)]
    result = _run_jobs(plans, machine)
    np.testing.assert_allclose(result.finish_s, [2.0, 3.0], rtol=1e-12)
    assert result.cpu.zero_core_s == pytest.approx(1.0, rel=1e-12)
    assert result.cpu.work_core_s == pytest.approx(2.0, rel=1e-12)
    assert result.cpu.by_stage["zero"]["zero"] == pytest.approx(1.0, rel=1e-12)
    assert result.cpu.by_stage["cpu"]["work"] == pytest.approx(2.0, rel=1e-12)


def test_zero_bandwidth_bound_and_cpu_oversubscribed() -> None:
    """2 cores, B = 0.9·c; three Zero jobs of 1 s worth each and one Cpu(1), from t=0.

    t ∈ [0, 2]: 4 runnable on 2 cores, share s = ½; zeroing speed
    z = min(s, B/(3c)) = 0.3. The CPU job finishes at 1/½ = 2; each zero job has
    done 0.6. t > 2: s = ⅔, z still 0.3, the remaining 0.4 take 4/3 s: t = 10/3.
    Zero core-s per job = ½·2 + ⅔·4/3 = 17/9, so 17/3 in all; busy = 1 + 17/3 =
    20/3 = 2 cores × 10/3: the cores are fully busy although zeroing is memory bound.
    """
    machine = MachineSpec(
        cores=2, zero_bytes_per_core_s=ZERO_RATE, memory_bandwidth_bytes_s=0.9 * ZERO_RATE
    )
    plans = [*_zero_jobs(ZERO_RATE, ZERO_RATE, ZERO_RATE), (Stage("cpu", (Cpu(1.0),)),)]
    result = _run_jobs(plans, machine)
    np.testing.assert_allclose(result.finish_s, [10 / 3, 10 / 3, 10 / 3, 2.0], rtol=1e-9)
    assert result.cpu.zero_core_s == pytest.approx(17 / 3, rel=1e-9)
    assert result.cpu.work_core_s == pytest.approx(1.0, rel=1e-9)
    assert result.cpu.utilisation == pytest.approx(1.0, rel=1e-9)
