"""bootstorm.models — scenarios, calibration profiles, the CNI catalogs and the data plane.

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
    ovs_reconfigure_s,
    pool_kinds,
    qos_resend_s,
    sandbox_plan,
    vport_creators,
)
from .compile import (
    ProgramCache,
    SeedLike,
    compile_scenario,
    full_pools,
    scenario_pool_kinds,
    scenario_stages,
    service_streams,
)
from .dataplane import DATA_PATHS, DataPath, DataplaneCostTable, Traffic
from .profile import (
    CostEvidence,
    CostTable,
    HostSpec,
    Identification,
    Profile,
    SriovCostTable,
    TestbedCostTable,
    UnseenDirection,
    available_profiles,
    load_profile,
)
from .scenario import CNI_NAMES, CniName, Scenario
from .softirq import DataplaneResult, solve_dataplane, solve_on_profile
from .tuned import TUNED_CONFIG_SCHEMA_VERSION, ConfigOrigin, TunedConfig

__all__ = [
    "CNI_NAMES",
    "DATA_PATHS",
    "RTNL",
    "RTNL_OPS",
    "STAGES",
    "TUNED_CONFIG_SCHEMA_VERSION",
    "CniName",
    "ConfigError",
    "ConfigOrigin",
    "CostEvidence",
    "CostTable",
    "DataPath",
    "DataplaneCostTable",
    "DataplaneResult",
    "HostSpec",
    "Identification",
    "Profile",
    "ProgramCache",
    "RtnlOps",
    "Scenario",
    "SeedLike",
    "SriovCostTable",
    "TestbedCostTable",
    "Traffic",
    "TunedConfig",
    "UnseenDirection",
    "available_profiles",
    "cni_stages",
    "compile_scenario",
    "full_pools",
    "load_profile",
    "ovs_reconfigure_s",
    "pool_kinds",
    "qos_resend_s",
    "sandbox_plan",
    "scenario_pool_kinds",
    "scenario_stages",
    "service_streams",
    "solve_dataplane",
    "solve_on_profile",
    "vport_creators",
]
