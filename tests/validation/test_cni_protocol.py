"""The testbed's cni runtime without root: configs, results, discovery, the
exec protocol against a fake plugin, options, trace records and the shim's
error path."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bootstorm.traces import (
    ExecSpan,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceHeader,
    read_trace,
    write_trace,
)
from bootstorm.validation.testbed import StormOptions, cni
from bootstorm.validation.testbed._cni_stages import SHIM_FLAGS, exec_owners
from bootstorm.validation.testbed._leftovers import (
    SHIM_SCRIPT,
    RunNames,
    _cni_containers,
    _run_of_link,
    new_run_id,
    register_run,
    unregister_run,
)

NETNS = "/run/netns/bst-ab12-0"
SUBNET = ipaddress.IPv4Network("10.200.0.0/16")


def _network(**kw: object) -> cni.CniNetwork:
    args: dict[str, object] = {
        "name": "bst-ab12",
        "plugin": "bridge",
        "subnet": SUBNET,
        "ipam_dir": Path("/run/bootstorm-cni/ab12/ipam"),
        "bridge": "bstab12br",
        "tuning_dir": Path("/run/bootstorm-cni/ab12/tuning"),
    }
    args.update(kw)
    return cni.build_network(**args)  # type: ignore[arg-type]


# -- configs -------------------------------------------------------------------


def test_bridge_network_with_host_local_ipam() -> None:
    net = _network()
    assert net.types == ("bridge",)
    conf = json.loads(net.config(0, None))
    assert conf["cniVersion"] == cni.CNI_VERSION and conf["name"] == "bst-ab12"
    assert conf["bridge"] == "bstab12br" and conf["isGateway"] is True
    assert conf["ipMasq"] is False  # no iptables rules on the host
    assert conf["ipam"] == {
        "type": "host-local",
        "ranges": [[{"subnet": "10.200.0.0/16"}]],
        "dataDir": "/run/bootstorm-cni/ab12/ipam",
    }
    assert "prevResult" not in conf


def test_chain_order_and_prev_result_injection() -> None:
    net = _network(chain=("tuning", "bandwidth"))
    assert net.types == ("bridge", "tuning", "bandwidth")
    prev = cni.parse_result(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": NETNS}],
                "ips": [{"address": "10.200.0.2/16", "interface": 0}],
            }
        ),
        plugin="bridge",
    )
    tuning = json.loads(net.config(1, prev))
    assert tuning["type"] == "tuning" and tuning["name"] == "bst-ab12"
    assert tuning["prevResult"] == prev.as_dict()
    assert tuning["mtu"] == cni.TUNING_MTU and tuning["sysctl"] == {"net.core.somaxconn": "512"}
    assert tuning["dataDir"] == "/run/bootstorm-cni/ab12/tuning"
    bandwidth = json.loads(net.config(2, prev))
    assert bandwidth["ingressRate"] == bandwidth["egressRate"] == cni.BANDWIDTH_RATE_BPS
    assert bandwidth["ingressBurst"] == cni.BANDWIDTH_BURST_BITS
    # The conflist (what a killed run's sweep DELs with) round-trips.
    again = cni.CniNetwork.from_conflist(json.loads(json.dumps(net.conflist())))
    assert again.types == net.types and json.loads(again.config(2, None)) == json.loads(
        net.config(2, None)
    )


def test_other_plugins_and_config_errors() -> None:
    assert json.loads(_network(plugin="ptp").config(0, None))["type"] == "ptp"
    mac = json.loads(_network(plugin="macvlan", parent="bstab12vp").config(0, None))
    assert mac["master"] == "bstab12vp" and mac["mode"] == "bridge"
    ipv = json.loads(_network(plugin="ipvlan", parent="bstab12vp").config(0, None))
    assert ipv["type"] == "ipvlan" and ipv["mode"] == "l2"
    with pytest.raises(ValueError, match="parent: the macvlan plugin needs a master link"):
        _network(plugin="macvlan")
    with pytest.raises(ValueError, match="plugin: unknown CNI plugin 'flannel'"):
        _network(plugin="flannel")
    with pytest.raises(ValueError, match="chain: 'tuning' appears twice"):
        _network(chain=("tuning", "tuning"))
    with pytest.raises(ValueError, match="chain: unknown chained plugin 'portmap'"):
        _network(chain=("portmap",))


# -- results -------------------------------------------------------------------


def _result(**over: object) -> str:
    data: dict[str, object] = {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": "bstab12br", "mac": "aa:bb:cc:dd:ee:ff"},
            {"name": "veth1234", "mac": "aa:bb:cc:dd:ee:00"},
            {"name": "eth0", "mac": "aa:bb:cc:dd:ee:01", "sandbox": NETNS},
        ],
        "ips": [{"interface": 2, "address": "10.200.0.2/16", "gateway": "10.200.0.1"}],
        "dns": {},
    }
    data.update(over)
    return json.dumps(data)


def test_result_is_parsed_and_verified() -> None:
    r = cni.parse_result(_result(), plugin="bridge")
    assert r.cni_version == "1.0.0" and [i.name for i in r.interfaces][2] == "eth0"
    assert r.interfaces[2].sandbox == NETNS and r.interfaces[0].sandbox is None
    assert r.ips == (cni.CniIp(address="10.200.0.2/16", interface=2, gateway="10.200.0.1"),)
    cni.verify_result(r, plugin="bridge", netns=NETNS, ifname="eth0")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", r"CNI result of bridge: malformed JSON"),
        ("[1]", r"\(top level\): expected an object"),
        (_result(cniVersion=None), r"cniVersion: expected a version string, but got None"),
        (_result(interfaces={}), r"interfaces: expected a list"),
        (_result(interfaces=[{"mac": "x"}]), r"interfaces\.0\.name: expected a name"),
        (_result(ips=[{"interface": 0}]), r"ips\.0\.address: expected an address"),
        (_result(ips=[{"address": "10.1/99"}]), r"ips\.0\.address: not an address/prefix"),
        (
            _result(ips=[{"address": "10.0.0.2/8", "interface": 7}]),
            r"ips\.0\.interface: expected an index into interfaces \(0\.\.2\), but got 7",
        ),
    ],
)
def test_malformed_results_name_the_field(text: str, message: str) -> None:
    with pytest.raises(cni.CniError, match=message):
        cni.parse_result(text, plugin="bridge")


def test_a_result_without_what_the_runtime_needs_is_refused() -> None:
    old = cni.parse_result(_result(cniVersion="0.4.0"), plugin="bridge")
    with pytest.raises(cni.CniError, match=r"cniVersion: expected '1\.0\.0', but got '0\.4\.0'"):
        cni.verify_result(old, plugin="bridge", netns=NETNS, ifname="eth0")
    elsewhere = cni.parse_result(_result(), plugin="bridge")
    with pytest.raises(cni.CniError, match="interfaces: no interface 'eth0' in sandbox /other"):
        cni.verify_result(elsewhere, plugin="bridge", netns="/other", ifname="eth0")
    no_ip = cni.parse_result(_result(ips=[]), plugin="bridge")
    with pytest.raises(cni.CniError, match="ips: no IP on the sandbox's 'eth0'"):
        cni.verify_result(no_ip, plugin="bridge", netns=NETNS, ifname="eth0")


# -- discovery and subnets -----------------------------------------------------


def _plugin_dir(tmp_path: Path, *names: str) -> Path:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for name in names:
        (d / name).write_text("#!/bin/sh\nexit 0\n")
        (d / name).chmod(0o755)
    return d


def test_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _plugin_dir(tmp_path, "bridge", "host-local")
    assert cni.discover_bin_dir(d, ["bridge", "host-local"]) == d
    with pytest.raises(cni.CniSetupError) as err:
        cni.discover_bin_dir(tmp_path / "nope", ["bridge"])
    assert str(err.value) == (
        f"cni_bin_dir: {tmp_path / 'nope'}: no CNI plugin 'bridge' there; "
        "install them: apt-get install containernetworking-plugins"
    )
    with pytest.raises(cni.CniSetupError, match=rf"{d} has no CNI plugin 'tuning'"):
        cni.discover_bin_dir(d, ["bridge", "tuning", "host-local"])
    # Without --cni-bin-dir: the first default directory that has the plugin.
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(cni, "DEFAULT_BIN_DIRS", (empty, d))
    assert cni.discover_bin_dir(None, ["bridge"]) == d
    monkeypatch.setattr(cni, "DEFAULT_BIN_DIRS", (empty, tmp_path / "gone"))
    with pytest.raises(cni.CniSetupError) as err:
        cni.discover_bin_dir(None, ["bridge"])
    assert str(err.value).startswith(f"cni_bin_dir: {empty} or {tmp_path / 'gone'}: no CNI")
    assert "apt-get install containernetworking-plugins" in str(err.value)


def test_the_first_free_subnet() -> None:
    assert cni.pick_subnet([]) == ipaddress.IPv4Network("10.200.0.0/16")
    taken = [ipaddress.IPv4Network("10.200.5.0/24"), ipaddress.IPv4Network("10.201.0.0/16")]
    assert cni.pick_subnet(taken) == ipaddress.IPv4Network("10.202.0.0/16")
    with pytest.raises(cni.CniSetupError, match="subnet: every /16"):
        cni.pick_subnet([ipaddress.IPv4Network("10.0.0.0/8")])


# -- the exec protocol, against a fake plugin ----------------------------------

FAKE_PLUGIN = """\
import json, os, sys
conf = json.load(sys.stdin)
env = {k: v for k, v in os.environ.items() if k.startswith("CNI_")}
with open(conf["log"], "a") as fh:
    fh.write(json.dumps({"type": conf["type"], "env": env, "conf": conf}) + "\\n")
