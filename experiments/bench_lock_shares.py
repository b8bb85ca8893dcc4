"""How much of each stage is waiting for a lock: the kernel trace against the model.

Run ``python experiments/bench_lock_shares.py [--profile P] TRACE...`` (the
defaults: the CNI runtime's held-out 150-sandbox baseline storms and the
profile its calibration plan fitted).

For every stage, the share of the sandboxes' time inside it that was spent
waiting for RTNL, cgroup_mutex or host-local's file lock: measured, the sum
of the kernel's ``contention_begin``/``end`` waits joined to the sandbox
and stage whose thread or process waited, over the sum of the stage spans
(the median over the runs given); predicted, the same sums over the
recorded simulation of the same storm (the scenario each trace describes,
under the profile).

A file lock is a sleep in ``flock``, not a kernel lock-contention
tracepoint: host-local's wait is the model's alone (shown as "-" measured).
A trace that kept only some of its lock spans (``--max-lock-spans``) kept
every sandbox's RTNL and cgroup_mutex wait first; where even those were too
many it kept every k-th in time, and its note gives the counts: their sums
are scaled up by that ratio here (a trace of older code, which kept the
earliest, is short of its tail: printed). Nothing is asserted: a measurement.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from bootstorm._api import simulate
from bootstorm.calibration.trace_fit import StormStats
from bootstorm.models import Profile
from bootstorm.traces import Trace, read_trace

HERE = Path(__file__).resolve().parent.parent
DEFAULT_TRACES = sorted((HERE / "traces/data/cni/heldout").glob("baseline-run*.jsonl.gz"))
DEFAULT_PROFILE = HERE / "traces/data/cni/plan/local.yaml"
STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")
LOCKS = ("rtnl", "cgroup_mutex", "host-local")


def _key_scale(trace: Trace) -> float:
    """Seen over kept of the sandboxes' key-lock waits, from the trace's note."""
    for note in trace.header.notes:
        if m := re.search(r"(\d+) of the (\d+) rtnl, cgroup_mutex, css_set_lock waits", note):
            return int(m.group(2)) / int(m.group(1))
    return 1.0


def measured_shares(trace: Trace) -> dict[tuple[str, str], float]:
    """(lock, stage) → waited seconds over the stage's total seconds."""
    inside: dict[str, float] = defaultdict(float)
    for s in trace.spans:
        inside[s.stage] += s.end_s - s.start_s
    waited: dict[tuple[str, str], float] = defaultdict(float)
    for lk in trace.locks:
        if lk.what == "wait" and lk.stage is not None and lk.sandbox is not None:
            waited[(lk.lock, lk.stage)] += lk.end_s - lk.start_s
    scale = _key_scale(trace)
    return {(lock, st): scale * waited[(lock, st)] / inside[st] for lock in LOCKS for st in STAGES}


def predicted_shares(trace: Trace, profile: Profile) -> dict[tuple[str, str], float]:
    """The same shares in the recorded simulation of the storm ``trace`` is."""
    result = simulate(StormStats.of(trace).scenario(), profile=profile, record=True)
    rec = result.recording
    assert rec is not None
    inside: dict[str, float] = defaultdict(float)
    for _sb, st, begin, end in rec.stage_spans:
        inside[rec.stage_names[st]] += end - begin
    waited: dict[tuple[str, str], float] = defaultdict(float)
    for lock, _sb, st, is_hold, begin, end in rec.lock_spans:
        if not is_hold and 0 <= st < len(rec.stage_names):
            waited[(rec.lock_names[lock], rec.stage_names[st])] += end - begin
    return {
        (lock, st): waited[(lock, st)] / inside[st] if inside[st] else 0.0
        for lock in LOCKS
        for st in STAGES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    args = parser.parse_args()
    profile = Profile.from_yaml(args.profile)
    traces = [read_trace(p) for p in args.traces]
    for t in traces:
        for note in t.header.notes:
            if "lock spans sampled" in note:
                print(f"note: {note}")
    measured = [measured_shares(t) for t in traces]
    predicted = [predicted_shares(t, profile) for t in traces]
    print(
        f"{len(traces)} storm(s) of {traces[0].header.scenario.sandboxes} sandboxes "
        f"({traces[0].header.scenario.runtime} runtime); profile {args.profile.name}"
    )
    print(f"{'stage':<9} {'lock':<13} {'measured':>9} {'model':>7}")
    for st in STAGES:
        for lock in LOCKS:
            m = float(np.median([s[(lock, st)] for s in measured]))
            p = float(np.median([s[(lock, st)] for s in predicted]))
            if m < 0.005 and p < 0.005:
                continue
            shown = "-" if lock == "host-local" else f"{m:.1%}"
            print(f"{st:<9} {lock:<13} {shown:>9} {p:>7.1%}")


if __name__ == "__main__":
    main()
