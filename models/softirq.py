"""Softirq chains: per-flow throughput ceilings and the CPU a traffic load costs.

A received packet raises one IRQ on the core RSS picks for its flow (one per
NAPI batch: the NIC coalesces frames and NAPI polls them together), then
crosses the data path's stages (:mod:`bootstorm.models.dataplane`) in
softirq context on that same core — RSS/RPS parallelise per flow, never per
packet (seed 004 §3.2) — and is finally copied to the receiving application
in system time on the core the scheduler gave it.

Modelling choice: an **analytic fluid model**, not a simulation at batch
granularity. In the steady state of long-lived flows each core delivers one
core-second per second, each flow's work is a fixed number of core-seconds
per bit on each core it touches (its RSS core, its receiver's core, and for
intra-host pairs its sender's core), and the link carries a fixed goodput.
Elastic TCP flows that share cores fairly settle at the *max-min fair*
allocation of these linear capacity constraints, which progressive filling
computes exactly. A SimPy run at NAPI-batch granularity would reach the same
steady state after millions of events, and add only noise around it; the
one thing it would add — queueing delay — is not an output here. Of seed
004's explanation of the overlay's poor multi-flow scaling (contexts that
multiply) the model takes the receivers' context switches ("Wake-ups"
below) but not the cache and memory-bandwidth inefficiency they bring; the
tests say where that shows.

Batching enters as amortisation: a stage that sees GRO-merged skbs pays its
per-packet cost once per merged skb (up to ``gro_max_bytes`` of TCP payload),
IRQs come one per ``min(coalesce_frames, napi_budget)`` frames. Softirqs of
one batch *merge* (run in one ``net_rx_action`` and count once) when they run
back to back; a core busy with other work interrupts them, so a batch of a
path with ``k`` softirq stages counts ``1 + (k - 1) * rho`` softirqs, where
``rho`` is its core's utilisation (seed 004 §3.2: the overlay's softirqs
reach ≈3x its IRQs because its saturated cores keep them from merging).

Hyper-threads (SMT) share their physical core: besides each CPU's row, a
physical core's threads together deliver at most ``core_work`` threads'
work (``HostSpec.core_work``), one more linear constraint of the max-min
problem. RSS queue
``q`` interrupts CPU ``q``; Linux numbers every core's first thread before
any sibling, so the first queues land on distinct cores and the later ones
on siblings of the first (seed 004: 16 queues on 10 cores x 2 threads).

Wake-ups (seed 004 §3.2: "the kernel is just busy with juggling numerous
tasks"): a receiver blocked in ``recv`` is woken by the poll that delivers
its data, and switches in and out again, two context switches
(``context_switch_s`` each) on its CPU. A poll takes ``B`` frames from its
queue (``B`` = ``min(coalesce_frames, napi_budget)``; intra-host: a backlog
poll of ``napi_budget`` skbs), so a flow with share ``s`` of its queue's
frames has frames in ``1 - (1 - s)^B`` of the queue's polls: one poll per
``B`` of its own frames when it is alone, up to one per frame when many
flows share the queue. A woken receiver that finds its data still queued
does not sleep: under processor sharing a thread with work ``u`` on a CPU
busy ``rho`` is runnable ``u / (1 - rho + u)`` of the time (1 when the CPU
is saturated), and only the rest of the deliveries wake it. The wake-ups
change the load and the load the wake-ups: the solver iterates to the fixed
point. A flow's own ceiling is not moved: at its receiver's ceiling the
receiver never sleeps.

Placement (RSS hash, scheduler) is random: results are means over
``Traffic.draws`` seeded draws.

Flow completion times (``Traffic.flow_bytes``): each flow's size over its
steady max-min rate, pooled over the flows of every draw, so the spread of
rates among pairs gives the tail (p99 of the completion times is the size
over the 1st percentile of the rates). All flows start together and run
the whole time: one that finishes frees no CPU for the others, so the tail
is an upper bound of the fluid model's, and a flow's connection set-up,
slow start and process start are not in it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from .._params import Interval, Rules, validate
from ._errors import ConfigError
from .dataplane import (
    ETHERNET_OVERHEAD_BYTES,
    IP_HEADER_BYTES,
    TCP_HEADER_BYTES,
    UDP_HEADER_BYTES,
    DataPath,
    DataplaneCostTable,
    Traffic,
)
from .profile import Profile

__all__ = [
    "DataplaneResult",
    "FlowCosts",
    "flow_costs",
    "max_min_rates",
    "solve_dataplane",
    "solve_on_profile",
]

log = logging.getLogger(__name__)

BITS_PER_GBIT = 1e9
#: A woken receiver switches in, and out again when it blocks.
SWITCHES_PER_WAKEUP = 2
#: Fixed-point iterations of the wake-up cost: damped by half (converged to
#: 1e-9 in far fewer), then, where that cycles, averaged for as many again x3.
_WAKE_ITERATIONS = 50
_F64 = npt.NDArray[np.float64]
_EPS = 1e-12


_NON_NEGATIVE = Interval(float, 0.0)


@dataclass(frozen=True, kw_only=True, slots=True)
class FlowCosts:
    """One flow's work per Gbit of payload, by the core it runs on and by kind.

    ``rx_*``: on the flow's RSS core (the sender's core for intra-host
    pairs); ``app_*``: on the receiving application's core; ``tx_*``: on the
    sending application's core (intra-host only); ``kthread_system``: in a
    kernel thread (vhost-net) on a core of its own. All in core-seconds per
    Gbit; ``irqs``, ``batches``, ``messages`` per Gbit; ``wire_gbit`` is the
    link's bits per payload bit.
    """

    rx_irq: float
    rx_softirq: float
    app_system: float
    app_user: float
    tx_system: float
    tx_user: float
    kthread_system: float
    irqs: float
    batches: float
    softirqs_per_batch: int
    messages: float
    wire_gbit: float

    __rules__: ClassVar[Rules]  # every field a finite number >= 0 (below the class)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def core_s_per_gbit(self) -> float:
        """All the flow's CPU, per Gbit."""
        return (
            self.rx_irq
            + self.rx_softirq
            + self.app_system
            + self.app_user
            + self.tx_system
            + self.tx_user
            + self.kthread_system
        )


