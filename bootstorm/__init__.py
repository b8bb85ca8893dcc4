"""bootstorm — predict and shorten boot storms of secure containers.

>>> from bootstorm import Scenario, simulate
>>> result = simulate(Scenario(cni="ipvtap", sandboxes=400, profile="paper-000"))
>>> round(result.makespan_s)  # doctest: +SKIP
21
"""

from . import models, simulator
from ._api import compare, dataplane_sweep, simulate
from .models import CNI_NAMES, ConfigError, Profile, Scenario, available_profiles, load_profile
from .simulator import Result

__all__ = [
    "CNI_NAMES",
    "ConfigError",
    "Profile",
    "Result",
    "Scenario",
    "available_profiles",
    "compare",
    "dataplane_sweep",
    "load_profile",
    "models",
    "simulate",
    "simulator",
]

__version__ = "0.1.0"
