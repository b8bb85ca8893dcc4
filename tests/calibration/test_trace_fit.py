"""Fitting a testbed profile to a recorded storm, and validating against another."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bootstorm import simulate
from bootstorm.calibration.trace_fit import StormStats, bootstrap_prediction, fit_trace
from bootstorm.models import ConfigError, Profile, Scenario, compile_scenario
from bootstorm.traces import read_trace

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"
SMALL = DATA / "testbed-veth-qemu-25.jsonl.gz"
POOLED = DATA / "testbed-veth-qemu-25-netns-pool.jsonl.gz"


@pytest.fixture(scope="module")
def fitted() -> Profile:
    return fit_trace(read_trace(SMALL), max_evaluations=60).profile


def test_storm_stats_read_what_the_testbed_measured() -> None:
    stats = StormStats.of(read_trace(SMALL))
    assert stats.sandboxes == 25 and stats.cni == "testbed-veth" and stats.cores >= 1
    assert stats.latency_s.size == stats.complete.size > 0
    assert set(stats.stage_s) == {"NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM"}
    # A sandbox's startup covers its stages.
    total = sum(stats.stage_s.values())
    assert np.all(stats.latency_s >= total - 1e-9)
    pooled = StormStats.of(read_trace(POOLED))
    assert pooled.pools == {"netns": 25}


def test_the_fitted_profile_is_a_valid_profile_with_sources(
    fitted: Profile, tmp_path: Path
) -> None:
    assert fitted.testbed is not None and fitted.costs is None
    path = tmp_path / "local.yaml"
    path.write_text(fitted.to_yaml())
    again = Profile.from_yaml(path)
    assert again == fitted
    assert all(again.sources[p] for p in again.numeric_paths())


def test_the_fit_is_reproducible() -> None:
    trace = read_trace(SMALL)
    a = fit_trace(trace, max_evaluations=15).profile
    b = fit_trace(trace, max_evaluations=15).profile
    assert a.to_yaml() == b.to_yaml()


def test_the_fit_brings_the_storm_closer(fitted: Profile) -> None:
    """The fitted costs reproduce the storm they were fitted to better than
    the starting point does (contention itself is simulated, never fitted)."""
    from bootstorm.calibration.trace_fit import testbed_template

    trace = read_trace(SMALL)
    stats = StormStats.of(trace)
    start = testbed_template(cores=stats.cores, memory_mib=1024, service_cv=0.1)
    measured = stats.makespan_s

    def err(profile: Profile) -> float:
        return abs(simulate(stats.scenario(), profile=profile).makespan_s - measured) / measured

    assert err(fitted) < err(start)


def test_a_pool_replaces_namespace_creation_with_a_fetch(fitted: Profile) -> None:
    stats = StormStats.of(read_trace(SMALL))
    plain = simulate(stats.scenario(), profile=fitted)
    pooled = simulate(stats.scenario(pools={"netns": 25}), profile=fitted)
    assert pooled.pools["netns"].taken == 25
    assert pooled.stages["NetNS"].mean_s < plain.stages["NetNS"].mean_s


def test_a_veth_pool_moves_a_made_pair_in(fitted: Profile) -> None:
    """A pooled pair still takes RTNL twice (the move, with its grace
    period, and the rename) but never registers two netdevs."""
    stats = StormStats.of(read_trace(SMALL))
    plain = simulate(stats.scenario(), profile=fitted)
    pooled = simulate(stats.scenario(pools={"veth": 25}), profile=fitted)
    assert pooled.pools["veth"].taken == 25 and pooled.pool_memory_mib == 0.0
    assert pooled.locks["rtnl"].acquisitions == plain.locks["rtnl"].acquisitions + 25


def test_bootstrap_gives_an_interval(fitted: Profile) -> None:
    trace = read_trace(SMALL)
    what_if = StormStats.of(trace).scenario(sandboxes=50)
    interval = bootstrap_prediction(
        trace, fitted, what_if, resamples=3, max_evaluations=8, level=0.8
    )
    assert len(interval.samples) == 3
    assert interval.low <= interval.high
    assert all(s > 0 for s in interval.samples)
    with pytest.raises(ValueError, match="resamples >= 2"):
        bootstrap_prediction(trace, fitted, what_if, resamples=1)


def test_testbed_scenarios_need_a_testbed_profile() -> None:
    with pytest.raises(ConfigError, match="has no `testbed` section"):
        compile_scenario(Scenario(cni="testbed-veth", sandboxes=3))
    with pytest.raises(ConfigError, match="has no `costs` section"):
        from bootstorm.calibration.trace_fit import testbed_template

        local = testbed_template(cores=2, memory_mib=1024, service_cv=0.1)
        compile_scenario(Scenario(cni="ipvtap", sandboxes=3), profile=local)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from bootstorm.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600
    )


def test_calibrate_trace_prints_its_error_table_and_writes_the_profile(tmp_path: Path) -> None:
    out_file = tmp_path / "local.yaml"
    out = _cli(
        "calibrate", "--measured", str(SMALL), "--output", str(out_file), "--max-evaluations", "10"
    )
    assert out.returncode == 0, out.stderr
    assert "AttachIf mean" in out.stdout and "RTNL wait" in out.stdout
    assert "what identified each cost" in out.stdout and "unidentified" in out.stdout
    assert " ".join(out.stdout.split()).count("service times: ") == 1
    assert "by AIC over" in out.stdout
    assert Profile.from_yaml(out_file).testbed is not None


def test_validate_a_recorded_storm_against_a_profile(tmp_path: Path, fitted: Profile) -> None:
    profile = tmp_path / "local.yaml"
    profile.write_text(fitted.to_yaml())
    args = ("validate", "--profile", str(profile), "--measured", str(POOLED), "--json")
    loose = _cli(*args, "--threshold", "100")
    assert loose.returncode == 0, loose.stderr
    data = json.loads(loose.stdout)
    names = [row["metric"] for row in data["rows"]]
    assert names[:3] == ["makespan_s", "startup mean_s", "startup p99_s"]
    assert data["scenario"]["pools"] == {"netns": 25} and data["within"] is True
    strict = _cli(*args, "--threshold", "1e-9")
    assert strict.returncode == 1 and json.loads(strict.stdout)["within"] is False


def test_validate_takes_at_most_one_profile_source() -> None:
    out = _cli("validate", "--measured", str(SMALL))
    assert out.returncode == 2
    assert out.stderr.startswith("error: profile: --measured compares recorded storms")
    out = _cli(
        "validate", "--profile", "x.yaml", "--calibrate-from", str(SMALL), "--measured", str(SMALL)
    )
    assert out.returncode == 2
    assert out.stderr.startswith("error: profile: give at most one of --profile")
    out = _cli("validate", "--calibration-runs", "0")
    assert out.returncode == 2
    assert out.stderr.startswith("error: calibration_runs: must be in 1..100 (got 0)")


def test_a_malformed_or_missing_trace_is_one_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"record": "header"}\n')
    out = _cli("calibrate", "--measured", str(bad))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: bad.jsonl:1: header.")
    out = _cli("calibrate", "--measured", str(tmp_path / "missing.jsonl.gz"))
    assert out.returncode == 2 and "cannot read" in out.stderr and "Traceback" not in out.stderr


def _cut_halves(draw: np.ndarray) -> list[tuple[np.ndarray, float]]:
    """Stages as the trace fit sees them: each one's fastest half over its
    mean, and its median on that scale."""
    out = []
    for stage in draw:
        ordered = np.sort(stage)
        fast = ordered[: stage.size // 2]
        out.append((fast / fast.mean(), float(ordered[stage.size // 2] / fast.mean())))
    return out


def test_the_criterion_finds_gamma_and_keeps_lognormal_without_evidence() -> None:
    from bootstorm.calibration.trace_fit import AIC_MARGIN, choose_service_family

    rng = np.random.default_rng(0)
    cv = 0.8  # wide enough for a cut-off sample to show the tail's shape
    gamma = rng.gamma(1 / cv**2, cv**2, size=(4, 2000))
    sigma = np.sqrt(np.log1p(cv**2))
    lognormal = rng.lognormal(-0.5 * sigma**2, sigma, size=(4, 2000))
    found = choose_service_family(_cut_halves(gamma))
    assert found.chosen == "gamma" and found.samples == 4000
    assert found.aic["gamma"] < found.aic["lognormal"] - AIC_MARGIN
    kept = choose_service_family(_cut_halves(lognormal))
    assert kept.chosen == "lognormal"
    # A small sample says too little: the simulator's default stays.
    assert choose_service_family(_cut_halves(gamma[:, :40])).chosen == "lognormal"
    with pytest.raises(ValueError, match="positive factors"):
        choose_service_family([(np.array([1.0, -1.0]), 2.0)])


def test_the_fitted_profile_states_its_service_family(fitted: Profile) -> None:
    assert fitted.service_family in ("lognormal", "gamma")
    source = fitted.sources["service_family"]
    assert source.startswith(f"the recorded storm: {fitted.service_family} by AIC over")


def test_a_storm_with_its_cpu_work_measured_fits_that_too(fitted: Profile) -> None:
    """A trace that measured the host's busy core-seconds adds it as a fitted
    row (the model's ``cpu.busy_core_s``); a resample of its sandboxes, which
    has no CPU total of its own, and an older trace without it add none."""
    trace = read_trace(SMALL)
    assert trace.header.busy_core_s is None
    labels = [t.label for t in StormStats.of(trace).targets()]
    assert "CPU busy (core-s)" not in labels
    measured = dataclasses.replace(
        trace, header=trace.header.model_copy(update={"busy_core_s": 3.5})
    )
    stats = StormStats.of(measured)
    (row,) = [t for t in stats.targets() if t.label == "CPU busy (core-s)"]
    assert row.value == 3.5 and row.weight == 1.0 and row.role == "fit"
    result = simulate(stats.scenario(), profile=fitted)
    assert row.metric.read(result) == result.cpu.busy_core_s > 0
    assert StormStats.of(measured, sandboxes=[0, 1]).busy_core_s is None
    runs = StormStats.pooled([measured, measured, trace])
    assert runs.busy_core_s is None  # one run did not measure it
    assert StormStats.pooled([measured, measured]).busy_core_s == 3.5


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--sandboxes", "5"), "sandboxes: not with --measured"),
        (("--repeats", "2"), "repeats: not with --measured"),
        (("--config", "tuned.yaml"), "config: not with --measured (each brings the config"),
        (("--trace", "out.jsonl"), "trace: not with --measured"),
        (("--agent", "http://127.0.0.1:9"), "agent: not with --measured"),
    ],
)
def test_validate_measured_refuses_the_options_of_a_run(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], needle: str
) -> None:
    """Each was read and ignored: --sandboxes 0 against a 25-sandbox storm
    exited 0, a --config with a stage the catalog lacks too."""
    from bootstorm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["validate", "--measured", str(SMALL), "--profile", "x.yaml", *extra])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and needle in err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--measured", str(SMALL), "--pool-kind", "netns"), "pool-kind: goes with --plan"),
        (("--measured", str(SMALL), "--trace-dir", "runs"), "trace-dir: goes with --plan"),
        (("--check", "--dry-run"), "dry-run: goes with --plan, but got '--dry-run'"),
        (("--check", "--limit-stage", "AddCNI"), "limit-stage: goes with --plan"),
    ],
)
def test_calibrate_refuses_a_plans_options_without_the_plan(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], needle: str
) -> None:
    """Each was read and ignored outside --plan."""
    from bootstorm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", *extra])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and needle in err
