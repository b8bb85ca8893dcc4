"""Programs whose results are known: queueing theory and schedules worked by hand.

Every executor must get these right, so they are shipped with the package
(SALib's ``test_functions`` is the model): :class:`~.testing.ExecutorContract`
runs them all on the executor under test, and a new executor gets the whole
check for free. Each :class:`ReferenceProblem` carries its program, where its
answer comes from, and :meth:`ReferenceProblem.check`, which raises
:class:`AssertionError` naming the figure that is off.

Exact problems (answers to the float, or to 1e-9 where the answer is a
fraction that floats do not hold):

- :func:`processor_sharing_schedules`: jobs on shared cores (egalitarian
  processor sharing), worked by hand;
- :func:`fig13_lock_order`: the lock-grant order of seed 000's Fig. 13, under
  each grant policy;
- :func:`kernel_hand_over_schedules`: a kernel mutex on a busy node (a woken
  waiter's turn for a core, a steal meanwhile, a holder not time-sliced);
- :func:`pooled_across_stages`: a device whose making goes on into the next,
  limited stage (an empty pool's CNI ADD under AddCNI's permit).

Statistical problems (seeded, so each is deterministic):

- :func:`mm1`: one server (a mutex), Poisson arrivals, exponential service;
  the mean wait is ρ/(μ−λ) (Kleinrock, *Queueing Systems I*, §3.2);
- :func:`mmc`: ``c`` servers (a gate of ``c`` permits); the mean wait is
  C(c, a)/(cμ−λ), Erlang C (Kleinrock §3.5);
- :func:`mg1_processor_sharing`: one core shared by Poisson arrivals of any
  service distribution; the mean response is E[S]/(1−ρ) (Kleinrock,
  *Queueing Systems II*, ch. 4);
- :func:`refilled_pool`: a pool of ``S`` devices refilled, one device per
  start, by unlimited workers that take ``L`` each (any distribution):
  devices being made behave as the busy servers of an M/G/S/S loss system,
  so a start finds the pool empty with probability Erlang B(S, λL)
  (Palm's theorem: the occupancy is truncated Poisson, insensitive to L's
  distribution; Kleinrock, *Queueing Systems I*, §3.6).

A statistical answer is accepted when the estimate is within ``Z`` = 4 batch
means standard errors of the theory (Law & Kelton, *Simulation Modeling and
Analysis*, §9.5.3: 20 contiguous batches after a warm-up of 2 000 customers,
which removes the empty start's bias), and the standard error is at most a few
per cent of the theory, so the test cannot become vacuous.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .program import GateSpec, LockSpec, MachineSpec, PoolSpec, Program
from .result import PoolEvent, Result
from .steps import (
    Async,
    Cpu,
    Hold,
    Pooled,
    RcuSync,
    Refill,
    Retarget,
    SandboxPlan,
    Sleep,
    Stage,
    compile_program,
)

__all__ = [
    "SEED",
    "ReferenceProblem",
    "assert_near_theory",
    "batch_means_se",
    "deadlock_program",
    "erlang_b",
    "erlang_c",
    "exact_problems",
    "fifo_servers_program",
    "fig13_lock_order",
    "kernel_hand_over_schedules",
    "mg1_processor_sharing",
    "mm1",
    "mmc",
    "pooled_across_stages",
    "processor_sharing_program",
    "processor_sharing_schedules",
    "rcu_sync_writers",
    "refilled_pool",
    "refilled_pool_program",
    "service_times",
    "statistical_problems",
    "trimmed_pool",
]

F64 = npt.NDArray[np.float64]

SEED = 20_240_601
"""The seed of the statistical problems' default draws."""
N_BATCHES = 20
Z = 4.0
WARMUP = 2_000


@dataclass(frozen=True, kw_only=True)
class ReferenceProblem:
    """A program and a check of an executor's result on it.

    ``source`` says where the answer comes from; ``statistical``: the answer
    holds within a sampling error (a run of tens of thousands of customers).
    """

    name: str
    program: Program
    source: str
    statistical: bool = False
    _check: Callable[[Result], None] = field(repr=False)

    def check(self, result: Result) -> None:
        """Raise :class:`AssertionError` if ``result`` is not this problem's answer."""
        try:
            self._check(result)
        except AssertionError as exc:
            raise AssertionError(f"{self.name}: {exc}") from None


# -- statistics -----------------------------------------------------------------------------


def batch_means_se(x: F64, n_batches: int = N_BATCHES) -> float:
    """Standard error of ``x.mean()`` by non-overlapping batch means."""
    m = len(x) // n_batches
    means = x[: m * n_batches].reshape(n_batches, m).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(n_batches))


