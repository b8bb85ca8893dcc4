"""Whether a kernel lock's holder keeps its core: RTNL's holds, alone and shared.

The model either pins a holder of RTNL or cgroup_mutex to its core while it
holds (``kernel_holders_pinned``: its CPU work is not time-sliced) or shares
the core with the other runnable work (processor sharing). The kernel's
build does not settle it: on this project's hosts (``PREEMPT_NONE``) a
holder is never preempted, yet one that sleeps inside its hold waits for
the core again when it wakes, behind whatever runs there. So it is measured
(:class:`~bootstorm.traces.operations.HoldStretch`): a holder pinned to one
CPU makes veth pairs (one RTNL hold each) while a witness on another CPU
takes RTNL for short requests as fast as it can and times its waits; once
alone, once with a CPU-bound process on the holder's CPU, rounds
interleaved. The witness sees the holds from outside, so a holder merely
preempted after its request (on its way back to user space) does not count.

Everything runs in one namespace of the run's (``bst-<run>-h``), removed
after, also on error; the CPU-bound process and the two probes
(:mod:`._hold_probe`) are ended by PID.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ...traces.operations import MAX_STRETCH_REQUESTS, HoldStretch
from .._names import LINK_PREFIX
from .._netns import NETNS_RUN_DIR, create_netns_here, remove_netns
from ._errors import TestbedError
from ._host import settle
from ._leftovers import RunNames

__all__ = [
    "LONG_WAIT_S",
    "STRETCH_REQUESTS",
    "STRETCH_ROUNDS",
    "measure_hold_stretch",
]

log = logging.getLogger(__name__)

#: veth pairs the holder makes in each window (~0.4 ms of RTNL each here:
#: about 0.12 s of holds a window alone), and rounds of two windows: 7
#: rounds' median moved by ±0.2 here, single rounds 1.4-3.0.
STRETCH_REQUESTS = 300
STRETCH_ROUNDS = 7
#: A witness's request waited behind a hold when it took longer than this:
#: its own request takes 10-15 µs here, a veth pair's creation 0.3-0.5 ms.
#: The witness asks again within microseconds of its last answer, so it
#: waits through nearly the whole of each hold: the waits' sum is the holds'.
LONG_WAIT_S = 50e-6
_PROBE = Path(__file__).with_name("_hold_probe.py")
_PROBE_TIMEOUT_S = 120.0
#: The CPU-bound process: it dies with the measurement (a parent-death
#: signal, and its parent checked after setting it) and by a deadline, so a
#: measurement killed outright leaves no core spinning.
_HOG = (
    "import ctypes, os, signal, sys, time\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[2]):\n"
    "    sys.exit(0)\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "end = time.monotonic() + float(sys.argv[3])\n"
    "while time.monotonic() < end:\n"
    "    for _ in range(100_000):\n"
    "        pass\n"
)


def _two_cpus() -> tuple[int, int] | None:
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


def _probe(*args: object) -> list[str]:
    # -I -S: the probe is standard library only; nothing of the site's.
    return [sys.executable, "-I", "-S", str(_PROBE), *(str(a) for a in args)]


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _window(
    netns_path: str, cpus: tuple[int, int], *, requests: int, prefix: str, shared: bool
) -> tuple[int, float]:
    """One window: the witness's long waits behind ``requests`` holds (count,
    summed wall), with the holder's core ``shared`` with a CPU-bound process."""
    holder_cpu, witness_cpu = cpus
    procs: list[subprocess.Popen[Any]] = []
    try:
        if shared:
            hog = [sys.executable, "-I", "-S", "-c", _HOG, str(holder_cpu), str(os.getpid())]
            hog.append(str(2 * _PROBE_TIMEOUT_S))
            procs.append(subprocess.Popen(hog))
        witness = subprocess.Popen(
            _probe("witness", netns_path, witness_cpu, prefix, LONG_WAIT_S),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(witness)
        assert witness.stdout is not None and witness.stderr is not None
        if witness.stdout.readline().strip() != "ready":
            _stop(witness)
            why = witness.stderr.read().strip()
            raise TestbedError(f"hold stretch: the witness did not start: {why}")
        holder = subprocess.run(
            _probe("holder", netns_path, holder_cpu, requests, prefix),
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
        # communicate() closes the witness's stdin: it stops at its next request.
        out, err = witness.communicate(timeout=_PROBE_TIMEOUT_S)
        if holder.returncode != 0 or witness.returncode != 0:
            raise TestbedError(f"hold stretch: {(holder.stderr + err).strip()}")
        held = json.loads(holder.stdout)
        seen = json.loads(out)
        # The witness's waits while the holder made its pairs: before and
        # after, it waits behind others only (kworkers, the probes' start).
        during = [
            elapsed
            for began, elapsed in seen["waits"]
            if began + elapsed > held["first"] and began < held["last"]
        ]
        log.debug(
            "hold stretch window (shared %s): holder %d requests, %.1f ms wall, %.1f ms CPU; "
            "witness %d requests, %d waits during, %.1f ms",
            shared,
            held["requests"],
            held["wall_s"] * 1e3,
            held["cpu_s"] * 1e3,
            seen["requests"],
            len(during),
            sum(during) * 1e3,
        )
        if not during:
            raise TestbedError(
                f"hold stretch: the witness never waited over {LONG_WAIT_S * 1e6:g} µs "
                f"behind {requests} veth pairs (saw {seen['requests']} requests)"
            )
        return len(during), float(sum(during))
    except subprocess.TimeoutExpired:
        raise TestbedError(f"hold stretch: a probe ran past {_PROBE_TIMEOUT_S:g} s") from None
    finally:
        for proc in procs:
            _stop(proc)


def measure_hold_stretch(
    names: RunNames,
    *,
    requests: int = STRETCH_REQUESTS,
    rounds: int = STRETCH_ROUNDS,
    settle_max_s: float = 10.0,
) -> tuple[HoldStretch | None, str]:
    """:class:`HoldStretch` over ``rounds`` rounds of ``requests`` veth pairs,
    and a note; ``None`` (and why, in the note) on a host of one CPU.
    Root only; everything made is removed before returning."""
    if not 1 <= requests <= MAX_STRETCH_REQUESTS:
        raise ValueError(f"requests: must be in 1..{MAX_STRETCH_REQUESTS}, but got {requests}")
    if rounds < 1:
        raise ValueError(f"rounds: must be at least 1, but got {rounds}")
    cpus = _two_cpus()
    if cpus is None:
        return None, "hold stretch: not measured (it needs two CPUs: a holder and a witness)"
    ns = names.netns(0) + "h"
    prefix = f"{LINK_PREFIX}{names.run}s"
    figures: dict[str, list[float]] = {
        "alone_waits": [],
        "alone_wait_s": [],
        "shared_waits": [],
        "shared_wait_s": [],
    }
    os.close(create_netns_here(ns))
    try:
        for r in range(rounds):
            for which in ("alone", "shared") if r % 2 == 0 else ("shared", "alone"):
                settle(settle_max_s)
                waits, waited_s = _window(
                    str(NETNS_RUN_DIR / ns),
                    cpus,
                    requests=requests,
                    prefix=prefix,
                    shared=which == "shared",
                )
                figures[f"{which}_waits"].append(waits)
                figures[f"{which}_wait_s"].append(waited_s)
    finally:
        remove_netns(ns)
    stretch = HoldStretch(
        requests=requests,
        long_wait_s=LONG_WAIT_S,
        alone_waits=tuple(int(w) for w in figures["alone_waits"]),
        alone_wait_s=tuple(figures["alone_wait_s"]),
        shared_waits=tuple(int(w) for w in figures["shared_waits"]),
        shared_wait_s=tuple(figures["shared_wait_s"]),
    )
    note = (
        f"hold stretch: {requests} veth pairs on CPU {cpus[0]} timed from a witness on CPU "
        f"{cpus[1]}, alone and with a CPU-bound process on CPU {cpus[0]}, {rounds} rounds: "
        f"the holds {stretch.ratio():.2f}x as long shared (rounds "
        + ", ".join(f"{x:.2f}" for x in stretch.per_round)
        + ")"
    )
    return stretch, note
