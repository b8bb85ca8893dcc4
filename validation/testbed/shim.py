"""One sandbox's shim for the testbed's ``cni`` runtime: Kata's containerd-shim-kata-v2 part.

Run as ``python -I -S shim.py <sandbox name>`` (stdlib only, no bootstorm:
its start costs a bare interpreter), one per sandbox. Its job comes as one
JSON line on stdin (``netns``, ``inner_if``, ``tap``, ``tc``, ``cgroup``,
``vm_mode``, ``vm_argv``, ``marker``, ``boot_timeout_s``, ``wait_go``). It

1. enters the sandbox's network namespace (``setns``: Python 3.11 has no
   ``os.setns``, so through libc);
2. makes the VMM's tap there (``TUNSETIFF``) and brings it up;
3. runs the real ``tc`` four times: an ``ingress`` qdisc on the CNI's
   interface and on the tap, and u32 match-all filters with ``mirred``
   egress redirects both ways (Kata's tcfilter mode);
4. reports ``attach_done``; with ``wait_go`` it waits for a ``go`` line
   (the driver holds the StartVM admission gate for it);
5. moves itself into the sandbox's cgroup (its VMM is born there);
6. starts the VMM with the tap's fd as its NIC (the driver's QEMU command
   line, ``{tap_fd}`` filled in) or the fallback process, and waits for the
   guest's marker and the VMM's exit, as :mod:`._vm` does;
7. reports ``vm_up`` and stays, holding the tap, until stdin closes or
   SIGTERM; then it stops the VMM if it still runs, and exits.

Each event is one JSON line on stdout stamped with ``time.monotonic()``
(CLOCK_MONOTONIC: system-wide, so the driver's and the kernel's clock):
``{"event": "exec", "program", "command", "pid", "rc", "start", "end"}``
for each process it ran, ``{"event": "attach_done", "t"}``,
``{"event": "vm_up", "t", "vmm_pid"}``, ``{"event": "error", "msg"}``.
"""

from __future__ import annotations

import _socket
import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import struct
import sys
import time
from typing import Any

_CLONE_NEWNET = 0x40000000
# include/uapi/linux/if_tun.h and sockios.h (as in _tap.py, which the shim cannot import)
_TUNSETIFF = 0x400454CA
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000
_IFF_VNET_HDR = 0x4000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ_SIZE = 40
_STOP_WAIT_S = 2.0


class ShimError(RuntimeError):
    """A step of the shim failed; its message goes to the driver."""


class _Stop(BaseException):
    """SIGTERM, or stdin closed: stop the VMM and leave."""


def _emit(event: str, **fields: Any) -> None:
    try:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        raise _Stop() from None  # the driver is gone


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise _Stop()


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise ShimError(f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _make_tap(name: str) -> int:
    """A tap ``name`` in this namespace, up; the fd that holds it."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        ifr = struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI | _IFF_VNET_HDR)
        fcntl.ioctl(fd, _TUNSETIFF, ifr)
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
        try:
            req = struct.pack("16sh", name.encode(), 0).ljust(_IFREQ_SIZE, b"\0")
            got = fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, req)
            flags = struct.unpack_from("16sh", got)[1]
            up = struct.pack("16sh", name.encode(), flags | _IFF_UP).ljust(_IFREQ_SIZE, b"\0")
            fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, up)
        finally:
            sock.close()
    except BaseException:
        os.close(fd)
        raise
    return fd


def _spawn(argv: list[str], out_fd: int) -> int:
    """Start ``argv`` (searched on PATH) with stdout and stderr on ``out_fd``."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out_fd, 1),
        (os.POSIX_SPAWN_DUP2, out_fd, 2),
    ]
    return os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)


