"""Steps, stages and the compiler that flattens them into a :class:`Program`.

A sandbox's start is a sequence of stages; a stage is a sequence of steps:

- :class:`Cpu` — work on a core (core-seconds at full speed);
- :class:`Sleep` — off-CPU waiting (a daemon round trip, a device);
- :class:`Hold` — a lock-held section around more steps (nestable);
- :class:`Zero` — clearing memory, at a per-core rate under shared bandwidth;
- :class:`Pooled` — take a pre-created device if the pool has one, else create it;
- :class:`Async` — start a branch the sandbox does not wait for;
- :class:`Wait` / :class:`Signal` — wait for another sandbox to get somewhere;
- :class:`Once` — the first sandbox to get here does something, the others wait for it.

:func:`compile_program` turns one plan per sandbox into the flat op arrays,
drawing the service-time jitter from the generator it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from .program import GateSpec, LockSpec, MachineSpec, OpKind, PoolSpec, Program, ProgramError

__all__ = [
    "SERVICE_FAMILIES",
    "Async",
    "Cpu",
    "Hold",
    "Once",
    "Pooled",
    "SandboxPlan",
    "Signal",
    "Sleep",
    "Stage",
    "Step",
    "Wait",
    "Zero",
    "compile_program",
]

#: Families the service-time factors can be drawn from, each with mean 1 and
#: the given coefficient of variation. Lognormal is the default; gamma has the
#: lighter right tail (skewness 2·cv against lognormal's 3·cv + cv³).
SERVICE_FAMILIES: tuple[str, ...] = ("lognormal", "gamma")


def _check_nonnegative(owner: str, name: str, value: float) -> None:
    if not (value >= 0.0 and np.isfinite(value)):
        raise ProgramError(f"`{owner}.{name} >= 0` must hold, but got {name}={value!r}")


@dataclass(frozen=True, slots=True)
class Cpu:
    """``work_s`` core-seconds of work; ``label`` names it in traces.

    ``growth_s`` adds that much work per sandbox ahead of this one in the
    program (sandbox ``i`` does ``work_s + i * growth_s``): the cost of walking
    a structure every earlier sandbox has added to. ``guest``: the work runs
    inside the microVM, on vCPUs held to the sandbox's CPU quota.
    """

    work_s: float
    label: str = ""
    growth_s: float = 0.0
    guest: bool = False

    def __post_init__(self) -> None:
        _check_nonnegative("Cpu", "work_s", self.work_s)
        _check_nonnegative("Cpu", "growth_s", self.growth_s)


@dataclass(frozen=True, slots=True)
class Sleep:
    """``duration_s`` seconds off-CPU.

    ``growth_s``: as for :class:`Cpu`, that much longer per sandbox ahead of
    this one in the program (another process's work that walks what every
    earlier sandbox has added, such as a daemon's reconfiguration).
    """

    duration_s: float
    label: str = ""
    growth_s: float = 0.0

    def __post_init__(self) -> None:
        _check_nonnegative("Sleep", "duration_s", self.duration_s)
        _check_nonnegative("Sleep", "growth_s", self.growth_s)


@dataclass(frozen=True, slots=True)
class Zero:
    """Clear ``n_bytes`` of memory."""

    n_bytes: float
    label: str = ""

    def __post_init__(self) -> None:
        _check_nonnegative("Zero", "n_bytes", self.n_bytes)


@dataclass(frozen=True, slots=True)
class Hold:
    """Run ``body`` while holding ``lock`` (``shared``: as a reader of an rw lock)."""

    lock: str
    body: tuple[Step, ...]
    shared: bool = False


@dataclass(frozen=True, slots=True)
class Pooled:
    """Fetch a device from ``pool`` if one is left (``fetch``), else ``create`` it."""

    pool: str
    create: tuple[Step, ...]
    fetch: tuple[Step, ...] = ()


@dataclass(frozen=True, slots=True)
class Async:
    """Start ``steps`` as a branch of kind ``kind`` and go on without waiting.

    The branch runs concurrently with the rest of its sandbox (its own stages,
    locks and CPU work count as the sandbox's). ``ready``: the sandbox is not
    ready for use until the branch is done (a NIC initialised in the
    background); otherwise the branch is housekeeping nobody waits for.
    """

    kind: str
    steps: tuple[Step, ...]
    ready: bool = False

    def __post_init__(self) -> None:
        if not self.kind:
            raise ProgramError(f"`Async.kind` must be non-empty, but got {self.kind=}")


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait until signal gate ``gate`` has a permit, and take it (see :class:`Signal`)."""

    gate: str


@dataclass(frozen=True, slots=True)
class Signal:
    """Let ``count`` waiters of signal gate ``gate`` go on (now or when they come).

    Declare the gate with ``GateSpec(signal=True, permits=0)``; each of the
    sandboxes that depend on this one has a :class:`Wait` on it.
    """

    gate: str
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ProgramError(f"`Signal.count >= 0` must hold, but got {self.count=}")


@dataclass(frozen=True, slots=True)
class Once:
    """The first of the sandboxes that share ``name`` to get here runs
    ``body``, lets the ``waiters`` others go on, then runs ``after``; each of
    the others waits here until then (a device every pod of a tenant needs,
    made by whichever pod comes first).

    Declare ``GateSpec(name=name, permits=0, signal=True)`` and
    ``PoolSpec(name=name, capacity=1, memory_mib_per_device=0, ticket=True)``.
    """

    name: str
    body: tuple[Step, ...]
    waiters: int
    after: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if self.waiters < 0:
            raise ProgramError(f"`Once.waiters >= 0` must hold, but got {self.waiters=}")


Step: TypeAlias = Cpu | Sleep | Zero | Hold | Pooled | Async | Wait | Signal | Once


@dataclass(frozen=True, slots=True)
class Stage:
    """A named stage; ``gate`` names the admission gate that guards it, if any."""

    name: str
    steps: tuple[Step, ...]
    gate: str | None = None


SandboxPlan: TypeAlias = tuple[Stage, ...]

# One flattened op before jitter: (kind, arg, base amount, jittered?, growth per index).
_Op: TypeAlias = tuple[int, int, float, bool, float]


class _Flattener:
    def __init__(
        self,
        lock_ids: Mapping[str, int],
        gate_ids: Mapping[str, int],
        pool_ids: Mapping[str, int],
        *,
        signals: frozenset[str] = frozenset(),
        tickets: frozenset[str] = frozenset(),
    ) -> None:
        self.lock_ids = lock_ids
        self.gate_ids = gate_ids
        self.pool_ids = pool_ids
        self.signals = signals
        self.tickets = tickets
        self.stage_ids: dict[str, int] = {}
        self.branches: list[tuple[str, bool, list[_Op]]] = []
        self.in_branch = False

    def plan(self, plan: SandboxPlan) -> tuple[list[_Op], list[tuple[str, bool, list[_Op]]]]:
        """The sandbox's ops and its branches' (kind, ready, ops)."""
        self.branches = []
        ops: list[_Op] = []
        for stage in plan:
            sid = self.stage_ids.setdefault(stage.name, len(self.stage_ids))
            gid = None
            if stage.gate is not None:
                gid = self._lookup(self.gate_ids, stage.gate, "gate")
                if stage.gate in self.signals:
                    raise ProgramError(
                        f"stage {stage.name!r} is guarded by {stage.gate!r}, a signal gate"
                    )
                ops.append((OpKind.GATE_ENTER, gid, 0.0, False, 0.0))
            ops.append((OpKind.STAGE_BEGIN, sid, 0.0, False, 0.0))
            self.steps(stage.steps, ops)
            ops.append((OpKind.STAGE_END, sid, 0.0, False, 0.0))
            if gid is not None:
                ops.append((OpKind.GATE_EXIT, gid, 0.0, False, 0.0))
        return ops, self.branches

    def steps(self, steps: Sequence[Step], ops: list[_Op]) -> None:
        for step in steps:
            if isinstance(step, Cpu):
                kind = OpKind.GUEST_CPU if step.guest else OpKind.CPU
                ops.append((kind, 0, step.work_s, True, step.growth_s))
            elif isinstance(step, Sleep):
                ops.append((OpKind.SLEEP, 0, step.duration_s, True, step.growth_s))
            elif isinstance(step, Zero):
                ops.append((OpKind.ZERO, 0, step.n_bytes, False, 0.0))
            elif isinstance(step, Hold):
                lid = self._lookup(self.lock_ids, step.lock, "lock")
                kind = OpKind.ACQUIRE_SHARED if step.shared else OpKind.ACQUIRE
                ops.append((kind, lid, 0.0, False, 0.0))
                self.steps(step.body, ops)
                ops.append((OpKind.RELEASE, lid, 0.0, False, 0.0))
            elif isinstance(step, Pooled):
                pid = self._lookup(self.pool_ids, step.pool, "pool")
                create: list[_Op] = []
                fetch: list[_Op] = []
                self.steps(step.create, create)
                self.steps(step.fetch, fetch)
                skip = 1 + len(create) + (1 if fetch else 0)
                ops.append((OpKind.POOL_TRY, pid, float(skip), False, 0.0))
                ops.extend(create)
                if fetch:
                    ops.append((OpKind.JUMP, 0, float(1 + len(fetch)), False, 0.0))
                    ops.extend(fetch)
            elif isinstance(step, Wait):
                ops.append((OpKind.GATE_ENTER, self._signal(step.gate), 0.0, False, 0.0))
            elif isinstance(step, Signal):
                if step.count:  # one op, whatever the count: programs stay linear in sandboxes
                    gid = self._signal(step.gate)
                    ops.append((OpKind.GATE_EXIT, gid, float(step.count), False, 0.0))
            elif isinstance(step, Once):
                # Take the ticket and do it (the jump), or wait for whoever did.
                pid = self._lookup(self.pool_ids, step.name, "pool")
                if step.name not in self.tickets:
                    raise ProgramError(
                        f"Once needs a ticket pool, but {step.name!r} is a pool of devices"
                    )
                gid = self._signal(step.name)
                first: list[_Op] = []
                self.steps(step.body, first)
                if step.waiters:
                    first.append((OpKind.GATE_EXIT, gid, float(step.waiters), False, 0.0))
                self.steps(step.after, first)
                ops.append((OpKind.POOL_TRY, pid, 3.0, False, 0.0))
                ops.append((OpKind.GATE_ENTER, gid, 0.0, False, 0.0))
                ops.append((OpKind.JUMP, 0, float(1 + len(first)), False, 0.0))
                ops.extend(first)
            elif isinstance(step, Async):
                if self.in_branch:
                    raise ProgramError(f"a branch cannot start a branch, but got {step!r}")
                sid = self.stage_ids.setdefault(step.kind, len(self.stage_ids))
                body: list[_Op] = [(OpKind.STAGE_BEGIN, sid, 0.0, False, 0.0)]
                self.in_branch = True
                self.steps(step.steps, body)
                self.in_branch = False
                body.append((OpKind.STAGE_END, sid, 0.0, False, 0.0))
                ops.append((OpKind.SPAWN, len(self.branches), 0.0, False, 0.0))
                self.branches.append((step.kind, step.ready, body))
            else:  # pragma: no cover - the type alias is closed
                raise ProgramError(f"unknown step {step!r}")

    def _signal(self, name: str) -> int:
        gid = self._lookup(self.gate_ids, name, "gate")
        if name not in self.signals:
            raise ProgramError(f"Wait/Signal need a signal gate, but {name!r} is an admission gate")
        return gid

    @staticmethod
    def _lookup(ids: Mapping[str, int], name: str, what: str) -> int:
        try:
            return ids[name]
        except KeyError:
            raise ProgramError(
                f"step refers to {what} {name!r}, but the program declares {sorted(ids)}"
            ) from None


def compile_program(
    plans: Sequence[SandboxPlan],
    *,
    machine: MachineSpec,
    locks: Sequence[LockSpec],
    gates: Sequence[GateSpec] = (),
    pools: Sequence[PoolSpec] = (),
    arrival_s: Sequence[float] | np.ndarray | None = None,
    service_cv: float = 0.0,
    service_family: str = "lognormal",
    rng: np.random.Generator | None = None,
) -> Program:
    """Flatten one plan per sandbox into a :class:`Program`.

    Every CPU and sleep amount is multiplied by an independent factor of mean
    1 and coefficient of variation ``service_cv``, drawn from ``rng`` out of
    ``service_family`` (:data:`SERVICE_FAMILIES`; memory sizes are not
    jittered). Plans that are equal are flattened once.
    """
    n = len(plans)
    if n < 1:
        raise ProgramError(f"a program needs at least one sandbox, but got {n=}")
    _check_nonnegative("compile_program", "service_cv", service_cv)
    if service_family not in SERVICE_FAMILIES:
        raise ProgramError(
            f"`service_family` must be one of {SERVICE_FAMILIES}, but got {service_family!r}"
        )
    if service_cv > 0.0 and rng is None:
        raise ProgramError("`rng` is required when `service_cv > 0`")
    arrivals = np.zeros(n) if arrival_s is None else np.asarray(arrival_s, dtype=np.float64)
    if arrivals.shape != (n,):
        raise ProgramError(
            f"`arrival_s` must have one entry per sandbox ({n}), got {arrivals.shape}"
        )

    def ids(specs: Sequence[LockSpec] | Sequence[GateSpec] | Sequence[PoolSpec]) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in specs:
            if s.name in out:
                raise ProgramError(f"name {s.name!r} declared twice")
            out[s.name] = len(out)
        return out

    flat = _Flattener(
        ids(locks),
        ids(gates),
        ids(pools),
        signals=frozenset(g.name for g in gates if g.signal),
        tickets=frozenset(p.name for p in pools if p.ticket),
    )
    # Equal plans are flattened once. A *part* is one op list of a template:
    # its sandbox's own ops, or one of its branches.
    template_of: dict[SandboxPlan, int] = {}
    # Models hand the same Stage objects to many sandboxes: look those up by
    # identity first, since hashing a plan walks every step of it.
    template_by_ids: dict[tuple[int, ...], int] = {}
    parts: list[list[_Op]] = []
    template_parts: list[list[int]] = []  # per template: part ids, sandbox's first
    branch_names: dict[str, int] = {}
    ready: set[str] = set()
    part_kind: dict[int, int] = {}  # branch part -> branch kind
    which = np.empty(n, dtype=np.int64)
    for i, plan in enumerate(plans):
        stage_ids = tuple(map(id, plan))
        t = template_by_ids.get(stage_ids)
        if t is None:
            t = template_of.get(plan)
        if t is None:
            t = template_of[plan] = len(template_parts)
            main, branches = flat.plan(plan)
            ids_ = [len(parts)]
            parts.append(main)
            for kind, is_ready, body in branches:
                part_kind[len(parts)] = branch_names.setdefault(kind, len(branch_names))
                if is_ready:
                    ready.add(kind)
                ids_.append(len(parts))
                parts.append(body)
            template_parts.append(ids_)
        template_by_ids[stage_ids] = t
        which[i] = t

    # Tasks: every sandbox, then every branch in sandbox order.
    n_branch = np.array([len(template_parts[t]) - 1 for t in which.tolist()], dtype=np.int64)
    spawn_base = np.zeros(n, dtype=np.int64)
    np.cumsum(n_branch[:-1], out=spawn_base[1:])
    branch_parent = np.repeat(np.arange(n, dtype=np.int64), n_branch)
    task_part = [template_parts[t][0] for t in which.tolist()]
    for t in which.tolist():
        task_part.extend(template_parts[t][1:])
    task_part_a = np.asarray(task_part, dtype=np.int64)
    task_owner = np.concatenate([np.arange(n, dtype=np.int64), branch_parent])
    branch_kind = np.array([part_kind[p] for p in task_part[n:]], dtype=np.int32).reshape(-1)

    lengths = np.array([len(parts[p]) for p in task_part], dtype=np.int64)
    offsets = np.zeros(len(task_part) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    op_kind = np.empty(total, dtype=np.int8)
    op_arg = np.empty(total, dtype=np.int32)
    op_amount = np.empty(total, dtype=np.float64)
    # Scatter per part: one vectorised write (and one jitter draw) each;
    # tasks grouped by part in one sort, not one scan per part.
    order = np.argsort(task_part_a, kind="stable")
    bounds = np.searchsorted(task_part_a[order], np.arange(len(parts) + 1))
    for part, ops in enumerate(parts):
        members = order[bounds[part] : bounds[part + 1]]
        if not ops or not members.size:
            continue
        k = np.array([o[0] for o in ops], dtype=np.int8)
        a = np.array([o[1] for o in ops], dtype=np.int32)
        base = np.array([o[2] for o in ops], dtype=np.float64)
        jit = np.array([o[3] for o in ops], dtype=bool)
        idx = offsets[members][:, None] + np.arange(len(ops))[None, :]
        op_kind[idx] = k
        op_arg[idx] = a
        growth = np.array([o[4] for o in ops], dtype=np.float64)
        amounts = np.broadcast_to(base, idx.shape).copy()
        if growth.any():
            amounts += task_owner[members][:, None].astype(np.float64) * growth[None, :]
        if service_cv > 0.0 and jit.any():
            assert rng is not None
            size = (members.size, int(jit.sum()))
            if service_family == "gamma":
                shape = 1.0 / service_cv**2
                factors = rng.gamma(shape, 1.0 / shape, size=size)
            else:
                sigma = float(np.sqrt(np.log1p(service_cv**2)))
                factors = rng.lognormal(-0.5 * sigma * sigma, sigma, size=size)
            amounts[:, jit] *= factors
        op_amount[idx] = amounts

    stage_names = tuple(sorted(flat.stage_ids, key=flat.stage_ids.__getitem__))
    return Program(
        machine=machine,
        stage_names=stage_names,
        locks=tuple(locks),
        gates=tuple(gates),
        pools=tuple(pools),
        arrival_s=arrivals,
        offsets=offsets,
        op_kind=op_kind,
        op_arg=op_arg,
        op_amount=op_amount,
        branch_names=tuple(sorted(branch_names, key=branch_names.__getitem__)),
        ready_branches=tuple(sorted(ready)),
        branch_parent=branch_parent,
        branch_kind=branch_kind,
        spawn_base=spawn_base,
    )
