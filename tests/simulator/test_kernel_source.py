"""One kernel source, compiled or interpreted; its codes are the program's.

The compiled executor's loop (``_fast_nb.py``) reads op and lock kinds as
the codes :class:`OpKind` and :class:`LockKind` give them, and the same file
runs interpreted as executor "python": a debugger or a coverage tracer sees
the loop the compiled executor runs, and its result is the compiled one's
to the bit, the event count included.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
from test_fast_equivalence import KNOBS_400
from test_invariants import with_mutex_wake

from bootstorm.models import compile_scenario
from bootstorm.models.scenario import Scenario
from bootstorm.simulator import LockKind, OpKind, make_executor
from bootstorm.simulator import _fast_nb as compiled
from bootstorm.simulator.fast import kernel_module


def test_op_and_lock_kinds_are_pinned() -> None:
    """Programs are written with these codes; changing one is a format change."""
    assert {k.name: k.value for k in OpKind} == {
        "CPU": 0,
        "SLEEP": 1,
        "ACQUIRE": 2,
        "ACQUIRE_SHARED": 3,
        "RELEASE": 4,
        "ZERO": 5,
        "STAGE_BEGIN": 6,
        "STAGE_END": 7,
        "GATE_ENTER": 8,
        "GATE_EXIT": 9,
        "POOL_TRY": 10,
        "JUMP": 11,
        "SPAWN": 12,
        "GUEST_CPU": 13,
        "POOL_ORDER": 14,
        "POOL_PUT": 15,
        "POOL_TARGET": 16,
        "POOL_TRIM": 17,
        "BACK": 18,
        "RCU_SYNC_ENTER": 19,
        "RCU_SYNC_EXIT": 20,
    }
    assert {k.name: k.value for k in LockKind} == {"MUTEX": 0, "SPIN": 1, "RW": 2}


def test_the_kernel_reads_every_code_from_the_enums() -> None:
    assert {kind: int(kind) for kind in OpKind} == compiled.OP_CODES
    assert {kind: int(kind) for kind in LockKind} == compiled.LOCK_CODES
    # What the compiled code was built with (numba freezes module constants).
    want = (*compiled.OP_CODES.values(), *compiled.LOCK_CODES.values())
    assert tuple(compiled.compiled_codes()) == want
    assert tuple(kernel_module(jit=False).compiled_codes()) == want


def test_the_interpreted_kernel_is_the_same_file_without_numba() -> None:
    twin = kernel_module(jit=False)
    assert twin is not compiled and twin.INTERPRETED and not compiled.INTERPRETED
    assert kernel_module(jit=False) is twin  # loaded once
    source = Path(compiled.__file__).resolve()
    for name in ("run_kernel", "_simulate", "_push", "_settle"):
        func = getattr(twin, name)
        assert type(func).__name__ == "function", name  # not a numba dispatcher
        assert Path(func.__code__.co_filename).resolve() == source, name
        assert type(getattr(compiled, name)).__name__ != "function", name


def test_a_tracer_sees_the_kernels_lines_run_by_the_python_executor() -> None:
    """What pdb and coverage hook: the event loop's own frames, in ``_fast_nb.py``."""
    source = str(Path(compiled.__file__).resolve())
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and str(Path(frame.f_code.co_filename).resolve()) == source:
            seen.add(frame.f_code.co_name)

    program = compile_scenario(Scenario(cni="ipvtap", sandboxes=3))
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        make_executor("python").run(program)
    finally:
        sys.setprofile(previous)
    assert {"run_kernel", "_simulate", "_push", "_pop"} <= seen


def test_interpreted_and_compiled_agree_to_the_bit_events_included() -> None:
    """The 400 storm with pools, a stage limit, RTNL priority, background load
    and mutexes handed over through a wake-up: every figure, every array."""
    program = compile_scenario(KNOBS_400)
    for p in (program, replace(program, locks=with_mutex_wake(program.locks, 2e-5))):
        fast, slow = make_executor("compiled").run(p), make_executor("python").run(p)
        assert slow.to_dict() == fast.to_dict()  # events included
        assert np.array_equal(slow.finish_s, fast.finish_s)
        for name, times in fast.stage_time_s.items():
            assert np.array_equal(slow.stage_time_s[name], times), name
