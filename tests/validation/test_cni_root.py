"""The testbed's cni runtime for real (root): CNI plugins exec'd, a shim per
sandbox, and nothing left afterwards — on success, SIGTERM and SIGKILL.

Assertions name only this test's run (its run id, and host links that were
not there before it started), never "no object at all": another root
test's storm may run at the same moment.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import CNI_ROOT_MARKS, start_testbed_run

from bootstorm.validation.testbed._leftovers import (
    CNI_STATE_DIR,
    REGISTRY_DIR,
    SHIM_SCRIPT,
    process_argvs,
)

pytestmark = CNI_ROOT_MARKS

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")


def _netns() -> list[str]:
    return os.listdir("/run/netns") if os.path.isdir("/run/netns") else []


def _host_links() -> set[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return {n for link in ipr.get_links() if (n := link.get_attr("IFLA_IFNAME"))}


def _processes_of(run: str) -> list[str]:
    """Shims (``shim.py bst-<run>-<i>``) and VMMs (``-name bst-<run>-<i>``) of run ``run``."""
    found = []
    for pid, argv in process_argvs():
        for a, b in itertools.pairwise(argv):
            if a in (str(SHIM_SCRIPT).encode(), b"-name") and b.startswith(f"bst-{run}-".encode()):
                found.append(f"process {pid} {a.decode()} {b.decode()}")
    return found


def _objects_of(run: str, links_before: set[str]) -> list[str]:
    """Everything left of run ``run``: namespaces, links (its own names, and
    plugin-made ``veth``/``bwp`` links that appeared since), its bridge, IPAM
    state, cgroups, processes."""
    from bootstorm.validation.testbed._cgroup import cgroup2_root

    left = [f"netns {n}" for n in _netns() if n.startswith(f"bst-{run}-")]
    links = _host_links()
    left += [f"link {n}" for n in links if n.startswith(f"bst{run}")]
    left += [f"plugin link {n}" for n in links - links_before if n.startswith(("veth", "bwp"))]
    if (CNI_STATE_DIR / run).exists():
        left.append(f"cni state {CNI_STATE_DIR / run}")
    cg = cgroup2_root() / "bootstorm-testbed" / run
    if cg.exists():
        left.append(f"cgroup {cg}")
    left += [f"workdir {p}" for p in Path(tempfile.gettempdir()).glob(f"bootstorm-testbed-{run}-*")]
    if (REGISTRY_DIR / run).exists():
        left.append(f"registry {run}")
    return left + _processes_of(run)


def _peak(spans: list, stage: str) -> int:  # type: ignore[type-arg]
    events = sorted(  # at a tie, a leaving sandbox (-1) counts before an entering one
        ev for s in spans if s.stage == stage for ev in ((s.start_s, 1), (s.end_s, -1))
    )
    inside = peak = 0
    for _, step in events:
        inside += step
        peak = max(peak, inside)
    return peak


@pytest.mark.parametrize(
    ("vm", "chain"),
    [(True, ()), (False, ("tuning", "bandwidth"))],
    ids=["qemu-bridge-check", "novm-bridge+tuning+bandwidth"],
)
def test_cni_storm_end_to_end(vm: bool, chain: tuple[str, ...], tmp_path: Path) -> None:
    from bootstorm.traces import read_trace, write_trace
    from bootstorm.validation.testbed import StormOptions, run_storm, summarize
    from bootstorm.validation.testbed._vm import vm_available

    links_before = _host_links()
    n = 20
    options = StormOptions(
        sandboxes=n,
        vm=vm,
        vm_memory_mib=32,
        runtime="cni",
        cni_chain=chain,  # type: ignore[arg-type]
        cni_check=vm,
    )
    result = run_storm(options)
    assert result.failures == ()
    trace = result.trace
    h = trace.header
    assert h.scenario.runtime == "cni"
    assert h.scenario.cni == "cni-bridge" + "".join(f"+{p}" for p in chain)
    assert h.scenario.vm == ("qemu-microvm" if vm and vm_available()[0] else "process")
    got = Counter((s.sandbox, s.stage) for s in trace.spans)
    assert got == Counter({(i, st): 1 for i in range(n) for st in STAGES})
    for i in range(n):  # stages in order, none overlapping
        mine = sorted((s for s in trace.spans if s.sandbox == i), key=lambda s: s.start_s)
        assert [s.stage for s in mine] == list(STAGES)
        assert all(a.end_s <= b.start_s + 1e-9 for a, b in itertools.pairwise(mine))
    plugins = ("bridge", *chain)
    for i in range(n):
        execs = [e for e in trace.execs if e.sandbox == i]
        adds = [e.program for e in execs if e.command == "ADD"]
        assert adds == list(plugins) and all(
            e.stage == "AddCNI" for e in execs if e.command == "ADD"
        )
        checks = [e.program for e in execs if e.command == "CHECK"]
        assert checks == (list(plugins) if vm else [])
        dels = [e.program for e in execs if e.command == "DEL"]
        assert dels == list(reversed(plugins))  # the chain in reverse, at teardown
        assert all(e.stage == "teardown" for e in execs if e.command == "DEL")
        (shim,) = [e for e in execs if e.command == "shim"]
        assert shim.program == "shim.py" and shim.rc == 0
        tcs = [e for e in execs if e.command == "tc"]
        assert len(tcs) == 4 and all(e.rc == 0 and e.stage == "AttachIf" for e in tcs)
        (vmm,) = [e for e in execs if e.command == "vmm"]
        assert vmm.stage == "StartVM"
        attach = next(s for s in trace.spans if s.sandbox == i and s.stage == "AttachIf")
        assert attach.start_s == shim.start_s  # AttachIf: the shim's start to attach_done
        assert all(e.rc == 0 for e in execs if e.command in ("ADD", "CHECK", "DEL"))
    # Kernel waits of plugin, shim, tc and VMM processes join by their tgid.
    assert h.kernel_trace is not None
    if h.kernel_trace.record_tgid:
        pids = {e.pid for e in trace.execs}
        by_process = [lk for lk in trace.locks if lk.tgid in pids and lk.sandbox is not None]
        assert by_process, "no kernel wait joined to a sandbox's process"
        for lk in by_process:
            e = next(e for e in trace.execs if e.pid == lk.tgid)
            assert lk.sandbox == e.sandbox
    # Every VM still up, stopped one at a time after the storm and timed.
    assert h.vm_stops is not None and h.vm_stops.vms == n and h.scenario.lifetime_s is None
    assert h.vm_stops.busy_core_s > 0.0 and h.vm_stops.wall_s > 0.0
    shim_ends = [
        next(e.end_s for e in trace.execs if e.sandbox == i and e.command == "shim")
        for i in range(n)
    ]
    assert shim_ends == sorted(shim_ends)  # in index order, each after the last
    s = summarize(trace)
    assert s.completed == n and s.makespan_s > 0
    path = tmp_path / "storm.jsonl.gz"
    write_trace(trace, path)
    assert read_trace(path) == trace
    assert _objects_of(result.run, links_before) == []


def _start_run(sandboxes: int, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``bootstorm testbed run --runtime cni`` and wait until its shims
    run: half-way, shims running, others still in AddCNI."""
    return start_testbed_run(
        "--sandboxes",
        str(sandboxes),
        "--runtime",
        "cni",
        *extra,
        started=lambda run: len(_processes_of(run)) >= 5,
        timeout_s=60,
    )