if conf.get("fail"):
    print(json.dumps({"cniVersion": "1.0.0", "code": 11, "msg": "no luck", "details": "d"}))
    sys.exit(1)
if env["CNI_COMMAND"] != "ADD":
    sys.exit(0)
prev = conf.get("prevResult") or {
    "cniVersion": conf["cniVersion"],
    "interfaces": [{"name": env["CNI_IFNAME"], "sandbox": env["CNI_NETNS"]}],
    "ips": [{"address": "10.200.0.2/16", "interface": 0}],
}
prev["interfaces"] = prev["interfaces"] + [{"name": conf["type"]}]
print(json.dumps(prev))
"""


def _fakes(tmp_path: Path) -> Path:
    d = tmp_path / "fakebin"
    d.mkdir()
    for name in ("fakemain", "fakechain"):
        (d / name).write_text(f"#!{sys.executable}\n{FAKE_PLUGIN}")
        (d / name).chmod(0o755)
    return d


def _fake_network(log: Path, *, fail: str | None = None) -> cni.CniNetwork:
    return cni.CniNetwork(
        name="bst-ab12",
        plugins=tuple(
            json.dumps({"type": t, "log": str(log), **({"fail": True} if t == fail else {})})
            for t in ("fakemain", "fakechain")
        ),
    )


def _calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_add_check_del_speak_the_protocol(tmp_path: Path) -> None:
    bin_dir = _fakes(tmp_path)
    log = tmp_path / "calls.jsonl"
    net = _fake_network(log)
    records: list[cni.ExecRecord] = []
    kw = {"bin_dir": bin_dir, "container_id": "bst-ab12-0", "netns": NETNS, "ifname": "eth0"}
    result = cni.add(net, on_exec=records.append, **kw)  # type: ignore[arg-type]
    # The chained plugin got the main one's result, and printed the final one.
    assert [i.name for i in result.interfaces] == ["eth0", "fakemain", "fakechain"]
    calls = _calls(log)
    assert [c["type"] for c in calls] == ["fakemain", "fakechain"]
    assert calls[0]["env"] == {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "bst-ab12-0",
        "CNI_NETNS": NETNS,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(bin_dir),
    }
    conf0, conf1 = calls[0]["conf"], calls[1]["conf"]
    assert isinstance(conf0, dict) and isinstance(conf1, dict)
    assert "prevResult" not in conf0 and conf0["name"] == "bst-ab12"
    assert conf1["prevResult"]["interfaces"][-1] == {"name": "fakemain"}
    assert [(r.program, r.command, r.rc) for r in records] == [
        ("fakemain", "ADD", 0),
        ("fakechain", "ADD", 0),
    ]
    assert all(r.pid > 0 and r.end_s >= r.start_s for r in records)
    log.unlink()
    cni.check(net, result, on_exec=records.append, **kw)  # type: ignore[arg-type]
    cni.delete(net, result, on_exec=records.append, **kw)  # type: ignore[arg-type]
    calls = _calls(log)
    assert [(c["type"], c["env"]["CNI_COMMAND"]) for c in calls] == [  # type: ignore[index]
        ("fakemain", "CHECK"),
        ("fakechain", "CHECK"),
        ("fakechain", "DEL"),  # DEL: the chain in reverse
        ("fakemain", "DEL"),
    ]
    for c in calls:  # CHECK and DEL carry the ADD's final result
        assert c["conf"]["prevResult"] == result.as_dict()  # type: ignore[index]


def test_a_failing_plugin_gives_its_code_and_msg(tmp_path: Path) -> None:
    bin_dir = _fakes(tmp_path)
    log = tmp_path / "calls.jsonl"
    records: list[cni.ExecRecord] = []
    with pytest.raises(cni.CniPluginError) as err:
        cni.add(
            _fake_network(log, fail="fakechain"),
            bin_dir=bin_dir,
            container_id="c",
            netns=NETNS,
            ifname="eth0",
            on_exec=records.append,
        )
    assert str(err.value) == "CNI ADD fakechain failed (exit 1): code 11: no luck (d)"
    assert (err.value.code, err.value.msg, err.value.rc) == (11, "no luck", 1)
    assert [(r.program, r.rc) for r in records] == [("fakemain", 0), ("fakechain", 1)]
    # DEL calls every plugin even when one fails, and raises the failure after.
    log.unlink()
    with pytest.raises(cni.CniPluginError, match="CNI DEL fakemain failed"):
        cni.delete(
            _fake_network(log, fail="fakemain"),
            None,
            bin_dir=bin_dir,
            container_id="c",
            netns=NETNS,
            ifname="eth0",
            on_exec=records.append,
        )
    assert [c["type"] for c in _calls(log)] == ["fakechain", "fakemain"]


def test_a_plugin_without_error_json_is_reported_by_its_output(tmp_path: Path) -> None:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "broken").write_text("#!/bin/sh\necho 'panic: something' >&2\nexit 2\n")
    (d / "broken").chmod(0o755)
    with pytest.raises(cni.CniPluginError, match=r"CNI ADD broken failed \(exit 2\): panic"):
        cni.exec_plugin(
            bin_dir=d,
            plugin="broken",
            command="ADD",
            config=b"{}",
            container_id="c",
            netns=NETNS,
            ifname="eth0",
        )


# -- options, names, trace records ---------------------------------------------


def test_runtime_options_are_validated() -> None:
    from bootstorm.models import TunedConfig

    assert StormOptions().runtime == "threads"
    opts = StormOptions(runtime="cni", cni_chain=("tuning", "bandwidth"))
    assert opts.variant == "cni-bridge+tuning+bandwidth"
    assert StormOptions(runtime="cni", cni_plugin="ptp").variant == "cni-ptp"
    with pytest.raises(ValueError, match="cni_plugin: 'ptp' applies to runtime 'cni' only"):
        StormOptions(cni_plugin="ptp")
    with pytest.raises(ValueError, match="cni_check: True applies to runtime 'cni' only"):
        StormOptions(cni_check=True)
    with pytest.raises(ValueError, match="endpoint: 'tap' applies to runtime 'threads' only"):
        StormOptions(runtime="cni", endpoint="tap")
    with pytest.raises(ValueError, match="peer: 'moved' applies to runtime 'threads' only"):
        StormOptions(runtime="cni", peer="moved")
    with pytest.raises(ValueError, match="cni_chain: 'bandwidth' shapes the host end"):
        StormOptions(runtime="cni", cni_plugin="macvlan", cni_chain=("bandwidth",))
    with pytest.raises(ValueError, match="cni_chain: a plugin appears twice"):
        StormOptions(runtime="cni", cni_chain=("tuning", "tuning"))
    with pytest.raises(ValueError, match=r"cni_chain\.0"):
        StormOptions(runtime="cni", cni_chain=("portmap",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"config\.pools\.veth: 2 does not apply to runtime 'cni'"):
        StormOptions(runtime="cni", config=TunedConfig(pools={"veth": 2}))
    pooled = StormOptions(runtime="cni", config=TunedConfig(pools={"netns": 2, "netns-veth": 3}))
    assert pooled.config is not None


def test_names_of_the_cni_runtime() -> None:
    names = RunNames("ab12")
    assert names.bridge() == "bstab12br" and len(names.bridge()) <= 15
    assert _run_of_link(names.bridge()) == "ab12" and _run_of_link(names.ipvlan_probe()) == "ab12"
    assert names.cni_network() == "bst-ab12"
    assert names.cni_dir() == Path("/run/bootstorm-cni/ab12")


def test_a_dead_runs_containers_are_read_from_its_ipam_state(tmp_path: Path) -> None:
    state = tmp_path / "ab12" / "ipam" / "bst-ab12"
    state.mkdir(parents=True)
    (state / "lock").write_text("")
    (state / "last_reserved_ip.0").write_text("10.200.0.3")
    (state / "10.200.0.2").write_text("bst-ab12-0\r\neth0")
    (state / "10.200.0.3").write_text("bst-ab12-v1\neth0")
    assert _cni_containers(tmp_path / "ab12") == ["bst-ab12-0", "bst-ab12-v1"]


def test_exec_spans_in_a_trace(tmp_path: Path) -> None:
    header = TraceHeader(
        source="testbed",
        scenario=ScenarioFacts(sandboxes=1, cni="cni-bridge", runtime="cni"),
    )
    spans = (
        StageSpan(sandbox=0, stage="AddCNI", start_s=1.0, end_s=2.0, tid=5),
        StageSpan(sandbox=0, stage="AttachIf", start_s=2.0, end_s=3.0, tid=5),
    )
    execs = (
        ExecSpan(
            sandbox=0,
            stage="AddCNI",
            program="bridge",
            command="ADD",
            pid=77,
            rc=0,
            start_s=1.1,
            end_s=1.5,
        ),
        ExecSpan(
            sandbox=0,
            stage="AttachIf",
            program="shim.py",
            command="shim",
            pid=78,
            rc=0,
            start_s=2.0,
            end_s=9.0,
        ),
        ExecSpan(stage="pool", program="bridge", command="ADD", pid=60, start_s=0.1, end_s=0.2),
    )
    trace = Trace(header=header, spans=spans, execs=execs)
    path = tmp_path / "t.jsonl"
    write_trace(trace, path)
    assert read_trace(path) == trace
    assert '"record":"exec"' in path.read_text()
    # A plugin owns its sandbox's stage while it ran; the shim, the stages it spans.
    owners = exec_owners(spans, execs)
    assert owners[77] == [(1.1, 1.5, 0, "AddCNI")]
    assert owners[78] == [(2.0, 2.0, 0, "AddCNI"), (2.0, 3.0, 0, "AttachIf")]
    assert 60 not in owners  # a pool's ADD belongs to no stage
    with pytest.raises(ValueError, match="end_s must not be before start_s"):
        ExecSpan(stage="x", program="p", command="ADD", pid=1, start_s=2.0, end_s=1.0)
    # An old trace (no exec records, no runtime) still reads as the threads runtime.
    old = tmp_path / "old.jsonl"
    old.write_text(
        json.dumps(
            {"record": "header", "source": "testbed", "scenario": {"sandboxes": 1, "cni": "x"}}
        )
        + "\n"
    )
    got = read_trace(old)
    assert got.header.scenario.runtime == "threads" and got.execs == ()


# -- the shim's protocol (its error path needs no root) ------------------------


@pytest.fixture
def shim_name() -> Iterator[str]:
    """A shim's name in a run of its own, registered where this is root: a
    root test on the other worker sweeps every ``bst-<run>-`` process of an
    unregistered run (it SIGKILLed this test's shim, named ``bst-ab12-0``)."""
    run = new_run_id()
    registered = os.geteuid() == 0
    if registered:
        register_run(run)
    try:
        yield f"bst-{run}-0"
    finally:
        if registered:
            unregister_run(run)


def _shim(name: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, *SHIM_FLAGS, str(SHIM_SCRIPT), name],
        input=stdin,
        capture_output=True,
        timeout=30,
        check=False,
    )


