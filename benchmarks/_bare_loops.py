"""Anchors for the kernel: the same number of timed events through a bare event loop.

Each loop runs ``processes`` processes that only sleep, ``steps`` times each,
off one binary heap of (time, sequence) keys: the least a discrete-event
executor can do per event. The SimPy one is ``bench_storm.bare_simpy``; these
are the same loop compiled by numba and in C++ (``g++ -O2``,
``std::priority_queue``), measured by the benchmark in the same run as the
kernel, so that a ratio to them says how much the model costs per event over
the event loop itself on this machine, today.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit  # type: ignore[import-not-found,unused-ignore]

__all__ = ["CppLoop", "bare_numba", "delays"]


def delays(n: int = 4096) -> np.ndarray:
    """A fixed table of sleep times (exponential, 1 ms mean), shifted per process."""
    return np.random.default_rng(0).exponential(1e-3, size=n)


@njit(cache=False)  # type: ignore[misc,unused-ignore]
def _push(ht: Any, hs: Any, hp: Any, size: int, t: float, s: int, q: int) -> None:
    i = size  # sift the hole up from the end, then fill it
    while i > 0:
        parent = (i - 1) >> 1
        if t < ht[parent] or (t == ht[parent] and s < hs[parent]):
            ht[i], hs[i], hp[i] = ht[parent], hs[parent], hp[parent]
            i = parent
        else:
            break
    ht[i], hs[i], hp[i] = t, s, q


@njit(cache=False)  # type: ignore[misc,unused-ignore]
def _pop(ht: Any, hs: Any, hp: Any, size: int) -> None:
    """Drop the root of a heap of ``size`` entries (read it before)."""
    n = size - 1
    if n == 0:
        return
    t, s, q = ht[n], hs[n], hp[n]  # sift the last entry down from the root
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hs[c + 1] < hs[c])):
            c += 1
        if ht[c] < t or (ht[c] == t and hs[c] < s):
            ht[i], hs[i], hp[i] = ht[c], hs[c], hp[c]
            i = c
        else:
            break
    ht[i], hs[i], hp[i] = t, s, q


@njit(cache=False)  # type: ignore[misc,unused-ignore]
def _heap_loop(processes: int, steps: int, table: Any) -> int:
    ht = np.empty(processes)
    hs = np.empty(processes, dtype=np.int64)
    hp = np.empty(processes, dtype=np.int64)
    left = np.full(processes, steps, dtype=np.int64)
    n_table = table.shape[0]
    size = 0
    for q in range(processes):  # each process's first sleep
        _push(ht, hs, hp, size, table[q % n_table], q, q)
        size += 1
    seq = processes
    events = 0
    while size > 0:
        now, q = ht[0], hp[0]
        _pop(ht, hs, hp, size)
        size -= 1
        events += 1
        left[q] -= 1
        if left[q] > 0:  # its next sleep
            _push(ht, hs, hp, size, now + table[(q + steps - left[q]) % n_table], seq, q)
            size += 1
            seq += 1
    return events


def bare_numba(processes: int, events: int) -> int:
    """The loop compiled by numba; returns the events it popped (about ``events``)."""
    steps = max(1, round(events / processes))
    return int(_heap_loop(processes, steps, delays()))


_CPP = r"""
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <tuple>
#include <vector>

int main(int argc, char** argv) {
    long processes = std::atol(argv[1]), steps = std::atol(argv[2]);
    std::vector<double> table(4096);
    unsigned long long x = 88172645463325252ULL;  // xorshift: exponential sleeps, 1 ms mean
    for (double& d : table) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        d = -1e-3 * std::log((x >> 11) * (1.0 / 9007199254740992.0) + 1e-300);
    }
    using Entry = std::tuple<double, long, long>;
    std::chrono::duration<double> best(1e9);
    long events = 0;
    for (int rep = 0; rep < 2; ++rep) {  // the first warms the caches
        auto t0 = std::chrono::steady_clock::now();
        std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
        std::vector<long> left(processes, steps);
        long seq = 0;
        events = 0;
        for (long p = 0; p < processes; ++p) heap.emplace(table[p % 4096], seq++, p);
        while (!heap.empty()) {
            auto [now, s, q] = heap.top();
            heap.pop();
            ++events;
            if (--left[q] > 0) heap.emplace(now + table[(q + steps - left[q]) % 4096], seq++, q);
        }
        best = std::chrono::steady_clock::now() - t0;
    }
    std::printf("%ld %.9f\n", events, best.count());
    return 0;
}
"""


class CppLoop:
    """The loop in C++, built once in a temporary directory; ``None`` from
    :meth:`build` when there is no C++ compiler."""

    def __init__(self, binary: Path, workdir: tempfile.TemporaryDirectory[str]) -> None:
        self.binary = binary
        self._workdir = workdir  # kept alive with the binary

    @classmethod
    def build(cls) -> CppLoop | None:
        cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
        if cxx is None:
            return None
        workdir = tempfile.TemporaryDirectory(prefix="bootstorm-bare-")
        src = Path(workdir.name) / "bare.cc"
        src.write_text(_CPP)
        binary = Path(workdir.name) / "bare"
        subprocess.run([cxx, "-O2", "-std=c++17", "-o", str(binary), str(src)], check=True)
        return cls(binary, workdir)

    def run_s(self, processes: int, events: int) -> float:
        """Seconds the loop took (timed inside the program: no process start)."""
        steps = max(1, round(events / processes))
        out = subprocess.run(
            [str(self.binary), str(processes), str(steps)],
            check=True,
            capture_output=True,
            text=True,
        )
        return float(out.stdout.split()[1])
