"""bootstorm.validation.testbed — real boot storms of seed 000's pipeline on this host.

:func:`run_storm` starts N sandboxes at once (netns, veth, cgroup, tap + tc
mirred, QEMU microVM) and returns their trace; :func:`sweep_leftovers`
removes what a killed run left. Needs root; the module imports without it.
"""

# Names load on first use (PEP 562): the storm's modules need pyroute2 (the
# `bootstorm[node]` extra), and commands that run without it (`calibrate`
# against a paper) check their sizes against StormOptions' bounds, which
# `.options` holds and imports without it.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from ._cni_stages import WrapperSplit, wrapper_split
    from ._errors import TestbedError
    from ._leftovers import SweepReport, sweep_leftovers, sweep_lock
    from .admission import Admission, LocalAdmission
    from .driver import run_storm
    from .options import STAGES, StormOptions, StormResult
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
    "WrapperSplit",
    "register_runtime",
    "run_storm",
    "runtime_names",
    "summarize",
    "sweep_leftovers",
    "sweep_lock",
    "wrapper_split",
]

_SOURCES = {
    "WrapperSplit": "._cni_stages",
    "wrapper_split": "._cni_stages",
    "TestbedError": "._errors",
    "SweepReport": "._leftovers",
    "sweep_leftovers": "._leftovers",
    "sweep_lock": "._leftovers",
    "Admission": ".admission",
    "LocalAdmission": ".admission",
    "run_storm": ".driver",
    "STAGES": ".options",
    "StormOptions": ".options",
    "StormResult": ".options",
    "StormRuntime": ".runtime",
    "register_runtime": ".runtime",
    "runtime_names": ".runtime",
    "LockSummary": ".summary",
    "StormSummary": ".summary",
    "summarize": ".summary",
}
#: Names of the runtime registry: the built-in runtimes register themselves
#: when the driver loads, as they did when this package imported it whole.
_REGISTRY = frozenset({"StormRuntime", "register_runtime", "runtime_names"})

_getattr, __dir__ = lazy_exports(__name__, globals(), _SOURCES)


def __getattr__(name: str) -> Any:
    if name in _REGISTRY:
        importlib.import_module(".driver", __name__)
    return _getattr(name)
