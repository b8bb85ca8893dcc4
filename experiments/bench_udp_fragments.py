"""How the receive stack's softirq cost of a UDP datagram splits between a
part paid per IP fragment and a part paid once per datagram (socket lookup,
enqueue, the reader's wake-up, reassembly completion) — the ratio
``d / a`` of ``cost(datagram) = a * fragments + d``, which no paper gives.

Method. Two network namespaces (``bst-udp-tx``, ``bst-udp-rx``) joined by a
veth pair (``bstu0`` / ``bstu1``, MTU 1500). RPS on ``bstu1`` steers every
received packet to CPU 1's backlog, so CPU 1 runs the whole receive stack
(``process_backlog`` → ``ip_rcv`` → ``ip_defrag`` → ``udp_rcv`` → socket
enqueue and wake-up) in softirq context and nothing else of the traffic: the
paced sender and the reader both run on CPU 0, as the model's receiver runs
on a CPU other than its softirq's. On CPU 1 a ``SCHED_IDLE`` spinner counts
loop iterations; whatever the softirqs take, it loses. The receive cost of
an interval is ``1 - rate / rate_idle`` core-seconds per second, where
``rate_idle`` is the spinner's rate in the idle intervals on either side
(the machine is noisy: every traffic interval has its own baselines), and
the cost per datagram divides that by the datagrams that reached UDP (the
``rx`` namespace's ``Udp InDatagrams + RcvbufErrors``). (The tick-sampled
``softirq`` column of ``/proc/stat`` is no help here: 250 Hz samples alias
with the paced bursts.)

The reader either sleeps in ``recv`` (``--reader sleep``: each delivery
that finds it asleep pays a remote wake-up in the softirq) or polls without
sleeping (``--reader busy``: no wake-up, the socket's own work only). The
model charges a receiver's wake-ups per NAPI poll, not per datagram, so the
per-datagram part it takes is the ``busy`` one; ``sleep`` bounds what the
wake-ups add.

Datagram sizes: UDP payloads that fill 1, 2, 4 and 6 fragments at MTU 1500
(1472, 2952, 5912 bytes; 8192, iperf3's default, as seed 004's S4-2), all at
the same datagram rate and burst, so the reader's behaviour is alike; and 64
bytes, S4-5's size, as a check on the per-byte part (reported, not fitted).
Each run fits ``a`` and ``d`` by least squares over the four full sizes;
runs repeat with the sizes in a rotated order.

Diagnostics per size: fragments per datagram seen by IP (``InReceives``),
IPIs per datagram on CPU 1 (``CAL`` in ``/proc/interrupts``: RPS kicks the
remote backlog with one when it finds it idle), NET_RX softirqs per datagram,
the reader's sleeps per datagram (its voluntary context switches).

Needs root, ``ip``, and ``cc``. Creates only its two namespaces (their veth
pair goes with them) and a temporary directory; removes them and ends the
processes it started, by PID, even on failure.

Run: ``python experiments/bench_udp_fragments.py [--runs 6] [--seconds 4]
[--rate 40000] [--burst 16] [--reader busy|sleep]``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

NS_TX = "bst-udp-tx"
NS_RX = "bst-udp-rx"
DEV_TX = "bstu0"
DEV_RX = "bstu1"
ADDR_TX = "10.199.77.1"
ADDR_RX = "10.199.77.2"
PORT = 5201
#: The CPU that runs the receive softirqs (and the spinner); the rest runs on the other.
SOFTIRQ_CPU = 1
APP_CPU = 0
#: UDP payloads: 1 fragment small (S4-5), then full 1, 2, 4 fragments and iperf3's 8 KiB (6).
SIZES_BYTES = (64, 1472, 2952, 5912, 8192)
FITTED_SIZES_BYTES = (1472, 2952, 5912, 8192)

_C_SOURCE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

static void pin(int cpu) {
    cpu_set_t set; CPU_ZERO(&set); CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) { perror("affinity"); exit(1); }
}

/* spin CPU COUNTER_FILE: count loop iterations at SCHED_IDLE */
static int spin(int cpu, const char *path) {
    pin(cpu);
    struct sched_param p = {0};
    if (sched_setscheduler(0, SCHED_IDLE, &p)) { perror("SCHED_IDLE"); return 1; }
    int fd = open(path, O_RDWR);
    if (fd < 0) { perror("open"); return 1; }
    volatile uint64_t *counter = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (counter == MAP_FAILED) { perror("mmap"); return 1; }
    for (;;) {
        for (int i = 0; i < 1000; i++) __asm__ volatile("");
        *counter += 1;
    }
}

/* recv CPU PORT BUSY: read datagrams forever; BUSY: poll, never sleep */
static int recv_loop(int cpu, int port, int busy) {
    pin(cpu);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    int buf = 8 << 20;
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (bind(s, (struct sockaddr *)&a, sizeof a)) { perror("bind"); return 1; }
    static char data[65536];
    for (;;)
        if (recv(s, data, sizeof data, busy ? MSG_DONTWAIT : 0) < 0 && errno != EAGAIN) {
            perror("recv"); return 1;
        }
}

/* send CPU ADDR PORT SIZE RATE BURST: paced datagrams forever */
static int send_loop(int cpu, const char *addr, int port, int size, double rate, int burst) {
    pin(cpu);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    int pmtu = IP_PMTUDISC_DONT; /* fragment locally, as iperf3's 8 KB datagrams are */
    setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, addr, &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 1; }
    static char data[65536];
    memset(data, 'x', sizeof data);
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    long step = (long)(1e9 * burst / rate);
    for (;;) {
        for (int i = 0; i < burst; i++) send(s, data, size, 0);
        t.tv_nsec += step;
        while (t.tv_nsec >= 1000000000L) { t.tv_nsec -= 1000000000L; t.tv_sec++; }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, 0);
    }
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "spin")) return spin(atoi(argv[2]), argv[3]);
    if (argc >= 5 && !strcmp(argv[1], "recv"))
        return recv_loop(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    if (argc >= 8 && !strcmp(argv[1], "send"))
        return send_loop(atoi(argv[2]), argv[3], atoi(argv[4]), atoi(argv[5]),
                         atof(argv[6]), atoi(argv[7]));
    fprintf(stderr, "usage: spin|recv|send ...\n");
    return 2;
}
"""