def assert_near_theory(estimate: F64, theory: float, *, max_rel_se: float, what: str) -> None:
    """``mean(estimate)`` is within ``Z`` batch-means standard errors of ``theory``,
    and the standard error is at most ``max_rel_se`` of it."""
    mean = float(estimate.mean())
    se = batch_means_se(estimate)
    assert se <= max_rel_se * theory, f"{what}: too few samples, se={se:.4g} for {theory:.4g}"
    assert abs(mean - theory) <= Z * se, (
        f"{what}: mean={mean:.5g}, theory={theory:.5g}, se={se:.3g}, z={(mean - theory) / se:.2f}"
    )


def erlang_c(c: int, a: float) -> float:
    """Probability of waiting in M/M/c with offered load ``a = λ/μ < c`` (Erlang C)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def erlang_b(c: int, a: float) -> float:
    """Probability that all ``c`` servers are busy in M/G/c/c with offered
    load ``a = λ·E[S]`` (Erlang B, by its stable recursion)."""
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b


def _close(got: float, want: float, what: str, rel: float = 1e-9) -> None:
    assert math.isclose(got, want, rel_tol=rel, abs_tol=1e-12), f"{what}: {got!r}, want {want!r}"


def _close_each(got: npt.ArrayLike, want: Sequence[float], what: str, rel: float = 1e-12) -> None:
    """:func:`_close` for each of a run's per-task figures; ``what`` names
    the task's figure with ``{i}`` for its index."""
    values = np.asarray(got, dtype=np.float64).tolist()
    assert len(values) == len(want), f"{what.format(i='each')}: {values}, want {list(want)}"
    for i, (value, wanted) in enumerate(zip(values, want, strict=True)):
        _close(value, wanted, what.format(i=i), rel=rel)


def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Separate generators for inter-arrival and service times, from one seed."""
    arrivals, services = np.random.default_rng(seed).spawn(2)
    return arrivals, services


def _poisson_arrivals(rng: np.random.Generator, lam: float, n: int) -> F64:
    return np.cumsum(rng.exponential(1.0 / lam, size=n))


def service_times(*, n: int, service_rate: float, seed: int) -> F64:
    """The Exp(μ) service times :func:`mm1` and :func:`mmc` give their ``n``
    customers with ``seed``: a test reads each customer's wait off them."""
    return _streams(seed)[1].exponential(1.0 / service_rate, size=n)


# -- M/M/1, M/M/c, M/G/1-PS ----------------------------------------------------------------


def mm1(
    *, n: int = 40_000, arrival_rate: float = 0.7, service_rate: float = 1.0, seed: int = SEED
) -> ReferenceProblem:
    """M/M/1: every customer holds mutex ``server`` for an Exp(μ) sleep."""
    lam, mu = arrival_rate, service_rate
    arrivals = _poisson_arrivals(_streams(seed)[0], lam, n)
    service = service_times(n=n, service_rate=mu, seed=seed)
    plans = [(Stage("serve", (Hold("server", (Sleep(float(s)),)),)),) for s in service]
    program = compile_program(
        plans,
        machine=MachineSpec(cores=1),
        locks=[LockSpec(name="server")],
        arrival_s=arrivals,
        service_cv=0.0,
    )

    def check(result: Result) -> None:
        sojourn = result.startup_latency_s
        wait = sojourn - service
        stats = result.locks["server"]
        assert stats.acquisitions == n, f"acquisitions {stats.acquisitions}, want {n}"
        _close(stats.wait_s, float(wait.sum()), "the lock's wait_s against the waits")
        rho = lam / mu
        assert_near_theory(wait, rho / (mu - lam), max_rel_se=0.05, what="mean wait")
        assert_near_theory(
            wait[WARMUP:], rho / (mu - lam), max_rel_se=0.05, what="mean wait after warm-up"
        )
        assert_near_theory(sojourn[WARMUP:], 1.0 / (mu - lam), max_rel_se=0.05, what="sojourn")

    return ReferenceProblem(
        name=f"M/M/1 rho={lam / mu:g}",
        program=program,
        source="Kleinrock, Queueing Systems I, §3.2: W_q = ρ/(μ−λ), W = 1/(μ−λ)",
        statistical=True,
        _check=check,
    )


def deadlock_program() -> Program:
    """Two sandboxes taking two locks in opposite orders (a then b, b then a):
    neither ever finishes, which every executor must report."""

    def plan(first: str, second: str) -> SandboxPlan:
        return (Stage("x", (Hold(first, (Sleep(1.0), Hold(second, (Sleep(1.0),)))),)),)

    return compile_program(
        [plan("a", "b"), plan("b", "a")],
        machine=MachineSpec(cores=1),
        locks=(LockSpec(name="a"), LockSpec(name="b")),
    )


