"""Thousands of generated programs: the compiled executor against the reference.

The bar for the compiled executor: the equivalence property holds over
thousands of generated programs in CI. ``test_fast_equivalence`` covers every
feature with a few hundred examples on both fast loops; this runs the same
generator (every lock kind, spinning mutexes, gates, pools, zeroing, guest
quotas), here also on a busy node and with mutexes handed over through a
wake-up, 2 000 times against the compiled loop, the one search and sweeps use.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fast_equivalence import _assert_same_result
from test_invariants import Case, cases, with_mutex_wake

from bootstorm.simulator import run_with

EXAMPLES = 2_000


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,  # the same 2 000 programs every run: a failure reproduces
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    case=cases(),
    background=st.sampled_from([0.0, 0.0, 0.5, 3.0]),
    reserved=st.sampled_from([0.0, 0.0, 0.25]),
    wake_s=st.sampled_from([0.0, 0.0, 1e-3, 0.05]),
)
def test_thousands_of_programs(
    case: Case, background: float, reserved: float, wake_s: float
) -> None:
    machine = replace(
        case.machine, background_jobs=background, reserved_cores=reserved * case.machine.cores
    )
    program = replace(case, machine=machine, locks=with_mutex_wake(case.locks, wake_s)).compile()
    _assert_same_result(run_with(program, "simpy"), run_with(program, "compiled"))
