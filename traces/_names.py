"""Names the kernel collector gives what it makes on a host.

Defined here, in the bottom layer, because the collector (``traces/kernel``)
names its tracefs instances with it; :mod:`bootstorm.validation._names`
re-exports it beside the testbed's and the agent's prefixes, so a sweep of
leftovers finds everything bootstorm made in one place.
"""

from __future__ import annotations

__all__ = ["TRACEFS_INSTANCE_PREFIX"]

#: tracefs instances of the kernel collector: ``instances/bootstorm-<pid>``.
TRACEFS_INSTANCE_PREFIX = "bootstorm-"
