"""The what-if a capacity planner asks: a typed, frozen, validated scenario."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)

from ..traces._config import NamesAsKeys
from ._errors import ConfigError, format_validation_error, load_yaml_model
from .dataplane import PathName
from .profile import MAX_CORES, MAX_MEMORY_MIB, MAX_NIC_VFS, MIN_VCPUS
from .tuned import MAX_CONFIG_STAGES, MAX_RTNL_PRIORITY, NotBool, PoolRefill, TunedConfig

__all__ = [
    "CNI_NAMES",
    "MAX_ARRIVAL_S",
    "MAX_BACKGROUND_FLOWS",
    "MAX_BACKGROUND_LOAD",
    "MAX_CORES",
    "MAX_FLOW_GBPS",
    "MAX_MEMORY_MIB",
    "MAX_NIC_VFS",
    "MAX_QOS_RULES",
    "MAX_SANDBOXES",
    "MAX_SEED",
    "MAX_SG_RULES",
    "MAX_TENANTS",
    "MIN_VCPUS",
    "CniName",
    "Scenario",
    "available_scenarios",
    "load_scenario",
]

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
    # TSoR (seed 003): TCP sockets over RDMA, and the two designs it argues against.
    "tsor",
    "tsor-dynamic-ip",
    "tsor-qp-per-pod",
    # The testbed's own sandboxes (``bootstorm testbed run``), on a profile fitted to a trace.
    "testbed-veth",
    "testbed-veth-moved",
    "testbed-cni-bridge",
    "testbed-cni-ptp",
    "testbed-cni-macvlan",
]
CNI_NAMES: tuple[str, ...] = get_args(CniName)

# Every count and size a scenario holds has an upper bound, declared here with
# where it comes from: a value past it is a slip (a digit too many, a 400-digit
# paste) that would otherwise end in an OverflowError deep in the model, a
# program of billions of ops or a search that never ends -- never in a storm
# anyone meant. A storm of many sandboxes that is still within its bound is
# sized against this machine's memory before it is built (compile_scenario).

#: Sandboxes in one storm. The papers' storms are 400 (seed 000 §4) and 200
#: (seed 001 §5); the benchmarks run a day of 1 000 000 arrivals
#: (benchmarks/bench_planner.py) and size 10⁹ (tests/simulator/
#: test_program_scale.py). Past 10⁹ no machine holds the program (~2 KB a
#: sandbox: 2 TB); the bound keeps the count well inside the kernel's int64.
MAX_SANDBOXES = 1_000_000_000
#: Tenants (one shared vPort each). Seed 000 §4.1.2 (S0-13) spreads 400
#: sandboxes over 1 to 200 tenants. Each tenant's vPort is a plan of its own
#: and a signal gate in every task's kernel state, so compile time and memory
#: grow as tenants x sandboxes (4 000 sandboxes: 0.14 s and 19 MiB with 200
#: tenants, 0.64 s and 68 MiB with 1 000, 4.1 s and 251 MiB with 4 000).
MAX_TENANTS = 1_000
#: QoS rules per vPort. Seed 000 §4.1.2 (S0-11) configures 2. Each rule is
#: ~12 ops in every sandbox that sets it and is re-sent with every later vPort:
#: 100 rules make a 400-sandbox veth storm 0.56 M ops (1.5 s on SimPy); 1 000
#: made 4.9 M ops (14 s) and 100 000 on 5 sandboxes took 26 s and 1 GB.
MAX_QOS_RULES = 100
#: Security-group rules per pod. Seed 000 §4.1.2 (S0-12, Fig. 12) goes up to
#: 100; a cloud caps the rules on one interface at about 1 000 (AWS: security
#: groups per interface x rules per group <= 1 000). Each is an OVS flow-mod:
#: 1 000 rules on 400 sandboxes are 1.7 M ops (11 s on SimPy, 0.6 s compiled).
MAX_SG_RULES = 1_000
# Guest memory per sandbox (MAX_MEMORY_MIB, 64 TiB), CPUs (MAX_CORES, 8 192),
# the NIC's VFs (MAX_NIC_VFS, 2 048) and a sandbox's vCPUs (MIN_VCPUS, 0.001)
# are a host's: bounded where a profile's host is (models/profile.py), with
# their sources. (A quota of 1e-300 cores made a makespan of 1.5e300 s.)

#: Always-runnable background tasks: Linux cannot have more tasks than its
#: PID_MAX_LIMIT (4 194 304 = 2²²).
MAX_BACKGROUND_LOAD = float(1 << 22)
#: Background flows. Seeds 002 and 004 run 1 to 6 flows (S4-3); the data-plane
#: solver takes ~2 s for 10 000 flows and did not end in a minute for 10⁷.
MAX_BACKGROUND_FLOWS = 10_000
#: Offered Gbps of one flow: six times 1.6 TbE, the fastest Ethernet there is
#: (a flow faster than its path is capped by the model anyway).
MAX_FLOW_GBPS = 10_000.0
#: Latest arrival, seconds (~116 days). A day of arrivals is 86 400 s; at
#: 10⁷ s a float still resolves 2 ns, far below the shortest hold of a profile,
#: where at 1e300 every stage's duration was lost to rounding (makespan 0).
MAX_ARRIVAL_S = 1e7
#: Seeds: what fits a signed 64-bit integer (NumPy, Parquet, Optuna's storage).
MAX_SEED = 2**63 - 1
#: Longest profile name or path: Linux's PATH_MAX.
_MAX_PROFILE_CHARS = 4096


Sandboxes = Annotated[int, NotBool, Field(ge=1, le=MAX_SANDBOXES)]
PoolSize = Annotated[int, NotBool, Field(ge=0, le=MAX_SANDBOXES)]  # past the storm's: full
Limit = Annotated[int, NotBool, Field(ge=1, le=MAX_SANDBOXES)]  # past the storm's: no limit
Priority = Annotated[int, NotBool, Field(ge=-MAX_RTNL_PRIORITY, le=MAX_RTNL_PRIORITY)]
Seconds = Annotated[float, NotBool, Field(ge=0.0, le=MAX_ARRIVAL_S, allow_inf_nan=False)]


def _arrivals_at_once(value: Any, validate: ValidatorFunctionWrapHandler) -> Any:
    """Arrivals that are all floats within 0..MAX_ARRIVAL_S, checked as one
    array (a day's million, one validator call each, took a second); any
    other value through the validation per element, for its one-line error."""
    if (
        isinstance(value, (tuple, list))
        and len(value) <= MAX_SANDBOXES
        and all(type(t) is float for t in value)  # not a bool, an int or a str
    ):
        times = np.asarray(value, dtype=np.float64)
        if bool(((times >= 0.0) & (times <= MAX_ARRIVAL_S)).all()):  # NaN fails both
            return tuple(value)
    return validate(value)


Arrivals = Annotated[
    tuple[Seconds, ...], Field(max_length=MAX_SANDBOXES), WrapValidator(_arrivals_at_once)
]


class Scenario(BaseModel):
    """One boot storm on one node.

    Parameters
    ----------
    cni:
        The network: one of :data:`CNI_NAMES` — a software CNI of seed 000,
        or SR-IOV passthrough of seed 001 (``sriov-vanilla``, ``fastiov``,
        its ablations ``fastiov-no-lock``/``-sync-vf``/``-no-skip``/
        ``-eager-zero``, pre-zeroing ``prezero-10``/``-50``/``-100``), or
        TSoR of seed 003 (``tsor``, and the designs it argues against:
        ``tsor-dynamic-ip``, ``tsor-qp-per-pod``; the profile needs a
        ``tsor`` section).
    sandboxes:
        How many sandboxes start (1 to 10⁹; a storm this machine has not the
        memory for is refused when it is compiled).
    profile:
        A built-in calibration profile (``paper-000``) or a path to one.
    memory_mib:
        Guest memory per sandbox.
    vcpus:
        vCPUs per sandbox: its guest's CPU quota in cores (``None``: the
        profile's, as the paper ran it).
    tenants:
        Tenants the sandboxes belong to (spread evenly, at most 1 000);
        sharing-mode CNIs create one vPort per tenant.
    qos_rules:
        QoS rules per vPort (seed 000 §4.1.2 uses 2; at most 100).
    sg_rules:
        Security-group rules per pod, inserted as OVS flows (at most 1 000).
    pools:
        Pre-created devices per kind (``netns``, ``vport``, or the CNI's own
        device such as ``ipvtap``): creation becomes a fetch while they last.
    limits:
        Per-stage concurrency limits: at most K sandboxes inside the stage.
    rtnl_priority:
        Grant priority of RTNL waiters by stage (lower first); empty is FIFO.
    pool_refill:
        How the pools refill while starts go on (:class:`PoolRefill`: refill
        workers that take the same locks and CPU as the starts, a target
        that may follow the start rate); ``None``: the pools are made
        before the storm and never refilled (the papers' setup).
    through_agent:
        The testbed's sandboxes take their permits and pooled devices from a
        node agent over HTTP (``testbed run --agent``, ``tune --workload``):
        each lease of a limited stage is two calls (acquire, release) and
        each pool take one, at the profile's measured
        ``testbed.agent_call_cpu_s`` (the caller's CPU, under the testbed's
        GIL) and ``agent_serve_cpu_s`` (the agent's). ``False``: the
        testbed's own in-process admission (no calls); other CNIs ignore it.
    arrival_s:
        Arrival time of each sandbox; ``None`` is the papers' burst at t=0.
    lifetime_s:
        Each sandbox's VM stops this long after it came up, during the
        storm, as ``testbed run --lifetime-s`` stops it (its VMM and shim
        exit, its tap goes under RTNL: CPU and a lock the starts still
        running share); ``None``: the VMs stay up (the papers' storms). Only
        the testbed's catalog (``testbed-*``) has a stop, measured.
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
        Seed of the service-time and arrival streams (0 to 2⁶³ - 1).
    config:
        A :class:`~bootstorm.models.TunedConfig` (or the path of its YAML
        file) to apply. Its ``limits``, ``pools`` and ``rtnl_priority``
        override the scenario's maps key by key: a stage or device kind the
        config names takes the config's value, the others keep the
        scenario's; its ``pool_refill``, if set, replaces the scenario's.
        The config is applied when the scenario is built and is not kept
        (the scenario stays a plain what-if that dumps and loads as
        before); its ``lease_ttl_s`` only concerns node agents.

    Every number has a range (the ``MAX_*`` constants of this module, each
    with where it comes from): a value outside it is refused with the field,
    the rule and the value.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cni: CniName = "ipvtap"
    sandboxes: Sandboxes = 400
    profile: Annotated[str, Field(min_length=1, max_length=_MAX_PROFILE_CHARS)] = "paper-000"
    memory_mib: Annotated[int, NotBool, Field(ge=1, le=MAX_MEMORY_MIB)] = 512
    vcpus: (
        Annotated[float, NotBool, Field(ge=MIN_VCPUS, le=MAX_CORES, allow_inf_nan=False)] | None
    ) = None
    tenants: Annotated[int, NotBool, Field(ge=1, le=MAX_TENANTS)] = 1
    qos_rules: Annotated[int, NotBool, Field(ge=0, le=MAX_QOS_RULES)] = 0
    sg_rules: Annotated[int, NotBool, Field(ge=0, le=MAX_SG_RULES)] = 0
    pools: Annotated[dict[str, PoolSize], Field(max_length=MAX_CONFIG_STAGES)] = Field(
        default_factory=dict
    )
    limits: Annotated[dict[str, Limit], Field(max_length=MAX_CONFIG_STAGES)] = Field(
        default_factory=dict
    )
    rtnl_priority: Annotated[dict[str, Priority], Field(max_length=MAX_CONFIG_STAGES)] = Field(
        default_factory=dict
    )
    pool_refill: Annotated[PoolRefill | None, NamesAsKeys] = None
    through_agent: bool = False
    arrival_s: Arrivals | None = None
    lifetime_s: Seconds | None = None
    cores: Annotated[int, NotBool, Field(ge=1, le=MAX_CORES)] | None = None
    nic_vfs: Annotated[int, NotBool, Field(ge=1, le=MAX_NIC_VFS)] | None = None
    hugepages: bool | None = None
    background_load: Annotated[
        float, NotBool, Field(ge=0.0, le=MAX_BACKGROUND_LOAD, allow_inf_nan=False)
    ] = 0.0
    background_flows: Annotated[int, NotBool, Field(ge=0, le=MAX_BACKGROUND_FLOWS)] = 0
    flow_gbps: Annotated[float, NotBool, Field(gt=0.0, le=MAX_FLOW_GBPS, allow_inf_nan=False)] = 1.0
    background_path: PathName | None = None
    seed: Annotated[int, NotBool, Field(ge=0, le=MAX_SEED)] = 0

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
        if self.lifetime_s is not None and not self.cni.startswith("testbed-"):
            raise ValueError(
                f"lifetime_s: only the testbed's catalog (testbed-*) models a VM's stop, "
                f"but got cni={self.cni!r} with lifetime_s={self.lifetime_s:g}"
            )
        if self.arrival_s is not None and len(self.arrival_s) != self.sandboxes:
            raise ValueError(
                f"arrival_s must list one time per sandbox ({self.sandboxes}), "
                f"but got {len(self.arrival_s)}"
            )
        return self

    @property
    def refills(self) -> bool:
        """Whether its pools refill while the starts go on: a refill policy
        and something pooled (a policy over no pool refills nothing)."""
        return self.pool_refill is not None and any(n > 0 for n in self.pools.values())

    @classmethod
    def from_yaml(cls, path: str | Path) -> Scenario:
        """Load a scenario file; unknown fields and bad values are refused."""
        return load_yaml_model(cls, Path(path))

    def replace(self, **changes: Any) -> Scenario:
        """A validated copy with some fields changed.

        Arrivals this scenario holds already passed validation and are kept
        as they are (each change is checked, and their count against the
        sandboxes): a search's trials replaced an hour's 14 000 arrivals one
        float at a time, a third of its time.
        """
        if self.arrival_s is None or "arrival_s" in changes:
            return Scenario(**{**self.model_dump(), **changes})
        rest = Scenario(**{**self.model_dump(exclude={"arrival_s"}), **changes})
        if rest.sandboxes != len(self.arrival_s):
            # The full validation, for its one-line refusal.
            return Scenario(**{**self.model_dump(), **changes})
        return rest.model_copy(update={"arrival_s": self.arrival_s})


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
    if config.pool_refill is not None:
        merged["pool_refill"] = config.pool_refill
    return merged


_EXAMPLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""An installed example's name: a file name in the package, never a path."""


def _examples() -> Any:
    return resources.files("bootstorm.models").joinpath("scenarios")


def available_scenarios() -> list[str]:
    """The example scenarios installed with bootstorm, by name."""
    return sorted(
        p.name[: -len(".yaml")] for p in _examples().iterdir() if p.name.endswith(".yaml")
    )


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A scenario YAML file by path, or an example installed with bootstorm
    by name (``storm-400-ipvtap``; :func:`available_scenarios`), as profiles
    are found (:func:`~.profile.load_profile`): a name ending in ``.yaml`` or
    naming a file that exists is a path."""
    path = Path(name_or_path)
    name = str(name_or_path)
    try:
        on_disk = path.suffix in (".yaml", ".yml") or path.exists()
    except (OSError, ValueError):  # too long a name, a NUL byte: neither
        on_disk = True  # the reader says why, in one line
    if on_disk or not _EXAMPLE_NAME.fullmatch(name):
        return Scenario.from_yaml(path)
    ref = _examples().joinpath(f"{name}.yaml")
    if not ref.is_file():
        raise ConfigError(
            f"scenario: no file and no installed example named {name!r}; the examples are "
            f"{', '.join(available_scenarios())}, or give the path of a YAML file"
        )
    with resources.as_file(ref) as real:  # a zipped package's: a copy while read
        return Scenario.from_yaml(real)