def test_sigterm_half_way_leaves_nothing() -> None:
    links_before = _host_links()
    proc, run = _start_run(40, "--cni-chain", "bandwidth")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 130), err.decode()[-500:]
    assert _objects_of(run, links_before) == []


def test_sigkill_leftovers_are_swept_by_the_next_run() -> None:
    from bootstorm.validation.testbed import StormOptions, run_storm

    links_before = _host_links()
    proc, run = _start_run(30, "--cni-chain", "bandwidth")
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    left = _objects_of(run, links_before)
    assert any(x.startswith("netns") for x in left), left  # the kill left things behind
    assert f"cni state {CNI_STATE_DIR / run}" in left
    # The next run sweeps them first (its own objects are its own business).
    result = run_storm(
        StormOptions(sandboxes=2, vm=False, kernel_trace=False, settle_s=0.0, runtime="cni")
    )
    assert result.failures == ()
    assert _objects_of(run, links_before) == []
    assert _objects_of(result.run, links_before) == []


def test_pooled_and_limited_cni_storm() -> None:
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed import StormOptions, run_storm

    links_before = _host_links()
    config = TunedConfig(limits={"AttachIf": 2, "StartVM": 1}, pools={"netns": 3, "netns-veth": 4})
    n = 10
    result = run_storm(
        StormOptions(sandboxes=n, vm=False, kernel_trace=False, runtime="cni", config=config)
    )
    assert result.failures == ()
    trace = result.trace
    assert trace.header.scenario.pools == {"netns": 3, "netns-veth": 4}
    assert _peak(list(trace.spans), "AttachIf") <= 2
    assert _peak(list(trace.spans), "StartVM") <= 1
    assert {a.stage for a in trace.admits} <= {"AttachIf", "StartVM"}
    # Four sandboxes took a namespace whose ADD was done before the storm:
    # recorded as the pool's ADD, with the taker; they ADD nothing themselves.
    pooled = [e for e in trace.execs if e.stage == "pool"]
    takers = {e.sandbox for e in pooled}
    assert len(pooled) == 4 and None not in takers and len(takers) == 4
    in_storm = [e for e in trace.execs if e.command == "ADD" and e.stage == "AddCNI"]
    assert len(in_storm) == n - 4 and not {e.sandbox for e in in_storm} & takers
    dels = Counter(e.sandbox for e in trace.execs if e.command == "DEL")
    assert dels == Counter(dict.fromkeys(range(n), 1))  # every sandbox DELeted once
    assert Counter((s.sandbox, s.stage) for s in trace.spans) == Counter(
        {(i, st): 1 for i in range(n) for st in STAGES}
    )
    assert _objects_of(result.run, links_before) == []