FlowCosts.__rules__ = Rules(**{f.name: _NON_NEGATIVE for f in fields(FlowCosts)})


def _stage_cost(costs: DataplaneCostTable, name: str) -> tuple[float, float]:
    stage = costs.stages.get(name)
    if stage is None:
        raise ConfigError(
            f"dataplane.stages: no cost for stage {name!r}; "
            f"the profile has {', '.join(sorted(costs.stages)) or 'none'}"
        )
    return stage.per_packet_s, stage.per_byte_s


def flow_costs(costs: DataplaneCostTable, path: DataPath, proto: str, message: int) -> FlowCosts:
    """The work one flow of ``path`` asks per Gbit of payload (known-answer
    checked in tests: one stage, per-packet cost ``c`` and packets of ``b``
    bytes give a ceiling of ``8 b / c`` bits per second)."""
    bytes_per_gbit = BITS_PER_GBIT / 8.0
    mtu = costs.mtu_bytes
    inner = mtu - path.encap_bytes  # the inner packet's MTU (VXLAN: 1450)
    if path.intra_host:
        # GSO: skbs as large as the message allows, never on a wire.
        skb = float(min(costs.gro_max_bytes, message))
        wire_pkts = merged = 1.0 / skb
        wire_ratio = 0.0
    elif proto == "tcp":
        mss = inner - IP_HEADER_BYTES - TCP_HEADER_BYTES
        wire_pkts = 1.0 / mss
        merged = 1.0 / (mss * max(1, costs.gro_max_bytes // mss))
        wire_ratio = (mtu + ETHERNET_OVERHEAD_BYTES) / mss
    else:
        # IP fragments of one datagram; UDP is not merged by GRO.
        frag_payload = ((inner - IP_HEADER_BYTES) // 8) * 8
        frags = math.ceil((message + UDP_HEADER_BYTES) / frag_payload)
        wire_pkts = merged = frags / message
        per_frame = IP_HEADER_BYTES + path.encap_bytes + ETHERNET_OVERHEAD_BYTES
        wire_ratio = (message + UDP_HEADER_BYTES + frags * per_frame) / message

    softirq = system = 0.0
    for stage in path.stages:
        per_packet, per_byte = _stage_cost(costs, stage.cost)
        rate = merged if (stage.merged and proto == "tcp") or path.intra_host else wire_pkts
        work = (per_packet * rate + per_byte) * bytes_per_gbit
        if stage.context == "system":
            system += work
        else:
            softirq += work
    per_irq = min(costs.coalesce_frames, costs.napi_budget)
    irqs = 0.0 if path.intra_host or not path.stages else wire_pkts * bytes_per_gbit / per_irq
    batches = irqs if not path.intra_host else merged * bytes_per_gbit / costs.napi_budget
    messages = bytes_per_gbit / message
    receive = (costs.copy_per_byte_s * bytes_per_gbit + costs.syscall_s * messages) * float(
        path.host_receiver
    )
    user = costs.user_per_byte_s * bytes_per_gbit * float(path.host_receiver)
    return FlowCosts(
        rx_irq=costs.irq_s * irqs,
        rx_softirq=softirq,
        app_system=receive,
        app_user=user,
        # The sender copies from user space as the receiver copies to it.
        tx_system=receive if path.intra_host else 0.0,
        tx_user=user if path.intra_host else 0.0,
        kthread_system=system,
        irqs=irqs,
        batches=batches,
        softirqs_per_batch=path.softirqs_per_batch,
        messages=messages,
        wire_gbit=wire_ratio,
    )


def max_min_rates(demand: _F64, capacity: _F64, cap: _F64) -> _F64:
    """Max-min fair rates by progressive filling (exact).

    ``demand[r, f]``: what one unit of flow ``f``'s rate uses of resource
    ``r``; ``capacity[r]``; ``cap[f]``: each flow's own limit (may be inf).
    All flows rise together; a flow stops when a resource it uses is full
    or it reaches its cap.
    """
    n = demand.shape[1]
    rate = np.zeros(n)
    active = np.ones(n, dtype=bool)
    for _ in range(demand.shape[0] + n + 1):
        if not active.any():
            break
        left = capacity - demand @ rate
        pull = demand[:, active].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.where(pull > _EPS, left / pull, np.inf)
        step = min(float(room.min()), float((cap[active] - rate[active]).min()))
        if not math.isfinite(step):
            raise ValueError("a flow uses no resource and has no cap: its rate is unbounded")
        rate[active] += max(step, 0.0)
        full = (capacity - demand @ rate) <= _EPS * np.maximum(capacity, 1.0)
        stopped = (demand[full] > _EPS).any(axis=0) | (rate >= cap * (1.0 - _EPS))
        active &= ~stopped
    return rate


@dataclass(frozen=True, kw_only=True, slots=True)
class DataplaneResult:
    """The steady state of a :class:`Traffic` load (means over the draws).

    Throughputs are payload Gbps; CPU in cores (core-seconds per second);
    rates per second (``wakeups_per_s``: deliveries that wake a sleeping
    receiver, whose context switches are system time). ``flow_spread`` is
    the ratio of the fastest to the slowest flow's throughput.
    """

    traffic: Traffic
    cores: int
    per_flow_ceiling_gbps: float
    aggregate_gbps: float
    per_flow_gbps: float
    flow_min_gbps: float
    flow_max_gbps: float
    flow_spread: float
    cpu_irq_cores: float
    cpu_softirq_cores: float
    cpu_system_cores: float
    cpu_user_cores: float
    irq_per_s: float
    softirq_per_s: float
    messages_per_s: float
    wakeups_per_s: float
    fct_p50_s: float | None = None
    """Median flow completion time, s (``Traffic.flow_bytes`` set; else ``None``)."""
    fct_p99_s: float | None = None
    """99th-percentile flow completion time, s, of the flows of all draws."""

    __rules__: ClassVar[Rules]  # every number a finite one >= 0 (below the class)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def cpu_total_cores(self) -> float:
        return (
            self.cpu_irq_cores
            + self.cpu_softirq_cores
            + self.cpu_system_cores
            + self.cpu_user_cores
        )

    @property
    def softirq_core_demand(self) -> float:
        """Cores that run with preemption off: hard IRQs and softirqs."""
        return self.cpu_irq_cores + self.cpu_softirq_cores

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"traffic": self.traffic.model_dump(mode="json")}
        for name in self.__slots__:
            if name != "traffic":
                out[name] = getattr(self, name)
        out["cpu_total_cores"] = self.cpu_total_cores
        return out


_OPTIONAL = ("traffic", "fct_p50_s", "fct_p99_s")
DataplaneResult.__rules__ = Rules(
    **{f.name: _NON_NEGATIVE for f in fields(DataplaneResult) if f.name not in _OPTIONAL}
)


def _completion_quantiles(
    flow_bytes: int | None, rates: list[_F64]
) -> tuple[float | None, float | None]:
    """(p50, p99) of ``flow_bytes`` over each flow's rate (Gbps), pooled."""
    if flow_bytes is None:
        return None, None
    gbps = np.concatenate(rates)
    fct = flow_bytes * 8.0 / (np.maximum(gbps, _EPS) * BITS_PER_GBIT)
    p50, p99 = np.quantile(fct, [0.5, 0.99])
    return float(p50), float(p99)


def _placement(
    traffic: Traffic,
    path: DataPath,
    costs: DataplaneCostTable,
    cores: int,
    threads_per_core: int,
    rng: np.random.Generator,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(RSS core, receiver core, sender core) per flow."""
    n = traffic.flows
    queues = min(costs.rx_queues, cores)
    if traffic.placement == "random":
        # CFS balances the count of threads per core but not the softirq
        # work they bring: a random assignment with equal counts per core.
        threads = 2 * n if path.intra_host else n
        slots = rng.permutation(np.arange(threads, dtype=np.int64) % cores)
        recv = slots[:n]
        send = slots[n:] if path.intra_host else slots[:n].copy()
    else:
        send = np.arange(n, dtype=np.int64) % cores
        recv = (send + 1) % cores if traffic.placement == "pinned-apart" else send.copy()
    if path.intra_host:
        # veth queues to the backlog of the CPU that sends: the chain runs there.
        return send, recv, send
    if traffic.proto == "udp" and not path.rss_hashes_udp_ports:
        rss = np.full(n, rng.integers(0, queues))
    else:
        rss = rng.integers(0, queues, size=n)
    if traffic.placement == "random" and cores > 1:
        recv = _wake_away_from(rss, recv, threads_per_core, cores, rng)
    return rss, recv, send


def _wake_away_from(
    rss: npt.NDArray[np.int64],
    recv: npt.NDArray[np.int64],
    threads: int,
    cores: int,
    rng: np.random.Generator,
) -> npt.NDArray[np.int64]:
    """A woken receiver goes to an idle core, not the one busy with its
    softirqs; with SMT, not to that core's sibling thread either (CFS's
    select_idle_sibling looks for a physical core whose threads are all idle)."""
    physical = math.ceil(cores / threads)
    if threads == 1 or physical == 1:
        other = (recv + 1 + rng.integers(0, cores - 1, size=len(recv))) % cores
        return np.where(recv == rss, other, recv)
    clash = recv % physical == rss % physical
    core = (rss % physical + 1 + rng.integers(0, physical - 1, size=len(recv))) % physical
    cpu = core + physical * rng.integers(0, threads, size=len(recv))
    return np.where(clash, np.where(cpu < cores, cpu, core), recv)


def _smt_rows(threads: int, core_work: float, cpus: int) -> _F64:
    """``rows[p, c]`` = 1 if CPU ``c`` is a hardware thread of physical core
    ``p``; only cores with more than one thread (a lone thread is already
    bounded by its own CPU row), none without SMT."""
    if threads == 1 or core_work >= threads:
        return np.zeros((0, cpus))
    physical = math.ceil(cpus / threads)
    rows = np.zeros((physical, cpus))
    rows[np.arange(cpus) % physical, np.arange(cpus)] = 1.0
    shared: _F64 = rows[rows.sum(axis=1) > 1.0]
    return shared


def _wake_s_per_gbit(
    rates: _F64,
    queue: npt.NDArray[np.int64],
    recv: npt.NDArray[np.int64],
    busy: _F64,
    own_gbit: _F64,
    *,
    frames_per_gbit: float,
    frames_per_poll: int,
    wakeup_s: float,
) -> tuple[_F64, _F64]:
    """(core-seconds per Gbit each flow's wake-ups cost its receiver's CPU,
    wake-ups per Gbit): see the module's "Wake-ups". ``own_gbit``: each
    receiver's own work per Gbit, wake-ups included."""
    queue_rate = np.bincount(queue, weights=rates, minlength=int(queue.max()) + 1)[queue]
    share = np.divide(rates, queue_rate, out=np.ones_like(rates), where=queue_rate > _EPS)
    b = float(frames_per_poll)
    # Polls with a frame of the flow, per frame of the flow (b / b = 1 per
    # frame when its share goes to 0, 1 / b when it is alone).
    hit = np.where(share > _EPS, (1.0 - (1.0 - share) ** b) / np.maximum(share, _EPS), b) / b
    deliveries = frames_per_gbit * hit
    own = rates * own_gbit
    rho = np.minimum(busy[recv], 1.0)
    runnable = np.minimum(
        np.divide(own, 1.0 - rho + own, out=np.zeros_like(own), where=own > _EPS), 1.0
    )
    wakeups = deliveries * (1.0 - runnable)
    return wakeups * wakeup_s, wakeups


def solve_dataplane(
    costs: DataplaneCostTable,
    traffic: Traffic,
    *,
    cores: int,
    threads_per_core: int = 1,
    core_work: float = 1.0,
) -> DataplaneResult:
    """The steady state of ``traffic`` on a node of ``cores`` CPUs with ``costs``.

    ``threads_per_core`` CPUs share each physical core (Linux numbers every
    core's first thread before any sibling: CPU ``c`` is on core
    ``c % (cores / threads_per_core)``), which does ``core_work`` threads'
    work when all of them are busy (``HostSpec.core_work``).
    """
    if not 1.0 <= core_work <= threads_per_core:
        raise ConfigError(
            "`1 <= core_work <= threads_per_core` must hold, but got "
            f"({core_work=}, {threads_per_core=})"
        )
    n_cores = traffic.cores or cores
    path = traffic.data_path
    fc = flow_costs(costs, path, traffic.proto, traffic.message)
    n = traffic.flows
    link = not path.intra_host
    rx = fc.rx_irq + fc.rx_softirq + fc.tx_system + fc.tx_user  # on the RSS/sender core
    app = fc.app_system + fc.app_user
    single = [1.0 / w for w in (rx, app, fc.kthread_system) if w > 0.0]
    if link:
        single.append(costs.link_gbps / fc.wire_gbit)
    offered = math.inf if traffic.flow_gbps is None else traffic.flow_gbps
    ceiling = min([*single, offered])

    rng = np.random.default_rng(traffic.seed)
    # Resources: the CPUs, the link, then the physical cores SMT threads share.
    smt = _smt_rows(threads_per_core, core_work, n_cores)
    capacity = np.concatenate(
        [np.ones(n_cores), [costs.link_gbps], np.full(smt.shape[0], core_work)]
    )
    cap = np.full(n, offered)
    # Wake-ups: only a receiver on the host sleeps on host CPUs.
    wakeup_s = SWITCHES_PER_WAKEUP * costs.context_switch_s * float(path.host_receiver)
    frames_per_poll = (
        costs.napi_budget if path.intra_host else min(costs.coalesce_frames, costs.napi_budget)
    )
    frames_per_gbit = fc.batches * frames_per_poll
    sums = np.zeros(11)
    drawn_rates: list[_F64] = []
    for _ in range(traffic.draws):
        rss, recv, send = _placement(traffic, path, costs, n_cores, threads_per_core, rng)
        demand = np.zeros((n_cores + 1 + smt.shape[0], n))
        cols = np.arange(n)
        core = send if path.intra_host else rss
        if path.intra_host:
            np.add.at(demand, (send, cols), rx)
        else:
            np.add.at(demand, (rss, cols), fc.rx_irq + fc.rx_softirq)
        np.add.at(demand, (recv, cols), app)
        # vhost-net threads: the scheduler places them as it places receivers.
        np.add.at(demand, (recv, cols), fc.kthread_system)
        if link:
            demand[n_cores, :] = fc.wire_gbit
        demand[n_cores + 1 :] = smt @ demand[:n_cores]
        rates = max_min_rates(demand, capacity, cap)
        busy = demand[:n_cores] @ rates
        wake = woken = np.zeros(n)
        if wakeup_s > 0.0:
            base = demand.copy()
            for k in range(4 * _WAKE_ITERATIONS):
                target, _ = _wake_s_per_gbit(
                    rates,
                    core,
                    recv,
                    busy,
                    app + wake,
                    frames_per_gbit=frames_per_gbit,
                    frames_per_poll=frames_per_poll,
                    wakeup_s=wakeup_s,
                )
                # The wake-ups and the receivers' load chase each other:
                # damped by half; where a receiver's CPU tips in and out of
                # saturation that cycles, so then averaged (steps 1/2, 1/3, ...).
                late = k - _WAKE_ITERATIONS
                step_wake = (target - wake) * (0.5 if late < 0 else 1.0 / (late + 2))
                wake = wake + step_wake
                demand = base.copy()
                np.add.at(demand, (recv, cols), wake)
                demand[n_cores + 1 :] = smt @ demand[:n_cores]
                rates = max_min_rates(demand, capacity, cap)
                busy = demand[:n_cores] @ rates
                if float(np.abs(step_wake).max()) <= 1e-9 * max(float(app), _EPS):
                    break
            else:
                log.debug("wake-ups: no fixed point in %d steps", 4 * _WAKE_ITERATIONS)
            # The wake-ups reported are the ones whose switches the CPU pays.
            woken = wake / wakeup_s
        drawn_rates.append(rates.copy())
        total = float(rates.sum())
        rho = np.minimum(busy[core], 1.0)
        batches = rates * fc.batches
        softirqs = float((batches * (1.0 + (fc.softirqs_per_batch - 1) * rho)).sum())
        if fc.softirqs_per_batch == 0:
            softirqs = 0.0
        lo, hi = float(rates.min()), float(rates.max())
        sums += np.array(
            [
                total,
                lo,
                hi,
                hi / lo if lo > 0.0 else math.inf,
                total * fc.rx_irq,
                total * fc.rx_softirq,
                total * (fc.app_system + fc.tx_system + fc.kthread_system) + float(rates @ wake),
                total * (fc.app_user + fc.tx_user),
                total * fc.irqs,
                softirqs,
                float(rates @ woken),
            ]
        )
    m = sums / traffic.draws
    fct_p50, fct_p99 = _completion_quantiles(traffic.flow_bytes, drawn_rates)
    return DataplaneResult(
        traffic=traffic,
        cores=n_cores,
        per_flow_ceiling_gbps=ceiling,
        aggregate_gbps=float(m[0]),
        per_flow_gbps=float(m[0]) / n,
        flow_min_gbps=float(m[1]),
        flow_max_gbps=float(m[2]),
        flow_spread=float(m[3]),
        cpu_irq_cores=float(m[4]),
        cpu_softirq_cores=float(m[5]),
        cpu_system_cores=float(m[6]),
        cpu_user_cores=float(m[7]),
        irq_per_s=float(m[8]),
        softirq_per_s=float(m[9]),
        messages_per_s=float(m[0]) * fc.messages,
        wakeups_per_s=float(m[10]),
        fct_p50_s=fct_p50,
        fct_p99_s=fct_p99,
    )


def solve_on_profile(profile: Profile, traffic: Traffic) -> DataplaneResult:
    """:func:`solve_dataplane` with ``profile``'s data plane and core count."""
    host = profile.host
    return solve_dataplane(
        profile.dataplane_costs(),
        traffic,
        cores=host.cores,
        threads_per_core=host.threads_per_core or 1,
        core_work=host.core_work,
    )
