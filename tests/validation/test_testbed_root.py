"""Real storms on this host (root): spans for every stage, RTNL contention, cleanup.

Assertions name only this test's run (its run id, its pid's tracefs
instance), never "no bst- object at all": pytest-xdist may run another root
test's storm at the same moment.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import start_testbed_run

from bootstorm.validation.testbed._leftovers import REGISTRY_DIR

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, cgroups, tracefs)"),
    pytest.mark.skipif(sys.platform != "linux", reason="Linux only"),
]

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")
TRACEFS_INSTANCES = Path("/sys/kernel/tracing/instances")


def _netns() -> list[str]:
    return os.listdir("/run/netns") if os.path.isdir("/run/netns") else []


def _objects_of(run: str, pid: int | None = None) -> list[str]:
    """Everything left of run ``run`` (and of process ``pid``'s collector)."""
    from pyroute2 import IPRoute

    from bootstorm.validation.testbed._cgroup import cgroup2_root

    left = [f"netns {n}" for n in _netns() if n.startswith(f"bst-{run}-")]
    with IPRoute() as ipr:
        left += [
            f"link {n}"
            for link in ipr.get_links()
            if (n := link.get_attr("IFLA_IFNAME")) and n.startswith(f"bst{run}")
        ]
    cg = cgroup2_root() / "bootstorm-testbed" / run
    if cg.exists():
        left.append(f"cgroup {cg}")
    left += [f"workdir {p}" for p in Path(tempfile.gettempdir()).glob(f"bootstorm-testbed-{run}-*")]
    if (REGISTRY_DIR / run).exists():
        left.append(f"registry {run}")
    if pid is not None and (TRACEFS_INSTANCES / f"bootstorm-{pid}").exists():
        left.append(f"tracefs bootstorm-{pid}")
    return left


def test_storm_end_to_end(tmp_path: Path) -> None:
    from bootstorm.traces import read_trace, write_trace
    from bootstorm.validation.testbed import StormOptions, run_storm, summarize

    # 20 sandboxes on 2 cores: enough concurrency that RTNL waits happen every run
    # (a storm of 8 sometimes has none); the microVMs are 32 MiB stubs.
    result = run_storm(StormOptions(sandboxes=20, vm_memory_mib=32))
    assert result.failures == ()
    trace = result.trace
    got = Counter((s.sandbox, s.stage) for s in trace.spans)
    assert got == Counter({(i, st): 1 for i in range(20) for st in STAGES})
    assert all(s.tid is not None for s in trace.spans)
    for i in range(20):  # stages in order, none overlapping
        mine = sorted((s for s in trace.spans if s.sandbox == i), key=lambda s: s.start_s)
        assert [s.stage for s in mine] == list(STAGES)
        assert all(a.end_s <= b.start_s for a, b in itertools.pairwise(mine))
    rtnl = [lk for lk in trace.locks if lk.lock == "rtnl"]
    assert rtnl, "no RTNL contention seen in a storm of 20"
    assert any(lk.sandbox is not None and lk.stage in STAGES for lk in rtnl)
    s = summarize(trace)
    assert s.completed == 20 and s.makespan_s > 0 and s.rtnl.waits == len(rtnl)
    assert trace.header.kernel_trace is not None and trace.header.host is not None
    path = tmp_path / "storm.jsonl.gz"
    write_trace(trace, path)
    assert read_trace(path) == trace
    assert _objects_of(result.run, os.getpid()) == []


def test_pool_and_limits(tmp_path: Path) -> None:
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed import StormOptions, run_storm

    config = TunedConfig(limits={"AttachIf": 2}, pools={"netns": 4})
    result = run_storm(
        StormOptions(sandboxes=6, vm=False, kernel_trace=False, peer="moved", config=config)
    )
    assert result.failures == ()
    h = result.trace.header
    assert h.scenario.pools == {"netns": 4} and h.config == config
    assert h.scenario.vm == "process" and any("fallback" in n for n in h.notes)
    attach = sorted(  # at a tie, a leaving sandbox (-1) counts before an entering one
        ev
        for s in result.trace.spans
        if s.stage == "AttachIf"
        for ev in ((s.start_s, 1), (s.end_s, -1))
    )
    inside = peak = 0
    for _, step in attach:
        inside += step
        peak = max(peak, inside)
    assert peak <= 2
    assert _objects_of(result.run) == []


def _start_run(sandboxes: int) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``bootstorm testbed run`` and wait until its namespaces appear."""
    return start_testbed_run(
        "--runtime",
        "threads",
        "--sandboxes",
        str(sandboxes),
        started=lambda run: any(n.startswith(f"bst-{run}-") for n in _netns()),
        timeout_s=30,
    )


def test_sigint_mid_run_leaves_nothing() -> None:
    proc, run = _start_run(40)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), err.decode()[-500:]
    assert _objects_of(run, proc.pid) == []


def test_sigkill_mid_run_is_swept() -> None:
    from bootstorm.validation.testbed import sweep_leftovers, sweep_lock

    proc, run = _start_run(40)
    # Held from the kill to the sweep, the lock keeps another root test's
    # storm (the other xdist worker) from sweeping this run's leftovers
    # first, so the report must name them.
    with sweep_lock() as lock:
        time.sleep(0.3)  # some devices, cgroups and the tracefs instance exist by now
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        left = _objects_of(run, proc.pid)
        assert left != []  # the kill left things behind
        report = sweep_leftovers(lock=lock)
    assert _objects_of(run, proc.pid) == []
    named = [n for n in report.netns if n.startswith(f"bst-{run}-")]
    assert named, (report, left)
    assert run in report.registry


def test_a_registration_waits_for_a_sweep_under_way() -> None:
    """A run that registers mid-sweep must not be swept as dead (the race the lock closes)."""
    import threading

    from bootstorm.validation.testbed import sweep_lock
    from bootstorm.validation.testbed._leftovers import (
        new_run_id,
        register_run,
        unregister_run,
    )

    run = new_run_id()
    registered = threading.Event()
    thread = threading.Thread(target=lambda: (register_run(run), registered.set()))
    with sweep_lock():
        thread.start()
        assert not registered.wait(0.5)  # blocked while the sweep holds the lock
        assert not (REGISTRY_DIR / run).exists()
    thread.join(timeout=10)
    try:
        assert registered.is_set()
        assert (REGISTRY_DIR / run).read_text().strip() == str(os.getpid())
    finally:
        unregister_run(run)


def test_netprio_without_a_v1_mount_is_refused_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    from bootstorm.validation.testbed import StormOptions, TestbedError, driver, run_storm
    from bootstorm.validation.testbed._cgroup import netprio_root

    try:
        netprio_root()
    except TestbedError:
        pass
    else:
        pytest.skip("a v1 net_prio hierarchy is mounted here; the refusal cannot be shown")
    runs: list[str] = []  # this run's id: another test's storm may run meanwhile

    def new_run_id() -> str:
        runs.append(real_new_run_id())
        return runs[-1]

    real_new_run_id = driver.new_run_id
    monkeypatch.setattr(driver, "new_run_id", new_run_id)
    with pytest.raises(TestbedError, match="net_prio"):
        run_storm(StormOptions(sandboxes=2, netprio_ifpriomap=True, kernel_trace=False))
    assert len(runs) == 1 and _objects_of(runs[0]) == []


def test_softirqs_on_request() -> None:
    from bootstorm.validation.testbed import StormOptions, run_storm

    result = run_storm(StormOptions(sandboxes=4, vm=False, softirqs=True))
    kt = result.trace.header.kernel_trace
    assert kt is not None and "irq:softirq_entry" in kt.events
    assert result.trace.softirqs, "no softirq at all in a storm (timers run every tick)"
    assert _objects_of(result.run) == []


def test_cli_json_and_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from bootstorm.cli import main
    from bootstorm.traces import read_trace

    out = tmp_path / "storm.jsonl.gz"
    main(
        [
            "testbed",
            "run",
            "--runtime",
            "threads",
            "--sandboxes",
            "3",
            "--no-vm",
            "--json",
            "--trace",
            str(out),
        ]
    )
    payload = json.loads(capsys.readouterr().out)
    assert payload["completed"] == 3 and payload["failures"] == []
    assert payload["header"]["scenario"]["cni"] == "veth-peer-in-netns"
    assert read_trace(out).header == read_trace(out).header  # a whole, readable file
    assert _objects_of(payload["run"]) == []


def test_validate_a_live_storm_against_a_fitted_profile(tmp_path: Path) -> None:
    """`bootstorm validate` end to end: fit the host's profile to a recorded
    storm, run a real storm, simulate it, compare; JSON rows and exit codes."""
    import json
    import subprocess

    data = Path(__file__).resolve().parents[2] / "traces" / "data" / "validation"
    args = [
        sys.executable,
        "-c",
        "from bootstorm.cli import main; main()",
        "validate",
        "--runtime",
        "threads",  # the recorded storm is the thread harness's
        "--calibrate-from",
        str(data / "storm-50-run1.jsonl.gz"),
        "--sandboxes",
        "10",
        "--no-vm",
        "--json",
        "--trace",
        str(tmp_path / "measured.jsonl.gz"),
    ]
    loose = subprocess.run(
        [*args, "--threshold", "100"], capture_output=True, text=True, timeout=600
    )
    assert loose.returncode == 0, loose.stderr
    data_out = json.loads(loose.stdout)
    assert data_out["sandboxes"] == 10 and data_out["within"] is True
    assert [r["metric"] for r in data_out["rows"]][:3] == [
        "makespan_s",
        "startup mean_s",
        "startup p99_s",
    ]
    assert (tmp_path / "measured.jsonl.gz").stat().st_size > 0


def test_validate_fits_this_node_first_without_a_profile(tmp_path: Path) -> None:
    """`bootstorm validate --sandboxes N` alone: two calibration storms of
    N/2 run and are fitted first (their traces kept beside the measured one),
    then the storm of N is run and compared."""
    import json

    from bootstorm.traces import read_trace

    out = tmp_path / "measured.jsonl.gz"
    args = [sys.executable, "-c", "from bootstorm.cli import main; main()", "validate"]
    args += ["--sandboxes", "8", "--calibration-runs", "2", "--no-vm", "--json"]
    args += ["--trace", str(out), "--threshold", "100"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sandboxes"] == 8
    for k in range(2):
        calibration = read_trace(tmp_path / f"calibration-{k}-measured.jsonl.gz")
        assert calibration.header.scenario.sandboxes == 4
    assert read_trace(out).header.scenario.sandboxes == 8


@pytest.mark.parametrize("endpoint", ["tap", "macvtap"])
def test_tap_and_macvtap_endpoints(endpoint: str) -> None:
    """The endpoint is the VMM's NIC as it is: a storm passes every stage,
    the header names the variant, and the shared parent goes with the run."""
    from bootstorm.validation.testbed import StormOptions, run_storm

    result = run_storm(
        StormOptions(sandboxes=6, endpoint=endpoint, vm_memory_mib=32, kernel_trace=False)  # type: ignore[arg-type]
    )
    assert result.failures == ()
    trace = result.trace
    assert trace.header.scenario.cni == f"{endpoint}-endpoint"
    got = Counter((s.sandbox, s.stage) for s in trace.spans)
    assert got == Counter({(i, st): 1 for i in range(6) for st in STAGES})
    assert _objects_of(result.run) == []  # the macvtaps' shared parent pair too


@pytest.mark.parametrize("endpoint", ["tap", "veth"])
def test_an_endpoint_from_a_pool(endpoint: str) -> None:
    """``pools.tap`` with a tap endpoint, ``pools.veth`` with a veth one:
    devices made before the storm, taken and moved in by the first
    sandboxes, the rest made in place; the untaken ones removed with the run."""
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed import StormOptions, run_storm

    config = TunedConfig(pools={endpoint: 3})
    options = StormOptions(
        sandboxes=5,
        endpoint=endpoint,  # type: ignore[arg-type]
        config=config,
        vm=False,
        kernel_trace=False,
    )
    result = run_storm(options)
    assert result.failures == ()
    assert result.trace.header.scenario.pools == {endpoint: 3}
    assert not any("not emulated" in n for n in result.trace.header.notes)
    assert _objects_of(result.run) == []