def fifo_servers_program(
    arrival_s: npt.ArrayLike, service_s: npt.ArrayLike, *, servers: int
) -> Program:
    """Customers arriving at ``arrival_s`` for ``service_s`` seconds of an
    off-CPU sleep behind a gate of ``servers`` permits: a FIFO G/G/c queue."""
    plans = [(Stage("serve", (Sleep(float(s)),), gate="servers"),) for s in np.asarray(service_s)]
    return compile_program(
        plans,
        machine=MachineSpec(cores=1),
        locks=[],
        gates=[GateSpec(name="servers", permits=servers)],
        arrival_s=np.asarray(arrival_s, dtype=np.float64),
    )


def processor_sharing_program(arrival_s: npt.ArrayLike, work_s: npt.ArrayLike) -> Program:
    """Jobs arriving at ``arrival_s`` with ``work_s`` core-seconds each on one
    shared core: a G/G/1 processor-sharing queue."""
    plans = [(Stage("job", (Cpu(float(w)),)),) for w in np.asarray(work_s)]
    return compile_program(
        plans,
        machine=MachineSpec(cores=1),
        locks=[],
        arrival_s=np.asarray(arrival_s, dtype=np.float64),
    )


def mmc(
    *,
    n: int = 40_000,
    arrival_rate: float = 3.0,
    service_rate: float = 1.0,
    servers: int = 4,
    seed: int = SEED + 1,
) -> ReferenceProblem:
    """M/M/c: a gate of ``servers`` permits guards a stage of one Exp(μ) sleep."""
    lam, mu, c = arrival_rate, service_rate, servers
    arrivals = _poisson_arrivals(_streams(seed)[0], lam, n)
    service = service_times(n=n, service_rate=mu, seed=seed)
    program = fifo_servers_program(arrivals, service, servers=c)

    def check(result: Result) -> None:
        sojourn = result.startup_latency_s
        wait = sojourn - service
        gate = result.gates["servers"]
        assert gate.entries == n, f"gate entries {gate.entries}, want {n}"
        _close(gate.wait_s, float(wait.sum()), "the gate's wait_s against the waits")
        p_wait = erlang_c(c, lam / mu)
        # Who queued: a wait shorter than 1 µs has probability ~1e-6 here; the
        # threshold only absorbs the rounding of finish − arrival − service.
        queued = (wait > 1e-6).astype(np.float64)
        assert gate.waited == int(queued.sum()), f"waited {gate.waited}, want {queued.sum()}"
        assert_near_theory(queued[WARMUP:], p_wait, max_rel_se=0.05, what="P(wait)")
        w_q = p_wait / (c * mu - lam)
        assert_near_theory(wait[WARMUP:], w_q, max_rel_se=0.08, what="mean wait")
        assert_near_theory(sojourn[WARMUP:], w_q + 1.0 / mu, max_rel_se=0.05, what="sojourn")

    return ReferenceProblem(
        name=f"M/M/{c} rho={lam / (c * mu):g}",
        program=program,
        source="Kleinrock, Queueing Systems I, §3.5: W_q = C(c, λ/μ)/(cμ−λ) (Erlang C)",
        statistical=True,
        _check=check,
    )


def mg1_processor_sharing(
    *,
    distribution: str = "hyperexponential",
    n: int = 30_000,
    arrival_rate: float = 0.7,
    seed: int = SEED + 2,
) -> ReferenceProblem:
    """M/G/1-PS: Poisson arrivals of CPU jobs of mean 1 core-s on one core;
    ``distribution``: ``deterministic``, ``uniform`` or ``hyperexponential`` (SCV 4)."""
    lam, mean_s = arrival_rate, 1.0
    rng_a, rng_s = _streams(seed)
    arrivals = _poisson_arrivals(rng_a, lam, n)
    if distribution == "deterministic":
        work = np.full(n, mean_s)
        max_rel_se = 0.05
    elif distribution == "uniform":
        work = rng_s.uniform(0.5 * mean_s, 1.5 * mean_s, size=n)
        max_rel_se = 0.05
    elif distribution == "hyperexponential":
        # Balanced means, squared CV 4 (Whitt 1982).
        scv = 4.0
        p1 = 0.5 * (1.0 + math.sqrt((scv - 1.0) / (scv + 1.0)))
        rates = np.where(rng_s.random(n) < p1, 2.0 * p1 / mean_s, 2.0 * (1.0 - p1) / mean_s)
        work = rng_s.exponential(1.0, size=n) / rates
        max_rel_se = 0.08
    else:
        raise ValueError(
            "distribution: expected deterministic, uniform or hyperexponential, "
            f"but got {distribution!r}"
        )
    program = processor_sharing_program(arrivals, work)

    def check(result: Result) -> None:
        response = result.startup_latency_s
        _close(result.cpu.work_core_s, float(work.sum()), "work core-s")
        assert result.cpu.spin_core_s == 0.0, f"spin core-s {result.cpu.spin_core_s}"
        rho = lam * mean_s
        assert_near_theory(
            response[WARMUP:], mean_s / (1.0 - rho), max_rel_se=max_rel_se, what="mean response"
        )
        assert_near_theory(
            (response / work)[WARMUP:], 1.0 / (1.0 - rho), max_rel_se=max_rel_se, what="slowdown"
        )

    return ReferenceProblem(
        name=f"M/G/1-PS {distribution}",
        program=program,
        source="Kleinrock, Queueing Systems II, ch. 4: E[T] = E[S]/(1−ρ) for any service law",
        statistical=True,
        _check=check,
    )


