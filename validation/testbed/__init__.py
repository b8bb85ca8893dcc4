"""bootstorm.validation.testbed — real boot storms of seed 000's pipeline on this host.

:func:`run_storm` starts N sandboxes at once (netns, veth, cgroup, tap + tc
mirred, QEMU microVM) and returns their trace; :func:`sweep_leftovers`
removes what a killed run left. Needs root; the module imports without it.
"""

from ._leftovers import SweepReport, sweep_leftovers, sweep_lock
from .admission import Admission, LocalAdmission
from .driver import STAGES, StormOptions, StormResult, TestbedError, run_storm
from .runtime import StormRuntime, register_runtime, runtime_names
from .summary import LockSummary, StormSummary, summarize

__all__ = [
    "STAGES",
    "Admission",
    "LocalAdmission",
    "LockSummary",
    "StormOptions",
    "StormResult",
    "StormRuntime",
    "StormSummary",
    "SweepReport",
    "TestbedError",
    "register_runtime",
    "run_storm",
    "runtime_names",
    "summarize",
    "sweep_leftovers",
    "sweep_lock",
]
