"""The settings a storm runs under (stage limits, pools, RTNL order, lease TTL), as data.

The rules of a tuned config live here, in the bottom layer, because a trace
header records the config a measured storm ran under and traces depend on
nothing above them; :mod:`bootstorm.models.tuned` builds the user-facing
:class:`~bootstorm.models.TunedConfig` (its error type, its YAML file) on
:class:`AppliedConfig` and re-exports these names.

A remote client sends this object to the agent, so every number has a
declared range and every map a bounded size: a value outside its range is
refused with the rule and the value, never clamped, and a boolean is never
taken for a number (YAML's ``true`` is not 1 sandbox).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from .._params import ConfigError, format_validation_error

__all__ = [
    "MAX_CONFIG_STAGES",
    "MAX_FOLLOW_WINDOW_S",
    "MAX_LEASE_TTL_S",
    "MAX_LIMIT",
    "MAX_POOL_SIZE",
    "MAX_REFILL_CONCURRENCY",
    "MAX_RTNL_PRIORITY",
    "MIN_LEASE_TTL_S",
    "STAGE_NAME_PATTERN",
    "TUNED_CONFIG_SCHEMA_VERSION",
    "AppliedConfig",
    "ConfigOrigin",
    "FollowRate",
    "NotBool",
    "PoolRefill",
    "follow_rate_target",
]

TUNED_CONFIG_SCHEMA_VERSION: Literal[1] = 1

#: A stage or device-kind name: the simulator's (``StartVM``, ``dma-ram``,
#: ``netns-veth``) and the testbed's all fit; the agent takes the same names
#: in its URLs, so a config key it could never be asked for is refused here.
STAGE_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
#: Most entries in ``limits``, ``pools`` or ``rtnl_priority``. A sandbox passes
#: 5 or 6 stages and can take a handful of device kinds; 256 is room for any
#: pipeline and bounds what one ``PUT /config`` makes the agent track.
MAX_CONFIG_STAGES = 256
#: Largest stage limit (sandboxes). A limit at or above a storm's sandbox count
#: is no limit at all; the seeds' storms are hundreds of sandboxes per node, so
#: 100 000 is far past any real one while an accidental 10**9 is refused.
MAX_LIMIT = 100_000
#: Largest pool (devices of one kind). Each pooled device is a real netns, link
#: or tap the agent creates and holds memory for; 100 000 is past any storm one
#: node hosts, and the agent's device names count to 1 000 000 before wrapping.
MAX_POOL_SIZE = 100_000
#: RTNL priorities only order stages (lower first): ±10 000 orders any pipeline.
MAX_RTNL_PRIORITY = 10_000
#: Shortest lease TTL (s). A lease must outlive the grant's trip to its holder
#: and a scheduler tick, or a limit-1 stage hands every waiter a permit that has
#: already expired (a TTL of 1e-9 s granted 5 of 5 at once); 0.1 s is the
#: floor that still lets a test watch a lease expire quickly.
MIN_LEASE_TTL_S = 0.1
#: Longest lease TTL (s): the worst wait for the permit of a client that died.
#: An hour is longer than any storm's stage; 1e308 meant "never given back".
MAX_LEASE_TTL_S = 3600.0
#: Most devices a node agent creates at once (its refill workers, all pool
#: kinds together). Each worker holds its own netlink socket and takes RTNL
#: for every device it makes; past a few the workers only queue on RTNL
#: (seed 000 §4.1.3: device creation serialises there), so 64 is far past
#: any useful value while a mistaken 10**6 threads is refused.
MAX_REFILL_CONCURRENCY = 64
#: Longest window over which a rate-following pool counts starts (s): an
#: hour; a day's rhythm is better served by a planner changing the floor.
MAX_FOLLOW_WINDOW_S = 3600.0
#: Longest free-text field (a study name, a storage URL).
_MAX_TEXT_CHARS = 1024


def _not_bool(value: Any) -> Any:
    # bool is an int subclass, and pydantic's lax int and float take it: refuse
    # it before either sees it, so ``limits: {X: true}`` (or a scenario's
    # ``sandboxes: true``) is an error, not 1.
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return value


NotBool = BeforeValidator(_not_bool)
StageName = Annotated[str, Field(pattern=STAGE_NAME_PATTERN)]
Text = Annotated[str, Field(max_length=_MAX_TEXT_CHARS)]
# Strict ints: YAML and JSON give ints as ints, so a string, float or bool in
# an int field is a mistake to name, not a value to coerce.
Limit = Annotated[int, Field(strict=True, ge=1, le=MAX_LIMIT)]
PoolSize = Annotated[int, Field(strict=True, ge=0, le=MAX_POOL_SIZE)]
Priority = Annotated[int, Field(strict=True, ge=-MAX_RTNL_PRIORITY, le=MAX_RTNL_PRIORITY)]
# Floats stay lax but for bools: PyYAML (YAML 1.1) reads ``1e-3`` (no point) as
# the string "1e-3", and a JSON body goes through the same YAML reader.
LeaseSeconds = Annotated[
    float, NotBool, Field(ge=MIN_LEASE_TTL_S, le=MAX_LEASE_TTL_S, allow_inf_nan=False)
]
Predicted = Annotated[float, NotBool, Field(allow_inf_nan=False)]
#: Sandboxes of a storm a search was run for: any storm a scenario may
#: describe (a million-sandbox what-if is tuned too; its limits stay bounded).
Sandboxes = Annotated[int, Field(strict=True, ge=1, le=1_000_000_000)]
#: Optuna trial numbers: far more than any study runs.
TrialNumber = Annotated[int, Field(strict=True, ge=0, le=1_000_000_000)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _RefusedInOneLine(_Frozen):
    """A policy a notebook builds by hand: refused as a config file's field
    is, one line under ``_field`` (``pool_refill.concurrency: ...``), not
    pydantic's block. Pydantic calls this ``__init__`` for a nested mapping
    too; the outer error joins the path once (``_params.own_error_line``)."""

    _field: ClassVar[str]

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, prefix=f"{self._field}.")) from None


class ConfigOrigin(_Frozen):
    """Where a tuned config came from, so a reader can reproduce it."""

    profile: Text
    cni: Text
    sandboxes: Sandboxes
    study_name: Text | None = None
    storage: Text | None = None
    trial_number: TrialNumber | None = None
    sampler: Text | None = None
    #: What the model predicted for the tuned storm (``makespan_s``, ``p99_s``, ...).
    predicted: Annotated[dict[Text, Predicted], Field(max_length=MAX_CONFIG_STAGES)] = Field(
        default_factory=dict
    )
    created_at: datetime | None = None


class FollowRate(_RefusedInOneLine):
    """A pool target that follows the recent start rate: the demand
    prediction seed 000 (§6) calls for instead of a pool sized for the peak.

    At each start the target of every pooled kind becomes
    ``max(floor, min(max_devices, ceil(starts * cover_s / window_s)))``:
    ``starts`` counts the starts in the last ``window_s`` seconds (this one
    included), ``cover_s`` is how many seconds of starts at that rate the
    pool keeps ready (about one refill's duration, times a margin), and the
    floor is the kind's ``pools`` entry. A target that falls lets surplus
    devices go (they are removed, not handed out).
    """

    window_s: Annotated[
        float, NotBool, Field(ge=1.0, le=MAX_FOLLOW_WINDOW_S, allow_inf_nan=False)
    ] = 60.0
    cover_s: Annotated[
        float, NotBool, Field(ge=0.0, le=MAX_FOLLOW_WINDOW_S, allow_inf_nan=False)
    ] = 10.0
    max_devices: PoolSize = 1000

    _field: ClassVar[str] = "follow_rate"


def follow_rate_target(*, starts: int, rule: FollowRate, floor: int) -> int:
    """The target a :class:`FollowRate` pool sets after ``starts`` starts in
    its window (the model and the node agent both call this: one rule)."""
    wanted = math.ceil(starts * rule.cover_s / rule.window_s - 1e-9)
    return max(floor, min(rule.max_devices, wanted))


def _names_as_keys(value: Any) -> Any:
    """A policy's mapping with keys that are not strings (a YAML file's
    ``null:`` or ``1:``) refused by the key: pydantic builds a policy by a
    keyword call of its ``__init__``, which would raise a bare TypeError."""
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ValueError(f"expected field names, but got the key {key!r}")
    return value


#: The field of a policy that may come from a file's mapping.
NamesAsKeys = BeforeValidator(_names_as_keys)


class PoolRefill(_RefusedInOneLine):
    """How device pools are kept full while starts go on.

    Without it (``pool_refill`` absent) a scenario's pools are made before
    the storm and never refilled (the papers' setup, the testbed's own
    pools). With it, every start that takes a device lets a refill worker
    make another, through the same locks and CPU as the starts: a worker
    that is free makes a device of a kind whenever the kind's ready devices
    plus those being made are below its target, and removes ready devices
    above it. ``concurrency`` is how many workers (devices made at once, all
    kinds together; the node agent runs one netlink socket per worker).
    ``follow_rate``: the target follows the start rate instead of staying at
    the ``pools`` entry.
    """

    concurrency: Annotated[int, Field(strict=True, ge=1, le=MAX_REFILL_CONCURRENCY)] = 1
    follow_rate: Annotated[FollowRate | None, NamesAsKeys] = None

    _field: ClassVar[str] = "pool_refill"


class AppliedConfig(_Frozen):
    """The settings a storm ran under: a tuned config's fields and rules.

    :class:`~bootstorm.models.TunedConfig` is this with its errors as
    :class:`~bootstorm.models.ConfigError` and its YAML file; a trace header
    records the config in force as this (``TraceHeader.config``), so the
    bottom layer holds the one definition of the rules and needs nothing
    above it. pydantic's own ``__init__`` (see ``TunedConfig.problems``)."""

    schema_version: Literal[1] = 1  # TUNED_CONFIG_SCHEMA_VERSION
    kind: Literal["bootstorm/tuned-config"] = "bootstorm/tuned-config"
    limits: Annotated[dict[StageName, Limit], Field(max_length=MAX_CONFIG_STAGES)] = Field(
        default_factory=dict
    )
    pools: Annotated[dict[StageName, PoolSize], Field(max_length=MAX_CONFIG_STAGES)] = Field(
        default_factory=dict
    )
    rtnl_priority: Annotated[dict[StageName, Priority], Field(max_length=MAX_CONFIG_STAGES)] = (
        Field(default_factory=dict)
    )
    lease_ttl_s: LeaseSeconds = 30.0
    #: How the pools refill while starts go on (None: made before, never refilled).
    pool_refill: Annotated[PoolRefill | None, NamesAsKeys] = None
    origin: ConfigOrigin | None = None

    def __eq__(self, other: object) -> bool:
        # The same settings are equal whichever class holds them: a trace read
        # back holds an AppliedConfig where the run that wrote it had a
        # TunedConfig (pydantic's own __eq__ also compares the classes).
        if isinstance(other, AppliedConfig):
            return bool(self.model_dump() == other.model_dump())
        return NotImplemented
