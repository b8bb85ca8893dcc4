"""Testbed pieces that need no root: admission, names, summary, options."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bootstorm.traces import (
    Arrival,
    LockSpan,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceHeader,
)
from bootstorm.validation._names import LINK_PREFIX, NETNS_PREFIX, owned_link, owned_netns
from bootstorm.validation.testbed import LocalAdmission, StormOptions, summarize
from bootstorm.validation.testbed._leftovers import RunNames, _run_of_link, _run_of_netns
from bootstorm.validation.testbed._vm import VmRunner

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")


def test_stage_limit_is_enforced() -> None:
    adm = LocalAdmission(limits={"Cgroup": 2})
    inside = 0
    peak = 0
    lock = threading.Lock()

    def work(i: int) -> None:
        nonlocal inside, peak
        with adm.stage("Cgroup", f"s{i}"):
            with lock:
                inside += 1
                peak = max(peak, inside)
            time.sleep(0.01)
            with lock:
                inside -= 1
        with adm.stage("NetNS", f"s{i}"):  # unlimited
            pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2


def test_pool_take_until_empty() -> None:
    adm = LocalAdmission(pools={"netns": ["a", "b"]})
    assert [adm.take("netns", "x"), adm.take("netns", "y"), adm.take("netns", "z")] == [
        "a",
        "b",
        None,
    ]
    assert adm.take("vport", "x") is None
    with pytest.raises(ValueError, match=r"limits\.Cgroup: must be at least 1, but got 0"):
        LocalAdmission(limits={"Cgroup": 0})


def test_local_pairs_are_taken_once_in_order() -> None:
    adm = LocalAdmission(pairs={"veth": [("a0", "b0"), ("a1", "b1")]})
    assert [adm.take_pair("veth", "x"), adm.take_pair("veth", "y")] == [("a0", "b0"), ("a1", "b1")]
    assert adm.take_pair("veth", "z") is None and adm.take_pair("tap", "z") is None


class _SlowGate:
    """An admission whose gate takes 5 ms to pass, limited or not."""

    def __init__(self, *, limited: bool) -> None:
        self.limited = limited

    def gated(self, name: str) -> bool:
        return self.limited

    @contextlib.contextmanager
    def stage(self, name: str, holder: str) -> Iterator[None]:
        time.sleep(0.005)
        yield


@pytest.mark.parametrize("limited", [False, True])
def test_admit_span_only_where_a_stage_is_gated(limited: bool) -> None:
    """A pause before an unlimited stage (the host's, say a busy core) is no
    admission wait: a storm without limits records no admits (the CI flake of
    a pooled CNI storm, AddCNI among its admits)."""
    from bootstorm.validation.testbed.driver import _Storm
    from bootstorm.validation.testbed.runtime import Sandbox

    storm = SimpleNamespace(stop=threading.Event(), run="r", admission=_SlowGate(limited=limited))
    sb = Sandbox(index=0)
    _Storm._stage(storm, sb, "AddCNI", lambda sb: None)  # type: ignore[arg-type]
    assert [s.stage for s in sb.spans] == ["AddCNI"]
    assert [(a.stage, a.end_s - a.start_s >= 0.004) for a in sb.admits] == (
        [("AddCNI", True)] if limited else []
    )
    assert LocalAdmission(limits={"Cgroup": 1}).gated("Cgroup")
    assert not LocalAdmission(limits={"Cgroup": 1}).gated("AddCNI")


def test_names_carry_prefixes_and_run() -> None:
    names = RunNames("ab12")
    assert names.netns(3) == f"{NETNS_PREFIX}ab12-3" and owned_netns(names.netns(3))
    assert names.pool_netns(0) == "bst-ab12-p0"
    link = names.host_link(99999)
    assert link.startswith(LINK_PREFIX) and owned_link(link) and len(link) <= 15
    assert _run_of_netns(names.netns(7)) == "ab12"
    assert _run_of_netns(names.pool_netns(7)) == "ab12"
    assert _run_of_netns("bstpool-netns-1") is None  # the agent's, not ours
    assert _run_of_link(link) == "ab12" and _run_of_link(names.moved_peer(4)) == "ab12"
    assert _run_of_link("bsp12") is None and _run_of_link("eth0") is None
    for shared in (names.endpoint(3), names.pool_tap(2), *names.pool_veth(1), names.vport()):
        assert _run_of_link(shared) == "ab12" and owned_link(shared) and len(shared) <= 15
    assert _run_of_link("bstab12vx") is None
    with pytest.raises(ValueError, match="longer than 15 bytes"):
        names.host_link(10**8)


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="sandboxes"):
        StormOptions(sandboxes=0)
    with pytest.raises(ValueError, match="peer"):
        StormOptions(peer="sideways")  # type: ignore[arg-type]
    assert StormOptions().netprio_ifpriomap is False  # off unless asked for
    with pytest.raises(ValueError, match="peer: 'moved' applies to the veth endpoint only"):
        StormOptions(endpoint="tap", peer="moved")
    assert [StormOptions(endpoint=e).variant for e in ("veth", "tap", "macvtap")] == [
        "veth-peer-in-netns",
        "tap-endpoint",
        "macvtap-endpoint",
    ]
    from bootstorm.models import TunedConfig

    with pytest.raises(ValueError, match=r"config\.limits: unknown stage 'Boot'"):
        StormOptions(config=TunedConfig(limits={"Boot": 3}))


def test_qemu_command_line() -> None:
    from pathlib import Path

    runner = VmRunner(mode="qemu-microvm", stub=Path("/x/stub.elf"), mem_prealloc=True)
    argv = runner.qemu_argv("bst-ab12-0", 7)
    assert "-mem-prealloc" in argv and "tap,id=n0,fd=7,vhost=off" in argv
    assert argv[argv.index("-cpu") + 1] == "host,-arch-capabilities"
    assert "-mem-prealloc" not in VmRunner(mode="qemu-microvm", stub=Path("s")).qemu_argv("n", 3)


def test_summary_of_a_synthetic_storm() -> None:
    spans = []
    for sb in range(2):
        t = 10.0
        for stage in STAGES:
            spans.append(StageSpan(sandbox=sb, stage=stage, start_s=t, end_s=t + 0.1 * (sb + 1)))
            t += 0.1 * (sb + 1)
    trace = Trace(
        header=TraceHeader(
            source="testbed",
            origin_s=10.0,
            scenario=ScenarioFacts(sandboxes=3, cni="veth-peer-in-netns"),
        ),
        spans=tuple(spans),
        arrivals=tuple(Arrival(sandbox=i, t_s=10.0) for i in range(3)),
        locks=(
            LockSpan(lock="rtnl", sandbox=0, stage="AddCNI", start_s=10.1, end_s=10.15),
            LockSpan(lock="rtnl", start_s=10.1, end_s=10.3),
        ),
    )
    s = summarize(trace)
    assert s.completed == 2 and s.sandboxes == 3
    assert s.makespan_s == pytest.approx(1.0)
    assert s.startup_mean_s == pytest.approx(0.75)
    assert s.stage_mean_s["Cgroup"] == pytest.approx(0.15)
    assert s.rtnl.waits == 2 and s.rtnl.sandbox_waits == 1
    assert s.rtnl.wait_s == pytest.approx(0.25)


def test_cli_run_needs_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bootstorm.cli import main

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as exc:
        main(["testbed", "run", "--sandboxes", "2"])
    assert exc.value.code == 2
    assert "error: testbed: the testbed needs root" in capsys.readouterr().err


def test_cli_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    from bootstorm.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["testbed", "run", "--sandboxes", "0"])
    assert exc.value.code == 2
    assert "sandboxes" in capsys.readouterr().err


def test_cli_chrome_side_by_side(tmp_path: Path) -> None:
    import json

    from bootstorm.cli import main

    data = Path(__file__).resolve().parents[2] / "traces" / "data"
    recorded = sorted(data.glob("*-25.jsonl.gz"))[0]
    out = tmp_path / "both.json"
    main(["testbed", "chrome", str(recorded), "-o", str(out), "--simulate", "veth"])
    doc = json.loads(out.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert "measured · sandboxes" in names and "simulated · sandboxes" in names


def test_lock_spans_sampled_keep_the_key_waits_evenly_and_say_so() -> None:
    """Under the cap the sandboxes' key-lock waits go in whole, then the
    longest others; over it, every k-th key wait in time (not the earliest,
    which dropped the storm's tail), and the note gives the counts."""
    from bootstorm.traces import LockSpan
    from bootstorm.validation.testbed.driver import _sample

    def span(t: float, lock: str = "rtnl", sandbox: int | None = 0, d: float = 0.001) -> Any:
        return LockSpan(lock=lock, sandbox=sandbox, start_s=t, end_s=t + d)

    key = [span(float(t)) for t in range(10)]
    others = [span(100.0 + t, lock="other", sandbox=None, d=0.001 * t) for t in range(5)]
    assert _sample(key + others, None) == (key + others, None)
    kept, note = _sample(key + others, 12)
    assert kept[:10] == key and [lk.start_s for lk in kept[10:]] == [103.0, 104.0]
    assert note == (
        "kernel lock spans sampled: 12 of 15 kept (all 10 rtnl, cgroup_mutex, css_set_lock "
        "waits of sandboxes, then the longest others)"
    )
    kept, note = _sample(key + others, 5)
    assert [lk.start_s for lk in kept] == [0.0, 2.0, 4.0, 6.0, 8.0]  # evenly, to the end
    assert note is not None and "5 of the 10 rtnl" in note and "none of the others" in note
