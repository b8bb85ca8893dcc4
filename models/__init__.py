"""bootstorm.models — scenarios, calibration profiles and the seed-000 CNI catalog.

A :class:`Scenario` (the what-if) and a :class:`Profile` (the node's costs)
compile into the simulator's flat program with :func:`compile_scenario`.
"""

from ._errors import ConfigError
from .cni import (
    RTNL,
    RTNL_OPS,
    STAGES,
    RtnlOps,
    cni_stages,
    pool_kinds,
    sandbox_plan,
    vport_creators,
)
from .compile import SeedLike, compile_scenario, service_streams
from .profile import (
    CostTable,
    HostSpec,
    Profile,
    SriovCostTable,
    TestbedCostTable,
    available_profiles,
    load_profile,
)
from .scenario import CNI_NAMES, CniName, Scenario
from .tuned import TUNED_CONFIG_SCHEMA_VERSION, ConfigOrigin, TunedConfig

__all__ = [
    "CNI_NAMES",
    "RTNL",
    "RTNL_OPS",
    "STAGES",
    "TUNED_CONFIG_SCHEMA_VERSION",
    "CniName",
    "ConfigError",
    "ConfigOrigin",
    "CostTable",
    "HostSpec",
    "Profile",
    "RtnlOps",
    "Scenario",
    "SeedLike",
    "SriovCostTable",
    "TestbedCostTable",
    "TunedConfig",
    "available_profiles",
    "cni_stages",
    "compile_scenario",
    "load_profile",
    "pool_kinds",
    "sandbox_plan",
    "service_streams",
    "vport_creators",
]
