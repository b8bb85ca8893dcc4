"""bootstorm.models — scenarios, calibration profiles, the CNI catalogs and the data plane.

A :class:`Scenario` (the what-if) and a :class:`Profile` (the node's costs)
compile into the simulator's flat program with :func:`compile_scenario`.
"""

# Names load on first use (PEP 562): importing the package, or one light name
# of it, does not load every module (and NumPy, pydantic, YAML) with it.
from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._errors import (
        ConfigError,
    )
    from .cni import (
        RTNL,
        RTNL_OPS,
        STAGES,
        VPORT_SHARING,
        RtnlOps,
        VportSharing,
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
        estimate_memory,
        full_pools,
        run_scenario,
        scenario_pool_kinds,
        scenario_stages,
        service_streams,
    )
    from .dataplane import (
        DATA_PATHS,
        DataPath,
        DataplaneCostTable,
        Traffic,
    )
    from .families import (
        CNI_FAMILIES,
        CniFamily,
        FamilyPlans,
        cni_family,
        family_cnis,
    )
    from .interval import DEFAULT_LEVEL, headline_interval
    from .profile import (
        CostEvidence,
        CostTable,
        FittedOn,
        HostSpec,
        Identification,
        PredictionError,
        Profile,
        SriovCostTable,
        TestbedCostTable,
        UnseenDirection,
        available_profiles,
        load_profile,
    )
    from .scenario import (
        CNI_NAMES,
        CniName,
        Scenario,
        available_scenarios,
        load_scenario,
    )
    from .softirq import (
        DataplaneResult,
        solve_dataplane,
        solve_on_profile,
    )
    from .tuned import (
        TUNED_CONFIG_SCHEMA_VERSION,
        ConfigOrigin,
        FollowRate,
        PoolRefill,
        TunedConfig,
        follow_rate_target,
    )

__all__ = [
    "CNI_FAMILIES",
    "CNI_NAMES",
    "DATA_PATHS",
    "DEFAULT_LEVEL",
    "RTNL",
    "RTNL_OPS",
    "STAGES",
    "TUNED_CONFIG_SCHEMA_VERSION",
    "VPORT_SHARING",
    "CniFamily",
    "CniName",
    "ConfigError",
    "ConfigOrigin",
    "CostEvidence",
    "CostTable",
    "DataPath",
    "DataplaneCostTable",
    "DataplaneResult",
    "FamilyPlans",
    "FittedOn",
    "FollowRate",
    "HostSpec",
    "Identification",
    "PoolRefill",
    "PredictionError",
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
    "VportSharing",
    "available_profiles",
    "available_scenarios",
    "cni_family",
    "cni_stages",
    "compile_scenario",
    "estimate_memory",
    "family_cnis",
    "follow_rate_target",
    "full_pools",
    "headline_interval",
    "load_profile",
    "load_scenario",
    "ovs_reconfigure_s",
    "pool_kinds",
    "qos_resend_s",
    "run_scenario",
    "sandbox_plan",
    "scenario_pool_kinds",
    "scenario_stages",
    "service_streams",
    "solve_dataplane",
    "solve_on_profile",
    "vport_creators",
]

_SOURCES: dict[str, str] = {
    "ConfigError": "._errors",
    "RTNL": ".cni",
    "RTNL_OPS": ".cni",
    "STAGES": ".cni",
    "VPORT_SHARING": ".cni",
    "RtnlOps": ".cni",
    "VportSharing": ".cni",
    "CNI_FAMILIES": ".families",
    "CniFamily": ".families",
    "FamilyPlans": ".families",
    "cni_family": ".families",
    "family_cnis": ".families",
    "cni_stages": ".cni",
    "ovs_reconfigure_s": ".cni",
    "pool_kinds": ".cni",
    "qos_resend_s": ".cni",
    "sandbox_plan": ".cni",
    "vport_creators": ".cni",
    "DEFAULT_LEVEL": ".interval",
    "headline_interval": ".interval",
    "ProgramCache": ".compile",
    "SeedLike": ".compile",
    "compile_scenario": ".compile",
    "estimate_memory": ".compile",
    "full_pools": ".compile",
    "run_scenario": ".compile",
    "scenario_pool_kinds": ".compile",
    "scenario_stages": ".compile",
    "service_streams": ".compile",
    "DATA_PATHS": ".dataplane",
    "DataPath": ".dataplane",
    "DataplaneCostTable": ".dataplane",
    "Traffic": ".dataplane",
    "CostEvidence": ".profile",
    "CostTable": ".profile",
    "FittedOn": ".profile",
    "HostSpec": ".profile",
    "Identification": ".profile",
    "PredictionError": ".profile",
    "Profile": ".profile",
    "SriovCostTable": ".profile",
    "TestbedCostTable": ".profile",
    "UnseenDirection": ".profile",
    "available_profiles": ".profile",
    "load_profile": ".profile",
    "CNI_NAMES": ".scenario",
    "CniName": ".scenario",
    "Scenario": ".scenario",
    "available_scenarios": ".scenario",
    "load_scenario": ".scenario",
    "DataplaneResult": ".softirq",
    "solve_dataplane": ".softirq",
    "solve_on_profile": ".softirq",
    "TUNED_CONFIG_SCHEMA_VERSION": ".tuned",
    "ConfigOrigin": ".tuned",
    "TunedConfig": ".tuned",
    "FollowRate": ".tuned",
    "PoolRefill": ".tuned",
    "follow_rate_target": ".tuned",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _SOURCES)