@dataclass(frozen=True, slots=True)
class Counters:
    """A snapshot of everything an interval is measured by."""

    wall_s: float
    spins: int
    sleeps: int
    ipis: int
    net_rx: int
    ip_in: int
    udp_datagrams: int


@dataclass(frozen=True, slots=True)
class Interval:
    """One traffic interval against the idle intervals either side."""

    size_bytes: int
    datagrams: int
    cost_s_per_datagram: float
    sleeps_per_datagram: float
    fragments_per_datagram: float
    ipis_per_datagram: float
    net_rx_per_datagram: float
    load: float


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


def _ns_exists(name: str) -> bool:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return any(line.split()[:1] == [name] for line in out.splitlines())


def _setup() -> None:
    for ns in (NS_TX, NS_RX):
        _ip("netns", "add", ns)
    _ip("link", "add", DEV_TX, "netns", NS_TX, "type", "veth", "peer", DEV_RX, "netns", NS_RX)
    for ns, dev, addr in ((NS_TX, DEV_TX, ADDR_TX), (NS_RX, DEV_RX, ADDR_RX)):
        _ip("-n", ns, "link", "set", dev, "mtu", "1500", "up")
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
        _ip("-n", ns, "link", "set", "lo", "up")
    # RPS: the receive stack runs on SOFTIRQ_CPU's backlog, not the sender's CPU.
    mask = format(1 << SOFTIRQ_CPU, "x")
    subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            NS_RX,
            "sh",
            "-c",
            f"echo {mask} > /sys/class/net/{DEV_RX}/queues/rx-0/rps_cpus",
        ],
        check=True,
    )


def _teardown() -> None:
    for ns in (NS_TX, NS_RX):
        if _ns_exists(ns):
            subprocess.run(["ip", "netns", "delete", ns], check=False)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def _cpu_row(path: str, label: str) -> list[str]:
    with open(path) as f:
        row = next(line for line in f if line.split()[:1] == [label])
    return row.split()


