"""The tuned config: what a search hands to a node and what a node agent takes.

One versioned, schema-validated YAML object carries the settings a capacity
planner ships to a node — per-stage concurrency limits, device-pool sizes,
the RTNL grant order, the agent's lease TTL — and where they came from (the
profile, the study, the trial and what it predicted). ``bootstorm optimize``
writes it, ``PUT /config`` on the node agent accepts it, and
``bootstorm simulate --config`` applies it to any what-if.

A remote client sends this object to the agent, so every number has a
declared range and every map a bounded size: a value outside its range is
refused with the rule and the value, never clamped, and a boolean is never
taken for a number (YAML's ``true`` is not 1 sandbox).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from ._errors import ConfigError, format_validation_error, load_yaml_model

__all__ = [
    "MAX_CONFIG_STAGES",
    "MAX_LEASE_TTL_S",
    "MAX_LIMIT",
    "MAX_POOL_SIZE",
    "MAX_RTNL_PRIORITY",
    "MIN_LEASE_TTL_S",
    "STAGE_NAME_PATTERN",
    "TUNED_CONFIG_SCHEMA_VERSION",
    "ConfigOrigin",
    "TunedConfig",
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


class _TunedConfigRules(_Frozen):
    """TunedConfig's fields and rules, with pydantic's own ``__init__`` (see
    :meth:`TunedConfig.problems`)."""

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
    origin: ConfigOrigin | None = None


class TunedConfig(_TunedConfigRules):
    """Settings for one node, validated on both ends (optimizer and agent).

    Parameters
    ----------
    limits:
        Per-stage concurrency limits: at most K sandboxes inside the stage
        (1..100 000, at most 256 stages).
    pools:
        Pre-created devices per kind (``netns``, ``vport``, ``ipvtap``...),
        0..100 000 each.
    rtnl_priority:
        RTNL grant priority by stage (lower first, -10 000..10 000); empty is FIFO.
    lease_ttl_s:
        How long a node agent keeps a stage permit for a client that went
        silent before it gives the permit back, seconds (0.1..3600).
    origin:
        The profile, study and trial this config came from, if a search made it.
    """

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, prefix="config: ")) from None

    @classmethod
    def problems(cls, data: Mapping[str, Any]) -> ValidationError | None:
        """What is wrong with ``data`` as a TunedConfig (pydantic's errors, one per
        problem), or None: for a caller that formats each problem itself, as the
        node agent does to quote a remote client's keys."""
        try:
            _TunedConfigRules.model_validate(data)
        except ValidationError as exc:
            return exc
        return None

    @classmethod
    def from_yaml(cls, path: str | Path) -> TunedConfig:
        """Load a tuned config file; unknown fields and bad values are refused."""
        return load_yaml_model(cls, Path(path))

    def to_yaml(self) -> str:
        return yaml.safe_dump(
            self.model_dump(mode="json", exclude_none=True), sort_keys=False, width=100
        )
