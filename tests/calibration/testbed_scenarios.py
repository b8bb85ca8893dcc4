"""Scenarios of the testbed's catalog built the same way by several tests."""

from __future__ import annotations

from typing import Any

from bootstorm.models import Scenario

#: Seconds between two starts of :func:`one_at_a_time`: far longer than a
#: start on any profile the tests fit, so that no start meets another.
APART_S = 10.0


def one_at_a_time(sandboxes: int, **fields: Any) -> Scenario:
    """``sandboxes`` CNI-bridge sandboxes started :data:`APART_S` apart on a
    node profile: nothing contends, so a per-sandbox cost shows exactly.
    ``fields``: the scenario's other fields (a lifetime, another plugin)."""
    return Scenario(
        cni="testbed-cni-bridge",
        sandboxes=sandboxes,
        profile="local",
        arrival_s=tuple(APART_S * i for i in range(sandboxes)),
        **fields,
    )
