"""One declarative validation for every value object: one error, one format.

``bootstorm._params`` declares the rules; each value object's bad input is a
:class:`~bootstorm.models.ConfigError` (the CLI's exit 2, the agent's 400)
reading ``field: rule (got value)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from bootstorm._params import (
    Check,
    ConfigError,
    Each,
    Interval,
    Maybe,
    OneOf,
    Rules,
    format_problem,
    validate,
)
from bootstorm.calibration._fit import FreeParameter
from bootstorm.calibration.check import CheckRow, RowCheck
from bootstorm.calibration.known_misses import KnownMiss
from bootstorm.calibration.plan import PlanStorm
from bootstorm.calibration.rows import PaperRow
from bootstorm.calibration.targets import PaperTarget
from bootstorm.models import ConfigError as ModelsConfigError
from bootstorm.models.softirq import FlowCosts
from bootstorm.models.sriov import SRIOV_VARIANTS
from bootstorm.optimizers._objectives import Constraints
from bootstorm.optimizers._space import IntRange
from bootstorm.simulator import (
    Async,
    Cpu,
    CyclicPlans,
    GateSpec,
    LockKind,
    LockSpec,
    MachineSpec,
    Once,
    PoolSpec,
    ProgramError,
    Signal,
    Sleep,
    Stage,
    Zero,
    compile_program,
)
from bootstorm.simulator.executors import check_executor
from bootstorm.traces.operations import OperationTiming
from bootstorm.validation.agent._cni_pool import CniPoolSettings
from bootstorm.validation.agent._server import AgentSettings
from bootstorm.validation.candidates import Candidate
from bootstorm.validation.testbed.cni import CniNetwork, ExecRecord

ONE_LINE = re.compile(r"^[A-Za-z_][\w.\[\]]*: must [^\n]+ \(got [^\n]+\)$")

_FLOW = dict.fromkeys(
    (
        "rx_irq",
        "rx_softirq",
        "app_system",
        "app_user",
        "tx_system",
        "tx_user",
        "kthread_system",
        "irqs",
        "batches",
        "messages",
        "wire_gbit",
    ),
    1.0,
)

#: A bad construction of each value object converted, and the field it must name.
BAD: list[tuple[str, Callable[[], object]]] = [
    ("prezeroed", lambda: replace(SRIOV_VARIANTS["sriov-vanilla"], prezeroed=1.5)),
    (
        "prezeroed",
        lambda: replace(SRIOV_VARIANTS["fastiov"], prezeroed=0.5),  # lazy zeroing
    ),
    ("rx_irq", lambda: FlowCosts(**{**_FLOW, "rx_irq": -1.0}, softirqs_per_batch=1)),
    ("plugin", lambda: CniPoolSettings(plugin="macvlan", bin_dir=Path("/opt/cni/bin"))),
    (
        "read_timeout_s",
        lambda: AgentSettings(token=SecretStr("x" * 32), read_timeout_s=0.0),
    ),
    ("max_body_bytes", lambda: AgentSettings(token=SecretStr("x" * 32), max_body_bytes=1)),
    ("tls_key", lambda: AgentSettings(token=SecretStr("x" * 32), tls_cert=Path("c.pem"))),
    ("name", lambda: Candidate(name="a b")),
    ("pid", lambda: ExecRecord(program="x", command="x", pid=-1, rc=0, start_s=0, end_s=1)),
    ("end_s", lambda: ExecRecord(program="x", command="x", pid=1, rc=0, start_s=2, end_s=1)),
    ("plugins", lambda: CniNetwork(name="n", plugins=())),
    ("plugins[0]", lambda: CniNetwork(name="n", plugins=("[]",))),
    ("samples_s[0]", lambda: OperationTiming(name="link_up", samples_s=(math.nan,))),
    ("high", lambda: IntRange(low=5, high=2)),
    ("memory_budget_mib", lambda: Constraints(memory_budget_mib=-1.0)),
    # calibration/
    (
        "per_seed",
        lambda: RowCheck(
            row=CheckRow(key="S0-2", label="x", value=1.0, read=lambda _: 1.0, tolerance_rel=0.05),
            per_seed=(),
        ),
    ),
    ("low", lambda: FreeParameter(path="x", start=1.0, low=0.0, high=2.0)),
    ("start", lambda: FreeParameter(path="x", start=5.0, low=1.0, high=2.0)),
    (
        "evaluate",
        lambda: PaperTarget(id="t", role="fit", label="x", value=1.0, source="s"),
    ),
    ("kind", lambda: PaperRow(key="S9-1", kind="guess", figure="x")),
    ("why", lambda: PaperRow(key="S9-1", kind="mechanism", figure="x")),
    ("sandboxes", lambda: PlanStorm(sandboxes=1)),
    ("peer", lambda: PlanStorm(sandboxes=4, runtime="cni", peer="moved")),
    ("says", lambda: KnownMiss(key="S0-8/x", row="S0-8", profile="p", says="", why="w")),
    ("key", lambda: KnownMiss(key="S0-8/x", row="S0-13", profile="p", says="s", why="w")),
]

#: The same for the simulator's inputs, which refuse with its ProgramError.
BAD_PROGRAMS: list[tuple[str, Callable[[], object]]] = [
    ("work_s", lambda: Cpu(-1.0)),
    ("growth_s", lambda: Cpu(1.0, growth_s=math.nan)),
    ("duration_s", lambda: Sleep(math.inf)),
    ("n_bytes", lambda: Zero(-1.0)),
    ("kind", lambda: Async("", ())),
    ("count", lambda: Signal("g", -1)),
    ("waiters", lambda: Once("o", (), -1)),
    ("name", lambda: LockSpec(name="")),
    ("spin_s", lambda: LockSpec(name="s", spin_s=-0.1)),
    ("spin_s", lambda: LockSpec(name="s", kind=LockKind.SPIN, spin_s=1.0)),
    ("wake_s", lambda: LockSpec(name="s", kind=LockKind.RW, wake_s=0.1)),
    ("permits", lambda: GateSpec(name="g", permits=0)),
    ("permits", lambda: GateSpec(name="g", permits=-1, signal=True)),
    ("capacity", lambda: PoolSpec(name="p", capacity=-1, memory_mib_per_device=0.0)),
    ("memory_mib_per_device", lambda: PoolSpec(name="p", capacity=1, memory_mib_per_device=-1)),
    ("cores", lambda: MachineSpec(cores=0)),
    ("reserved_cores", lambda: MachineSpec(cores=2, reserved_cores=2.0)),
    ("guest_cpu_quota", lambda: MachineSpec(cores=1, guest_cpu_quota=math.inf)),
    ("plans", lambda: CyclicPlans([], sandboxes=1)),
    ("sandboxes", lambda: CyclicPlans([(Stage("s", (Cpu(1.0),)),)], sandboxes=-1)),
    ("executor", lambda: check_executor("numba")),
    ("executor", lambda: check_executor("compiled", record=True)),
    (
        "service_cv",
        lambda: compile_program(
            [(Stage("s", (Cpu(1.0),)),)], machine=MachineSpec(cores=1), locks=[], service_cv=-1
        ),
    ),
    (
        "service_family",
        lambda: compile_program(
            [(Stage("s", (Cpu(1.0),)),)],
            machine=MachineSpec(cores=1),
            locks=[],
            service_family="weibull",
        ),
    ),
]


@pytest.mark.parametrize(("field", "build"), BAD, ids=[f for f, _ in BAD])
def test_every_value_object_refuses_in_one_format(field: str, build: Callable[[], object]) -> None:
    with pytest.raises(ConfigError) as caught:
        build()
    message = str(caught.value)
    assert ONE_LINE.match(message), message
    assert message.startswith(f"{field}: ")


@pytest.mark.parametrize(("field", "build"), BAD_PROGRAMS, ids=[f for f, _ in BAD_PROGRAMS])
def test_every_simulator_input_refuses_in_one_format(
    field: str, build: Callable[[], object]
) -> None:
    with pytest.raises(ProgramError) as caught:
        build()
    message = str(caught.value)
    assert ONE_LINE.match(message), message
    assert message.startswith(f"{field}: ")


def test_a_program_error_is_a_config_error() -> None:
    """The node agent catches ConfigError as bad input (HTTP 400): a bad
    simulator input must be one too."""
    assert issubclass(ProgramError, ConfigError)


def test_the_error_is_the_models_config_error() -> None:
    """``except ConfigError`` (the CLI's exit 2, the agent's 400) catches it, and
    ``except ValueError`` as before."""
    assert ConfigError is ModelsConfigError
    assert issubclass(ConfigError, ValueError)


def test_format() -> None:
    assert format_problem("low", "must be >= 0", -1) == "low: must be >= 0 (got -1)"
    long = format_problem("name", "must be short", "x" * 500)
    assert len(long) < 120 and "\n" not in long


@settings(max_examples=200, deadline=None)
@given(
    low=st.one_of(st.none(), st.floats(-1e6, 1e6)),
    high=st.one_of(st.none(), st.floats(-1e6, 1e6)),
    closed=st.sampled_from(["both", "left", "right", "neither"]),
    value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans()),
)
def test_interval_holds_exactly_what_it_says(
    low: float | None, high: float | None, closed: Any, value: Any
) -> None:
    rule = Interval(float, low, high, closed=closed)
    expected = (
        not isinstance(value, bool)
        and math.isfinite(value)
        and (low is None or value > low or (value == low and closed in ("both", "left"))) is True
        and (high is None or value < high or (value == high and closed in ("both", "right")))
        is True
    )
    assert rule.holds(value) == expected
    if not expected:
        problem = rule.problem("x", value)
        assert problem is not None and problem[1] == rule.text()


@settings(max_examples=100, deadline=None)
@given(value=st.one_of(st.integers(), st.floats(), st.booleans(), st.text(max_size=5)))
def test_an_integer_interval_takes_integers_only(value: Any) -> None:
    rule = Interval(int, 0, 10)
    expected = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10
    assert rule.holds(value) == expected


def test_a_huge_int_is_compared_exactly_not_overflowed() -> None:
    assert not Interval(int, 0, 10).holds(10**400)
    assert Interval(float, 0).holds(10**400)
    assert "digit int" in format_problem("n", Interval(int, 0, 10).text(), 10**400)


def test_rules_report_the_first_broken_one_in_declared_order() -> None:
    class Thing:
        __rules__ = Rules(
            a=Interval(int, 0),
            b=Maybe(OneOf(("x", "y"))),
            c=Each(Interval(int, 0)),
            checks=(Check("a", lambda t: t.a < 5, lambda t: f"must be < 5 (b={t.b!r})"),),
        )

        def __init__(self, a: object, b: object, c: tuple[int, ...] = ()) -> None:
            self.a, self.b, self.c = a, b, c
            validate(self)

    Thing(1, None, (0, 1))
    with pytest.raises(ConfigError, match=r"^c\[1\]: must be an integer >= 0 \(got -2\)$"):
        Thing(1, "x", (0, -2))
    with pytest.raises(ConfigError, match=r"^a: must be an integer >= 0 \(got -1\)$"):
        Thing(-1, "z")
    with pytest.raises(ConfigError, match=r"^b: must be one of x, y \(got 'z'\)$"):
        Thing(1, "z")
    with pytest.raises(ConfigError, match=r"^a: must be < 5 \(b=None\) \(got 7\)$"):
        Thing(7, None)


def test_the_operation_times_name_the_operation_at_fault() -> None:
    from bootstorm.traces import HostFacts
    from bootstorm.traces.operations import OperationTimes

    timing = OperationTiming(name="link_up", samples_s=(0.1, 0.2))
    host = HostFacts(kernel="6", cores=2, memory_mib=1024)
    now = datetime.now().astimezone()
    with pytest.raises(ConfigError, match=r"^timings: .* \(got link_up twice\)$"):
        OperationTimes(
            timings=(timing, timing), host=host, vm_mode="process", created_at=now, repeats=2
        )
    with pytest.raises(ConfigError, match=r"^timings\[0\]: .* \(got link_up\.samples_s with 2\)$"):
        OperationTimes(timings=(timing,), host=host, vm_mode="process", created_at=now, repeats=3)