# -- exact schedules ------------------------------------------------------------------------


def _cpu_jobs(*work_s: float) -> list[SandboxPlan]:
    return [(Stage("job", (Cpu(w),)),) for w in work_s]


def processor_sharing_schedules() -> list[ReferenceProblem]:
    """Jobs on shared cores, each worked by hand (see each problem's ``source``)."""

    def schedule(
        name: str,
        source: str,
        work_s: Sequence[float],
        cores: int,
        finish_s: Sequence[float],
        arrival_s: Sequence[float] | None = None,
    ) -> ReferenceProblem:
        program = compile_program(
            _cpu_jobs(*work_s), machine=MachineSpec(cores=cores), locks=[], arrival_s=arrival_s
        )

        def check(result: Result) -> None:
            _close_each(result.finish_s, finish_s, "job {i} finished")
            _close(result.cpu.busy_core_s, float(sum(work_s)), "busy core-s", rel=1e-12)

        return ReferenceProblem(name=name, program=program, source=source, _check=check)

    return [
        schedule(
            "PS two jobs on one core",
            "1 and 2 core-s from t=0 run at ½ until t=2 (the short one is done); "
            "the long one's last core-s runs alone: t=3",
            (1.0, 2.0),
            1,
            (2.0, 3.0),
        ),
        schedule(
            "PS as many jobs as cores",
            "N jobs on N cores never share: each ends after its own work",
            (0.5, 1.0, 1.5, 2.0),
            4,
            (0.5, 1.0, 1.5, 2.0),
        ),
        schedule(
            "PS three jobs on two cores",
            "each gets ⅔ of a core: all end at 1/(⅔) = 1.5",
            (1.0, 1.0, 1.0),
            2,
            (1.5, 1.5, 1.5),
        ),
        schedule(
            "PS staggered arrival",
            "2 core-s at t=0 runs alone for 1 s; with 1 core-s arriving at t=1 "
            "both have 1 core-s left at ½: both end at t=3",
            (2.0, 1.0),
            1,
            (3.0, 3.0),
            arrival_s=(0.0, 1.0),
        ),
    ]


def fig13_lock_order(policy: str) -> ReferenceProblem:
    """Seed 000, Fig. 13: three sandboxes from t=0, two stages each.

    s1: hold L1 for 3 s; s2: hold L2 { sleep 2 s; hold L1 for 1 s }.
    ``policy``: which stage's L1 waiters are served first: ``s2`` (stage 2
    first overlaps the pipeline: makespan 14 s), ``s1`` or ``fifo`` (both
    16 s). The schedules are worked step by step in
    ``tests/simulator/test_locks.py::test_fig13_granting_l1_to_stage2_first_shortens_the_storm``.
    """
    priority = {
        "s2": (("s2", 0), ("s1", 1)),
        "s1": (("s1", 0), ("s2", 1)),
        "fifo": (),
    }
    if policy not in priority:
        raise ValueError(f"policy: expected s2, s1 or fifo, but got {policy!r}")
    plan = (
        Stage("s1", (Hold("L1", (Sleep(3.0),)),)),
        Stage("s2", (Hold("L2", (Sleep(2.0), Hold("L1", (Sleep(1.0),)))),)),
    )
    program = compile_program(
        [plan] * 3,
        machine=MachineSpec(cores=64),
        locks=[LockSpec(name="L1", stage_priority=priority[policy]), LockSpec(name="L2")],
    )
    s2_first = policy == "s2"
    finish = [7.0, 11.0, 14.0] if s2_first else [10.0, 13.0, 16.0]
    # L2 is held from its grant to the end of s2; waits for L2: B [6, 7], C
    # [10, 11] against B [6, 10], C [9, 13].
    l2_hold, l2_wait = (11.0, 2.0) if s2_first else (13.0, 8.0)
    grants = [0, 1, 0, 2, 1, 2] if s2_first else [0, 1, 2, 0, 1, 2]

    def check(result: Result) -> None:
        assert result.finish_s.tolist() == finish, f"finish {result.finish_s.tolist()}"
        assert result.makespan_s == finish[-1], f"makespan {result.makespan_s}"
        assert result.locks["L1"].hold_s == 12.0, f"L1 held {result.locks['L1'].hold_s}"
        assert result.locks["L2"].hold_s == l2_hold, f"L2 held {result.locks['L2'].hold_s}"
        assert result.locks["L2"].wait_s == l2_wait, f"L2 waited {result.locks['L2'].wait_s}"
        if result.recording is not None:  # an executor that records: the grant order too
            frame = result.recording.lock_frame()
            holds = frame[(frame["lock"] == "L1") & (frame["what"] == "hold")]
            order = holds.sort_values("begin_s")["sandbox"].tolist()
            assert order == grants, f"L1 granted to {order}, want {grants}"

    return ReferenceProblem(
        name=f"Fig. 13 L1 {policy} first" if policy != "fifo" else "Fig. 13 L1 FIFO",
        program=program,
        source="seed 000, Fig. 13: lock-grant order decides pipeline overlap",
        _check=check,
    )


