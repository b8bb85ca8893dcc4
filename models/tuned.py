"""The tuned config: what a search hands to a node and what a node agent takes.

One versioned, schema-validated YAML object carries the settings a capacity
planner ships to a node — per-stage concurrency limits, device-pool sizes,
the RTNL grant order, the agent's lease TTL — and where they came from (the
profile, the study, the trial and what it predicted). ``bootstorm optimize``
writes it, ``PUT /config`` on the node agent accepts it, and
``bootstorm simulate --config`` applies it to any what-if.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import ConfigError, format_validation_error, load_yaml_model

__all__ = ["TUNED_CONFIG_SCHEMA_VERSION", "ConfigOrigin", "TunedConfig"]

TUNED_CONFIG_SCHEMA_VERSION: Literal[1] = 1

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveSeconds = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConfigOrigin(_Frozen):
    """Where a tuned config came from, so a reader can reproduce it."""

    profile: str
    cni: str
    sandboxes: PositiveInt
    study_name: str | None = None
    storage: str | None = None
    trial_number: NonNegativeInt | None = None
    sampler: str | None = None
    #: What the model predicted for the tuned storm (``makespan_s``, ``p99_s``, ...).
    predicted: dict[str, float] = Field(default_factory=dict)
    created_at: datetime | None = None


class TunedConfig(_Frozen):
    """Settings for one node, validated on both ends (optimizer and agent).

    Parameters
    ----------
    limits:
        Per-stage concurrency limits: at most K sandboxes inside the stage.
    pools:
        Pre-created devices per kind (``netns``, ``vport``, ``ipvtap``...).
    rtnl_priority:
        RTNL grant priority by stage (lower first); empty is FIFO.
    lease_ttl_s:
        How long a node agent keeps a stage permit for a client that went
        silent before it gives the permit back.
    origin:
        The profile, study and trial this config came from, if a search made it.
    """

    schema_version: Literal[1] = TUNED_CONFIG_SCHEMA_VERSION
    kind: Literal["bootstorm/tuned-config"] = "bootstorm/tuned-config"
    limits: dict[str, PositiveInt] = Field(default_factory=dict)
    pools: dict[str, NonNegativeInt] = Field(default_factory=dict)
    rtnl_priority: dict[str, int] = Field(default_factory=dict)
    lease_ttl_s: PositiveSeconds = 30.0
    origin: ConfigOrigin | None = None

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, prefix="config: ")) from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> TunedConfig:
        """Load a tuned config file; unknown fields and bad values are refused."""
        return load_yaml_model(cls, Path(path))

    def to_yaml(self) -> str:
        return yaml.safe_dump(
            self.model_dump(mode="json", exclude_none=True), sort_keys=False, width=100
        )
