"""bootstorm — predict and shorten boot storms of secure containers.

>>> from bootstorm import Scenario, simulate
>>> result = simulate(Scenario(cni="ipvtap", sandboxes=400, profile="paper-000"))
>>> round(result.makespan_s)  # doctest: +SKIP
21
"""

from typing import TYPE_CHECKING, Any

from . import models, simulator
from ._api import compare, dataplane_sweep, simulate
from .models import CNI_NAMES, ConfigError, Profile, Scenario, available_profiles, load_profile
from .simulator import Result

if TYPE_CHECKING:
    from .optimizers import StudySpec, optimize, sweep

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
    "simulate",
    "simulator",
    "sweep",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The search imports Optuna; load it on first use so that `import bootstorm`
    # and `bootstorm simulate` stay quick.
    if name in ("StudySpec", "optimize", "sweep"):
        from . import optimizers

        return getattr(optimizers, name)
    raise AttributeError(f"module 'bootstorm' has no attribute {name!r}")