# -- a refilled pool: Erlang's loss system ------------------------------------------------


def refilled_pool_program(
    arrival_s: npt.ArrayLike,
    refill_s: npt.ArrayLike,
    *,
    pool: int,
    workers: int | None = None,
    make_s: float = 0.0,
) -> Program:
    """Starts at ``arrival_s`` that each take one device from a pool of
    ``pool`` (or make their own, ``make_s`` off-CPU, if it is empty), and a
    refill branch per start whose device takes ``refill_s[i]`` to make
    (``workers``: that many refill workers, a gate; None: unlimited)."""
    gates = [] if workers is None else [GateSpec(name="refill", permits=workers)]
    plans = [
        (
            Stage(
                "start",
                (
                    Pooled("device", create=(Sleep(make_s),)),
                    Async(
                        "refill",
                        (Refill("device", create=(Sleep(float(r)),)),),
                        gate=None if workers is None else "refill",
                    ),
                ),
            ),
        )
        for r in np.asarray(refill_s, dtype=np.float64)
    ]
    return compile_program(
        plans,
        machine=MachineSpec(cores=1),
        locks=[],
        gates=gates,
        pools=[PoolSpec(name="device", capacity=pool, memory_mib_per_device=1.0)],
        arrival_s=np.asarray(arrival_s, dtype=np.float64),
    )


def refilled_pool(
    *,
    n: int = 40_000,
    arrival_rate: float = 2.0,
    refill_s: float = 3.0,
    pool: int = 8,
    distribution: str = "deterministic",
    seed: int = SEED + 3,
) -> ReferenceProblem:
    """A pool of ``pool`` devices, Poisson starts, one device per start,
    unlimited refill workers, each device ``refill_s`` on average to make.

    A start that takes a device lets a worker make one; a start that finds
    the pool empty makes its own and orders none (ready plus being made is
    already at the target: the node agent's rule). So the devices being made
    are the busy servers of an M/G/S/S loss system with offered load
    ``a = λ·L``, a start finds the pool empty with probability Erlang
    B(S, a), and the devices a start finds ready average ``S − a(1 − B)``
    (PASTA), whatever the distribution of the refill time (Palm's theorem).

    The issue that asked for this problem states the backorder form, where a
    start that finds the pool empty still orders and waits for its device:
    there the devices out are Poisson(a) and the empty chance is the tail
    P(N ≥ S). Starts never wait for a pool here (they make their own), so
    the loss form is the one the model and the agent run; for S large
    against ``a`` the two agree (both tails vanish).
    """
    lam, mean, s = arrival_rate, refill_s, pool
    arrival_rng, refill_rng = _streams(seed)
    arrivals = _poisson_arrivals(arrival_rng, lam, n)
    if distribution == "deterministic":
        refill = np.full(n, mean)
    elif distribution == "exponential":
        refill = refill_rng.exponential(mean, size=n)
    else:
        raise ValueError(f"distribution: unknown {distribution!r}")
    program = refilled_pool_program(arrivals, refill, pool=s)
    a = lam * mean
    blocked = erlang_b(s, a)

    def check(result: Result) -> None:
        line = result.pool_timelines["device"]
        starts = (line.event == PoolEvent.TAKE) | (line.event == PoolEvent.MISS)
        stats = result.pools["device"]
        assert stats.taken + stats.empty_starts == n, (
            f"taken {stats.taken} + empty {stats.empty_starts}, want {n}"
        )
        assert stats.made == stats.taken, f"made {stats.made}, want one per take {stats.taken}"
        missed = (line.event[starts] == PoolEvent.MISS).astype(np.float64)
        assert_near_theory(missed[WARMUP:], blocked, max_rel_se=0.08, what="P(pool empty)")
        # What each start found ready: one more than left after a take, none on a miss.
        found = np.where(missed > 0, 0.0, line.ready[starts] + 1.0)
        assert_near_theory(found[WARMUP:], s - a * (1.0 - blocked), max_rel_se=0.05, what="ready")

    return ReferenceProblem(
        name=f"refilled pool S={s} a={a:g} {distribution}",
        program=program,
        source=(
            "Erlang B (M/G/S/S; Palm's insensitivity), Kleinrock, Queueing Systems I, §3.6: "
            "P(empty) = B(S, λL), E[ready seen] = S − λL(1 − B)"
        ),
        statistical=True,
        _check=check,
    )


