"""How pinning container pairs to cores moves their throughput on a real kernel.

Seed 002 (§IV, Fig. 9) pins 48 pairs of containers on an 8-vCPU VM, each
pair's two ends on different cores or on the same core, and measures the
total throughput against no pinning: OVS +21.2% apart, a bridge -13.2%
together (PAPER-TARGETS S2-3). It also sees single flows spread up to 3x at
50 pairs (S2-2). The fluid model (:mod:`bootstorm.models.softirq`) misses
both; this measures the same experiment, scaled to this host's cores, with
what the kernel does alongside it.

Topology: ``2P`` network namespaces (``bstpin-c*``), each a container with
one end of a veth pair whose other end is a port of a Linux bridge in a
namespace of its own (``bstpin-br``): seed 002's "bridge" driver. The
pairs are TCP bulk transfers (one connection each, 128 KiB writes, as
iperf3's default) between two containers. A small C program is both ends;
it pins itself (or not) and reports, over a window all pairs share
(``CLOCK_MONOTONIC``), its bytes, its voluntary and involuntary context
switches and its migrations between CPUs (``/proc/self/sched``).

Placements, interleaved round by round so that the machine's drift falls
on all of them alike (ratios in one run):

- ``random``: no pinning (CFS places and migrates the threads);
- ``pinned-apart``: pair ``i``'s sender on CPU ``i mod C``, its receiver on
  ``(i + 1) mod C``;
- ``pinned-together``: both ends of pair ``i`` on CPU ``i mod C``.

Printed per placement: total Gbit/s (mean over rounds) and its ratio to
``random``; the spread of single pairs (fastest / slowest, mean over
rounds); context switches and migrations per GB moved; the CPU's
softirq / system / user / idle shares over the window (``/proc/stat``).

Run (root; C compiler):
``python experiments/bench_pinning.py [--pairs 2 12 ...] [--rounds 4] [--window-s 8]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _cc import build_c

PREFIX = "bstpin"
BRIDGE_NS = f"{PREFIX}-br"
PORT = 5201  # iperf3's port: nothing else listens inside these namespaces
WRITE_BYTES = 128 * 1024  # iperf3's default TCP write
PLACEMENTS = ("random", "pinned-apart", "pinned-together")

_C_SOURCE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
static long migrations(void) {
    FILE *f = fopen("/proc/self/sched", "r"); char line[256]; long n = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "se.nr_migrations", 16)) { n = atol(strchr(line, ':') + 1); break; }
    fclose(f);
    return n;
}
struct mark { double bytes; long vol, invol, mig; };
static struct mark mark(double bytes) {
    struct rusage u; getrusage(RUSAGE_SELF, &u);
    struct mark m = { bytes, u.ru_nvcsw, u.ru_nivcsw, migrations() };
    return m;
}
/* pinpair recv|send ADDR PORT CPU T0 T1 TEND BYTES: moves data until TEND,
   prints the window [T0, T1]: bytes vol invol migrations */
int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: pinpair recv|send ADDR PORT CPU T0 T1 TEND BYTES\n");
        return 2;
    }
    int recv_mode = !strcmp(argv[1], "recv"), port = atoi(argv[3]), cpu = atoi(argv[4]);
    double t0 = atof(argv[5]), t1 = atof(argv[6]), tend = atof(argv[7]);
    size_t chunk = (size_t)atol(argv[8]);
    if (cpu >= 0) {
        cpu_set_t set; CPU_ZERO(&set); CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set)) { perror("sched_setaffinity"); return 1; }
    }
    struct sockaddr_in a; memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_port = htons(port);
    int fd;
    if (recv_mode) {
        int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1)) {
            perror("listen"); return 1;
        }
        fd = accept(l, 0, 0);
        if (fd < 0) { perror("accept"); return 1; }
    } else {
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        for (;;) {
            fd = socket(AF_INET, SOCK_STREAM, 0);
            if (!connect(fd, (struct sockaddr *)&a, sizeof a)) break;
            close(fd);
            if (now() > t0) { perror("connect"); return 1; }
            usleep(20000);
        }
    }
    char *buf = calloc(1, chunk);
    double moved = 0.0;
    struct mark at0 = {0}, at1 = {0};
    int phase = 0;
    for (;;) {
        double t = now();
        if (phase == 0 && t >= t0) { at0 = mark(moved); phase = 1; }
        if (phase == 1 && t >= t1) { at1 = mark(moved); phase = 2; }
        if (t >= tend) break;
        ssize_t n = recv_mode ? read(fd, buf, chunk) : write(fd, buf, chunk);
        if (n <= 0) break;
        moved += (double)n;
    }
    if (phase < 2) { fprintf(stderr, "ended before the window closed\n"); return 1; }
    printf("%.0f %ld %ld %ld\n", at1.bytes - at0.bytes, at1.vol - at0.vol,
           at1.invol - at0.invol, at1.mig - at0.mig);
    return 0;
}
"""


