"""The suite's start: the compiled executor's loop compiled once, before the
workers.

numba compiles the loop on its first run and caches it on disk (``cache=True``,
beside the module). On a fresh clone every xdist worker's first compiled run
found no cache and compiled it at the same time as the other: 50-75 s of each
worker's first test in CI (``--durations``: ``test_api``'s bit-for-bit test in
one worker, a paper-003 row in the other), the same work twice on two cores.
The controller compiles it here first, alone; the workers then load it.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or config.getoption("collectonly"):
        return  # a worker (the controller warmed the cache) or no test to run
    if not config.getoption("numprocesses", default=None):
        return  # one process: its first compiled run compiles, as before
    from bootstorm import Scenario, simulate

    simulate(Scenario(cni="ipvtap", sandboxes=2), executor="compiled")
