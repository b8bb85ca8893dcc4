"""``bootstorm optimize``: tuned config out, applied back by ``simulate --config``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bootstorm import Scenario, simulate
from bootstorm.cli import main
from bootstorm.models import ConfigError, TunedConfig


def run_cli(
    *args: str, cwd: Path | None = None, state: Path | None = None
) -> subprocess.CompletedProcess[str]:
    code = "from bootstorm.cli import main; main()"
    env = dict(os.environ)
    if state is not None:
        env["XDG_STATE_HOME"] = str(state)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


@pytest.mark.slow
def test_optimize_writes_a_config_that_simulate_applies(tmp_path: Path) -> None:
    out = run_cli(
        "optimize",
        "--sandboxes",
        "60",
        "--trials",
        "12",
        "--memory-budget",
        "8GiB",
        "--output",
        str(tmp_path / "tuned.yaml"),
        cwd=tmp_path,
        state=tmp_path / "state",
    )
    assert out.returncode == 0, out.stderr
    assert "before / after" in out.stdout and "best config" in out.stdout
    # A journal file by default, in the user's state directory, not the working one.
    journal = tmp_path / "state" / "bootstorm" / "studies.log"
    assert journal.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "tuned.yaml"]
    config = TunedConfig.from_yaml(tmp_path / "tuned.yaml")
    assert set(config.limits) == {"AddCNI", "Cgroup", "AttachIf", "StartVM"}
    origin = config.origin
    assert origin is not None
    assert (origin.profile, origin.cni, origin.sandboxes) == ("paper-000", "ipvtap", 60)
    assert origin.sampler == "tpe" and origin.storage == str(journal)
    assert origin.study_name == "bootstorm-ipvtap-60-makespan-tpe"
    assert origin.trial_number is not None and origin.created_at is not None

    # The prediction in the file is what simulating the config gives (same seed, same bits).
    applied = run_cli(
        "simulate", "--sandboxes", "60", "--config", str(tmp_path / "tuned.yaml"), "--json"
    )
    assert applied.returncode == 0, applied.stderr
    data = json.loads(applied.stdout)
    assert data["scenario"]["limits"] == config.limits
    assert data["makespan_s"] == origin.predicted["makespan_s"]
    assert data["startup_s"]["p99"] == origin.predicted["p99_s"]
    # ... and so does the Python API, from the object or from the path.
    base = Scenario(sandboxes=60)
    by_path = simulate(Scenario(sandboxes=60, config=tmp_path / "tuned.yaml"))
    assert by_path.makespan_s == simulate(base.replace(config=config)).makespan_s

    # Running the command again resumes the same study: nothing new to do, and it says so.
    same = ("optimize", "--sandboxes", "60", "--trials", "12", "--memory-budget", "8GiB")
    state = tmp_path / "state"
    again = run_cli(*same, "--output", "again.yaml", cwd=tmp_path, state=state)
    assert again.returncode == 0, again.stderr
    assert "12 completed trials" in again.stdout
    assert "already held 12 completed trials, so none ran now" in " ".join(again.stdout.split())
    # Another search under the same name is refused rather than mixed in.
    other = run_cli("optimize", "--sandboxes", "60", "--trials", "12", cwd=tmp_path, state=state)
    assert other.returncode == 2
    assert "is a different search" in other.stderr
    # Another sampler gets its own study by default ...
    name = "bootstorm-ipvtap-60-makespan-random"
    rand = run_cli(*same, "--sampler", "random", "--trials", "3", cwd=tmp_path, state=state)
    assert rand.returncode == 0, rand.stderr
    assert f"study {name} in" in " ".join(rand.stdout.split())
    # ... and is refused, with the way out, under the TPE study's name (it reprinted
    # the TPE study's answer as its own).
    named = ("--study-name", "bootstorm-ipvtap-60-makespan-tpe")
    mixed = run_cli(*same, "--sampler", "random", *named, cwd=tmp_path, state=state)
    assert mixed.returncode == 2
    assert "was searched with 'tpe', not 'random'" in mixed.stderr
    assert len(mixed.stderr.strip().splitlines()) == 1


def test_config_overrides_the_scenario_key_by_key() -> None:
    config = TunedConfig(limits={"Cgroup": 40}, pools={"netns": 10})
    s = Scenario(sandboxes=20, limits={"Cgroup": 3, "StartVM": 5}, config=config)
    assert s.limits == {"Cgroup": 40, "StartVM": 5}
    assert s.pools == {"netns": 10}
    assert "config" not in s.model_dump()  # applied, not stored


def test_two_objectives_print_a_pareto_front(tmp_path: Path) -> None:
    out = run_cli(
        "optimize",
        "--sandboxes",
        "40",
        "--trials",
        "16",
        "--objective",
        "makespan",
        "--objective",
        "memory",
        "--pool-kind",
        "netns,ipvtap",
        "--sampler",
        "nsga2",
        "--storage",
        "memory",
        "--output",
        str(tmp_path / "t.yaml"),
    )
    assert out.returncode == 0, out.stderr
    assert "Pareto front" in out.stdout
    assert TunedConfig.from_yaml(tmp_path / "t.yaml").origin is not None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--memory-budget", "8 parsecs"], "error: memory_budget: expected a memory size"),
        (["--slo-p99", "-3s"], "error: slo_p99: expected a duration"),
        (["--objective", "speed"], "error: objective: unknown objective 'speed'"),
        (["--sampler", "bayes"], "error: sampler: unknown sampler 'bayes'"),
        (["--limit-stage", "Boot"], "error: limit_stage: unknown name 'Boot'"),
        (["--pool-kind", "veth"], "error: pool_kind: unknown name 'veth'"),
        (
            ["--sandboxes", "200,x"],
            "error: sandboxes: expected comma-separated integers, but got 'x'",
        ),
        (["--robust", "median"], "error: robust: must be one of mean, worst (got 'median')"),
        (["--trials", "0"], "error: trials: must be an integer within 1..100000 (got 0)"),
        (["--jobs", "2", "--storage", "memory"], "error: jobs: 2 workers need a storage URL"),
        (["--sandboxes", "-5"], "error: sandboxes:"),
        # Each of these fell back to a default, or dropped a value, unsaid.
        (["--limit-stage", ""], "error: limit_stage: expected comma-separated names"),
        (["--pool-kind", "netns,,veth"], "error: pool_kind: expected comma-separated names"),
        (["--seeds", ""], "error: seeds: expected N, N-M"),
        (["--seeds", "1,1"], "error: seeds: seed 1 given twice"),
        (["--sandboxes", "200,200"], "error: sandboxes: 200 given twice"),
        (["--slo-p99", ""], "error: slo_p99: expected a duration"),
        (["--memory-budget", ""], "error: memory_budget: expected a memory size"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["optimize", "--trials", "1", "--storage", "memory", *args])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(message), lines[0]


def test_simulate_with_a_missing_config_names_the_file(tmp_path: Path) -> None:
    out = run_cli("simulate", "--config", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2
    assert "nope.yaml: cannot read" in out.stderr


def test_scenario_refuses_a_config_of_another_type() -> None:
    with pytest.raises(ConfigError, match=r"^config: expected a TunedConfig or the path of one"):
        Scenario(config=3)


def test_a_scenario_file_may_name_a_config(tmp_path: Path) -> None:
    (tmp_path / "tuned.yaml").write_text(TunedConfig(limits={"AddCNI": 3}).to_yaml())
    (tmp_path / "storm.yaml").write_text(f"sandboxes: 30\nconfig: {tmp_path / 'tuned.yaml'}\n")
    s = Scenario.from_yaml(tmp_path / "storm.yaml")
    assert (s.sandboxes, s.limits) == (30, {"AddCNI": 3})
    # A bad config inside the tuned file is reported with the file's name.
    (tmp_path / "tuned.yaml").write_text("limits: {AddCNI: 0}\n")
    with pytest.raises(ConfigError, match=r"storm.yaml: .*tuned.yaml: config: limits.AddCNI"):
        Scenario.from_yaml(tmp_path / "storm.yaml")