@dataclass(frozen=True, slots=True)
class End:
    """One end's window: bytes moved, context switches, migrations."""

    bytes: float
    voluntary: int
    involuntary: int
    migrations: int


@dataclass(frozen=True, slots=True)
class Round:
    """One placement's window: each pair's (sender, receiver), the CPU shares."""

    pairs: list[tuple[End, End]]
    window_s: float
    cpu_shares: dict[str, float]

    @property
    def gbps(self) -> np.ndarray:
        return np.array([r.bytes * 8 / self.window_s / 1e9 for _, r in self.pairs])

    def per_gb(self, field: str) -> float:
        moved_gb = sum(r.bytes for _, r in self.pairs) / 1e9
        count = sum(int(getattr(s, field)) + int(getattr(r, field)) for s, r in self.pairs)
        return count / moved_gb


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _container(i: int) -> str:
    return f"{PREFIX}-c{i}"


def _address(i: int) -> str:
    return f"10.77.{i // 250}.{i % 250 + 1}"


def setup(containers: int) -> None:
    """The bridge namespace and ``containers`` container namespaces on it."""
    _ip("netns", "add", BRIDGE_NS)
    _ip("-n", BRIDGE_NS, "link", "add", f"{PREFIX}br0", "type", "bridge")
    _ip("-n", BRIDGE_NS, "link", "set", f"{PREFIX}br0", "up")
    for i in range(containers):
        ns, port = _container(i), f"{PREFIX}v{i}"
        _ip("netns", "add", ns)
        peer = ("peer", "name", "eth0", "netns", ns)
        _ip("-n", BRIDGE_NS, "link", "add", port, "type", "veth", *peer)
        _ip("-n", BRIDGE_NS, "link", "set", port, "master", f"{PREFIX}br0", "up")
        _ip("-n", ns, "addr", "add", f"{_address(i)}/16", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")


def teardown() -> None:
    """Delete every namespace this bench made (their devices go with them)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"{PREFIX}-"):
            subprocess.run(["ip", "netns", "del", name], check=False)


def _cpu_times() -> np.ndarray:
    """user, nice, system, idle, iowait, irq, softirq, steal (jiffies), all CPUs."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:9]
    return np.array([float(x) for x in fields])


def _shares(before: np.ndarray, after: np.ndarray) -> dict[str, float]:
    d = after - before
    total = d.sum()
    return {
        "softirq": (d[6] + d[5]) / total,
        "system": d[2] / total,
        "user": (d[0] + d[1]) / total,
        "idle": (d[3] + d[4]) / total,
        "steal": d[7] / total,
    }


def _cpus(placement: str, pair: int, cores: int) -> tuple[int, int]:
    if placement == "random":
        return -1, -1
    send = pair % cores
    return send, (send + 1) % cores if placement == "pinned-apart" else send


def run_round(
    binary: Path, pairs: int, placement: str, cores: int, *, warmup_s: float, window_s: float
) -> Round:
    """All pairs at once under one placement; the window opens after ``warmup_s``."""
    t0 = time.monotonic() + 1.0 + warmup_s
    t1, tend = t0 + window_s, t0 + window_s + 0.5
    common = [str(PORT)]
    procs: list[subprocess.Popen[str]] = []
    try:
        for p in range(pairs):
            send_cpu, recv_cpu = _cpus(placement, p, cores)
            for mode, ns, cpu in (
                ("recv", _container(2 * p + 1), recv_cpu),
                ("send", _container(2 * p), send_cpu),
            ):
                args = [mode, _address(2 * p + 1), *common, str(cpu)]
                args += [f"{t0:.6f}", f"{t1:.6f}", f"{tend:.6f}", str(WRITE_BYTES)]
                procs.append(
                    subprocess.Popen(
                        ["ip", "netns", "exec", ns, str(binary), *args],
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
        time.sleep(max(0.0, t0 - time.monotonic()))
        before = _cpu_times()
        time.sleep(max(0.0, t1 - time.monotonic()))
        after = _cpu_times()
        ends: list[End] = []
        for proc in procs:
            out, err = proc.communicate(timeout=30)
            if proc.returncode != 0:
                raise RuntimeError(f"pinpair failed: {err.strip()}")
            b, vol, invol, mig = out.split()
            ends.append(End(float(b), int(vol), int(invol), int(mig)))
    finally:
        for proc in procs:  # only the processes this round started
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # procs alternate receiver, sender per pair
    return Round(
        pairs=[(ends[2 * p + 1], ends[2 * p]) for p in range(pairs)],
        window_s=window_s,
        cpu_shares=_shares(before, after),
    )


def build(workdir: Path) -> Path:
    return build_c(_C_SOURCE, workdir, "pinpair")


def summarise(pairs: int, rounds: dict[str, list[Round]]) -> None:
    base = np.mean([r.gbps.sum() for r in rounds["random"]])
    print(
        f"\n{pairs} pairs on {os.cpu_count()} CPUs "
        f"({len(rounds['random'])} rounds of each placement, interleaved)"
    )
    print(
        f"{'placement':>16} {'Gbit/s':>7} {'ratio':>6} {'spread':>7} "
        f"{'vol/GB':>7} {'invol/GB':>8} {'migr/GB':>7} {'softirq':>7} {'system':>6} "
        f"{'user':>5} {'idle':>5}"
    )
    for placement, done in rounds.items():
        total = np.array([r.gbps.sum() for r in done])
        spread = np.mean([r.gbps.max() / r.gbps.min() for r in done])
        shares = {k: np.mean([r.cpu_shares[k] for r in done]) for k in done[0].cpu_shares}
        print(
            f"{placement:>16} {total.mean():7.2f} {total.mean() / base:6.3f} {spread:7.2f} "
            f"{np.mean([r.per_gb('voluntary') for r in done]):7.0f} "
            f"{np.mean([r.per_gb('involuntary') for r in done]):8.0f} "
            f"{np.mean([r.per_gb('migrations') for r in done]):7.1f} "
            f"{shares['softirq']:7.2f} {shares['system']:6.2f} {shares['user']:5.2f} "
            f"{shares['idle']:5.2f}"
        )
        rel = total / base
        print(f"{'':>16} rounds: " + " ".join(f"{x:.3f}" for x in rel))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[2, 12])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bst-pin-") as tmp:
        binary = build(Path(tmp))
        try:
            setup(2 * max(args.pairs))
            for pairs in args.pairs:
                rounds: dict[str, list[Round]] = {p: [] for p in PLACEMENTS}
                for _ in range(args.rounds):
                    for placement in PLACEMENTS:
                        rounds[placement].append(
                            run_round(
                                binary,
                                pairs,
                                placement,
                                cores,
                                warmup_s=args.warmup_s,
                                window_s=args.window_s,
                            )
                        )
                summarise(pairs, rounds)
        finally:
            teardown()
    print(
        "\nratio: total over random's; spread: fastest / slowest pair; per GB: both ends' "
        "context switches (voluntary, involuntary) and migrations; CPU shares over the window"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
