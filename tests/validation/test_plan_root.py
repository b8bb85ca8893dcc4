"""A small calibration plan on this host's real kernel (root): the operations
timed alone, the plan's storms run and fitted together, then a moved-peer
storm the plan never ran predicted. The tolerance is wide (±50%): storms of a
dozen sandboxes on a shared 2-core host vary by tens of percent; what must
hold is that the move is identified by measurement, not assumed."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, links, cgroups)"),
    pytest.mark.skipif(sys.platform != "linux", reason="Linux only"),
]


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every operation timed alone, once for both plans (the CNI runtime's
    plan reads the CNI processes' times, the threads runtime's the rest).
    No pooled device's memory: no storm here reads it, and measuring it
    (tens of devices, a second's settle per batch) was 27 s of each test;
    test_pool_memory_root.py measures it. No hold stretch either: beside the
    suite's other worker it measures that worker's load;
    test_hold_stretch_root.py measures it, and the fit then goes by the
    kernel's build."""
    from bootstorm.validation.testbed.ops import measure_operations

    path = tmp_path_factory.mktemp("ops") / "ops.json"
    path.write_text(
        measure_operations(
            repeats=5, warmup=1, vm=False, settle_max_s=0.5, pool_devices=0, stretch_rounds=0
        ).to_json()
    )
    return path


def _small_plan(tmp_path: Path, ops: Path, *, pool_kind: str, runtime: str) -> Any:
    """A plan of 8 sandboxes, one run each, one pool kind and one limit, fitted."""
    from bootstorm.workflows import RecordingProgress, calibrate_plan

    return calibrate_plan(
        sandboxes=8,
        runs=1,
        pool_kinds=(pool_kind,),
        limit_stages=("AttachIf",),
        measured_ops=ops,
        measure=False,
        trace_dir=tmp_path / "plan",
        output=tmp_path / "local.yaml",
        dry_run=False,
        vm=False,
        max_evaluations=40,
        progress=RecordingProgress(),
        runtime=runtime,
    )


def test_a_small_plan_identifies_the_move_and_predicts_a_moved_storm(
    tmp_path: Path, ops: Path
) -> None:
    from bootstorm.calibration.trace_fit import predicted_vs_measured
    from bootstorm.validation.testbed import StormOptions, run_storm

    profile = _small_plan(tmp_path, ops, pool_kind="netns", runtime="threads")
    assert profile is not None and profile.identification is not None
    assert profile.identification.costs["testbed.rcu_grace_s"].status == "measured"
    assert (tmp_path / "local.yaml").exists()
    assert len(list((tmp_path / "plan").glob("*.jsonl.gz"))) >= 3
    moved = run_storm(StormOptions(sandboxes=16, vm=False, peer="moved"))
    assert not moved.failures
    rows = {c.metric: c for c in predicted_vs_measured(moved.trace, profile)}
    assert abs(rows["makespan_s"].rel_error) < 0.5


@pytest.mark.skipif(
    not any(Path(d, "bridge").exists() for d in ("/usr/lib/cni", "/opt/cni/bin")),
    reason="needs the CNI plugins: apt-get install containernetworking-plugins",
)
@pytest.mark.usefixtures("one_cni_storm_at_a_time")
def test_a_small_cni_plan_predicts_a_held_out_plumbed_pool_storm(tmp_path: Path, ops: Path) -> None:
    """The CNI runtime's plan (real plugins, a shim per sandbox), its
    processes timed alone, fitted; then a larger storm with plumbed
    namespaces from a pool, which no plan storm ran at that size, predicted."""
    from bootstorm.calibration.trace_fit import predicted_vs_measured
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed import StormOptions, run_storm

    profile = _small_plan(tmp_path, ops, pool_kind="netns-veth", runtime="cni")
    assert profile is not None and profile.identification is not None
    costs = profile.identification.costs
    assert costs["testbed.shim_start_cpu_s"].status == "measured"
    assert costs["testbed.rcu_grace_s"].status == "unidentified"  # no storm of the threads runtime
    held_out = run_storm(
        StormOptions(
            sandboxes=20,
            vm=False,
            runtime="cni",
            config=TunedConfig(pools={"netns-veth": 20}),
        )
    )
    assert not held_out.failures
    assert held_out.trace.header.scenario.runtime == "cni"
    rows = {c.metric: c for c in predicted_vs_measured(held_out.trace, profile)}
    assert abs(rows["makespan_s"].rel_error) < 0.5
