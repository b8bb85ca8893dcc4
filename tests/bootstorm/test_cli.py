"""The command line: JSON contract, traces, and one-line errors with exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bootstorm.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real entry point in a child process (exit code, stdout, stderr)."""
    code = "from bootstorm.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


def test_simulate_json_has_the_documented_fields() -> None:
    out = run_cli("simulate", "--cni", "ipvtap", "--sandboxes", "40", "--json")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1  # exactly one JSON object
    data = json.loads(lines[0])
    assert data["makespan_s"] > 0
    assert set(data["startup_s"]) >= {"mean", "p50", "p99"}
    assert set(data["stages"]) == {"NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM"}
    assert all("mean_s" in v for v in data["stages"].values())
    rtnl = data["locks"]["rtnl"]
    assert set(rtnl) >= {"acquisitions", "contended", "wait_s", "contended_wall_s", "hold_s"}
    assert set(data["cpu"]) >= {"busy_core_s", "spin_core_s"}
    assert data["pool_memory_mib"] == 0
    assert data["scenario"]["sandboxes"] == 40


def test_compiled_executor_prints_the_same_json() -> None:
    args = ("simulate", "--sandboxes", "60", "--limit", "AddCNI=5", "--json")
    simpy = run_cli(*args, "--executor", "simpy")
    compiled = run_cli(*args)  # the default, as for every other command
    assert simpy.returncode == compiled.returncode == 0, compiled.stderr
    a, b = json.loads(compiled.stdout), json.loads(simpy.stdout)
    # The one field that may differ: SimPy also counts each process's end as an event.
    assert a.pop("events") <= b.pop("events")
    assert a == b