def kernel_hand_over_schedules() -> list[ReferenceProblem]:
    """A kernel mutex on a busy node, worked by hand: a woken waiter that must
    first get a core (``LockSpec.dispatch_s``), one robbed by a running task
    meanwhile, and a holder the kernel does not time-slice
    (``LockSpec.holder_pinned``)."""

    def hold(sleep_s: float) -> SandboxPlan:
        return (Stage("hold", (Hold("L", (Sleep(sleep_s),)),)),)

    def problem(
        name: str,
        source: str,
        program: Program,
        finish_s: Sequence[float],
        wait_s: float,
        busy_core_s: float,
    ) -> ReferenceProblem:
        def check(result: Result) -> None:
            _close_each(result.finish_s, finish_s, "sandbox {i} finished")
            _close(result.locks["L"].wait_s, wait_s, "L's wait", rel=1e-12)
            _close(result.cpu.busy_core_s, busy_core_s, "busy core-s", rel=1e-12)

        return ReferenceProblem(name=name, program=program, source=source, _check=check)

    handed = [LockSpec(name="L", dispatch_s=0.01)]
    busy_node = MachineSpec(cores=1, background_jobs=2.0)
    pinned = [LockSpec(name="L", holder_pinned=True)]
    return [
        problem(
            "hand-over waits for a core",
            "1 core, 2 always-runnable tasks: H holds L asleep 0-1 s; W asks at 0.5 "
            "and is woken at 1, its turn among 2 runnable on 1 core 2 x 0.01 s later: "
            "it holds L 1.02-2.02 and waited 0.52 s",
            compile_program(
                [hold(1.0), hold(1.0)], machine=busy_node, locks=handed, arrival_s=(0.0, 0.5)
            ),
            (1.0, 2.02),
            0.52,
            0.0,
        ),
        problem(
            "hand-over robbed while the waiter waits for a core",
            "as above, but S asks at 1.01, while W waits for its core: S takes the free "
            "lock (1.01-2.01); W, woken at 1.02, finds it taken, so S's release hands it "
            "straight to W (2.01-3.01), which waited 1.51 s",
            compile_program(
                [hold(1.0), hold(1.0), hold(1.0)],
                machine=busy_node,
                locks=handed,
                arrival_s=(0.0, 0.5, 1.01),
            ),
            (1.0, 3.01, 2.01),
            1.51,
            0.0,
        ),
        problem(
            "holder not time-sliced",
            "2 cores: H's 1 core-s under L runs on a core of its own (a kernel without "
            "preemption) and ends at 1; three 1 core-s jobs share the other core (1/3 "
            "each) until then and both cores after (2/3 each): the 2/3 left end at 2",
            compile_program(
                [(Stage("hold", (Hold("L", (Cpu(1.0),)),)),), *_cpu_jobs(1.0, 1.0, 1.0)],
                machine=MachineSpec(cores=2),
                locks=pinned,
            ),
            (1.0, 2.0, 2.0, 2.0),
            0.0,
            4.0,
        ),
    ]


