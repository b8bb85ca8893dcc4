"""bootstorm.validation.agent — the node agent and its client.

The agent is an HTTP service on each node (``bootstorm agent serve``): per-stage
permits with leases that expire when a client dies, pools of devices
pre-created through netlink, ``PUT /config`` for a :class:`TunedConfig`
(saved, so a restart keeps it), Prometheus metrics, and a bearer token on
every call that changes something.
"""

from ._cni_pool import CniPoolSettings
from ._process import (
    TOKEN_ENV,
    AgentProcess,
    AgentProcessError,
    agent_process,
    measure_agent_calls,
    measure_agent_devices,
)
from ._protocol import DEFAULT_WAIT_S, MAX_WAIT_S, POOL_KINDS, ignored_pools
from ._runner import agent_in_thread
from ._server import AgentSettings, create_app, serve
from ._state import StartupConfig, default_state_dir
from .admission import AgentAdmission
from .client import (
    AgentClient,
    AgentError,
    ConfigInForce,
    Lease,
    PooledDevice,
    PoolsNotReadyError,
    PoolState,
    StageLease,
    wait_pools_ready,
)
from .inventory import AgentFleet, Inventory, InventoryNode, PushResult, push_config

__all__ = [
    "DEFAULT_WAIT_S",
    "MAX_WAIT_S",
    "POOL_KINDS",
    "TOKEN_ENV",
    "AgentAdmission",
    "AgentClient",
    "AgentError",
    "AgentFleet",
    "AgentProcess",
    "AgentProcessError",
    "AgentSettings",
    "CniPoolSettings",
    "ConfigInForce",
    "Inventory",
    "InventoryNode",
    "Lease",
    "PoolState",
    "PooledDevice",
    "PoolsNotReadyError",
    "PushResult",
    "StageLease",
    "StartupConfig",
    "agent_in_thread",
    "agent_process",
    "create_app",
    "default_state_dir",
    "ignored_pools",
    "measure_agent_calls",
    "measure_agent_devices",
    "push_config",
    "serve",
    "wait_pools_ready",
]
