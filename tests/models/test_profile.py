"""Profiles: every number has a source; bad profiles do not load."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from bootstorm.models import ConfigError, Profile, available_profiles, load_profile


def test_builtin_profile_loads_with_a_source_for_every_number() -> None:
    assert "paper-000" in available_profiles()
    p = load_profile("paper-000")
    assert set(p.sources) == set(p.numeric_paths())
    assert all(src.strip() for src in p.sources.values())


def test_fitted_numbers_say_so() -> None:
    p = load_profile("paper-000")
    assert p.sources["costs.vm_boot_cpu_s"].startswith("fit")
    assert p.sources["costs.pool_device_mib.ipvtap"].startswith("fit: S0-7")


def _dump(p: Profile) -> dict[str, object]:
    return yaml.safe_load(p.to_yaml())  # type: ignore[no-any-return]


def test_a_number_without_a_source_is_refused(tmp_path: Path) -> None:
    data = _dump(load_profile("paper-000"))
    del data["sources"]["costs.vm_boot_cpu_s"]  # type: ignore[attr-defined]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"numbers without a source.*costs.vm_boot_cpu_s"):
        Profile.from_yaml(path)


def test_negative_cost_is_refused(tmp_path: Path) -> None:
    data = _dump(load_profile("paper-000"))
    data["costs"]["vm_boot_cpu_s"] = -1.0  # type: ignore[index]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(
        ConfigError, match=r"costs.vm_boot_cpu_s: .*greater than or equal to 0 \(got -1.0\)"
    ):
        Profile.from_yaml(path)


def test_round_trip_and_with_values(tmp_path: Path) -> None:
    p = load_profile("paper-000")
    path = tmp_path / "copy.yaml"
    path.write_text(p.to_yaml())
    assert load_profile(path) == p
    q = p.with_values({"costs.pool_device_mib.veth": 0.01}, source="test")
    assert q.costs.pool_device_mib["veth"] == 0.01
    assert q.sources["costs.pool_device_mib.veth"] == "test"
    with pytest.raises(ConfigError, match="no number at"):
        p.with_values({"costs.nope": 1.0})


def test_unknown_profile_name() -> None:
    with pytest.raises(ConfigError, match="unknown profile 'paper-999'"):
        load_profile("paper-999")


def test_hyper_threads_give_a_fraction_of_a_core() -> None:
    """paper-001's 112 CPUs are 56 cores with two threads each: when all are
    busy they do 56 x 1.3 cores' worth of work, and the storm's program gets
    that capacity; a profile without SMT numbers gets its CPUs in full."""
    from bootstorm.models import Scenario, compile_scenario

    host = load_profile("paper-001").host
    assert host.capacity_cores(112) == pytest.approx(56 * 1.3)
    machine = compile_scenario(Scenario(cni="fastiov", sandboxes=4, profile="paper-001")).machine
    assert machine.cores - machine.reserved_cores == pytest.approx(56 * 1.3)
    plain = load_profile("paper-000")
    assert plain.host.threads_per_core is None and "host.smt_yield" not in plain.sources
    assert plain.host.capacity_cores(64) == 64.0
    assert compile_scenario(Scenario(cni="veth", sandboxes=4)).machine.reserved_cores == 0.0


def test_resend_rtnl_beyond_the_resend_is_refused(tmp_path: Path) -> None:
    data = _dump(load_profile("paper-000"))
    data["costs"]["ovs_qos_resend_rtnl_s"] = 1.0  # type: ignore[index]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    match = r"ovs_qos_resend_rtnl_s <= ovs_qos_resend_s.*rtnl_s=1\.0"
    with pytest.raises(ConfigError, match=match):
        Profile.from_yaml(path)


def test_numbers_taken_as_another_profiles_match_it() -> None:
    """A source "as paper-000 ..." promises paper-000's value: a refit of
    paper-000 must be carried over (it was once forgotten)."""
    profiles = {name: load_profile(name) for name in available_profiles()}
    for profile in profiles.values():
        flat = _numbers(profile)
        for path, source in profile.sources.items():
            donor = source.split()[1] if source.startswith("as paper-") else None
            if donor is not None:
                assert flat[path] == _numbers(profiles[donor])[path], (profile.name, path, donor)


def _numbers(profile: Profile) -> dict[str, object]:
    data = profile.model_dump(mode="json", exclude_none=True)
    out: dict[str, object] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = value

    walk("", data)
    return out


def test_a_service_family_needs_a_source_and_a_known_name(tmp_path: Path) -> None:
    data = _dump(load_profile("paper-000"))
    data["service_family"] = "gamma"  # type: ignore[index]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"numbers without a source.*service_family"):
        Profile.from_yaml(path)
    data["sources"]["service_family"] = "a test"  # type: ignore[index]
    path.write_text(yaml.safe_dump(data))
    assert Profile.from_yaml(path).service_family == "gamma"
    data["service_family"] = "weibull"  # type: ignore[index]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="service_family"):
        Profile.from_yaml(path)


def test_a_profile_read_again_is_the_same_object() -> None:
    """Every compile reads its profile: the file is parsed once while it is unchanged."""
    assert load_profile("paper-000") is load_profile("paper-000")


def test_an_edited_profile_is_read_again_even_with_the_same_size_and_mtime(
    tmp_path: Path,
) -> None:
    """The cache keys on the bytes, not the clock: an edit within one tick of the
    file system's clock, keeping the size, is still seen."""
    path = tmp_path / "p.yaml"
    text = (Path(__file__).parents[2] / "models/profiles/paper-000.yaml").read_text()
    path.write_text(text)
    first = Profile.from_yaml(path)
    assert Profile.from_yaml(path) is first
    stat = path.stat()
    edited = text.replace("service_cv: 0.1\n", "service_cv: 0.2\n", 1)
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    again = Profile.from_yaml(path)
    assert again is not first and again.service_cv == 0.2 and first.service_cv == 0.1


def test_a_settled_profile_is_vouched_for_by_its_stat_and_an_edit_still_seen(
    tmp_path: Path,
) -> None:
    """A file left alone for a while is not read again while its stat is the
    same; an edit keeping its size and mtime still changes its ctime."""
    from bootstorm.models import _errors

    path = tmp_path / "p.yaml"
    text = (Path(__file__).parents[2] / "models/profiles/paper-000.yaml").read_text()
    path.write_text(text)
    an_hour_ago = path.stat().st_mtime_ns - 3600 * 10**9
    fresh = Profile.from_yaml(path)
    assert (Profile, str(path)) not in _errors._settled  # just written: bytes decide
    os.utime(path, ns=(an_hour_ago, an_hour_ago))
    # ctime moved with utime; age the settling limit instead of the clock.
    old_settled, _errors._SETTLED_NS = _errors._SETTLED_NS, -(10**18)
    try:
        assert Profile.from_yaml(path) is fresh
        assert (Profile, str(path)) in _errors._settled
        path.write_text(text.replace("service_cv: 0.1\n", "service_cv: 0.2\n", 1))
        os.utime(path, ns=(an_hour_ago, an_hour_ago))  # same size, same mtime
        assert Profile.from_yaml(path).service_cv == 0.2  # its ctime changed
    finally:
        _errors._SETTLED_NS = old_settled


@pytest.mark.parametrize("name", available_profiles())
def test_the_c_yaml_reader_reads_what_the_python_one_does(name: str) -> None:
    """Profiles are parsed with libyaml when PyYAML has it (20x faster): the same values."""
    text = (Path(__file__).parents[2] / f"models/profiles/{name}.yaml").read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert yaml.load(text, Loader=loader) == yaml.safe_load(text)
