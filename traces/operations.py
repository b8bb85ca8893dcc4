"""One measurement of a node's operations, each timed alone: the record a
calibration reads (``bootstorm testbed measure-ops --output``).

The testbed's bench (:func:`bootstorm.validation.testbed.ops.measure_operations`)
times each operation ``repeats`` times on an otherwise idle host; what it
returns is :class:`OperationTimes`, a recorded measurement like a trace, so it
lives here, in the bottom layer, where a calibration (which may not import
the testbed) reads it back. Its JSON form is bounded and validated: a
malformed file is a :class:`ValueError` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal, cast

import numpy as np

from .._params import Depends, Each, Interval, NonEmpty, OneOf, Rules, Satisfies, validate
from .schema import HostFacts

__all__ = [
    "CNI_OPERATIONS",
    "OPERATIONS",
    "VM_MODES",
    "OperationTimes",
    "OperationTiming",
    "VmMode",
    "check_count",
]

#: The operations timed, in the order they run.
OPERATIONS: tuple[str, ...] = (
    "netlink_noop",
    "netns_create",
    "veth_in_netns",
    "veth_on_host",
    "move_into_netns",
    "link_up",
    "addr_add",
    "tap_create",
    "tc_qdisc",
    "tc_filter",
    "cgroup_mkdir",
    "cgroup_attach",
    "vm_spawn",
    "vm_up",
    # The CNI runtime's processes (``testbed run --runtime cni``).
    "process_spawn",
    "cni_exec",
    "ipam_add",
    "tc_exec",
    "shim_start",
)
#: The CNI runtime's operations: run only where the CNI plugins are installed.
CNI_OPERATIONS = frozenset({"process_spawn", "cni_exec", "ipam_add", "tc_exec", "shim_start"})
VmMode = Literal["qemu-microvm", "process"]
VM_MODES: tuple[VmMode, ...] = ("qemu-microvm", "process")

_SCHEMA_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class OperationTiming:
    """The timed repetitions of one operation, in seconds (warm-up excluded)."""

    name: str
    samples_s: tuple[float, ...]

    __rules__: ClassVar[Rules] = Rules(
        name=OneOf(OPERATIONS),
        samples_s=(NonEmpty(), Each(Interval(float, 0, closed="neither", unit="s"))),
    )

    def __post_init__(self) -> None:
        validate(self)

    def _percentile_s(self, q: float) -> float:
        return float(np.percentile(np.asarray(self.samples_s, dtype=float), q))

    @property
    def median_s(self) -> float:
        return self._percentile_s(50.0)

    @property
    def q25_s(self) -> float:
        """First quartile (linear interpolation between samples, numpy's default)."""
        return self._percentile_s(25.0)

    @property
    def q75_s(self) -> float:
        return self._percentile_s(75.0)


@dataclass(frozen=True, kw_only=True)
class OperationTimes:
    """One measurement of the operations on one host: what :func:`measure_operations` returns
    and ``bootstorm testbed measure-ops --output`` writes."""

    timings: tuple[OperationTiming, ...]
    host: HostFacts
    vm_mode: VmMode
    created_at: datetime
    repeats: int
    warmup: int = 0
    #: The run id its objects were named with (``bst-<run>-…``).
    run: str | None = None
    notes: tuple[str, ...] = ()

    __rules__: ClassVar[Rules] = Rules(
        repeats=Interval(int, 1),
        warmup=Interval(int, 0),
        vm_mode=OneOf(VM_MODES),
        created_at=Satisfies(lambda t: t.tzinfo is not None, "must be a time with its UTC offset"),
        timings=(
            Satisfies(
                lambda ts: len({t.name for t in ts}) == len(ts),
                "must time each operation once",
                shown=lambda ts: f"{_repeated(t.name for t in ts)} twice",
            ),
            Depends(
                lambda o: Each(
                    Satisfies(
                        lambda t: len(t.samples_s) == o.repeats,
                        f"must hold repeats={o.repeats} samples",
                        shown=lambda t: f"{t.name}.samples_s with {len(t.samples_s)}",
                    )
                )
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    def __getitem__(self, name: str) -> OperationTiming:
        for t in self.timings:
            if t.name == name:
                return t
        raise KeyError(f"{name!r} was not measured; measured: {', '.join(self.names) or 'nothing'}")

    def __contains__(self, name: object) -> bool:
        return name in self.names

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.timings)

    def to_json(self) -> str:
        data = {
            "schema_version": _SCHEMA_VERSION,
            "created_at": self.created_at.isoformat(),
            "run": self.run,
            "host": self.host.model_dump(mode="json"),
            "vm_mode": self.vm_mode,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "notes": list(self.notes),
            "timings": [{"name": t.name, "samples_s": list(t.samples_s)} for t in self.timings],
        }
        return json.dumps(data, indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> OperationTimes:
        """Parse what :meth:`to_json` wrote; a :class:`ValueError` names the bad field."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"(top level): not JSON: {exc}") from None
        obj = _object(data, "(top level)")
        version = _get(obj, "schema_version", "")
        if version != _SCHEMA_VERSION:
            raise ValueError(f"schema_version: expected {_SCHEMA_VERSION}, but got {version!r}")
        stamp = _get(obj, "created_at", "")
        try:
            created_at = datetime.fromisoformat(_string(stamp, "created_at"))
        except ValueError:
            raise ValueError(f"created_at: expected an ISO 8601 time, but got {stamp!r}") from None
        run = obj.get("run")
        if run is not None:
            run = _string(run, "run")
        host_obj = _object(_get(obj, "host", ""), "host")
        kernel = _string(_get(host_obj, "kernel", "host."), "host.kernel")
        cores = check_count(_get(host_obj, "cores", "host."), "host.cores", minimum=1)
        memory = check_count(_get(host_obj, "memory_mib", "host."), "host.memory_mib", minimum=1)
        hostname = host_obj.get("hostname")
        if hostname is not None:
            hostname = _string(hostname, "host.hostname")
        notes = obj.get("notes", [])
        if not isinstance(notes, list):
            raise ValueError(f"notes: expected a list of strings, but got {notes!r}")
        raw_timings = _get(obj, "timings", "")
        if not isinstance(raw_timings, list):
            raise ValueError(f"timings: expected a list, but got {_short(raw_timings)}")
        timings = []
        for i, raw in enumerate(raw_timings):
            where = f"timings[{i}]"
            entry = _object(raw, where)
            name = _string(_get(entry, "name", f"{where}."), f"{where}.name")
            if name not in OPERATIONS:
                raise ValueError(
                    f"{where}.name: unknown operation {name!r}; known: {', '.join(OPERATIONS)}"
                )
            samples = _get(entry, "samples_s", f"{where}.")
            if not isinstance(samples, list):
                raise ValueError(f"{where}.samples_s: expected a list, but got {_short(samples)}")
            for j, x in enumerate(samples):
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0:
                    raise ValueError(
                        f"{where}.samples_s[{j}]: expected a positive duration in seconds, "
                        f"but got {x!r}"
                    )
            timings.append(OperationTiming(name=name, samples_s=tuple(float(x) for x in samples)))
        vm_mode = _get(obj, "vm_mode", "")
        if vm_mode not in VM_MODES:
            raise ValueError(f"vm_mode: expected one of {', '.join(VM_MODES)}, but got {vm_mode!r}")
        return cls(
            timings=tuple(timings),
            host=HostFacts(kernel=kernel, cores=cores, memory_mib=memory, hostname=hostname),
            vm_mode=cast(VmMode, vm_mode),
            created_at=created_at,
            repeats=check_count(_get(obj, "repeats", ""), "repeats", minimum=1),
            warmup=check_count(_get(obj, "warmup", ""), "warmup", minimum=0)
            if "warmup" in obj
            else 0,
            run=run,
            notes=tuple(_string(n, f"notes[{k}]") for k, n in enumerate(notes)),
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}: {text[:40]}…"


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a JSON object, but got {_short(value)}")
    return value


def _get(obj: Mapping[str, Any], key: str, prefix: str) -> Any:
    if key not in obj:
        raise ValueError(f"{prefix}{key}: missing")
    return obj[key]


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, but got {_short(value)}")
    return value


def _repeated(names: Iterable[str]) -> str:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return "none"


def check_count(value: object, where: str, *, minimum: int) -> int:
    """``value`` if it is an integer of at least ``minimum``; else a
    :class:`ValueError` naming ``where`` (a JSON field, or an argument)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: expected an integer of at least {minimum}, but got {value!r}")
    return value