def pooled_across_stages() -> ReferenceProblem:
    """A device whose making goes on into the next, limited stage
    (``Pooled.create_next``), worked by hand: a namespace made in NetNS and
    plumbed by its ADD in AddCNI, under AddCNI's permit, as a CNI runtime
    does for a sandbox that found its plumbed-namespace pool empty."""
    make = Pooled(
        "dev",
        create=(Sleep(1.0, "make"),),
        create_next=(Sleep(2.0, "plumb"),),
    )
    after = Async("after", (Sleep(0.1, "housekeeping"),))
    plan: SandboxPlan = (
        Stage("make", (make, after)),
        Stage("plumb", (Sleep(0.25, "up"),), gate="plumb"),
    )
    program = compile_program(
        [plan] * 4,
        machine=MachineSpec(cores=1),
        locks=[],
        gates=[GateSpec(name="plumb", permits=1)],
        pools=[PoolSpec(name="dev", capacity=1, memory_mib_per_device=1.0)],
        arrival_s=(0.0, 0.1, 0.2, 0.3),
        service_cv=0.0,
    )
    # Sandbox 0 takes the one device: 0.25 s in plumb, alone, 0-0.25. The
    # others make theirs (1 s, to 1.1, 1.2, 1.3), then plumb it 2 s and go up
    # 0.25 s one at a time through the gate: 1.1-3.35, 3.35-5.6, 5.6-7.85.
    finish_s = (0.25, 3.35, 5.6, 7.85)
    gate_wait_s = (3.35 - 1.2) + (5.6 - 1.3)
    # The branch after the pooled step starts on either path, once.
    after_s = (0.1, 1.2, 1.3, 1.4)
    plumb_s = (0.25, 2.25, 2.25, 2.25)

    def check(result: Result) -> None:
        _close_each(result.finish_s, finish_s, "sandbox {i} finished")
        _close(result.gates["plumb"].wait_s, gate_wait_s, "plumb's gate wait", rel=1e-12)
        assert result.gates["plumb"].entries == 4, f"entries {result.gates['plumb'].entries}"
        stats = result.pools["dev"]
        assert (stats.taken, stats.empty_starts) == (1, 3), (
            f"taken {stats.taken}, empty {stats.empty_starts}"
        )
        _close_each(result.branch_finish_s["after"], after_s, "sandbox {i}'s branch finished")
        _close_each(result.stage_time_s["plumb"], plumb_s, "sandbox {i}'s time in plumb")

    return ReferenceProblem(
        name="a making that goes on into a limited stage",
        program=program,
        source="worked by hand: 4 starts 0.1 s apart, a pool of 1; the 3 that find it "
        "empty make 1 s, then plumb 2 s + 0.25 s under a gate of 1 permit",
        _check=check,
    )


def trimmed_pool() -> ReferenceProblem:
    """A pool whose target falls and rises, its surplus removed by its one
    refill worker one device after another (``Refill.remove``), worked by
    hand: the node agent's rule (a worker removes a surplus before it makes
    any), where the surplus stays ready, and may be taken, until removed.

    A pool of 4, one worker; removing a device takes 1 s, making one 0.5 s.
    At 0 a start sets the target to 1 and takes a device (3 left): its
    worker removes one (2 left, until 1.0), then another (1 left, until
    2.0). At 1.5 a start (target 1) takes the last one; at 2.0 the first
    worker, its surplus gone, makes one (ready at 2.5), and the second start's
    worker, at the gate until then, finds nothing to do. At 3.0 a start sets
    the target to 3 and takes it;
    its worker makes three (3.5, 4.0, 4.5). Ready devices over time: 2 on
    [0, 1), 1 to 1.5, 0 to 2.5, 1 to 3.0, 0 to 3.5, 1 to 4.0, 2 to 4.5:
    4.5 device-seconds. Removed at once (no ``remove``), the first start's
    target would have left 1 ready and its take none."""
    turn = Refill("dev", create=(Sleep(0.5, "make"),), copies=3, remove=(Sleep(1.0, "remove"),))
    plan: SandboxPlan = (
        Stage(
            "start",
            (
                Retarget("dev"),
                Pooled("dev", create=(Sleep(0.25, "own"),)),
                Async("refill", (turn,), gate="refill"),
            ),
        ),
    )
    arrival_s = (0.0, 1.5, 3.0)
    program = compile_program(
        [plan] * 3,
        machine=MachineSpec(cores=1),
        locks=[],
        gates=[GateSpec(name="refill", permits=1)],
        pools=[PoolSpec(name="dev", capacity=4, memory_mib_per_device=1.0)],
        arrival_s=arrival_s,
        service_cv=0.0,
    ).with_pool_targets({"dev": [1, 1, 3]})
    e = PoolEvent
    events = [
        (0.0, e.RETARGET, 4, 0),
        (0.0, e.TAKE, 3, 0),
        (0.0, e.TRIMMED, 2, 0),
        (1.0, e.TRIMMED, 1, 0),
        (1.5, e.RETARGET, 1, 0),
        (1.5, e.TAKE, 0, 0),
        (2.0, e.ORDERED, 0, 1),
        (2.5, e.MADE, 1, 0),
        (3.0, e.RETARGET, 1, 0),
        (3.0, e.TAKE, 0, 0),
        (3.0, e.ORDERED, 0, 1),
        (3.5, e.MADE, 1, 0),
        (3.5, e.ORDERED, 1, 1),
        (4.0, e.MADE, 2, 0),
        (4.0, e.ORDERED, 2, 1),
        (4.5, e.MADE, 3, 0),
    ]
    branches_s = (2.5, 2.5, 4.5)

    def check(result: Result) -> None:
        _close_each(result.finish_s, arrival_s, "sandbox {i} finished")
        line = result.pool_timelines["dev"]
        got_events = list(
            zip(
                line.t_s.tolist(),
                [PoolEvent(k) for k in line.event.tolist()],
                line.ready.tolist(),
                line.making.tolist(),
                strict=True,
            )
        )
        assert len(got_events) == len(events), f"pool events {got_events}"
        for event, wanted in zip(got_events, events, strict=True):
            _close(event[0], wanted[0], f"time of {wanted[1].name}", rel=1e-12)
            assert event[1:] == wanted[1:], f"pool event {event}, want {wanted}"
        _close_each(result.branch_finish_s["refill"], branches_s, "sandbox {i}'s refill branch")
        stats = result.pools["dev"]
        assert (stats.taken, stats.empty_starts, stats.made, stats.trimmed) == (3, 0, 4, 2), (
            f"taken {stats.taken}, empty {stats.empty_starts}, made {stats.made}, "
            f"trimmed {stats.trimmed}"
        )
        _close(stats.memory_mib_h * 3600.0, 4.5, "idle device-seconds", rel=1e-12)

    return ReferenceProblem(
        name="a surplus removed by the refill worker",
        program=program,
        source="worked by hand: a pool of 4 retargeted to 1, 1 and 3 by starts at 0, 1.5 "
        "and 3; one worker, 1 s a removal, 0.5 s a making",
        _check=check,
    )


