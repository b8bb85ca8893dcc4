"""A refill worker runs at the node's default nice value, whatever the
agent's own (its unit's ``Nice=-10``), and so do the processes it execs:
the refill must not outrank the starts it spares (root: a nice value below
0 needs it)."""

from __future__ import annotations

import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from bootstorm.validation.agent._pools import REFILL_NICE, _worker_executor

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a nice value below 0"),
]


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _child_nice() -> int:
    # Field 19 of /proc/<pid>/stat is the nice value (comm has no spaces here).
    out = subprocess.run(["cat", "/proc/self/stat"], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[18])


def test_a_refill_worker_and_what_it_execs_run_at_the_default_nice() -> None:
    got: dict[str, int] = {}

    def as_the_agent() -> None:
        # The agent's thread at its unit's nice value; threads it makes inherit it.
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
        with ThreadPoolExecutor(max_workers=1) as plain:
            got["plain"] = plain.submit(_own_nice).result()
        worker = _worker_executor("test-refill")
        try:
            got["worker"] = worker.submit(_own_nice).result()
            got["exec"] = worker.submit(_child_nice).result()
        finally:
            worker.shutdown(wait=True)
        got["agent"] = _own_nice()

    thread = threading.Thread(target=as_the_agent)
    thread.start()
    thread.join()
    assert got == {"plain": -10, "worker": REFILL_NICE, "exec": REFILL_NICE, "agent": -10}