def _snmp(pid: int) -> tuple[int, int]:
    """(IP packets received, datagrams that reached UDP) in ``pid``'s namespace."""
    with open(f"/proc/{pid}/net/snmp") as f:
        lines = f.read().splitlines()
    table: dict[str, dict[str, int]] = {}
    for head, vals in zip(lines[::2], lines[1::2], strict=False):
        proto = head.split(":")[0]
        keys, values = head.split()[1:], vals.split()[1:]
        table[proto] = {k: int(v) for k, v in zip(keys, values, strict=True)}
    udp = table["Udp"]
    return table["Ip"]["InReceives"], udp["InDatagrams"] + udp["RcvbufErrors"]


def _sleeps(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        row = next(line for line in f if line.startswith("voluntary_ctxt_switches:"))
    return int(row.split()[1])


def _snapshot(counter: mmap.mmap, reader_pid: int) -> Counters:
    ip_in, udp = _snmp(reader_pid)
    return Counters(
        wall_s=time.monotonic(),
        spins=int.from_bytes(counter[:8], "little"),
        sleeps=_sleeps(reader_pid),
        ipis=int(_cpu_row("/proc/interrupts", "CAL:")[1 + SOFTIRQ_CPU]),
        net_rx=int(_cpu_row("/proc/softirqs", "NET_RX:")[1 + SOFTIRQ_CPU]),
        ip_in=ip_in,
        udp_datagrams=udp,
    )


def _spin_rate(a: Counters, b: Counters) -> float:
    return (b.spins - a.spins) / (b.wall_s - a.wall_s)


def _idle(counter: mmap.mmap, reader_pid: int, seconds: float) -> float:
    a = _snapshot(counter, reader_pid)
    time.sleep(seconds)
    return _spin_rate(a, _snapshot(counter, reader_pid))


def _traffic(
    binary: Path,
    counter: mmap.mmap,
    reader_pid: int,
    size: int,
    seconds: float,
    rate: float,
    burst: int,
) -> tuple[Counters, Counters]:
    sender = subprocess.Popen(
        ["ip", "netns", "exec", NS_TX, str(binary), "send", str(APP_CPU), ADDR_RX]
        + [str(PORT), str(size), str(rate), str(burst)]
    )
    try:
        time.sleep(0.5)  # settle: reassembly queues, caches
        a = _snapshot(counter, reader_pid)
        time.sleep(seconds)
        b = _snapshot(counter, reader_pid)
        if sender.poll() is not None:
            raise RuntimeError(f"the sender exited with {sender.returncode}")
    finally:
        _stop(sender)
    time.sleep(0.3)  # let the backlog and the reader drain
    return a, b


def _fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of ``cost = a * fragments + d``."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    a = sum((x - mx) * (y - my) for x, y in points) / sxx
    return a, my - a * mx


def _run(
    binary: Path,
    counter: mmap.mmap,
    reader_pid: int,
    order: Sequence[int],
    seconds: float,
    rate: float,
    burst: int,
) -> dict[int, Interval]:
    out: dict[int, Interval] = {}
    before = _idle(counter, reader_pid, seconds)
    for size in order:
        a, b = _traffic(binary, counter, reader_pid, size, seconds, rate, burst)
        after = _idle(counter, reader_pid, seconds)
        idle_rate = 0.5 * (before + after)
        wall = b.wall_s - a.wall_s
        load = 1.0 - _spin_rate(a, b) / idle_rate
        datagrams = b.udp_datagrams - a.udp_datagrams
        if datagrams <= 0:
            raise RuntimeError(f"no datagram of {size} bytes reached UDP")
        out[size] = Interval(
            size_bytes=size,
            datagrams=datagrams,
            cost_s_per_datagram=load * wall / datagrams,
            sleeps_per_datagram=(b.sleeps - a.sleeps) / datagrams,
            fragments_per_datagram=(b.ip_in - a.ip_in) / datagrams,
            ipis_per_datagram=(b.ipis - a.ipis) / datagrams,
            net_rx_per_datagram=(b.net_rx - a.net_rx) / datagrams,
            load=load,
        )
        before = after
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0, help="per interval")
    parser.add_argument("--rate", type=float, default=40_000.0, help="datagrams per second")
    parser.add_argument("--burst", type=int, default=16, help="datagrams per paced send burst")
    parser.add_argument(
        "--reader", choices=("busy", "sleep"), default="busy", help="poll or sleep in recv"
    )
    args = parser.parse_args(argv)
    if os.cpu_count() is None or (os.cpu_count() or 0) < 2:
        sys.exit("needs two CPUs")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("needs a C compiler (cc)")
    saved = os.sched_getaffinity(0)
    spinner: subprocess.Popen[bytes] | None = None
    reader: subprocess.Popen[bytes] | None = None
    ratios: list[float] = []
    small: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bst-udp-") as tmp:
        binary = Path(tmp) / "udpbench"
        (Path(tmp) / "udpbench.c").write_text(_C_SOURCE)
        subprocess.run([compiler, "-O2", "-o", str(binary), f"{binary}.c"], check=True)
        counter_path = Path(tmp) / "counter"
        counter_path.write_bytes(bytes(4096))
        try:
            os.sched_setaffinity(0, {APP_CPU})  # this script stays off the softirq CPU
            _teardown()  # a previous run killed before its finally
            _setup()
            spinner = subprocess.Popen([str(binary), "spin", str(SOFTIRQ_CPU), str(counter_path)])
            reader = subprocess.Popen(
                ["ip", "netns", "exec", NS_RX, str(binary), "recv", str(APP_CPU), str(PORT)]
                + [str(int(args.reader == "busy"))]
            )
            time.sleep(1.0)
            with open(counter_path, "r+b") as f, mmap.mmap(f.fileno(), 4096) as counter:
                sys.stdout.write(
                    f"rate {args.rate:.0f} datagrams/s in bursts of {args.burst}, "
                    f"{args.seconds:.1f} s intervals; receive softirqs on CPU {SOFTIRQ_CPU}, "
                    f"{args.reader} reader on CPU {APP_CPU}\n"
                )
                for run in range(args.runs):
                    k = run % len(SIZES_BYTES)
                    order = SIZES_BYTES[k:] + SIZES_BYTES[:k]
                    res = _run(
                        binary, counter, reader.pid, order, args.seconds, args.rate, args.burst
                    )
                    for size in SIZES_BYTES:
                        r = res[size]
                        sys.stdout.write(
                            f"run {run} {size:5d} B: {r.cost_s_per_datagram * 1e6:6.3f} us/dgram, "
                            f"{r.sleeps_per_datagram:4.2f} sleeps, "
                            f"{r.fragments_per_datagram:4.2f} frag, "
                            f"{r.ipis_per_datagram:4.2f} IPI, "
                            f"{r.net_rx_per_datagram:4.2f} NET_RX, load {r.load:5.3f}\n"
                        )
                    a, d = _fit(
                        [
                            (res[s].fragments_per_datagram, res[s].cost_s_per_datagram)
                            for s in FITTED_SIZES_BYTES
                        ]
                    )
                    ratio = d / a
                    ratios.append(ratio)
                    small.append(res[64].cost_s_per_datagram / res[8192].cost_s_per_datagram)
                    sys.stdout.write(
                        f"run {run}: a = {a * 1e6:.3f} us/fragment, d = {d * 1e6:.3f} us/datagram, "
                        f"d/a = {ratio:.2f}; cost(64 B) / cost(8192 B) = {small[-1]:.3f}\n"
                    )
        finally:
            _stop(reader)
            _stop(spinner)
            _teardown()
            os.sched_setaffinity(0, saved)
    if ratios:
        sys.stdout.write(
            f"d/a over {len(ratios)} runs: median {statistics.median(ratios):.2f}, "
            f"min {min(ratios):.2f}, max {max(ratios):.2f}; "
            f"cost(64 B)/cost(8192 B): median {statistics.median(small):.3f}, "
            f"min {min(small):.3f}, max {max(small):.3f}\n"
        )


if __name__ == "__main__":
    main()
