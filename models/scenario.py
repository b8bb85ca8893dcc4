"""The what-if a capacity planner asks: a typed, frozen, validated scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ._errors import ConfigError, format_validation_error, load_yaml_model
from .dataplane import PathName
from .tuned import TunedConfig

__all__ = ["CNI_NAMES", "CniName", "Scenario"]

CniName = Literal[
    "no-network",
    "veth",
    "ipvlan",
    "macvlan",
    "ipvtap",
    "macvtap",
    "tc-routing",
    "vhost-user",
    "ebpf",
    # SR-IOV passthrough (seed 001): vanilla, FastIOV, its ablations, pre-zeroing.
    "sriov-vanilla",
    "fastiov",
    "fastiov-no-lock",
    "fastiov-sync-vf",
    "fastiov-no-skip",
    "fastiov-eager-zero",
    "prezero-10",
    "prezero-50",
    "prezero-100",
    # The testbed's own sandboxes (``bootstorm testbed run``), on a profile fitted to a trace.
    "testbed-veth",
    "testbed-veth-moved",
    "testbed-cni-bridge",
]
CNI_NAMES: tuple[str, ...] = get_args(CniName)

NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveInt = Annotated[int, Field(ge=1)]


class Scenario(BaseModel):
    """One boot storm on one node.

    Parameters
    ----------
    cni:
        The network: one of :data:`CNI_NAMES` — a software CNI of seed 000,
        or SR-IOV passthrough of seed 001 (``sriov-vanilla``, ``fastiov``,
        its ablations ``fastiov-no-lock``/``-sync-vf``/``-no-skip``/
        ``-eager-zero``, pre-zeroing ``prezero-10``/``-50``/``-100``).
    sandboxes:
        How many sandboxes start.
    profile:
        A built-in calibration profile (``paper-000``) or a path to one.
    memory_mib:
        Guest memory per sandbox.
    vcpus:
        vCPUs per sandbox: its guest's CPU quota in cores (``None``: the
        profile's, as the paper ran it).
    tenants:
        Tenants the sandboxes belong to (spread evenly); sharing-mode CNIs
        create one vPort per tenant.
    qos_rules:
        QoS rules per vPort (seed 000 §4.1.2 uses 2).
    sg_rules:
        Security-group rules per pod, inserted as OVS flows.
    pools:
        Pre-created devices per kind (``netns``, ``vport``, or the CNI's own
        device such as ``ipvtap``): creation becomes a fetch while they last.
    limits:
        Per-stage concurrency limits: at most K sandboxes inside the stage.
    rtnl_priority:
        Grant priority of RTNL waiters by stage (lower first); empty is FIFO.
    arrival_s:
        Arrival time of each sandbox; ``None`` is the papers' burst at t=0.
    cores:
        Override the profile's core count.
    nic_vfs:
        Override the VFs the profile's NIC offers (SR-IOV: one per sandbox).
    hugepages:
        Override whether guest memory is backed by hugepages (SR-IOV DMA mapping).
    background_load:
        Other work on the node: that many always-runnable tasks share its
        cores with the storm (a shared host's load average).
    background_flows:
        Flows of traffic the node receives during the storm; the host CPU
        they need (IRQs, softirqs, vhost-net) is taken from it (the profile
        needs a ``dataplane`` section).
    flow_gbps:
        Offered load of each background flow, Gbps.
    background_path:
        Their receive data path; ``None``: the CNI's (ipvlan/ipvtap/macvlan/
        macvtap: ``kata-tap``; veth and the other software CNIs: ``kata-veth``;
        SR-IOV: ``sriov``, which costs the host nothing).
    seed:
        Seed of the service-time and arrival streams.
    config:
        A :class:`~bootstorm.models.TunedConfig` (or the path of its YAML
        file) to apply. Its ``limits``, ``pools`` and ``rtnl_priority``
        override the scenario's maps key by key: a stage or device kind the
        config names takes the config's value, the others keep the
        scenario's. The config is applied when the scenario is built and is
        not kept (the scenario stays a plain what-if that dumps and loads
        as before); its ``lease_ttl_s`` only concerns node agents.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cni: CniName = "ipvtap"
    sandboxes: PositiveInt = 400
    profile: str = "paper-000"
    memory_mib: PositiveInt = 512
    vcpus: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    tenants: PositiveInt = 1
    qos_rules: NonNegativeInt = 0
    sg_rules: NonNegativeInt = 0
    pools: dict[str, NonNegativeInt] = Field(default_factory=dict)
    limits: dict[str, PositiveInt] = Field(default_factory=dict)
    rtnl_priority: dict[str, int] = Field(default_factory=dict)
    arrival_s: tuple[Annotated[float, Field(ge=0.0, allow_inf_nan=False)], ...] | None = None
    cores: PositiveInt | None = None
    nic_vfs: PositiveInt | None = None
    hugepages: bool | None = None
    background_load: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.0
    background_flows: NonNegativeInt = 0
    flow_gbps: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0
    background_path: PathName | None = None
    seed: NonNegativeInt = 0

    def __init__(self, **data: Any) -> None:
        if "config" in data:
            data = _with_config(data, data.pop("config"))
        named = data.get("profile")
        if isinstance(named, Path):
            data = {**data, "profile": str(named)}
        elif named is not None and not isinstance(named, str):
            # A notebook user's likeliest slip: the profile object itself.
            raise ConfigError(
                f"profile: a scenario names its profile (a built-in name or a YAML path), "
                f"but got a {type(named).__name__}; pass the object as "
                "simulate(scenario, profile=...) or compile_scenario(scenario, profile=...)"
            )
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc)) from None

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if self.tenants > self.sandboxes:
            raise ValueError(
                f"`tenants <= sandboxes` must hold, but got tenants={self.tenants}, "
                f"sandboxes={self.sandboxes}"
            )
        if self.arrival_s is not None and len(self.arrival_s) != self.sandboxes:
            raise ValueError(
                f"arrival_s must list one time per sandbox ({self.sandboxes}), "
                f"but got {len(self.arrival_s)}"
            )
        return self

    @classmethod
    def from_yaml(cls, path: str | Path) -> Scenario:
        """Load a scenario file; unknown fields and bad values are refused."""
        return load_yaml_model(cls, Path(path))

    def replace(self, **changes: Any) -> Scenario:
        """A validated copy with some fields changed."""
        return Scenario(**{**self.model_dump(), **changes})


def _with_config(data: dict[str, Any], config: TunedConfig | str | Path | None) -> dict[str, Any]:
    """``data`` with the config's maps laid over its own, key by key (the config wins)."""
    if config is None:
        return data
    if isinstance(config, str | Path):
        config = TunedConfig.from_yaml(config)
    if not isinstance(config, TunedConfig):
        raise ConfigError(
            f"config: expected a TunedConfig or the path of one, but got {type(config).__name__}"
        )
    merged = dict(data)
    for key in ("limits", "pools", "rtnl_priority"):
        given: dict[str, int] = getattr(config, key)
        if given:
            merged[key] = {**(data.get(key) or {}), **given}
    return merged