def test_the_shim_reports_errors_as_events(shim_name: str) -> None:
    assert SHIM_SCRIPT.is_file()
    done = _shim(shim_name, b"")  # stdin closed before a job: nothing to do
    assert done.returncode == 0 and done.stdout == b""
    bad = _shim(shim_name, b"[1, 2]\n")
    assert bad.returncode == 1
    (event,) = [json.loads(line) for line in bad.stdout.splitlines()]
    assert event == {
        "event": "error",
        "msg": "ShimError: job: expected a JSON object, but got b'[1, 2]\\n'",
    }
    job = {"netns": "/run/netns/bst-no-such-namespace", "tap": "tap0"}
    gone = _shim(shim_name, json.dumps(job).encode() + b"\n")
    assert gone.returncode == 1
    (event,) = [json.loads(line) for line in gone.stdout.splitlines()]
    assert event["event"] == "error" and "bst-no-such-namespace" in event["msg"]


def test_the_shim_imports_nothing_of_bootstorm() -> None:
    source = SHIM_SCRIPT.read_text()
    assert "bootstorm" not in source.split('"""', 2)[2]  # past the docstring
    out = subprocess.run(
        [
            sys.executable,
            *SHIM_FLAGS,
            "-c",
            f"import runpy, sys; runpy.run_path({str(SHIM_SCRIPT)!r}); "
            "print(sorted(m for m in sys.modules if 'bootstorm' in m))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    )
    assert out.stdout.strip() == "[]"


def test_a_storm_larger_than_one_bridge_holds_is_refused_before_it_starts() -> None:
    """The run's bridge takes 1 023 ports; the 1 024th sandbox failed mid-storm
    ("exchange full") after 1 023 had started. Pooled namespaces are ports too."""
    from bootstorm.models import TunedConfig
    from bootstorm.validation.testbed.options import MAX_BRIDGE_PORTS

    assert StormOptions(runtime="cni", sandboxes=MAX_BRIDGE_PORTS).sandboxes == MAX_BRIDGE_PORTS
    with pytest.raises(ValueError, match=r"sandboxes: 1024 sandboxes .* 1024 ports"):
        StormOptions(runtime="cni", sandboxes=MAX_BRIDGE_PORTS + 1)
    pooled = TunedConfig(pools={"netns-veth": 24})
    with pytest.raises(ValueError, match="24 pooled namespaces"):
        StormOptions(runtime="cni", sandboxes=1000, config=pooled)
    assert StormOptions(runtime="cni", cni_plugin="ptp", sandboxes=2000).sandboxes == 2000
    assert StormOptions(sandboxes=2000).sandboxes == 2000  # threads: no bridge
