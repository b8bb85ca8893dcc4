"""What the testbed's runtimes share: a sandbox in a named network namespace
and a cgroup of the run's, as a Kata sandbox has.

Both runtimes make NetNS and Cgroup the same way (a namespace made with
``unshare`` + a bind mount, or taken from the run's or an agent's pool; a
cgroup-v2 directory under the run's), and remove them the same way. A
runtime without a namespace (none yet) would implement
:class:`~.runtime.StormRuntime` directly.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ...traces import PoolTake
from .._netns import create_netns_here, remove_netns
from .admission import Admission, level_after_take
from .runtime import Sandbox, StormContext, StormRuntime, admission_holder

__all__ = ["NamespacedRuntime", "NamespacedSandbox"]


@dataclass(kw_only=True)
class NamespacedSandbox(Sandbox):
    """A sandbox with its namespace (its name under ``/run/netns`` and an fd
    on it) and its cgroup directory."""

    netns: str | None = None
    ns_fd: int | None = None
    cgroup: Path | None = None


N = TypeVar("N", bound=NamespacedSandbox)
T = TypeVar("T")


class NamespacedRuntime(StormRuntime[N]):
    """NetNS's fallbacks, Cgroup, the ``netns`` pool, their removal, and
    the record of every take from a pool."""

    def __init__(self, *, context: StormContext) -> None:
        super().__init__(context=context)
        #: Until :meth:`prepare` returns, the caller's (or an empty local) one.
        self.admission: Admission | None = None
        self.cgroup_run: Path | None = None
        self.pool_netns: list[str] = []  # made for the storm; a sandbox may take one

    def holder(self, sb: N) -> str:
        """The sandbox's name in admission calls (an agent's leases and pools)."""
        return self.holder_of(sb.index)

    def holder_of(self, index: int) -> str:
        """:meth:`holder` of the sandbox numbered ``index``."""
        return admission_holder(self.context.run, index)

    def took(self, sb: N, kind: str, got: T) -> T:
        """Record ``sb``'s take from pool ``kind`` (``got``: what it was
        handed, None if the pool was empty) with the level it left, where
        the admission says it; returns ``got``. Not recorded where the
        admission has no pool of ``kind``: a storm without pools would
        otherwise say every sandbox found one empty."""
        assert self.admission is not None
        t_s = time.monotonic()
        level = level_after_take(self.admission, kind, self.holder(sb))
        if level is not None:
            sb.takes.append(
                PoolTake(
                    sandbox=sb.index,
                    kind=kind,
                    t_s=t_s,
                    taken=got is not None,
                    ready=level.ready,
                    target=level.target,
                )
            )
        return got

    def make_netns_pool(self, n: int) -> None:
        """The ``netns`` pool: ``n`` namespaces made before the storm."""
        for k in range(n):
            name = self.names.pool_netns(k)
            os.close(create_netns_here(name))
            self.pool_netns.append(name)

    def open_netns(self, sb: N, name: str) -> None:
        """``sb`` uses namespace ``name``, made before the storm (a pool's)."""
        sb.netns = name
        sb.ns_fd = os.open(f"/run/netns/{name}", os.O_RDONLY)

    def pooled_or_new_netns(self, sb: N) -> None:
        """A namespace from the ``netns`` pool, else one made now (``bst-<run>-<i>``)."""
        assert self.admission is not None
        pooled = self.took(sb, "netns", self.admission.take("netns", self.holder(sb)))
        if pooled is not None:
            self.open_netns(sb, pooled)
            return
        sb.netns = self.names.netns(sb.index)
        sb.ns_fd = create_netns_here(sb.netns)

    def make_cgroup(self, sb: N) -> None:
        """The sandbox's cgroup-v2 directory (``cgroup_mkdir`` under cgroup_mutex)."""
        assert self.cgroup_run is not None
        sb.cgroup = self.cgroup_run / f"sb{sb.index}"
        sb.cgroup.mkdir()

    def remove_namespaces(self, sandboxes: Sequence[N], *, pooled: Sequence[str]) -> None:
        """Close each sandbox's namespace fd and remove its namespace (taken or
        made), then the pooled ones (``pooled``: those no sandbox took, and
        those it did, whichever exist)."""
        for sb in sandboxes:
            if sb.ns_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(sb.ns_fd)
            sb.ns_fd = None
            if sb.netns is not None:
                remove_netns(sb.netns)
            remove_netns(self.names.netns(sb.index))
        for name in pooled:
            remove_netns(name)
