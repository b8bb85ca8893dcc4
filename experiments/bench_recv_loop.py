"""What iperf3's UDP receiver spends per datagram in system calls, as
paper-004's ``dataplane.syscall_s`` was measured.

iperf3 (3.0-3.15, single-threaded; seed 004 used it on Ubuntu 16.04) receives
in a ``select()`` loop: each pass calls ``select()`` and then one ``read()``
per readable stream (``iperf_recv`` -> ``sp->rcv`` -> ``Nread``), so a UDP
stream costs its receiver one ``select()`` and one ``read()`` per datagram.

The measurement keeps the receive stack's softirq out of the timed part: a
helper process on another CPU fills the receiver's socket with a batch of
datagrams over loopback (loopback's softirq runs on the sending CPU, so the
skbs are written there, as a NIC queue's softirq CPU writes them), then the
receiver, pinned to its own CPU, drains the batch with ``select()`` +
``read()`` and times it. ``read()`` alone is timed the same way. Datagrams are
64 bytes, the size of seed 004's small-packet row (S4-5).

The measurement is a small C program (compiled with ``cc`` when there is
one). Without a compiler the same loop runs in Python, whose interpreter adds
its own cost per call: an upper figure.

Run: ``python experiments/bench_recv_loop.py [batches] [runs]``. Needs two CPUs
for the cross-CPU figure (with one, both sides share it and it says so).
Traffic stays on loopback.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DATAGRAM_BYTES = 64
BATCH_DATAGRAMS = 200
# Room for a batch: a 64-byte datagram's truesize on loopback is ~1 KiB, and
# the default buffer (rmem_default, often 208 KiB) can fall short of 200. The
# kernel caps the request at rmem_max; a short fill is detected and skipped,
# never timed.
RCVBUF_BYTES = 1 << 20

_C_SOURCE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
static void pin(int cpu) {
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); sched_setaffinity(0, sizeof s, &s);
}
/* Drain up to n datagrams from fd. mode 0: read() alone; 1: select() on fd,
   then read(); 2: iperf3's pass: a clock read, select() on the whole set,
   read(), the arrival clock read. */
static int drain(int fd, int n, int mode, fd_set *set, int maxfd, char *buf, int bytes) {
    int got = 0; struct timespec clk;
    for (; got < n; got++) {
        if (mode > 0) {
            fd_set rs; struct timeval tv = {0, 10000};  /* data is queued: never waits */
            if (mode == 2) { rs = *set; clock_gettime(CLOCK_MONOTONIC, &clk); }
            else { FD_ZERO(&rs); FD_SET(fd, &rs); maxfd = fd; }
            if (select(maxfd + 1, &rs, 0, 0, &tv) < 1 || !FD_ISSET(fd, &rs)) break;
        }
        if (read(fd, buf, bytes) != bytes) break;
        if (mode == 2) clock_gettime(CLOCK_MONOTONIC, &clk);
    }
    return got;
}
int main(int argc, char **argv) {
    int batches = atoi(argv[1]), batch = atoi(argv[2]), bytes = atoi(argv[3]);
    int rx_cpu = atoi(argv[4]), tx_cpu = atoi(argv[5]), rcvbuf = atoi(argv[6]);
    struct sockaddr_in a = {0}; socklen_t len = sizeof a;
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* iperf3's other two descriptors in the set: its TCP listener and control connection. */
    int listener = socket(AF_INET, SOCK_STREAM, 0), ctrl = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(listener, (void *)&a, sizeof a) || listen(listener, 1)) return 1;
    if (getsockname(listener, (void *)&a, &len) || connect(ctrl, (void *)&a, sizeof a)) return 1;
    int ctrl_srv = accept(listener, 0, 0);
    a.sin_port = 0; len = sizeof a;
    int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
    setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    if (bind(rx, (void *)&a, sizeof a) || getsockname(rx, (void *)&a, &len)) return 1;
    if (connect(tx, (void *)&a, sizeof a)) return 1;
    fd_set set; FD_ZERO(&set); FD_SET(listener, &set); FD_SET(ctrl_srv, &set); FD_SET(rx, &set);
    int maxfd = rx > ctrl_srv ? rx : ctrl_srv;
    if (listener > maxfd) maxfd = listener;
    int go[2], done[2]; if (pipe(go) || pipe(done)) return 1;
    static char buf[65536]; char c = 'x';
    pid_t child = fork();
    if (child == 0) {  /* the filler: one batch per token */
        pin(tx_cpu); close(go[1]); close(done[0]);
        while (read(go[0], &c, 1) == 1) {
            for (int i = 0; i < batch; i++) send(tx, buf, bytes, 0);
            if (write(done[1], &c, 1) != 1) _exit(1);
        }
        _exit(0);
    }
    pin(rx_cpu); close(go[0]); close(done[1]);
    double t[3] = {0, 0, 0}; long n[3] = {0, 0, 0}, short_fills = 0;
    for (int b = 0; b < 3 * (batches + 1); b++) {
        int mode = b % 3;
        if (write(go[1], &c, 1) != 1 || read(done[0], &c, 1) != 1) return 1;
        double t0 = now();
        int got = drain(rx, batch, mode, &set, maxfd, buf, bytes);
        double dt = now() - t0;
        if (got < batch) {  /* a short fill: drain the rest untimed, count it */
            short_fills++;
            while (drain(rx, 1, 1, &set, maxfd, buf, bytes) == 1) {}
            continue;
        }
        if (b >= 3) { t[mode] += dt; n[mode] += got; }
    }
    close(go[1]); waitpid(child, 0, 0);
    printf("%.9f %.9f %.9f %ld\n", t[2] / n[2], t[1] / n[1], t[0] / n[0], short_fills);
    return 0;
}
"""


