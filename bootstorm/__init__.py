"""bootstorm — predict and shorten boot storms of secure containers.

>>> from bootstorm import Scenario, simulate
>>> result = simulate(Scenario(cni="ipvtap", sandboxes=400, profile="paper-000"))
>>> round(result.makespan_s)  # doctest: +SKIP
21
"""

# Every name loads on first use (PEP 562): `import bootstorm` costs a few
# milliseconds, and `bootstorm --help` or a script that needs the scenario
# model does not pay for SciPy, Optuna, SimPy or numba.
from __future__ import annotations

from ._lazy import lazy_exports

# Not ``typing.TYPE_CHECKING``: ``typing`` is 5-10 ms of imports that every
# console script (``bootstorm-cni`` runs once per sandbox's ADD) would pay.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from . import models, simulator
    from ._api import compare, dataplane_sweep, recorded_trace, simulate
    from .models import (
        CNI_NAMES,
        ConfigError,
        Profile,
        Scenario,
        available_profiles,
        load_profile,
    )
    from .optimizers import StudySpec, optimize, sweep
    from .simulator import Result

__all__ = [
    "CNI_NAMES",
    "ConfigError",
    "Profile",
    "Result",
    "Scenario",
    "StudySpec",
    "available_profiles",
    "compare",
    "dataplane_sweep",
    "load_profile",
    "models",
    "optimize",
    "recorded_trace",
    "simulate",
    "simulator",
    "sweep",
]

__version__ = "0.1.0"

_SOURCES: dict[str, str] = {
    "CNI_NAMES": ".models",
    "ConfigError": ".models",
    "Profile": ".models",
    "Scenario": ".models",
    "available_profiles": ".models",
    "load_profile": ".models",
    "Result": ".simulator",
    "compare": "._api",
    "dataplane_sweep": "._api",
    "recorded_trace": "._api",
    "simulate": "._api",
    "StudySpec": ".optimizers",
    "optimize": ".optimizers",
    "sweep": ".optimizers",
}
_SUBPACKAGES = ("models", "simulator")


__getattr__, __dir__ = lazy_exports(__name__, globals(), _SOURCES, subpackages=_SUBPACKAGES)
