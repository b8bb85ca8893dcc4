"""A real storm on a ``netns-veth`` pool (root): every sandbox takes a namespace
made with its veth peer inside, makes no namespace and moves no peer, and
nothing of the run is left afterwards.

Assertions name only this test's run: pytest-xdist may run another root
test's storm at the same moment.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from typing import Any

import pytest

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, cgroups, tracefs)"),
    pytest.mark.skipif(sys.platform != "linux", reason="Linux only"),
]

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")


def _objects_of(run: str) -> list[str]:
    """Namespaces and host links with the run's names."""
    from pyroute2 import IPRoute

    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    left = [f"netns {n}" for n in netns if n.startswith(f"bst-{run}-")]
    with IPRoute() as ipr:
        left += [
            f"link {n}"
            for link in ipr.get_links()
            if (n := link.get_attr("IFLA_IFNAME")) and n.startswith(f"bst{run}")
        ]
    return left


class _Calls:
    """Who created a namespace and who moved a link, by thread name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from bootstorm.validation.testbed import _namespaced, threads_runtime
        from bootstorm.validation.testbed.threads_runtime import ThreadsRuntime

        self.netns: Counter[str] = Counter()
        self.moves = 0
        create = threads_runtime.create_netns_here
        move = ThreadsRuntime._move_in

        def counted_create(name: str) -> int:
            self.netns["prepare" if _in_main() else "sandbox"] += 1
            fd: int = create(name)
            return fd

        def counted_move(storm: Any, sb: Any, name: str) -> None:
            self.moves += 1
            move(storm, sb, name)

        monkeypatch.setattr(threads_runtime, "create_netns_here", counted_create)
        monkeypatch.setattr(_namespaced, "create_netns_here", counted_create)
        monkeypatch.setattr(ThreadsRuntime, "_move_in", counted_move)


def _in_main() -> bool:
    return threading.current_thread() is threading.main_thread()


def test_a_storm_on_a_netns_veth_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed import StormOptions, run_storm, summarize
    from bootstorm.validation.testbed.threads_runtime import ThreadsRuntime

    calls = _Calls(monkeypatch)
    taken: list[tuple[int, str, str]] = []
    netns_stage = ThreadsRuntime.netns

    def recorded(storm: Any, sb: Any) -> None:
        netns_stage(storm, sb)
        taken.append((sb.index, str(sb.netns), str(sb.host_end)))

    monkeypatch.setattr(ThreadsRuntime, "netns", recorded)
    config = TunedConfig(pools={"netns-veth": 6})
    result = run_storm(StormOptions(sandboxes=6, vm=False, kernel_trace=False, config=config))
    assert result.failures == ()
    trace = result.trace
    got = Counter((s.sandbox, s.stage) for s in trace.spans)
    assert got == Counter({(i, st): 1 for i in range(6) for st in STAGES})
    assert summarize(trace).completed == 6
    assert trace.header.scenario.pools == {"netns-veth": 6}
    assert not any("not emulated" in n for n in trace.header.notes)
    # Six namespaces made before the storm, none by a sandbox; no peer moved.
    assert calls.netns == Counter({"prepare": 6}) and calls.moves == 0
    run = result.run
    assert sorted(ns for _, ns, _ in taken) == sorted(f"bst-{run}-v{k}" for k in range(6))
    assert sorted(h for _, _, h in taken) == sorted(f"bst{run}n{k}" for k in range(6))
    assert _objects_of(run) == []


def test_netns_veth_first_then_the_netns_and_veth_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sandboxes take a netns-veth, two a namespace and a pair of the other
    pools (a move each), two make their own; all of it goes with the run."""
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed import StormOptions, run_storm

    calls = _Calls(monkeypatch)
    config = TunedConfig(pools={"netns-veth": 2, "netns": 2, "veth": 2})
    result = run_storm(StormOptions(sandboxes=6, vm=False, kernel_trace=False, config=config))
    assert result.failures == ()
    assert result.trace.header.scenario.pools == {"netns": 2, "veth": 2, "netns-veth": 2}
    assert calls.netns == Counter({"prepare": 4, "sandbox": 2})
    assert calls.moves == 2
    assert _objects_of(result.run) == []


def test_a_failed_storm_leaves_no_netns_veth(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox that fails after taking one (its host end never up) still has
    it removed, and so are the ones nobody took."""
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed import StormOptions, run_storm
    from bootstorm.validation.testbed.threads_runtime import ThreadsRuntime

    def broken(storm: Any, sb: Any) -> None:
        raise RuntimeError("no cgroup today")

    monkeypatch.setattr(ThreadsRuntime, "cgroup", broken)
    config = TunedConfig(pools={"netns-veth": 5})
    result = run_storm(StormOptions(sandboxes=3, vm=False, kernel_trace=False, config=config))
    assert len(result.failures) == 3 and all("no cgroup today" in f for f in result.failures)
    assert result.trace.header.scenario.pools == {"netns-veth": 3}  # capped at the storm's size
    assert _objects_of(result.run) == []
