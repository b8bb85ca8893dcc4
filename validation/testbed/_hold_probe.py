"""The two processes of the hold-stretch measurement (:mod:`.hold_stretch`).

Run as a script (standard library only: it starts in a fraction of the
time the package's imports take), each pinned to one CPU, in the network
namespace whose ``/run/netns`` path it is given:

- ``holder N PREFIX``: makes ``N`` veth pairs one after the other, each one
  ``RTM_NEWLINK`` request that holds RTNL for the whole creation (register
  both devices, their sysfs and uevents), and prints its requests' wall and
  CPU time; it removes them after, untimed.
- ``witness PREFIX LONG_S``: makes one veth pair, prints ``ready``, then
  sets its link up and down as fast as it can (each a short RTNL request,
  ~10-15 µs here) until its stdin is closed, and prints how many of its
  requests waited longer than ``LONG_S`` and their summed wall: from
  another CPU, the holder's holds as RTNL's queue sees them.

Both print one JSON line. An error is one line on stderr and exit 1.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import socket
import struct
import sys
import time

_CLONE_NEWNET = 0x40000000
_RTM_NEWLINK, _RTM_DELLINK = 16, 17
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_EXCL, _NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
_NLMSG_ERROR = 2
_IFLA_IFNAME, _IFLA_LINKINFO, _IFLA_GROUP = 3, 18, 27
#: The group of the holder's pairs: one request deletes them all (one batch
#: of unregisters, one grace period) where one each took ~17 ms.
HOLDER_GROUP = 7
_IFLA_INFO_KIND, _IFLA_INFO_DATA = 1, 2
_VETH_INFO_PEER = 1
_IFF_UP = 0x1
_IFINFOMSG = struct.Struct("BxHiII")  # family, type, index, flags, change


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("HH", length, kind) + payload + b"\0" * (-length % 4)


def _name(name: str) -> bytes:
    return _attr(_IFLA_IFNAME, name.encode() + b"\0")


def _message(kind: int, flags: int, body: bytes, seq: int) -> bytes:
    return struct.pack("IHHII", 16 + len(body), kind, flags, seq, 0) + body


def veth_request(host: str, peer: str, seq: int, group: int = 0) -> bytes:
    """``ip link add HOST [group GROUP] type veth peer name PEER`` as one
    netlink message."""
    peer_info = _IFINFOMSG.pack(0, 0, 0, 0, 0) + _name(peer)
    linkinfo = _attr(_IFLA_INFO_KIND, b"veth\0") + _attr(
        _IFLA_INFO_DATA, _attr(_VETH_INFO_PEER, peer_info)
    )
    body = _IFINFOMSG.pack(0, 0, 0, 0, 0) + _name(host) + _attr(_IFLA_LINKINFO, linkinfo)
    if group:
        body += _attr(_IFLA_GROUP, struct.pack("I", group))
    flags = _NLM_F_REQUEST | _NLM_F_ACK | _NLM_F_CREATE | _NLM_F_EXCL
    return _message(_RTM_NEWLINK, flags, body, seq)


def updown_request(name: str, up: bool, seq: int) -> bytes:
    """``ip link set NAME up|down``."""
    body = _IFINFOMSG.pack(0, 0, 0, _IFF_UP if up else 0, _IFF_UP) + _name(name)
    return _message(_RTM_NEWLINK, _NLM_F_REQUEST | _NLM_F_ACK, body, seq)


def delete_request(name: str, seq: int) -> bytes:
    """``ip link del NAME``."""
    body = _IFINFOMSG.pack(0, 0, 0, 0, 0) + _name(name)
    return _message(_RTM_DELLINK, _NLM_F_REQUEST | _NLM_F_ACK, body, seq)


def delete_group_request(group: int, seq: int) -> bytes:
    """``ip link del group GROUP``: every link of the group, one batch."""
    body = _IFINFOMSG.pack(0, 0, 0, 0, 0) + _attr(_IFLA_GROUP, struct.pack("I", group))
    return _message(_RTM_DELLINK, _NLM_F_REQUEST | _NLM_F_ACK, body, seq)


def _ack(sock: socket.socket, what: str) -> None:
    reply = sock.recv(65536)
    if len(reply) >= 20 and struct.unpack_from("H", reply, 4)[0] == _NLMSG_ERROR:
        error = struct.unpack_from("i", reply, 16)[0]
        if error:
            raise OSError(-error, f"{what}: {os.strerror(-error)}")
        return
    raise OSError(0, f"{what}: no acknowledgement")


def _enter(netns_path: str, cpu: int) -> socket.socket:
    os.sched_setaffinity(0, {cpu})
    fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns_path}")
    finally:
        os.close(fd)
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE


def holder(sock: socket.socket, count: int, prefix: str) -> dict[str, float]:
    wall_s = cpu_s = 0.0
    first = last = time.perf_counter()
    try:
        for i in range(count):
            request = veth_request(f"{prefix}a{i}", f"{prefix}b{i}", i, HOLDER_GROUP)
            w0, c0 = time.perf_counter(), time.thread_time()
            # rtnetlink runs the request inside sendmsg, under RTNL.
            sock.send(request)
            w1, c1 = time.perf_counter(), time.thread_time()
            _ack(sock, f"veth {prefix}a{i}")
            wall_s += w1 - w0
            cpu_s += c1 - c0
            first = w0 if i == 0 else first
            last = w1
    finally:
        sock.send(delete_group_request(HOLDER_GROUP, count))
        _ack(sock, f"delete group {HOLDER_GROUP}")
    return {"requests": count, "wall_s": wall_s, "cpu_s": cpu_s, "first": first, "last": last}


def witness(sock: socket.socket, prefix: str, long_s: float) -> dict[str, object]:
    link = f"{prefix}w0"
    sock.send(veth_request(link, f"{prefix}w1", 0))
    _ack(sock, f"veth {link}")
    try:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        requests = 0
        waits: list[tuple[float, float]] = []
        poll = select.poll()
        poll.register(sys.stdin.fileno(), select.POLLIN | select.POLLHUP)
        while not poll.poll(0):
            request = updown_request(link, requests % 2 == 0, requests)
            t0 = time.perf_counter()
            sock.send(request)
            elapsed = time.perf_counter() - t0
            _ack(sock, f"up/down {link}")
            requests += 1
            if elapsed > long_s:
                waits.append((t0, elapsed))
    finally:
        sock.send(delete_request(link, 1))
        _ack(sock, f"delete {link}")
    return {"requests": requests, "waits": waits}


def main(argv: list[str]) -> int:
    result: dict[str, object]
    try:
        role, netns_path, cpu = argv[0], argv[1], int(argv[2])
        if role not in ("holder", "witness"):  # before this process is pinned anywhere
            raise ValueError(f"role: expected holder or witness, but got {role!r}")
        sock = _enter(netns_path, cpu)
        if role == "holder":
            result = dict(holder(sock, int(argv[3]), argv[4]))
        else:
            result = witness(sock, argv[3], float(argv[4]))
    except (OSError, ValueError, IndexError) as exc:
        sys.stderr.write(f"hold probe: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
