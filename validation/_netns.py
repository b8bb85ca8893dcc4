"""Named network namespaces made and entered by one thread, in-process (the
testbed's sandboxes and the node agent's pools make them the same way).

Linux keeps the network namespace per *task* (thread), so a sandbox thread
can ``unshare(CLONE_NEWNET)``, bind-mount its new namespace on
``/run/netns/<name>`` (what ``ip netns add`` does), open its netlink socket
there and ``setns`` back, without forking. pyroute2's own
``netns.create`` forks a helper process, which is slow and unsafe with
hundreds of threads alive, and binds ``/proc/self`` (the main thread's
namespace), not the calling thread's.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "NETNS_RUN_DIR",
    "create_netns_here",
    "entered",
    "list_netns",
    "remove_netns",
]

log = logging.getLogger(__name__)

NETNS_RUN_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
_MS_REC = 0x4000
_MS_BIND = 0x1000
_MS_SHARED = 1 << 20
_MNT_DETACH = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prepare_run_dir(libc: ctypes.CDLL) -> None:
    """Make ``/run/netns`` a shared mount point, as iproute2 does, once."""
    NETNS_RUN_DIR.mkdir(parents=True, exist_ok=True)
    if libc.mount(b"", bytes(NETNS_RUN_DIR), b"none", _MS_SHARED | _MS_REC, None) == 0:
        return
    _check(
        libc.mount(bytes(NETNS_RUN_DIR), bytes(NETNS_RUN_DIR), b"none", _MS_BIND | _MS_REC, None),
        "bind /run/netns",
    )
    _check(libc.mount(b"", bytes(NETNS_RUN_DIR), b"none", _MS_SHARED | _MS_REC, None), "share")


def create_netns_here(name: str) -> int:
    """Create netns ``name`` from the calling thread and return an fd of it.

    The calling thread is back in its original namespace on return, error or
    not. The caller owns the returned fd (``O_RDONLY`` on the bind mount).
    """
    libc = _libc()
    _prepare_run_dir(libc)
    path = NETNS_RUN_DIR / name
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0)
    os.close(fd)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            _check(libc.unshare(_CLONE_NEWNET), f"unshare for {name}")
            _check(
                libc.mount(b"/proc/thread-self/ns/net", bytes(path), b"none", _MS_BIND, None),
                f"bind {path}",
            )
        finally:
            _check(libc.setns(home, _CLONE_NEWNET), "setns back home")
    except BaseException:
        with contextlib.suppress(OSError):
            remove_netns(name)
        raise
    finally:
        os.close(home)
    return os.open(path, os.O_RDONLY)


@contextlib.contextmanager
def entered(ns_fd: int) -> Iterator[None]:
    """Run the body with the calling thread inside the namespace of ``ns_fd``."""
    libc = _libc()
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _check(libc.setns(ns_fd, _CLONE_NEWNET), "setns into sandbox netns")
        try:
            yield
        finally:
            _check(libc.setns(home, _CLONE_NEWNET), "setns back home")
    finally:
        os.close(home)


def remove_netns(name: str) -> bool:
    """Unmount and unlink ``/run/netns/<name>``; whether it existed.

    The kernel frees the namespace, and the devices in it, once the last
    reference (mount, open fd, task) is gone.
    """
    path = NETNS_RUN_DIR / name
    libc = _libc()
    if libc.umount2(bytes(path), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):
            log.warning("umount %s: %s", path, os.strerror(err))
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def list_netns() -> list[str]:
    """Names under ``/run/netns``."""
    try:
        return sorted(p.name for p in NETNS_RUN_DIR.iterdir())
    except FileNotFoundError:
        return []
