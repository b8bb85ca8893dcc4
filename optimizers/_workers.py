"""Which process runs a trial, whether it is still alive, and dying with a parent.

A trial records the process that runs it as a tag (this boot of this
machine, the PID namespace, the PID and when that process started). A
worker that finds a RUNNING trial tagged by a process of its own machine and
PID namespace that no longer exists knows that trial's worker is dead: it
fails it at once instead of waiting out the heartbeat's grace period (30 s
by default). A tag from another machine or container (another boot ID or
PID namespace) says nothing, and the heartbeat decides; the start time
guards against a PID reused by a new process.

Linux only (``/proc``); elsewhere no tag is written and the heartbeat decides.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from functools import cache
from pathlib import Path

__all__ = ["die_with_parent", "is_dead", "process_tag"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@cache
def _machine() -> str | None:
    """This boot of this machine and this PID namespace, or ``None`` off Linux."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pid_ns = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    return f"{boot_id}/{pid_ns}"


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot), or ``None`` if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) is in parentheses and may hold spaces.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def process_tag(pid: int | None = None) -> str | None:
    """The tag of process ``pid`` (default: this one), or ``None`` off Linux."""
    machine = _machine()
    pid = os.getpid() if pid is None else pid
    started = _started(pid)
    if machine is None or started is None:
        return None
    return f"{machine}/{pid}/{started}"


def is_dead(tag: object) -> bool:
    """Whether the process ``tag`` names is known to have exited.

    Only a process of this machine's boot and PID namespace can be known
    dead: for any other tag (or something that is not a tag) this is ``False``.
    """
    machine = _machine()
    if machine is None or not isinstance(tag, str):
        return False
    where, _, rest = tag.rpartition("/")
    where, _, pid_text = where.rpartition("/")
    if where != machine or not pid_text.isdigit():
        return False
    return _started(int(pid_text)) != rest


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel send this process SIGTERM when its parent dies.

    A worker of ``--jobs N`` whose parent is killed (SIGKILL runs no
    cleanup) would otherwise run on, orphaned, until its share of the study
    is done. If the parent is already gone, end now.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    except (OSError, AttributeError) as exc:  # not Linux: the parent's finally joins us
        log.debug("cannot follow the parent's death: %s", exc)
        return
    if os.getppid() != parent_pid:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
