"""The testbed's one error type for "cannot run here"."""

from __future__ import annotations

__all__ = ["TestbedError"]


class TestbedError(RuntimeError):
    """The testbed cannot run here (not root, no cgroup v2, no net_prio when asked...)."""

    __test__ = False  # not a pytest test class, despite the name
