"""What a search may change: per-stage concurrency limits and device-pool sizes.

A :class:`SearchSpace` is a frozen value object, validated when built, that
knows nothing about Optuna beyond naming its parameters: a sampler suggests
one integer per parameter, and :meth:`SearchSpace.config_of` turns those into
the :class:`~bootstorm.models.TunedConfig` a node takes. The memory a config
costs is the pools' sizes times the profile's per-device memory, known before
any simulation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from .._params import Check, Depends, Interval, Keys, OneOf, Rules, Satisfies, Values, validate
from ..models import (
    ConfigError,
    FollowRate,
    PoolRefill,
    Profile,
    TunedConfig,
    scenario_pool_kinds,
    scenario_stages,
)
from ..models.tuned import MAX_LIMIT, MAX_POOL_SIZE

__all__ = [
    "DEFAULT_STAGES",
    "IntRange",
    "RefillSpace",
    "SearchSpace",
]

# Seed 000 §5.2 splits the start into "4 major stages" (Fig. 16, whose stage
# names are not in the text). bootstorm's default is the four stages in which
# a sandbox takes the contended global locks after its namespace exists:
# AddCNI (RTNL, ovs-vswitchd), Cgroup (cgroup_mutex, RTNL inside it,
# css_set_lock), AttachIf (RTNL) and StartVM (css_set_lock, RTNL). NetNS is
# left open: a limit on the first stage is admission control of the whole
# pipeline, which the seed does not describe.
DEFAULT_STAGES = ("AddCNI", "Cgroup", "AttachIf", "StartVM")

LIMIT_PREFIX = "limit:"
POOL_PREFIX = "pool:"
REFILL_PREFIX = "refill:"


@dataclass(frozen=True, kw_only=True, slots=True)
class IntRange:
    """An integer range ``[low, high]``; ``log`` samples it on a log scale."""

    low: int
    high: int
    log: bool = True

    __rules__: ClassVar[Rules] = Rules(
        low=Interval(int, 0),
        high=Interval(int, 0),
        checks=(
            Check("high", lambda r: r.low <= r.high, lambda r: f"must be >= low={r.low}"),
            Check("low", lambda r: not r.log or r.low >= 1, "must be >= 1 on a log scale (log)"),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class RefillSpace:
    """How the pools refill, as a search may choose it.

    ``workers``: refill workers (devices made at once); ``follow``: whether
    the search may choose a target that follows the start rate (parameter
    ``refill:follow``, 0 static, 1 following) against static targets;
    ``cover_s``: the seconds of starts a following pool keeps ready;
    ``window_s``: the window it counts starts over (fixed).
    """

    workers: IntRange = field(default_factory=lambda: IntRange(low=1, high=4, log=False))
    follow: bool = True
    cover_s: IntRange = field(default_factory=lambda: IntRange(low=1, high=120))
    window_s: float = 60.0

    __rules__: ClassVar[Rules] = Rules(
        window_s=Interval(float, 1.0, 3600.0, unit="s"),
        checks=(Check("workers", lambda r: r.workers.low >= 1, "must have low >= 1 (one worker)"),),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def parameters(self) -> dict[str, IntRange]:
        out = {f"{REFILL_PREFIX}workers": self.workers}
        if self.follow:
            out[f"{REFILL_PREFIX}follow"] = IntRange(low=0, high=1, log=False)
            out[f"{REFILL_PREFIX}cover_s"] = self.cover_s
        return out

    def params_of(self, policy: PoolRefill | None) -> dict[str, int]:
        """The point of this space nearest ``policy`` (None: one worker, static)."""
        policy = policy if policy is not None else PoolRefill()
        r = self.workers
        out = {f"{REFILL_PREFIX}workers": min(max(policy.concurrency, r.low), r.high)}
        if self.follow:
            follow = policy.follow_rate
            out[f"{REFILL_PREFIX}follow"] = int(follow is not None)
            cover = self.cover_s
            wanted = cover.low if follow is None else round(follow.cover_s)
            out[f"{REFILL_PREFIX}cover_s"] = min(max(wanted, cover.low), cover.high)
        return out

    def policy_of(self, params: Mapping[str, int], *, max_devices: int) -> PoolRefill:
        """The refill policy of one point (``params`` as in :attr:`parameters`)."""
        follow = None
        if self.follow and int(params[f"{REFILL_PREFIX}follow"]):
            follow = FollowRate(
                window_s=self.window_s,
                cover_s=float(params[f"{REFILL_PREFIX}cover_s"]),
                max_devices=max_devices,
            )
        return PoolRefill(concurrency=int(params[f"{REFILL_PREFIX}workers"]), follow_rate=follow)


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchSpace:
    """Per-stage limits and per-kind pool sizes a search may choose.

    Parameters
    ----------
    cni:
        The CNI the space is for: it decides which stages and pool kinds exist.
    limits:
        Stage name → range of its concurrency limit. A limit at or above the
        storm size does not bind, so ``high = sandboxes`` includes "no limit".
    pools:
        Device kind → range of its pool size (0 = not pooled).
    pool_device_mib:
        Memory of one pooled device, by kind (from the profile).
    refill:
        How the pools refill while starts go on, if the search chooses that
        too (a workload's search); ``None``: pools made before the storm.
        With a refill, a pool size is the kind's target (or a following
        pool's floor, at least 1).
    unbound_limit:
        A limit at or above this many sandboxes binds nothing the space was
        made for (its storm's or workload's size): the config leaves it out
        rather than write a limit a node would still enforce (through a node
        agent, a lease of two HTTP calls per sandbox for no permit to wait
        for). ``None``: every searched limit is written.
    """

    cni: str
    limits: Mapping[str, IntRange] = field(default_factory=dict)
    pools: Mapping[str, IntRange] = field(default_factory=dict)
    pool_device_mib: Mapping[str, float] = field(default_factory=dict)
    refill: RefillSpace | None = None
    unbound_limit: int | None = None

    __rules__: ClassVar[Rules] = Rules(
        limits=(
            Depends(
                lambda s: Keys(OneOf(scenario_stages(s.cni), what=f"the stages of cni {s.cni!r}"))
            ),
            Values(Satisfies(lambda r: r.low >= 1, "must have low >= 1 (a limit is at least 1)")),
        ),
        pools=(
            Depends(
                lambda s: Keys(
                    OneOf(scenario_pool_kinds(s.cni), what=f"the device kinds of cni {s.cni!r}")
                )
            ),
            Depends(
                lambda s: Keys(
                    OneOf(
                        tuple(s.pool_device_mib),
                        what="the kinds with a memory cost per device (pool_device_mib)",
                    )
                )
            ),
            # A log scale cannot hold 0 (no pool): IntRange refuses low 0 with log.
        ),
        checks=(
            Check(
                "limits",
                lambda s: bool(s.limits or s.pools),
                "must not be empty with no pools (give a stage limit or a pool to search)",
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)
        # Own copies, so that changing the caller's dicts cannot change a frozen space
        # (plain dicts, not read-only views: a space is pickled to worker processes).
        object.__setattr__(self, "limits", dict(self.limits))
        object.__setattr__(self, "pools", dict(self.pools))
        object.__setattr__(self, "pool_device_mib", dict(self.pool_device_mib))

    @classmethod
    def default(
        cls,
        *,
        cni: str,
        sandboxes: int,
        profile: Profile,
        stages: tuple[str, ...] | None = None,
        pool_kinds_searched: tuple[str, ...] = (),
    ) -> SearchSpace:
        """Limits ``1..sandboxes`` (log scale) on ``stages`` (default: the four of
        seed 000 §5.2 that the CNI has) and pools ``0..sandboxes`` of the given kinds,
        each capped at what a :class:`TunedConfig` holds (``MAX_LIMIT``, ``MAX_POOL_SIZE``)."""
        if sandboxes < 1:
            raise ConfigError(f"sandboxes: must be at least 1, but got {sandboxes}")
        if stages is not None:
            chosen = stages
        else:
            # Seed 000's four where the CNI has them; another kind of sandbox
            # (SR-IOV, the testbed's): all of its stages.
            own = scenario_stages(cni)
            chosen = tuple(s for s in DEFAULT_STAGES if s in own) or own
        # A profile without seed costs (a testbed host's, fitted to a trace)
        # knows no device memory: its CNI's kinds cost nothing known.
        memory = (
            profile.costs.pool_device_mib
            if profile.costs is not None
            else {
                kind: profile.testbed.pool_device_mib.get(kind, 0.0)
                if profile.testbed is not None
                else 0.0
                for kind in scenario_pool_kinds(cni)
            }
        )
        # A config's limits and pools have bounds of their own (a node agent
        # must accept what a search writes); past them a limit no longer
        # binds on any storm a node runs, and no node pools more devices.
        return cls(
            cni=cni,
            limits={s: IntRange(low=1, high=min(sandboxes, MAX_LIMIT)) for s in chosen},
            pools={
                k: IntRange(low=0, high=min(sandboxes, MAX_POOL_SIZE), log=False)
                for k in pool_kinds_searched
            },
            pool_device_mib=dict(memory),
        )

    @property
    def parameters(self) -> dict[str, IntRange]:
        """Parameter name → range, the names a sampler sees (``limit:Cgroup``, ``pool:netns``)."""
        out = {f"{LIMIT_PREFIX}{s}": r for s, r in self.limits.items()}
        out.update({f"{POOL_PREFIX}{k}": r for k, r in self.pools.items()})
        if self.refill is not None:
            out.update(self.refill.parameters)
        return out

    def config_of(self, params: Mapping[str, int]) -> TunedConfig:
        """The tuned config of one point of the space (``params`` as in :attr:`parameters`)."""
        missing = sorted(set(self.parameters) - set(params))
        if missing:
            raise ConfigError(f"params: missing {', '.join(missing)}")
        limits = {s: int(params[f"{LIMIT_PREFIX}{s}"]) for s in self.limits}
        if self.unbound_limit is not None:
            limits = {s: k for s, k in limits.items() if k < self.unbound_limit}
        pools = {k: int(params[f"{POOL_PREFIX}{k}"]) for k in self.pools}
        if self.refill is None:
            return TunedConfig(limits=limits, pools={k: n for k, n in pools.items() if n > 0})
        highest = max((r.high for r in self.pools.values()), default=1)
        refill = self.refill.policy_of(params, max_devices=max(highest, 1))
        if refill.follow_rate is not None:
            # A following pool is a kind pooled from a floor of at least one
            # device: 0 would leave the kind unpooled, whatever the rate.
            pools = {k: max(n, 1) for k, n in pools.items()}
        kept = {k: n for k, n in pools.items() if n > 0}
        return TunedConfig(limits=limits, pools=kept, pool_refill=refill if kept else None)

    def params_of(self, config: TunedConfig) -> dict[str, int]:
        """The point of the space nearest ``config`` (each value clamped to
        its range): a limit it does not set at its range's high end, a pool
        it does not have at the low end; its refill policy where the space
        searches one (no policy: one worker, static targets)."""

        def clamp(value: int, r: IntRange) -> int:
            return min(max(value, r.low), r.high)

        params = {
            f"{LIMIT_PREFIX}{s}": clamp(config.limits.get(s, r.high), r)
            for s, r in self.limits.items()
        }
        params.update(
            {
                f"{POOL_PREFIX}{k}": clamp(config.pools.get(k, r.low), r)
                for k, r in self.pools.items()
            }
        )
        if self.refill is not None:
            params.update(self.refill.params_of(config.pool_refill))
        return params

    def memory_mib(self, config: TunedConfig) -> float:
        """Memory the config's pools hold, MiB (pool size × memory per device)."""
        return float(sum(n * self.pool_device_mib.get(k, 0.0) for k, n in config.pools.items()))
