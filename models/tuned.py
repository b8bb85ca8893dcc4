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
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..traces._config import (
    MAX_CONFIG_STAGES,
    MAX_FOLLOW_WINDOW_S,
    MAX_LEASE_TTL_S,
    MAX_LIMIT,
    MAX_POOL_SIZE,
    MAX_REFILL_CONCURRENCY,
    MAX_RTNL_PRIORITY,
    MIN_LEASE_TTL_S,
    STAGE_NAME_PATTERN,
    TUNED_CONFIG_SCHEMA_VERSION,
    AppliedConfig,
    ConfigOrigin,
    FollowRate,
    NotBool,
    PoolRefill,
    follow_rate_target,
)
from ._errors import ConfigError, format_validation_error, load_yaml_model

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
    "TunedConfig",
    "follow_rate_target",
    "settings_line",
]


# The fields and their rules are defined once, in the bottom layer (a trace
# header records the config a storm ran under): see traces/_config.py.


# mypy sees bootstorm.traces as untyped (the packages are mapped by pyproject's
# package-dir, which mypy does not follow), hence the ignore.
class TunedConfig(AppliedConfig):  # type: ignore[misc]
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
    pool_refill:
        How the pools refill while starts go on (:class:`PoolRefill`: refill
        workers, a target that follows the start rate); absent: made before
        the storm, never refilled.
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
            AppliedConfig.model_validate(data)
        except ValidationError as exc:
            return exc
        return None

    @classmethod
    def from_yaml(cls, path: str | Path) -> TunedConfig:
        """Load a tuned config file; unknown fields and bad values are refused."""
        return load_yaml_model(cls, Path(path))

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_none=True)
        return str(yaml.safe_dump(data, sort_keys=False, width=100))


def settings_line(*, pools: Mapping[str, int], limits: Mapping[str, int]) -> str:
    """Pools and limits in one line, as every table and title shows them
    (``pools netns=6 vport=1, limits AddCNI=2``); ``""`` for neither."""
    parts = []
    if pools:
        parts.append("pools " + " ".join(f"{k}={v}" for k, v in sorted(pools.items())))
    if limits:
        parts.append("limits " + " ".join(f"{k}={v}" for k, v in sorted(limits.items())))
    return ", ".join(parts)
