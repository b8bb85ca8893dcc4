"""TimerEnvironment: the CPU's timer slot runs where a SimPy timeout would."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import simpy
from hypothesis import given
from hypothesis import strategies as st

import bootstorm.simulator
from bootstorm.simulator.cpu import TimerEnvironment

# A script: at each step a process waits ``delay`` and then either sets the
# timer (with its own delay) or does nothing; the log says who ran when.
Script = list[tuple[float, float | None]]


def _replay(env: simpy.Environment, script: Script, *, slot: bool) -> list[tuple[str, float]]:
    """Run ``script`` with the timer in the slot (``slot``) or as superseding
    timeouts (SimPy alone, the way the CPU used to do it)."""
    log: list[tuple[str, float]] = []
    generation = [0]

    def fire(tag: str) -> Callable[[], None]:
        return lambda: log.append((tag, env.now))

    def set_timer(delay: float, tag: str) -> None:
        if slot:
            assert isinstance(env, TimerEnvironment)
            env.set_timer(delay, fire(tag))
            return
        generation[0] += 1
        mine = generation[0]

        def on_timeout(_event: simpy.Event) -> None:
            if mine == generation[0]:
                fire(tag)()

        env.timeout(delay).callbacks.append(on_timeout)

    def actor(name: str, steps: Script) -> Generator[simpy.Event, Any, None]:
        for k, (wait, timer) in enumerate(steps):
            yield env.timeout(wait)
            log.append((f"{name}{k}", env.now))
            if timer is not None:
                set_timer(timer, f"timer from {name}{k}")

    env.process(actor("a", script[::2]))
    env.process(actor("b", script[1::2]))
    env.run()
    return log


delays = st.sampled_from([0.0, 0.5, 1.0, 1.5])  # coarse: many ties in time


@given(st.lists(st.tuples(delays, st.none() | delays), min_size=1, max_size=12))
def test_the_slot_runs_and_numbers_events_as_superseding_timeouts_did(script: Script) -> None:
    slot_env, plain_env = TimerEnvironment(), simpy.Environment()
    assert _replay(slot_env, script, slot=True) == _replay(plain_env, script, slot=False)
    # Each timer takes an eid, superseded or not, as a timeout did.
    assert next(slot_env._eid) == next(plain_env._eid)


def test_a_timer_set_first_runs_before_a_normal_event_of_the_same_time() -> None:
    env = TimerEnvironment()
    log: list[str] = []
    env.set_timer(1.0, lambda: log.append("timer"))
    env.timeout(1.0).callbacks.append(lambda _e: log.append("timeout"))
    env.run()
    assert log == ["timer", "timeout"] and env.now == 1.0


def test_a_later_timer_replaces_the_pending_one_and_peek_sees_the_slot() -> None:
    env = TimerEnvironment()
    log: list[float] = []
    env.timeout(5.0)
    env.set_timer(3.0, lambda: log.append(-1.0))
    assert env.peek() == 3.0
    env.set_timer(1.0, lambda: log.append(env.now))
    assert env.peek() == 1.0
    env.run()
    assert log == [1.0] and env.now == 5.0
    assert env.peek() == float("inf")


# -- SimPy's internals: TimerEnvironment is the one place that uses them ---------------------

SIMULATOR = Path(bootstorm.simulator.__file__).parent
PRIVATE = re.compile(r"\.(_now|_eid|_ok|_defused)\b|env\._queue\b")


def test_the_simpy_internals_the_timer_slot_relies_on_are_there() -> None:
    """SimPy is pinned to the 4.1 series (pyproject.toml); a release that moves these
    fails here, not as a wrong result."""
    major, minor = (int(x) for x in simpy.__version__.split(".")[:2])
    assert (major, minor) == (4, 1), simpy.__version__
    env = simpy.Environment()
    assert env._now == 0.0 and env._queue == [] and isinstance(env._eid, itertools.count)
    ev = env.event().succeed(1)
    assert ev._ok is True and ev._value == 1 and not hasattr(ev, "_defused")
    ev.defused = True
    assert ev._defused is True


def test_the_event_count_is_simpys_numbering() -> None:
    """A process that waits twice: its start, two timeouts and its end: 4 events."""
    env = TimerEnvironment()

    def twice() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1.0)
        yield env.timeout(1.0)

    env.process(twice())
    env.run()
    assert env.events_numbered() == 4


def test_only_the_timer_environment_touches_simpys_internals() -> None:
    """Locks, the executor and everything else use SimPy's public API."""
    offenders = [
        f"{path.name}:{n}"
        for path in sorted(SIMULATOR.glob("*.py"))
        if path.name != "cpu.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert offenders == []