def rcu_sync_writers() -> ReferenceProblem:
    """Writers of a percpu rwsem under its mutex (``RcuSync``), worked by
    hand: a writer waits a grace period (1 s here) to enter unless another
    left less than one grace period ago, as ``cgroup.procs`` writes do under
    cgroup_mutex (measured on this project's host: 7.8 ms after an idle
    100 ms, 0.04 ms back to back: docs/research-log.md).

    Each holds the mutex, enters, works 0.1 s, leaves. At 0 the first finds
    the rcu_sync idle: 1 s, then its work, out at 1.1. The second, come at
    0.5, waits for the mutex until 1.1 and enters at once (the first left
    just now): out at 1.2. The third, at 3.0, comes 1.8 s after the last
    left: a grace period again, out at 4.1. The fourth, at 4.5, 0.4 s after
    it: out at 4.6. The mutex is held 1.1 + 0.1 + 1.1 + 0.1 s and waited
    for 0.6 s."""
    body = (Hold("m", (RcuSync("m", 1.0, (Sleep(0.1, "work"),)),)),)
    program = compile_program(
        [(Stage("write", body),)] * 4,
        machine=MachineSpec(cores=1),
        locks=[LockSpec(name="m")],
        arrival_s=(0.0, 0.5, 3.0, 4.5),
        service_cv=0.0,
    )
    finish_s = (1.1, 1.2, 4.1, 4.6)

    def check(result: Result) -> None:
        _close_each(result.finish_s, finish_s, "writer {i} finished")
        _close(result.locks["m"].hold_s, 2.4, "the mutex's holds", rel=1e-12)
        _close(result.locks["m"].wait_s, 0.6, "the mutex's waits", rel=1e-12)

    return ReferenceProblem(
        name="rcu_sync writers under their mutex",
        program=program,
        source="worked by hand: writers at 0, 0.5, 3 and 4.5 s, a grace period of 1 s, "
        "0.1 s of work each inside the mutex",
        _check=check,
    )


def exact_problems() -> list[ReferenceProblem]:
    """Every exact problem (small: milliseconds on any executor)."""
    return [
        *processor_sharing_schedules(),
        *(fig13_lock_order(p) for p in ("s2", "s1", "fifo")),
        *kernel_hand_over_schedules(),
        pooled_across_stages(),
        trimmed_pool(),
        rcu_sync_writers(),
    ]


def statistical_problems() -> list[ReferenceProblem]:
    """Every statistical problem at its default size (tens of thousands of customers)."""
    return [
        mm1(),
        mmc(),
        *(
            mg1_processor_sharing(distribution=d)
            for d in ("deterministic", "uniform", "hyperexponential")
        ),
        *(refilled_pool(distribution=d) for d in ("deterministic", "exponential")),
    ]