def _rc(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


def _run(argv: list[str], command: str) -> None:
    """Run ``argv`` to its end, report it; :class:`ShimError` with its output if it failed."""
    r, w = os.pipe()
    start = time.monotonic()
    try:
        pid = _spawn(argv, w)
    finally:
        os.close(w)
    out = b""
    with os.fdopen(r, "rb") as fh:
        out = fh.read()
    _, status = os.waitpid(pid, 0)
    end = time.monotonic()
    rc = _rc(status)
    _emit(
        "exec",
        program=os.path.basename(argv[0]),
        command=command,
        pid=pid,
        rc=rc,
        start=start,
        end=end,
    )
    if rc != 0:
        text = out.decode(errors="replace").strip().replace("\n", " ")[-300:]
        raise ShimError(f"{' '.join(argv[1:])}: exit {rc}: {text}")


def _tc_filters(tc: str, inner: str, tap: str) -> None:
    """Kata's tcfilter mode: everything in on one side leaves by the other."""
    for dev, to in ((inner, tap), (tap, inner)):
        _run([tc, "qdisc", "add", "dev", dev, "ingress"], "tc")
        _run(
            [
                tc,
                "filter",
                "add",
                "dev",
                dev,
                "parent",
                "ffff:",
                "protocol",
                "all",
                "prio",
                "49152",
                "u32",
                "match",
                "u32",
                "0",
                "0",
                "action",
                "mirred",
                "egress",
                "redirect",
                "dev",
                to,
            ],
            "tc",
        )


class _Vmm:
    """The VMM (or the fallback process) and the end of its output."""

    def __init__(self, argv: list[str], tap_fd: int | None) -> None:
        if tap_fd is not None:
            os.set_inheritable(tap_fd, True)  # the VMM's NIC; every other fd is CLOEXEC
        r, w = os.pipe()
        self.program = os.path.basename(argv[0])
        self.start_s = time.monotonic()
        try:
            self.pid = _spawn(argv, w)
        finally:
            os.close(w)
            if tap_fd is not None:
                os.set_inheritable(tap_fd, False)
        self.out = r
        self.pidfd = os.pidfd_open(self.pid)
        self.rc: int | None = None

    def wait_up(self, marker: bytes, timeout_s: float) -> None:
        """Until the marker is printed and the process ended (as ``_vm.VmRunner.wait_up``)."""
        deadline = time.monotonic() + timeout_s
        seen = b""
        while marker not in seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ShimError(f"no {marker.decode()} within {timeout_s:.0f} s")
            ready, _, _ = select.select([self.out], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.out, 4096)
            if not chunk:
                break
            seen = (seen + chunk)[-4096:]
        left = max(1.0, deadline - time.monotonic())
        ready, _, _ = select.select([self.pidfd], [], [], left)
        if not ready:
            raise ShimError(f"{self.program} printed the marker but did not exit in {left:.0f} s")
        self.reap()
        if marker not in seen:
            tail = seen.decode(errors="replace").strip()[-300:]
            raise ShimError(f"{self.program} exited {self.rc} without {marker.decode()}: {tail!r}")

    def reap(self) -> None:
        if self.rc is not None:
            return
        _, status = os.waitpid(self.pid, 0)
        self.rc = _rc(status)
        _emit(
            "exec",
            program=self.program,
            command="vmm",
            pid=self.pid,
            rc=self.rc,
            start=self.start_s,
            end=time.monotonic(),
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers; reaped either way."""
        if self.rc is None:
            if not select.select([self.pidfd], [], [], 0)[0]:
                os.kill(self.pid, signal.SIGTERM)
                if not select.select([self.pidfd], [], [], _STOP_WAIT_S)[0]:
                    os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(_Stop):
                self.reap()
        for fd in (self.out, self.pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _readline() -> bytes:
    return sys.stdin.buffer.readline()


def _hold() -> None:
    """Until the driver closes stdin."""
    while sys.stdin.buffer.read(4096):
        pass


def serve(job: dict[str, Any]) -> None:
    tap_fd: int | None = None
    vmm: _Vmm | None = None
    try:
        _setns(str(job["netns"]))
        tap = str(job["tap"])
        tap_fd = _make_tap(tap)
        _tc_filters(str(job["tc"]), str(job["inner_if"]), tap)
        _emit("attach_done", t=time.monotonic())
        if job.get("wait_go") and _readline().strip() != b"go":
            return  # stdin closed: the storm was stopped before StartVM
        cgroup = job.get("cgroup")
        if cgroup:
            with open(os.path.join(str(cgroup), "cgroup.procs"), "w") as fh:
                fh.write(f"{os.getpid()}\n")  # the VMM is born in the sandbox's cgroup
        qemu = job["vm_mode"] == "qemu-microvm"
        argv = [str(a).replace("{tap_fd}", str(tap_fd)) for a in job["vm_argv"]]
        vmm = _Vmm(argv, tap_fd if qemu else None)
        vmm.wait_up(str(job["marker"]).encode(), float(job["boot_timeout_s"]))
        _emit("vm_up", t=time.monotonic(), vmm_pid=vmm.pid)
        _hold()
    finally:
        if vmm is not None:
            vmm.stop()
        if tap_fd is not None:
            os.close(tap_fd)


def main() -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when this sandbox stops
    try:
        line = _readline()
        if not line:
            return 0
        job = json.loads(line)
        if not isinstance(job, dict):
            raise ShimError(f"job: expected a JSON object, but got {line[:80]!r}")
        serve(job)
    except _Stop:
        return 0
    except Exception as exc:
        with contextlib.suppress(_Stop):
            _emit("error", msg=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
