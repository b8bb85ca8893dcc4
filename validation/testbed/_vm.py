"""StartVM: a QEMU microVM on the sandbox's tap, or a documented fallback.

The guest is ``pvh_stub.s`` (committed beside this module), assembled and
linked at run time: QEMU enters it through PVH, it prints :data:`MARKER` on
COM1 and exits QEMU through isa-debug-exit. StartVM ends when the marker has
been read, so it covers what Kata's StartVM pays for — the VMM process,
KVM VM and vCPU creation, guest memory (all of it zeroed up front with
``-mem-prealloc``), the tap NIC — plus a guest that really ran.

QEMU gets the tap as an open file descriptor (``-netdev tap,fd=N``), the
way Kata hands taps to its VMM, so QEMU itself runs in the host namespace.

Without qemu or /dev/kvm, StartVM spawns a short process into the sandbox's
network namespace (``nsenter --net``) that prints the marker; the trace
header says which one ran.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MARKER", "VmError", "VmRunner", "build_stub", "stop", "vm_available"]

log = logging.getLogger(__name__)

MARKER = "BOOTSTORM-GUEST-UP"
STUB_SOURCE = Path(__file__).with_name("pvh_stub.s")
QEMU = "qemu-system-x86_64"
#: Time a guest gets to print its marker; a microVM here takes ~0.1-0.2 s alone.
BOOT_TIMEOUT_S = 60.0


class VmError(RuntimeError):
    """The VM (or the fallback process) did not come up."""


def vm_available() -> tuple[bool, str]:
    """Whether QEMU under KVM can run, and why not if it cannot."""
    if shutil.which(QEMU) is None:
        return False, f"{QEMU} not found"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm not available"
    if shutil.which("as") is None or shutil.which("ld") is None:
        return False, "binutils (as, ld) not found to build the guest stub"
    return True, ""


def build_stub(workdir: Path) -> Path:
    """Assemble and link the PVH guest into ``workdir``; the ELF's path."""
    obj = workdir / "pvh_stub.o"
    elf = workdir / "pvh_stub.elf"
    subprocess.run(["as", "--32", str(STUB_SOURCE), "-o", str(obj)], check=True)
    # The note goes right after the code, inside the guest's low memory.
    subprocess.run(
        [
            "ld",
            "-m",
            "elf_i386",
            "-Ttext=0x100000",
            "--section-start=.note.Xen=0x100800",
            "-o",
            str(elf),
            str(obj),
        ],
        check=True,
    )
    return elf


@dataclass(frozen=True, kw_only=True)
class VmRunner:
    """How StartVM runs: ``qemu-microvm`` with ``stub``, or the ``process`` fallback."""

    mode: str
    stub: Path | None = None
    memory_mib: int = 64
    mem_prealloc: bool = False

    def qemu_argv(self, name: str, tap_fd: int | str) -> list[str]:
        """QEMU's command line; ``tap_fd`` may be a placeholder (the ``cni``
        runtime's shim fills in the fd it opened)."""
        assert self.stub is not None
        argv = [
            QEMU,
            "-name",
            name,
            "-M",
            "microvm",
            "-accel",
            "kvm",
            # The nested PVM /dev/kvm refuses a vCPU that claims arch-capabilities.
            "-cpu",
            "host,-arch-capabilities",
            "-m",
            str(self.memory_mib),
            "-nodefaults",
            "-no-user-config",
            "-nographic",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x04",
            "-netdev",
            f"tap,id=n0,fd={tap_fd},vhost=off",
            "-device",
            "virtio-net-device,netdev=n0",
            "-kernel",
            str(self.stub),
        ]
        if self.mem_prealloc:
            argv += ["-mem-prealloc"]
        return argv

    def argv(self, *, name: str, netns: str, tap_fd: int | str | None) -> list[str]:
        """The VM's (or the fallback's) command line for sandbox ``name``."""
        if self.mode == "qemu-microvm":
            if tap_fd is None:
                raise VmError(f"{name}: no tap to give the VM")
            return self.qemu_argv(name, tap_fd)
        return ["nsenter", f"--net=/run/netns/{netns}", "--", "echo", MARKER]

    def start(self, *, name: str, netns: str, tap_fd: int | None) -> subprocess.Popen[bytes]:
        """Spawn the VM (or the fallback) for sandbox ``name``."""
        argv = self.argv(name=name, netns=netns, tap_fd=tap_fd)
        qemu = self.mode == "qemu-microvm" and tap_fd is not None
        fds: tuple[int, ...] = (tap_fd,) if qemu and tap_fd is not None else ()
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=fds,
            close_fds=True,
        )

    def wait_up(self, proc: subprocess.Popen[bytes], *, name: str) -> None:
        """Block until the marker is printed and the process ended; VmError if not."""
        assert proc.stdout is not None
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        seen = b""
        try:
            while MARKER.encode() not in seen:
                if time.monotonic() > deadline:
                    raise VmError(f"{name}: no {MARKER} within {BOOT_TIMEOUT_S:.0f} s")
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                seen = (seen + chunk)[-4096:]
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            stop(proc)
            raise
        finally:
            proc.stdout.close()
        if MARKER.encode() not in seen:
            tail = seen.decode(errors="replace").strip()[-300:]
            raise VmError(f"{name}: exited {proc.returncode} without {MARKER}: {tail!r}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a process this testbed started, then kill it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
