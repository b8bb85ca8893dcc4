"""Scenarios are validated when built; errors name the field and the value."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from bootstorm.models import ConfigError, Scenario


def test_defaults_are_the_seed_000_storm() -> None:
    s = Scenario()
    assert (s.cni, s.sandboxes, s.profile, s.memory_mib) == ("ipvtap", 400, "paper-000", 512)


@pytest.mark.parametrize(
    ("changes", "field", "value"),
    [
        ({"sandboxes": -5}, "sandboxes", "-5"),
        ({"sandboxes": 0}, "sandboxes", "0"),
        ({"memory_mib": -512}, "memory_mib", "-512"),
        ({"cni": "foo"}, "cni", "'foo'"),
        ({"qos_rules": -1}, "qos_rules", "-1"),
        ({"limits": {"Cgroup": 0}}, "limits.Cgroup", "0"),
        ({"pools": {"netns": -3}}, "pools.netns", "-3"),
        ({"arrival_s": [0.0, float("nan")], "sandboxes": 2}, "arrival_s.1", "nan"),
    ],
)
def test_bad_values_name_field_and_value(
    changes: dict[str, object], field: str, value: str
) -> None:
    with pytest.raises(ConfigError) as err:
        Scenario(**changes)  # type: ignore[arg-type]
    message = str(err.value)
    assert message.startswith(f"{field}:"), message
    assert value in message


def test_unknown_field_is_refused() -> None:
    with pytest.raises(ConfigError, match="sandboxs: unknown field"):
        Scenario(sandboxs=3)  # type: ignore[call-arg]


def test_cross_field_rules() -> None:
    with pytest.raises(ConfigError, match="tenants <= sandboxes"):
        Scenario(sandboxes=3, tenants=4)
    with pytest.raises(ConfigError, match="one time per sandbox"):
        Scenario(sandboxes=3, arrival_s=(0.0, 1.0))


def test_frozen_and_replace_revalidates() -> None:
    s = Scenario(sandboxes=10)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type is internal
        s.sandboxes = 5  # type: ignore[misc]
    assert s.replace(cni="veth").cni == "veth"
    with pytest.raises(ConfigError, match="sandboxes"):
        s.replace(sandboxes=-1)


def test_replace_keeps_validated_arrivals_and_checks_the_rest() -> None:
    """The arrivals are carried over, not validated again one float at a
    time (the same tuple); the changed fields and the arrivals' count
    against the sandboxes are still checked; new arrivals are validated."""
    s = Scenario(sandboxes=3, arrival_s=(0.0, 1.0, 2.0))
    r = s.replace(seed=4, limits={"AddCNI": 2})
    assert r.arrival_s is s.arrival_s
    assert r == Scenario(sandboxes=3, arrival_s=(0.0, 1.0, 2.0), seed=4, limits={"AddCNI": 2})
    with pytest.raises(ConfigError, match="one time per sandbox"):
        s.replace(sandboxes=4)
    with pytest.raises(ConfigError, match="seed"):
        s.replace(seed=-1)
    with pytest.raises(ConfigError, match="arrival_s"):
        s.replace(arrival_s=(0.0, float("nan"), 1.0))


def test_yaml_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("cni: veth\nsandboxes: 200\nlimits: {Cgroup: 40}\npools: {netns: 10}\n")
    s = Scenario.from_yaml(path)
    assert (s.cni, s.sandboxes, s.limits, s.pools) == ("veth", 200, {"Cgroup": 40}, {"netns": 10})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cni: veth\nsandboxs: 3\n", "sandboxs: unknown field"),
        ("cni: veth\n  sandboxes: [3\n", "line 2: malformed YAML"),
        ("- just\n- a list\n", "expected a mapping"),
        ("sandboxes: -4\n", "sandboxes: Input should be greater than or equal to 1 (got -4)"),
    ],
)
def test_bad_yaml_names_file_and_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        Scenario.from_yaml(path)
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_a_profile_object_is_refused_with_the_way_to_pass_it() -> None:
    from bootstorm.models import load_profile

    with pytest.raises(ConfigError) as err:
        Scenario(profile=load_profile("paper-000"))  # type: ignore[arg-type]
    message = str(err.value)
    assert "got a Profile" in message and "simulate(scenario, profile=...)" in message
    assert len(message) < 300  # one line, not the whole object


def test_a_profile_path_may_be_a_path_object(tmp_path: Path) -> None:
    assert Scenario(profile=tmp_path / "p.yaml").profile == str(tmp_path / "p.yaml")  # type: ignore[arg-type]


def test_long_bad_values_are_shortened() -> None:
    with pytest.raises(ConfigError) as err:
        Scenario(limits={"AddCNI": "x" * 500})  # type: ignore[dict-item]
    assert "limits.AddCNI" in str(err.value)
    assert len(str(err.value)) < 300


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.floats(min_value=0.0, max_value=2e7),
            st.integers(min_value=-2, max_value=3),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_arrivals_checked_at_once_are_accepted_and_refused_as_one_by_one(
    times: list[float | int | bool],
) -> None:
    """The arrivals' array check decides as the validation per element does:
    the same tuple accepted, the same one-line refusal otherwise."""
    from pydantic import TypeAdapter

    from bootstorm.models.scenario import Seconds

    one_by_one = TypeAdapter(tuple[Seconds, ...])
    try:
        expected = one_by_one.validate_python(times)
    except ValidationError:
        expected = None
    try:
        got = Scenario(sandboxes=len(times), arrival_s=times).arrival_s
    except ConfigError as exc:
        assert expected is None
        assert str(exc).startswith("arrival_s.")
        return
    assert got == expected