@dataclass(frozen=True)
class RecvLoopCost:
    """Seconds per 64-byte datagram: iperf3's whole pass (clock reads,
    ``select()`` on its three descriptors, ``read()``), ``select()`` on the
    stream alone plus ``read()``, and ``read()`` alone."""

    iperf3_pass_s: float
    select_one_fd_s: float
    read_only_s: float
    short_fills: int


def _c_run(binary: Path, batches: int, rx_cpu: int, tx_cpu: int) -> RecvLoopCost:
    args = [batches, BATCH_DATAGRAMS, DATAGRAM_BYTES, rx_cpu, tx_cpu, RCVBUF_BYTES]
    out = subprocess.run(
        [str(binary), *map(str, args)], check=True, capture_output=True, text=True
    ).stdout.split()
    return RecvLoopCost(
        iperf3_pass_s=float(out[0]),
        select_one_fd_s=float(out[1]),
        read_only_s=float(out[2]),
        short_fills=int(out[3]),
    )


def _py_drain(fd: int, mode: int, watched: list[int]) -> int:
    got = 0
    while got < BATCH_DATAGRAMS:
        if mode == 2:
            time.clock_gettime(time.CLOCK_MONOTONIC)
        if mode and fd not in select.select(watched if mode == 2 else [fd], [], [], 0.01)[0]:
            break
        os.read(fd, DATAGRAM_BYTES)
        if mode == 2:
            time.clock_gettime(time.CLOCK_MONOTONIC)
        got += 1
    return got


def _py_run(batches: int, rx_cpu: int, tx_cpu: int) -> RecvLoopCost:
    """The same passes in Python; the interpreter adds its own cost per call."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        ctrl = stack.enter_context(socket.create_connection(listener.getsockname()))
        ctrl_srv = stack.enter_context(listener.accept()[0])
        rx = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        tx = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        rx.bind(("127.0.0.1", 0))
        tx.connect(rx.getsockname())
        del ctrl  # held open by the stack: iperf3's control connection
        go_r, go_w = os.pipe()
        done_r, done_w = os.pipe()
        payload = bytes(DATAGRAM_BYTES)
        child = os.fork()
        if child == 0:  # the filler: one batch per token
            try:
                os.sched_setaffinity(0, {tx_cpu})
                os.close(go_w)
                os.close(done_r)
                while os.read(go_r, 1):
                    for _ in range(BATCH_DATAGRAMS):
                        tx.send(payload)
                    os.write(done_w, b"x")
            finally:
                os._exit(0)
        os.sched_setaffinity(0, {rx_cpu})
        os.close(go_r)
        os.close(done_w)
        fd = rx.fileno()
        watched = [listener.fileno(), ctrl_srv.fileno(), fd]
        totals, counts, short_fills = [0.0] * 3, [0] * 3, 0
        for batch in range(3 * (batches + 1)):
            mode = batch % 3
            os.write(go_w, b"x")
            os.read(done_r, 1)
            start = time.perf_counter()
            got = _py_drain(fd, mode, watched)
            elapsed = time.perf_counter() - start
            if got < BATCH_DATAGRAMS:
                short_fills += 1
                while _py_drain(fd, 1, watched):
                    pass
                continue
            if batch >= 3:
                totals[mode] += elapsed
                counts[mode] += got
        os.close(go_w)
        os.waitpid(child, 0)
        os.close(done_r)
    per = [t / n for t, n in zip(totals, counts, strict=True)]
    return RecvLoopCost(
        iperf3_pass_s=per[2], select_one_fd_s=per[1], read_only_s=per[0], short_fills=short_fills
    )


def main(batches: int = 2000, runs: int = 5) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    rx_cpu, tx_cpu = cpus[0], cpus[-1]
    saved = os.sched_getaffinity(0)
    compiler = shutil.which("cc") or shutil.which("gcc")
    where = "another CPU" if rx_cpu != tx_cpu else "the same CPU (only one available)"
    sys.stdout.write(
        f"method: {'C (' + compiler + ')' if compiler else 'Python (an upper figure)'}; "
        f"{DATAGRAM_BYTES}-byte datagrams, batches of {BATCH_DATAGRAMS} filled from {where}\n"
    )
    passes: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bst-recv-") as tmp:
        binary = Path(tmp) / "recvloop"
        if compiler:
            (Path(tmp) / "recvloop.c").write_text(_C_SOURCE)
            subprocess.run([compiler, "-O2", "-o", str(binary), str(binary) + ".c"], check=True)
        try:
            for run in range(runs):
                if compiler:
                    cost = _c_run(binary, batches, rx_cpu, tx_cpu)
                else:
                    cost = _py_run(batches, rx_cpu, tx_cpu)
                passes.append(cost.iperf3_pass_s)
                sys.stdout.write(
                    f"run {run}: iperf3 pass {cost.iperf3_pass_s * 1e6:.3f} us; "
                    f"select(1 fd)+read {cost.select_one_fd_s * 1e6:.3f} us; "
                    f"read alone {cost.read_only_s * 1e6:.3f} us "
                    f"({cost.short_fills} short fills skipped)\n"
                )
        finally:
            os.sched_setaffinity(0, saved)
    sys.stdout.write(
        f"iperf3 pass per datagram: median {statistics.median(passes) * 1e6:.3f} us "
        f"(range {min(passes) * 1e6:.3f}-{max(passes) * 1e6:.3f})\n"
    )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