def test_options_change_the_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    main(
        [
            "simulate",
            "--sandboxes",
            "30",
            "--pool",
            "ipvtap=30",
            "--pool",
            "netns=30",
            "--limit",
            "Cgroup=5",
            "--qos-rules",
            "2",
            "--tenants",
            "3",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert data["scenario"]["pools"] == {"ipvtap": 30, "netns": 30}
    assert data["scenario"]["limits"] == {"Cgroup": 5}
    assert data["pools"]["ipvtap"]["taken"] == 30
    assert data["gates"]["Cgroup"]["permits"] == 5
    assert data["pool_memory_mib"] > 0


def test_scenario_file_and_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("cni: veth\nsandboxes: 20\nlimits: {Cgroup: 4, AttachIf: 8}\n")
    main(["simulate", str(path), "--sandboxes", "10", "--limit", "Cgroup=2", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert (data["scenario"]["cni"], data["scenario"]["sandboxes"]) == ("veth", 10)
    # NAME=COUNT options override the file's map key by key
    assert data["scenario"]["limits"] == {"Cgroup": 2, "AttachIf": 8}


def test_trace_opens_as_chrome_trace_json(tmp_path: Path) -> None:
    trace = tmp_path / "storm.json"
    out = run_cli("simulate", "--sandboxes", "10", "--trace", str(trace))
    assert out.returncode == 0, out.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert {f"sandbox {i}" for i in range(10)} <= names
    assert {"rtnl", "cgroup_mutex"} <= names


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["simulate", "--cni", "foo"], "error: cni: Input should be"),
        (
            ["simulate", "--sandboxes", "-5"],
            "error: sandboxes: Input should be greater than or equal to 1 (got -5)",
        ),
        (["simulate", "--sandboxes", "abc"], "error: Invalid value for '--sandboxes'"),
        (["simulate", "--pool", "veth=3"], "error: pools: unknown pool kind 'veth'"),
        (["simulate", "--pool", "ipvtap"], "error: pools: expected NAME=COUNT, but got 'ipvtap'"),
        (
            ["simulate", "--limit", "Cgroup=x"],
            "error: limits.Cgroup: expected an integer, but got 'x'",
        ),
        (
            ["simulate", "--memory-mib", "-512"],
            "error: memory_mib: Input should be greater than or equal to 1 (got -512)",
        ),
        (["simulate", "/no/such/file.yaml"], "error: /no/such/file.yaml: cannot read"),
        (["simulate", "--executor", "numba"], "error: Invalid value for '--executor'"),
        (
            ["simulate", "--executor", "compiled", "--trace", "t.json"],
            "error: executor: must be 'simpy' to record spans (record=True) (got 'compiled')",
        ),
        # Sized from its one plan before anything per sandbox is made (it used to
        # build a list of plans per sandbox, then run out of memory minutes later).
        # (10**9: the most a scenario takes; past it the bound says so.)
        (
            ["simulate", "--sandboxes", "1000000000"],
            "error: sandboxes: 1000000000 sandboxes would need about ",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str) -> None:
    out = run_cli(*args)
    assert out.returncode == 2
    assert out.stderr.startswith(expected), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr
    assert out.stdout == ""


def test_malformed_and_unknown_field_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cni: veth\nsandboxs: 3\n")
    out = run_cli("simulate", str(bad))
    assert out.returncode == 2 and out.stderr.strip() == f"error: {bad}: sandboxs: unknown field"
    bad.write_text("cni: veth\n  sandboxes: [3\n")
    out = run_cli("simulate", str(bad))
    assert out.returncode == 2 and "malformed YAML" in out.stderr and "line 2" in out.stderr


def test_demo_prints_the_summary_and_writes_config_and_report(tmp_path: Path) -> None:
    out = run_cli("demo", "--sandboxes", "60", "--trials", "8", "--output-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    from bootstorm import Scenario, simulate
    from bootstorm.models import TunedConfig

    # The config it writes is the storm it predicted: pools and limits both
    # (it once wrote `pools: {}` while predicting with pools).
    config = TunedConfig.from_yaml(tmp_path / "tuned.yaml")
    assert config.pools and config.limits and config.origin is not None
    assert config.origin.predicted is not None
    applied = Scenario(cni="ipvtap", sandboxes=60, profile="paper-000", config=config)
    assert simulate(applied, executor="compiled").makespan_s == pytest.approx(
        config.origin.predicted["makespan_s"], rel=1e-9
    )
    # The chosen settings are printed, not only written.
    limits = " ".join(f"{k}={v}" for k, v in config.limits.items())
    assert "tuned config: limits " + limits.replace(" ", ", ") in text
    # A caution that concerns one what-if of the table names it.
    assert "S0-5 for veth: ipvtap is the slowest" in text
    assert "S0-3 for no network:" in text

    assert out.returncode == 0, out.stderr
    assert "makespan" in out.stdout and "what-ifs" in out.stdout and "rtnl" in out.stdout
    assert "before / after" in text and "pooled + tuned" in text
    from bootstorm.models import TunedConfig

    config = TunedConfig.from_yaml(tmp_path / "tuned.yaml")
    assert config.limits and config.origin is not None
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    # The what-ifs rank veth (S0-5), and the tuned limits sit on full pools
    # (S0-9): both rows the model misses; the report is of the tuned storm.
    text = " ".join(out.stdout.split())
    assert "S0-5 for veth: ipvtap is the slowest kernel-datapath CNI" in text
    assert "caution: the papers measured otherwise S0-9" in text
    assert "S0-9" in page and "S0-5" not in page and "S0-8" not in text


def _json(*args: str) -> dict:  # type: ignore[type-arg]
    out = run_cli("simulate", *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_sriov_json_has_table_1_steps_and_reproduces_s1_4() -> None:
    """The issue's check, through the command line: FastIOV and vanilla SR-IOV,
    200 sandboxes on paper-001, average and p99 reductions within ±15% of S1-4."""
    fast = _json("--cni", "fastiov", "--sandboxes", "200", "--profile", "paper-001")
    vanilla = _json("--cni", "sriov-vanilla", "--sandboxes", "200", "--profile", "paper-001")
    for name in ("cgroup", "dma-ram", "virtiofs", "dma-image", "vfio-devset", "vf-driver"):
        step = vanilla["steps"][name]
        assert step["mean_s"] > 0 and 0 < step["p99_share"] < 1
    assert "ready_s" in fast and "ready_s" not in vanilla  # FastIOV's NIC comes up later
    assert fast["steps"]["vf-driver"]["on_path"] is False
    avg_cut = 1 - fast["startup_s"]["mean"] / vanilla["startup_s"]["mean"]
    p99_cut = 1 - fast["startup_s"]["p99"] / vanilla["startup_s"]["p99"]
    assert abs(avg_cut - 0.657) <= 0.15 * 0.657
    assert abs(p99_cut - 0.754) <= 0.15 * 0.754


def test_sriov_tables_show_shares_and_group_per_vf_locks() -> None:
    out = run_cli("simulate", "--cni", "fastiov", "--sandboxes", "30", "--profile", "paper-001")
    assert out.returncode == 0, out.stderr
    assert re.search(r"% of +% of", out.stdout) and "ready (network usable)" in out.stdout
    assert "vfio_vf/* (30 locks)" in out.stdout
    assert "vf-driver (background)" in out.stdout


def test_sriov_on_a_profile_without_sriov_costs_is_one_line() -> None:
    out = run_cli("simulate", "--cni", "fastiov", "--sandboxes", "4")
    assert out.returncode == 2
    assert out.stderr.startswith("error: profile: 'paper-000' has no `sriov` section")


def test_calibrate_check_paper_001_prints_the_error_table() -> None:
    out = run_cli("calibrate", "--targets", "paper-001", "--check")
    assert out.returncode == 0, out.stderr
    assert "S1-1" in out.stdout and "S1-2" in out.stdout and "≥ −5%" in out.stdout


def test_summary_names_the_options_the_busiest_lock_and_the_qos_resend() -> None:
    out = run_cli(
        "simulate", "--cni", "veth", "--sandboxes", "100", "--qos-rules", "2", "--pool", "netns=10"
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # rich may wrap a row
    assert "100 × veth on paper-000 [netns=10, qos 2]" in text
    assert "most contended lock" in text
    # Per vPort ahead, (100 x 99 / 2 = 4950 of them): re-sending 2 rules, 21 us
    # each, on 3 changes (0.6 s); walking the ports, 37 us as measured
    # (experiments/bench_ovs_qos.py), on the 3 changes QoS makes (0.55 s).
    assert re.search(
        r"OVS reconfiguring for vPorts ahead\W+1\.2 s of ovs-vswitchd work \(walking their "
        r"ports 0\.5 s, re-sending QoS rules 0\.6 s; grows as vPorts²\)",
        text,
    )
    plain = run_cli("simulate", "--cni", "veth", "--sandboxes", "100")
    plain_text = " ".join(plain.stdout.split())
    # No QoS: one change a vPort, 37 us x 4950 = 0.18 s of walking only.
    assert re.search(
        r"vPorts ahead\W+0\.2 s of ovs-vswitchd work \(walking their ports 0\.2 s; grows",
        plain_text,
    )
    shared = run_cli("simulate", "--cni", "ipvtap", "--sandboxes", "100", "--qos-rules", "2")
    assert "vPorts ahead" not in shared.stdout  # one vPort: nothing ahead


def test_a_what_if_resting_on_a_missed_row_says_so() -> None:
    """The known misses a what-if rests on are printed under the tables and
    listed in the JSON (``calibration.known_misses``); none for the default."""
    args = ("simulate", "--cni", "ipvtap", "--sandboxes", "40", "--qos-rules", "2")
    out = run_cli(*args, "--tenants", "20")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "caution: the papers measured otherwise S0-13 with QoS, more tenants shorten" in text
    keys = [c["key"] for c in _json(*args[1:], "--tenants", "20")["caveats"]]
    assert keys == ["S0-13/qos-tenants"]
    assert _json(*args[1:])["caveats"] == []
    assert "the papers measured otherwise" not in run_cli(*args).stdout


def test_simulate_help_shows_every_default() -> None:
    from bootstorm._options import SCENARIO_DEFAULTS
    from bootstorm.models import Scenario

    default = Scenario()
    assert {k: getattr(default, k) for k in SCENARIO_DEFAULTS} == SCENARIO_DEFAULTS
    out = run_cli("simulate", "--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for field, value in SCENARIO_DEFAULTS.items():
        option = "--" + field.replace("_", "-")
        assert re.search(rf"{option} .*?\[default: {re.escape(str(value))}\]", text), option
    assert "[default: compiled; simpy with --trace" in text
    # Besides the scenario's fields: pools, limits, RTNL order, cores, vCPUs,
    # VFs, hugepages, the background's path, the executor, the workload's
    # window, the refill workers and the VMs' lifetime.
    assert text.count("[default:") == len(SCENARIO_DEFAULTS) + 12


def test_demo_searches_as_many_trials_as_the_reference_it_quotes() -> None:
    """The S0-9 caution under the demo quotes a 50-trial search: the demo once ran 40."""
    from bootstorm._cli_demo import DEMO_TRIALS
    from bootstorm.calibration import known_miss

    # The trial count is in the why (the reference runs'), not in what is said
    # under a run, which must never look like a claim about that run.
    miss = known_miss("S0-9/total")
    assert f"{DEMO_TRIALS} TPE trials" in miss.reason and "TPE trials" not in miss.says
    assert f"[default: {DEMO_TRIALS};" in " ".join(run_cli("demo", "--help").stdout.split())


def test_simulate_runs_the_compiled_executor_unless_asked_for_spans(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import bootstorm._api as api

    seen: list[str] = []
    real = api.simulate

    def spy(*args: object, executor: str = "simpy", **kw: object) -> object:
        seen.append(executor)
        return real(*args, executor=executor, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "simulate", spy)
    main(["simulate", "--sandboxes", "20", "--json"])
    main(["simulate", "--sandboxes", "20", "--trace", str(tmp_path / "t.json")])
    main(["simulate", "--sandboxes", "20", "--executor", "python", "--json"])
    capsys.readouterr()
    assert seen == ["compiled", "simpy", "python"]


def test_piped_tables_fit_80_columns() -> None:
    """Piped output was printed 140 columns wide; now as a terminal's 80 (or $COLUMNS)."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    args = ["simulate", "--sandboxes", "100", "--limit", "AddCNI=4", "--qos-rules", "2"]
    out = subprocess.run(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    widths = [len(line.rstrip()) for line in out.stdout.splitlines()]
    assert max(widths) <= 80, max(widths)
    # Numbers are never cut (rich crops a squeezed cell with "…").
    table = out.stdout.split("stages")[1].split("caution")[0]
    assert "…" not in table
    # The stage shares and the waits at the limit add up to the whole startup.
    shares = [
        float(x) for x in re.findall(r"(\d+\.\d)%", out.stdout.split("stages")[1].split("locks")[0])
    ]
    assert sum(shares[0::2]) == pytest.approx(100.0, abs=0.5)


def _makespan(*args: str) -> float:
    return float(_json(*args)["makespan_s"])


def test_s0_8_is_printed_only_for_limits_that_shorten_the_storm() -> None:
    """S0-8 says the model credits *tuned* limits with too much; it was printed
    under hand-picked limits that made the storm longer."""
    storm = ("--cni", "ipvtap", "--sandboxes", "100")
    tight, tuned = ("--limit", "StartVM=1"), ("--limit", "AddCNI=4")
    none = _makespan(*storm)
    assert _makespan(*storm, *tight) > none > _makespan(*storm, *tuned)  # computed, not assumed
    longer = run_cli("simulate", *storm, *tight)
    text = " ".join(longer.stdout.split())
    assert "measured otherwise S0-8" not in text
    assert "S0-8 (the model credits tuned limits with too much) does not apply" in text
    assert not [c for c in _json(*storm, *tight)["caveats"] if c["row"] == "S0-8"]
    shorter = " ".join(run_cli("simulate", *storm, *tuned).stdout.split())
    assert "caution: the papers measured otherwise S0-8" in shorter
    assert [c["key"] for c in _json(*storm, *tuned)["caveats"]][:1] == ["S0-8/cut"]


def test_a_what_if_within_the_seed_spread_is_marked() -> None:
    from rich.console import Console

    from bootstorm import Scenario, simulate
    from bootstorm._render import comparison_table

    base = Scenario(cni="ipvtap", sandboxes=100)
    runs = [simulate(base.replace(seed=k), executor="compiled") for k in range(3)]
    other = simulate(base.replace(cni="no-network"), executor="compiled")
    spans = [r.makespan_s for r in runs]
    rows = [("base", runs[0]), ("seed 1", runs[1]), ("no network", other)]
    console = Console(width=100, record=True)
    console.print(comparison_table("t", rows, spread_s=(min(spans), max(spans))))
    text = console.export_text()
    assert re.search(r"seed 1 .*% ≈", text) and not re.search(r"no network .*≈", text)
    assert "no change the model can tell from chance" in text


def test_a_deadlocked_storm_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A storm left waiting forever (limits and pools that cannot all be met, or
    a model bug) ends in one line naming the stuck tasks, not a traceback."""
    import bootstorm._api as api
    from bootstorm.simulator import DeadlockError

    def stuck(*_: object, **__: object) -> object:
        raise DeadlockError("deadlock: 3 tasks never finished (first: [0, 1, 2])")

    monkeypatch.setattr(api, "simulate", stuck)
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--sandboxes", "3"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == (
        "error: the simulated storm deadlocked: deadlock: 3 tasks never finished "
        "(first: [0, 1, 2])\n"
    )


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    out = run_cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"bootstorm {version('bootstorm')}\n"


#: A cell rich cut short ends in "…" before its border or padding; the
#: ranges the tables print ("0.01…100", "+0%…+24%") go on with a number.
CUT_CELL = re.compile(r"…(?![0-9+\-−])")


@pytest.mark.slow
def test_calibrate_on_recorded_storms_reads_at_80_columns(tmp_path: Path) -> None:
    """Piped, calibrate --measured printed 120 columns and cut the
    identification's sources at 60 characters; its fit table headed this
    node's own measurements "paper"."""
    data = Path(__file__).resolve().parents[2] / "traces/data/validation"
    runs = [f"--trace={data}/storm-50-run{k}.jsonl.gz" for k in (1, 2, 3)]
    out = run_cli("calibrate", *runs, "--output", str(tmp_path / "local.yaml"))
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    assert not CUT_CELL.search(out.stdout), out.stdout
    assert "measured" in out.stdout and "paper" not in out.stdout


def test_a_key_given_twice_in_a_scenario_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The loader kept the last: ``sandboxes: 20`` then ``sandboxes: 30`` ran 30."""
    path = tmp_path / "s.yaml"
    path.write_text("sandboxes: 20\nsandboxes: 30\n")
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err == f"error: {path}: line 2: 'sandboxes' is given twice in a mapping\n"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["simulate", "--pool", "netns=5", "--pool", "netns=6"], "pools.netns: given twice"),
        (["calibrate", "--check", "--write"], "write: not with --check"),
        (["calibrate", "--check", "--bootstrap", "5"], "bootstrap: goes with --measured"),
    ],
)
def test_an_option_that_would_be_ignored_or_overridden_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """The last --pool of a kind won, and calibrate --check ignored these."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and needle in err
