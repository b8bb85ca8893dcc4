"""What the running machine is, as a trace header and a profile record it.

Read from ``/proc`` and ``/boot`` without root; a fact that cannot be read is
``None``, never a guess. A profile fitted to storms keeps these facts
(:class:`~bootstorm.models.FittedOn`), and a what-if on it compares them with
the machine it runs on: this machine kind measured a host 30% slower from one
day to the next, and a kernel built otherwise (preemption, HZ) hands locks
over differently (docs/research-log.md).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import socket

from .schema import HostFacts

__all__ = ["cpu_model", "current_host", "kernel_config_summary"]

#: The build options that change how the model's locks behave: who runs
#: when a lock is handed over (preemption) and the scheduler tick.
_CONFIG_KEYS = (
    "CONFIG_PREEMPT_NONE",
    "CONFIG_PREEMPT_VOLUNTARY",
    "CONFIG_PREEMPT",
    "CONFIG_PREEMPT_RT",
    "CONFIG_PREEMPT_DYNAMIC",
    "CONFIG_HZ",
)


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``), or None where it has none."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name":
                return value.strip() or None
    return None


def kernel_config_summary(release: str | None = None) -> str | None:
    """The running kernel's preemption model and tick, as ``PREEMPT_NONE
    HZ=250`` (from ``/boot/config-<release>`` or ``/proc/config.gz``), or
    None where neither is readable."""
    release = release or os.uname().release
    text = None
    boot_config = f"/boot/config-{release}"
    with contextlib.suppress(OSError), open(boot_config, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    if text is None:
        with (
            contextlib.suppress(OSError, EOFError, gzip.BadGzipFile),
            gzip.open("/proc/config.gz", "rt", encoding="utf-8", errors="replace") as gz,
        ):
            text = gz.read()
    if text is None:
        return None
    return summarise_kernel_config(text)


def summarise_kernel_config(text: str) -> str | None:
    """The preemption options set and ``HZ`` of a kernel's ``.config`` text."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in _CONFIG_KEYS:
            found[key] = value.strip()
    parts = [k.removeprefix("CONFIG_") for k in _CONFIG_KEYS[:-1] if found.get(k) == "y"]
    if "CONFIG_HZ" in found:
        parts.append(f"HZ={found['CONFIG_HZ']}")
    return " ".join(parts) or None


def current_host() -> HostFacts:
    """This machine: kernel release and build, CPUs and their model, memory, name."""
    mem_kib = 0
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    release = os.uname().release
    return HostFacts(
        kernel=release,
        cores=os.cpu_count() or 1,
        memory_mib=max(1, mem_kib // 1024),
        hostname=socket.gethostname(),
        cpu_model=cpu_model(),
        kernel_config=kernel_config_summary(release),
    )
