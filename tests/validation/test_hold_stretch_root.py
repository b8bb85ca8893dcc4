"""RTNL's hold stretch measured on this host (root): a holder's veth pairs
seen from a witness on another CPU, alone and with the holder's core shared;
nothing of it left behind. The ratio's arithmetic and what the fit makes of
it: tests/calibration/test_hold_stretch.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, links)"),
    pytest.mark.skipif(sys.platform != "linux", reason="Linux only"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs"),
]


def _probes_alive() -> list[str]:
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"_hold_probe.py" in argv or b"PR_SET_PDEATHSIG" in argv:
                alive.append(entry.name)
    return alive


def test_the_witness_sees_every_round_and_nothing_is_left() -> None:
    from bootstorm.validation.testbed._leftovers import (
        RunNames,
        new_run_id,
        register_run,
        unregister_run,
    )
    from bootstorm.validation.testbed.hold_stretch import measure_hold_stretch

    run = new_run_id()
    register_run(run)
    try:
        stretch, note = measure_hold_stretch(RunNames(run), requests=40, rounds=2, settle_max_s=0.5)
    finally:
        unregister_run(run)
    assert stretch is not None and stretch.rounds == 2 and stretch.requests == 40
    # Every window saw the holder's holds (a wait each, about), and a hold
    # lasts a positive time: the ratio is finite and positive.
    assert all(n >= 1 for n in (*stretch.alone_waits, *stretch.shared_waits))
    assert 0.0 < stretch.ratio() < 100.0
    assert "40 veth pairs" in note and "2 rounds" in note
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert [n for n in netns if n.startswith(f"bst-{run}-")] == []
    assert _probes_alive() == []
