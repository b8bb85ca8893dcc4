"""The cost of one context switch on this machine, as paper-004's
``dataplane.context_switch_s`` was measured (Li, Ding and Shen, "Quantifying
the cost of context switch", ExpCS 2007; Ousterhout's pipe benchmark).

Two processes pinned to one CPU pass one byte back and forth over two pipes:
each round trip is two switches plus the pipe traffic. The same traffic in
one process (write then read on each pipe, no switch) is subtracted, and the
difference halved.

The measurement is a small C program (compiled with ``cc`` when there is
one): paper-004's 1.5 us came from it (1.47-1.50 us on this project's AMD
EPYC KVM guest, Linux 6.18). Without a compiler the same method runs in
Python, whose larger working set makes each switch dearer (about 1.8 us on
the same machine): an upper figure.

Run: ``python experiments/bench_context_switch.py [round_trips] [runs]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_C_SOURCE = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200000, cpu = argc > 2 ? atoi(argv[2]) : 0;
    cpu_set_t set; CPU_ZERO(&set); CPU_SET(cpu, &set); sched_setaffinity(0, sizeof set, &set);
    int a[2], b[2], x[2], y[2]; char c = 'x';
    if (pipe(a) || pipe(b) || pipe(x) || pipe(y)) return 1;
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < n; i++) {
            if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1) _exit(1);
        }
        _exit(0);
    }
    double t0 = now();
    for (int i = 0; i < n; i++) { if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 1; }
    double switched = (now() - t0) / n;
    waitpid(child, 0, 0);
    t0 = now();
    for (int i = 0; i < n; i++) {
        if (write(x[1], &c, 1) != 1 || read(x[0], &c, 1) != 1) return 1;
        if (write(y[1], &c, 1) != 1 || read(y[0], &c, 1) != 1) return 1;
    }
    double alone = (now() - t0) / n;
    printf("%.9f %.9f\n", switched, alone);
    return 0;
}
"""


def _c_round_trips(round_trips: int, cpu: int, binary: Path) -> tuple[float, float]:
    out = subprocess.run(
        [str(binary), str(round_trips), str(cpu)], check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def _ping_pong_s(round_trips: int, cpu: int) -> float:
    """Seconds per round trip between two processes on ``cpu``."""
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    os.sched_setaffinity(0, {cpu})
    child = os.fork()
    if child == 0:  # the echo side: inherits the affinity
        try:
            for _ in range(round_trips):
                os.read(a_r, 1)
                os.write(b_w, b"x")
        finally:
            os._exit(0)
    start = time.perf_counter()
    for _ in range(round_trips):
        os.write(a_w, b"x")
        os.read(b_r, 1)
    elapsed = time.perf_counter() - start
    os.waitpid(child, 0)
    for fd in (a_r, a_w, b_r, b_w):
        os.close(fd)
    return elapsed / round_trips


def _same_process_s(round_trips: int) -> float:
    """Seconds per round trip of the same pipe traffic without a switch."""
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    start = time.perf_counter()
    for _ in range(round_trips):
        os.write(a_w, b"x")
        os.read(a_r, 1)
        os.write(b_w, b"x")
        os.read(b_r, 1)
    elapsed = time.perf_counter() - start
    for fd in (a_r, a_w, b_r, b_w):
        os.close(fd)
    return elapsed / round_trips


def main(round_trips: int = 200_000, runs: int = 5) -> None:
    cpu = min(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    compiler = shutil.which("cc") or shutil.which("gcc")
    with tempfile.TemporaryDirectory(prefix="bst-ctxsw-") as tmp:
        binary = Path(tmp) / "ctxsw"
        if compiler:
            (Path(tmp) / "ctxsw.c").write_text(_C_SOURCE)
            subprocess.run([compiler, "-O2", "-o", str(binary), str(binary) + ".c"], check=True)
        method = f"C ({compiler})" if compiler else "Python (an upper figure)"
        sys.stdout.write(f"method: {method}\n")
        try:
            for run in range(runs):
                if compiler:
                    switched, alone = _c_round_trips(round_trips, cpu, binary)
                else:
                    switched = _ping_pong_s(round_trips, cpu)
                    alone = _same_process_s(round_trips)
                per_switch_us = (switched - alone) / 2 * 1e6
                sys.stdout.write(
                    f"run {run}: round trip {switched * 1e6:.2f} us, same process "
                    f"{alone * 1e6:.2f} us -> {per_switch_us:.2f} us per switch\n"
                )
        finally:
            os.sched_setaffinity(0, saved)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
