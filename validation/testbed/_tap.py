"""Tap devices through ``/dev/net/tun``: the ioctls and their arguments."""

from __future__ import annotations

import errno
import fcntl
import struct
import time

__all__ = ["TUNSETIFF", "TUNSETPERSIST", "attach_tap", "ifreq"]

# include/uapi/linux/if_tun.h
TUNSETIFF = 0x400454CA
TUNSETPERSIST = 0x400454CB
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000
_IFF_VNET_HDR = 0x4000

# How long a re-attach waits for a forked child to let go of the tap (below).
_TAP_BUSY_WAIT_S = 2.0
_TAP_BUSY_POLL_S = 0.001  # a fork-to-exec window lasts about a millisecond


def attach_tap(fd: int, name: str) -> None:
    """``TUNSETIFF`` onto the existing tap ``name``.

    AddCNI closed its own fd, but a child that another sandbox's thread
    forked meanwhile (to start its VMM) holds a copy until it execs
    (``O_CLOEXEC`` acts at exec, not at fork), and a single-queue tap refuses
    a second file with ``EBUSY`` until then: retry for that short window.
    """
    deadline = time.monotonic() + _TAP_BUSY_WAIT_S
    while True:
        try:
            fcntl.ioctl(fd, TUNSETIFF, ifreq(name))
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(_TAP_BUSY_POLL_S)


def ifreq(name: str) -> bytes:
    """A ``struct ifreq`` for ``TUNSETIFF``: a tap, no packet info, virtio-net headers."""
    return struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI | _IFF_VNET_HDR)
