"""The testbed's cgroups: one cgroup-v2 directory per sandbox under our own parent.

cgroup v2 may be mounted at ``/sys/fs/cgroup`` (unified) or at
``/sys/fs/cgroup/unified`` (hybrid, as on this project's host), so the mount
point is read from ``/proc/self/mounts``. ``mkdir`` and ``rmdir`` of a
cgroup take cgroup_mutex (``cgroup_mkdir`` → ``cgroup_kn_lock_live``), and
moving a process in takes css_set_lock: the locks seed 000 finds contended.

net_prio is a cgroup-v1 controller: its ``ifpriomap`` write takes RTNL (the
paper's Cgroup/RTNL interplay), but using net_prio or net_cls at all makes
the kernel disable cgroup-v2 socket matching until reboot ("cgroup:
disabling cgroup2 socket matching due to net_prio or net_cls activation").
So it is off unless asked for, and only an existing v1 net_prio mount is used.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from pathlib import Path

from .._names import CGROUP_PARENT
from ._errors import TestbedError

__all__ = [
    "CgroupError",
    "add_process",
    "cgroup2_root",
    "kill_and_remove",
    "netprio_root",
    "remove_tree",
    "testbed_parent",
    "write_ifpriomap",
]

log = logging.getLogger(__name__)


class CgroupError(TestbedError):
    """cgroup v2 (or net_prio, when asked for) is not available."""


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fs type, options) of this mount namespace."""
    out = []
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 4:
                out.append((parts[1], parts[2], parts[3]))
    return out


def cgroup2_root() -> Path:
    """The cgroup-v2 mount point; :class:`CgroupError` if v2 is not mounted."""
    for point, fstype, _ in _mounts():
        if fstype == "cgroup2":
            return Path(point)
    raise CgroupError("cgroup v2 is not mounted (no cgroup2 entry in /proc/self/mounts)")


def netprio_root() -> Path:
    """A cgroup-v1 hierarchy with net_prio; :class:`CgroupError` if there is none."""
    for point, fstype, options in _mounts():
        if fstype == "cgroup" and "net_prio" in options.split(","):
            return Path(point)
    raise CgroupError(
        "--netprio-ifpriomap: no cgroup-v1 hierarchy with net_prio is mounted; "
        "the testbed does not mount one itself"
    )


def testbed_parent(root: Path) -> Path:
    """``<root>/bootstorm-testbed``, made if absent."""
    parent = root / CGROUP_PARENT
    parent.mkdir(exist_ok=True)
    return parent


def remove_tree(path: Path, *, attempts: int = 20) -> None:
    """rmdir a cgroup and its children, deepest first.

    A cgroup whose last task just exited can be busy for a moment (the task
    is still being released), so EBUSY is retried a few times.
    """
    if not path.exists():
        return
    children = [p for p in path.iterdir() if p.is_dir()]
    for child in children:
        remove_tree(child, attempts=attempts)
    for i in range(attempts):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or i == attempts - 1:
                log.warning("rmdir %s: %s", path, exc.strerror)
                return
            time.sleep(0.05)


def add_process(cgroup: Path, pid: int) -> bool:
    """Move ``pid`` into ``cgroup``; False if it already exited."""
    try:
        (cgroup / "cgroup.procs").write_text(f"{pid}\n")
    except ProcessLookupError:
        return False
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return False
        raise
    return True


def kill_and_remove(path: Path) -> None:
    """Kill what is still in a leftover cgroup (only ours), then remove it."""
    with contextlib.suppress(OSError):
        kill = path / "cgroup.kill"
        if kill.exists():
            kill.write_text("1\n")
    remove_tree(path)


def write_ifpriomap(cgroup: Path, ifname: str, prio: int) -> None:
    """Set ``ifname``'s priority in a net_prio cgroup (takes RTNL in the kernel)."""
    (cgroup / "net_prio.ifpriomap").write_text(f"{ifname} {prio}\n")
