"""``bootstorm tune``'s loop without root: the "real" storms are the catalog
simulated under a known node profile, so what the loop measures is known.
It must write a config only when one was measured faster than the baseline,
and the config it writes must reproduce its own prediction when applied."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from bootstorm.calibration import trace_fit
from bootstorm.models import ConfigError, Profile, Scenario, TunedConfig, compile_scenario
from bootstorm.models.testbed import TESTBED_CNIS
from bootstorm.simulator import run_with
from bootstorm.traces import HostFacts, Trace
from bootstorm.validation.recording import from_recording
from bootstorm.workflows import RecordingProgress, tune


def node(**values: float) -> Profile:
    start = trace_fit.testbed_template(cores=2, memory_mib=2048, service_cv=0.05)
    return start.with_values(
        {"testbed.rcu_grace_s": 0.013, "testbed.vm_boot_s": 0.07, **values}, source="test node"
    )


class SimulatedNode:
    """A storm runner: the candidate's storm under ``truth``, as a trace."""

    def __init__(self, truth: Profile, *, cni: str = "testbed-veth") -> None:
        self.truth = truth
        self.cni = cni
        self.runs = 0

    def __call__(self, candidate: Any, *, sandboxes: int, vm: bool) -> Trace:
        self.runs += 1
        storm = Scenario(cni=self.cni, sandboxes=sandboxes, profile="local")
        if candidate.config is not None:
            storm = storm.replace(config=candidate.config)
        program = compile_scenario(storm, seed=self.runs, profile=self.truth)
        result = run_with(program, "simpy", record=True)
        assert result.recording is not None
        trace = from_recording(result.recording, cni=TESTBED_CNIS[self.cni].recorded)
        scenario = trace.header.scenario
        header = trace.header.model_copy(
            update={
                "source": "testbed",
                "host": HostFacts(kernel="6.1", cores=2, memory_mib=2048),
                "config": candidate.config,
                "scenario": scenario.model_copy(update={"pools": dict(storm.pools)}),
            }
        )
        return dataclasses.replace(trace, header=header)


def _tune(tmp_path: Path, truth: Profile, model: Profile, **kw: Any) -> Any:
    profile = tmp_path / "model.yaml"
    profile.write_text(model.to_yaml())
    args: dict[str, Any] = {
        "sandboxes": 16,
        "trials": 12,
        "candidates": 2,
        "repeats": 3,
        "profile_path": profile,
        "measured_ops": None,
        "plan_sandboxes": None,
        "plan_runs": 1,
        "pool_kinds": ("netns-veth",),
        "limit_stages": ("AttachIf",),
        "output": tmp_path / "tuned.yaml",
        "trace_dir": tmp_path / "runs",
        "report": tmp_path / "tune.html",
        "vm": False,
        "progress": RecordingProgress(),
        "run_storm": SimulatedNode(truth),
    }
    args.update(kw)
    return tune(**args)


def test_tune_writes_the_config_measured_faster_and_it_reproduces_its_prediction(
    tmp_path: Path,
) -> None:
    # Making a namespace and a pair is dear here: the pooled namespace wins.
    truth = node(**{"testbed.netns_create_cpu_s": 0.02, "testbed.rtnl_veth_hold_s": 0.01})
    outcome = _tune(tmp_path, truth, truth)
    assert outcome.chosen is not None
    assert outcome.wins >= 2
    written = TunedConfig.from_yaml(tmp_path / "tuned.yaml")
    assert written.pools.get("netns-veth", 0) > 0
    assert written.origin is not None
    applied = Scenario(cni="testbed-veth", sandboxes=16, profile=written.origin.profile).replace(
        config=written
    )
    result = run_with(compile_scenario(applied), "compiled")
    assert result.makespan_s == pytest.approx(written.origin.predicted["makespan_s"], rel=1e-9)
    assert result.startup.mean == pytest.approx(written.origin.predicted["mean_s"], rel=1e-9)
    assert len(list((tmp_path / "runs").glob("*.jsonl.gz"))) == 3 * 3
    page = (tmp_path / "tune.html").read_text()
    assert "predicted against measured" in page
    # What a planner reads to trust the pick (the page was one table of
    # medians): each candidate's settings, every run, the figures, the config.
    comparison = outcome.refitted or outcome.comparison
    for row in comparison.rows:
        assert ", ".join(f"{x:.2f}" for x in row.run_makespans_s) in page
    assert "netns-veth" in page  # a candidate's pool, in its settings
    assert "Makespan: every run against the prediction" in page
    assert "Stages: measured beside predicted" in page
    assert f"Chosen config: {outcome.chosen}" in page and "schema_version" in page
    assert "plotly.js embedded" in page


def test_tune_writes_nothing_when_no_candidate_beats_the_baseline(tmp_path: Path) -> None:
    """The model believes pooled veth pairs help (a dear pair, a cheap move);
    on the node a move is dear and a pair cheap: nothing is written."""
    model = node(**{"testbed.rtnl_veth_hold_s": 0.02, "testbed.rcu_grace_s": 1e-4})
    truth = node(**{"testbed.rtnl_veth_hold_s": 1e-4, "testbed.rcu_grace_s": 0.03})
    outcome = _tune(tmp_path, truth, model, pool_kinds=("veth",), limit_stages=())
    assert outcome.comparison.predicted_best.name != "baseline"
    assert outcome.chosen is None
    assert not (tmp_path / "tuned.yaml").exists()
    assert outcome.refitted is not None  # the profile missed: refitted with the storms


def test_tune_of_the_cni_runtime_searches_its_catalog_and_pools(tmp_path: Path) -> None:
    """With ``runtime="cni"`` the search, the candidates' storms and the
    written config are the CNI runtime's: its pool kinds (no veth pool), its
    catalog, and the config reproduces its prediction on ``testbed-cni-bridge``."""
    start = trace_fit.testbed_template(cores=2, memory_mib=2048, service_cv=0.05, runtimes=("cni",))
    # A dear ADD (the plugin's start): a plumbed namespace from the pool wins.
    truth = start.with_values(
        {"testbed.cni_exec_cpu_s": 0.03, "testbed.vm_boot_s": 0.07}, source="test node"
    )
    outcome = _tune(
        tmp_path,
        truth,
        truth,
        runtime="cni",
        pool_kinds=None,
        run_storm=SimulatedNode(truth, cni="testbed-cni-bridge"),
    )
    assert outcome.chosen is not None
    written = TunedConfig.from_yaml(tmp_path / "tuned.yaml")
    assert set(written.pools) <= {"netns", "netns-veth"} and written.pools
    assert written.origin is not None
    applied = Scenario(
        cni="testbed-cni-bridge", sandboxes=16, profile=written.origin.profile
    ).replace(config=written)
    result = run_with(compile_scenario(applied), "compiled")
    assert result.makespan_s == pytest.approx(written.origin.predicted["makespan_s"], rel=1e-9)


def test_tune_refuses_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="repeats: must be at least 1, but got 0"):
        _tune(tmp_path, node(), node(), repeats=0)
