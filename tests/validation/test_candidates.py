"""Validated decisions (``bootstorm validate --candidates``): interleaved runs,
measured medians, the Spearman of the rankings, one-line refusals, and (root)
real storms of two configs."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from bootstorm.calibration import trace_fit
from bootstorm.calibration.trace_fit import StormStats
from bootstorm.cli import main
from bootstorm.models import ConfigError, Profile, Scenario, TunedConfig, compile_scenario
from bootstorm.simulator import run_with
from bootstorm.traces import (
    Arrival,
    HostFacts,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceHeader,
    read_trace,
    write_trace,
)
from bootstorm.validation.candidates import (
    Candidate,
    CandidateComparison,
    CandidateMeasurement,
    compare_candidates,
    measure_candidates,
    read_runs,
    run_order,
    run_path,
)

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")
EXECUTOR = "python"  # the same numbers as compiled, without numba's first compile

POOL = TunedConfig(pools={"netns": 6})
LIMIT = TunedConfig(limits={"AddCNI": 2})


def synthetic_trace(
    sandboxes: int = 6, *, scale: float = 1.0, config: TunedConfig | None = None
) -> Trace:
    """A testbed storm of ``sandboxes``: sandbox i spends ``scale * 10 ms *
    (1 + i/10)`` in each stage, back to back, all arriving at t=0. Its
    makespan is ``5 * scale * 10 ms * (1 + (n-1)/10)``."""
    origin = 100.0
    spans = []
    for i in range(sandboxes):
        t = origin
        step = scale * 0.01 * (1 + i / 10)
        for stage in STAGES:
            spans.append(StageSpan(sandbox=i, stage=stage, start_s=t, end_s=t + step, tid=100 + i))
            t += step
    pools = {k: v for k, v in (config.pools if config else {}).items() if k == "netns"}
    header = TraceHeader(
        source="testbed",
        origin_s=origin,
        host=HostFacts(kernel="6.1", cores=2, memory_mib=2048),
        config=config,
        scenario=ScenarioFacts(
            sandboxes=sandboxes, cni="veth-peer-in-netns", vm="process", pools=pools
        ),
    )
    arrivals = tuple(Arrival(sandbox=i, t_s=origin) for i in range(sandboxes))
    return Trace(header=header, spans=tuple(spans), arrivals=arrivals)


def makespan_of(sandboxes: int, scale: float) -> float:
    return 5 * scale * 0.01 * (1 + (sandboxes - 1) / 10)


@pytest.fixture(scope="module")
def profile() -> Profile:
    # Imported under its module: pytest would collect a bare `testbed_template`.
    return trace_fit.testbed_template(cores=2, memory_mib=2048, service_cv=0.1)


class FakeStorms:
    """A :class:`StormRunner` that records what it ran and returns synthetic traces."""

    def __init__(self, scales: dict[str, float] | None = None) -> None:
        self.calls: list[str] = []
        self.scales = scales or {}

    def __call__(self, candidate: Candidate, *, sandboxes: int, vm: bool) -> Trace:
        self.calls.append(candidate.name)
        scale = self.scales.get(candidate.name, 1.0) * (1 + 0.01 * len(self.calls))
        return synthetic_trace(sandboxes, scale=scale, config=candidate.config)


def _candidates(*names: str) -> list[Candidate]:
    return [Candidate(name=n, config=None if n == "baseline" else POOL) for n in names]


# -- the interleaving --------------------------------------------------------


def test_each_round_runs_every_candidate_once_in_a_shuffled_order() -> None:
    names = ["baseline", "a", "b", "c"]
    fake = FakeStorms()
    seen: list[tuple[str, int]] = []
    traces = measure_candidates(
        _candidates(*names),
        sandboxes=4,
        repeats=3,
        vm=False,
        run_storm=fake,
        order_seed=7,
        on_run=lambda c, r, t: seen.append((c.name, r)),
    )
    rounds = [tuple(fake.calls[k : k + 4]) for k in range(0, 12, 4)]
    assert len(fake.calls) == 12
    assert all(sorted(r) == sorted(names) for r in rounds)  # each candidate once a round
    assert len(set(rounds)) > 1  # the order is shuffled between rounds
    assert rounds == run_order(names, repeats=3, order_seed=7)
    assert [r for _, r in seen] == [0] * 4 + [1] * 4 + [2] * 4
    assert list(traces) == names and all(len(v) == 3 for v in traces.values())
    # Each candidate's traces in the order they ran, under its own config.
    assert all(t.header.config is None for t in traces["baseline"])
    assert all(t.header.config == POOL for t in traces["a"])


def test_the_order_is_reproducible_and_never_repeats_a_round() -> None:
    names = ["w", "x", "y", "z"]
    assert run_order(names, repeats=5, order_seed=3) == run_order(names, repeats=5, order_seed=3)
    orders = {tuple(run_order(names, repeats=5, order_seed=s)) for s in range(5)}
    assert len(orders) > 1  # the seed matters
    for seed in range(20):
        rounds = run_order(["a", "b"], repeats=4, order_seed=seed)
        assert all(a != b for a, b in itertools.pairwise(rounds))
    assert run_order(["solo"], repeats=3) == [("solo",)] * 3


def test_measure_refuses_bad_input() -> None:
    fake = FakeStorms()
    with pytest.raises(ConfigError, match="repeats: must be at least 1, but got 0"):
        measure_candidates(_candidates("a", "b"), sandboxes=4, repeats=0, run_storm=fake)
    with pytest.raises(ConfigError, match="candidates: duplicate name 'a'"):
        measure_candidates(_candidates("a", "a"), sandboxes=4, run_storm=fake)
    with pytest.raises(ConfigError, match="candidates: give at least one"):
        measure_candidates([], sandboxes=4, run_storm=fake)
    with pytest.raises(ConfigError, match=r"^name: must be letters"):
        Candidate(name="a b", config=None)
    assert fake.calls == []


# -- measured and predicted --------------------------------------------------


def test_measured_numbers_are_medians_of_runs_and_the_pooled_mean(profile: Profile) -> None:
    scales = (1.0, 3.0, 2.0)
    runs = [synthetic_trace(6, scale=s) for s in scales]
    (row,) = compare_candidates(
        {"baseline": runs}, _candidates("baseline"), profile, executor=EXECUTOR
    ).rows
    assert row.measured_makespan_s == pytest.approx(makespan_of(6, 2.0))
    assert row.run_makespans_s == pytest.approx([makespan_of(6, s) for s in scales])
    latencies = [5 * s * 0.01 * (1 + i / 10) for s in scales for i in range(6)]
    assert row.measured_mean_s == pytest.approx(float(np.mean(latencies)))
    p99s = [
        float(np.percentile([5 * s * 0.01 * (1 + i / 10) for i in range(6)], 99)) for s in scales
    ]
    assert row.measured_p99_s == pytest.approx(float(np.median(p99s)))
    # The prediction is the recorded storm simulated under the profile.
    result = run_with(
        compile_scenario(StormStats.pooled(runs).scenario(), seed=0, profile=profile), EXECUTOR
    )
    assert row.predicted_makespan_s == result.makespan_s
    assert row.predicted_mean_s == result.startup.mean
    assert row.predicted_p99_s == result.startup.p99
    assert row.makespan_error == pytest.approx(
        (result.makespan_s - row.measured_makespan_s) / row.measured_makespan_s
    )
    assert row.mean_error == pytest.approx(
        (result.startup.mean - row.measured_mean_s) / row.measured_mean_s
    )


def test_the_recorded_pools_are_what_is_simulated(profile: Profile) -> None:
    traces = measure_candidates(
        _candidates("baseline", "pool"), sandboxes=6, repeats=2, run_storm=FakeStorms()
    )
    comparison = compare_candidates(
        traces, _candidates("baseline", "pool"), profile, executor=EXECUTOR
    )
    base, pool = comparison.rows
    assert base.scenario.pools == {} and pool.scenario.pools == {"netns": 6}
    assert comparison.repeats == 2 and comparison.sandboxes == 6
    assert pool.predicted_makespan_s != base.predicted_makespan_s
    frame = comparison.frame()
    assert list(frame["name"]) == ["baseline", "pool"]
    assert {
        "measured_makespan_s",
        "predicted_makespan_s",
        "makespan_error",
        "measured_mean_s",
        "predicted_mean_s",
        "mean_error",
        "measured_rank",
        "predicted_rank",
    } <= set(frame.columns)


def test_compare_refuses_runs_that_are_not_the_candidates(profile: Profile) -> None:
    runs = [synthetic_trace(6, config=POOL)]
    with pytest.raises(ConfigError, match="measured: no recorded runs of candidate 'limit'"):
        compare_candidates({"pool": runs}, [Candidate(name="limit", config=LIMIT)], profile)
    with pytest.raises(ConfigError, match=r"run 1 was recorded with limits \{\} and pools"):
        compare_candidates({"limit": runs}, [Candidate(name="limit", config=LIMIT)], profile)
    with pytest.raises(ConfigError, match="ranked at one storm size"):
        compare_candidates(
            {"baseline": [synthetic_trace(6)], "pool": [synthetic_trace(8, config=POOL)]},
            _candidates("baseline", "pool"),
            profile,
            executor=EXECUTOR,
        )


# -- the ranking -------------------------------------------------------------


def _row(name: str, measured: float, predicted: float) -> CandidateMeasurement:
    return CandidateMeasurement(
        candidate=Candidate(name=name, config=None),
        traces=(),
        scenario=Scenario(cni="testbed-veth", sandboxes=6, profile="local"),
        predicted_makespan_s=predicted,
        predicted_mean_s=predicted / 2,
        predicted_p99_s=predicted,
        measured_makespan_s=measured,
        measured_mean_s=measured / 2,
        measured_p99_s=measured,
    )


def _comparison(pairs: Sequence[tuple[float, float]]) -> CandidateComparison:
    rows = tuple(_row(f"c{k}", m, p) for k, (m, p) in enumerate(pairs))
    return CandidateComparison(rows=rows, repeats=3, sandboxes=6)


def test_spearman_of_a_known_ranking() -> None:
    same = _comparison([(1.0, 1.5), (2.0, 2.1), (3.0, 2.2), (4.0, 9.0)])
    assert same.spearman_makespan == 1.0  # exactly
    assert same.measured_ranks() == same.predicted_ranks() == (1, 2, 3, 4)
    assert same.best_agrees and same.measured_best.name == "c0"
    reversed_ = _comparison([(1.0, 4.0), (2.0, 3.0), (3.0, 2.0), (4.0, 1.0)])
    assert reversed_.spearman_makespan == -1.0
    assert reversed_.measured_best.name == "c0" and reversed_.predicted_best.name == "c3"
    assert not reversed_.best_agrees
    assert _comparison([(1.0, 1.0), (2.0, 2.0)]).spearman_makespan == 1.0
    # One swap among four: 1 - 6 * 2 / (4 * 15) = 0.8.
    assert _comparison([(1, 1), (2, 3), (3, 2), (4, 4)]).spearman_makespan == pytest.approx(0.8)


def test_spearman_is_nan_where_undefined() -> None:
    assert math.isnan(_comparison([(1.0, 1.0)]).spearman_makespan)
    assert math.isnan(_comparison([(1.0, 2.0), (2.0, 2.0), (3.0, 2.0)]).spearman_makespan)
    assert math.isnan(_comparison([(1.0, 1.0), (1.0, 2.0)]).spearman_makespan)


def test_spearman_of_mean_startup_ranks_its_own_column() -> None:
    """Limits move the mean startup, not the makespan, of a CPU-bound storm:
    the two rankings are separate, each of its own columns (a known answer)."""
    rows = (
        dataclasses.replace(_row("none", 9.1, 8.6), measured_mean_s=8.3, predicted_mean_s=7.7),
        dataclasses.replace(_row("pool", 7.8, 7.8), measured_mean_s=6.9, predicted_mean_s=7.1),
        dataclasses.replace(_row("limit", 9.5, 8.3), measured_mean_s=6.1, predicted_mean_s=5.1),
    )
    comparison = CandidateComparison(rows=rows, repeats=3, sandboxes=6)
    assert comparison.spearman_makespan == 0.5  # one swap of three: 1 - 6 * 2 / 24
    assert comparison.spearman_mean == 1.0
    tied = CandidateComparison(rows=rows[:1] * 2, repeats=3, sandboxes=6)
    assert math.isnan(tied.spearman_mean)


def test_median_abs_error_and_ranks_with_ties() -> None:
    c = _comparison([(1.0, 1.1), (2.0, 1.0), (4.0, 4.0)])  # errors +10%, -50%, 0%
    assert c.median_abs_error == pytest.approx(0.1)
    assert c.predicted_ranks() == (2, 1, 3)
    tied = _comparison([(1.0, 1.0), (1.0, 2.0), (3.0, 3.0)])
    assert tied.measured_ranks() == (1, 1, 3)


def test_discordant_pairs_say_whether_the_runs_separate_them() -> None:
    from dataclasses import replace

    def row(name: str, runs: tuple[float, ...], predicted: float) -> CandidateMeasurement:
        median = sorted(runs)[len(runs) // 2]
        return replace(_row(name, median, predicted), run_makespans_s=runs)

    rows = (
        row("a", (9.0, 9.1, 9.2), 7.0),  # measured fastest, predicted slowest
        row("b", (9.1, 9.5, 11.0), 6.0),  # its runs overlap a's: swap within spread
        row("c", (10.0, 10.2, 10.4), 6.5),  # every run slower than a's: a model error
    )
    c = CandidateComparison(rows=rows, repeats=3, sandboxes=6)
    pairs = sorted(
        (p.measured_faster, p.predicted_faster, p.separated_by_runs) for p in c.discordant_pairs()
    )
    assert pairs == [("a", "b", False), ("a", "c", True)]
    assert rows[1].run_range_s == (9.1, 11.0)
    assert rows[1].run_spread == pytest.approx((11.0 - 9.1) / 9.5)
    assert c.records()[2]["run_spread"] == pytest.approx(0.4 / 10.2)
    assert c.records()[1]["run_range_s"] == [9.1, 11.0]
    # Agreeing orders have no discordant pair; a single run has no spread.
    assert _comparison([(1.0, 1.0), (2.0, 3.0)]).discordant_pairs() == []
    assert _row("x", 2.0, 1.0).run_spread == 0.0


# -- recorded runs on disk ---------------------------------------------------


def test_runs_round_trip_through_a_directory(tmp_path: Path) -> None:
    for k in (1, 2, 3):
        write_trace(synthetic_trace(4, scale=k), run_path(tmp_path, "pool", k))
    write_trace(synthetic_trace(4), run_path(tmp_path, "pool-x", 1))  # not pool's
    (tmp_path / "pool-run10.jsonl.gz").write_bytes(run_path(tmp_path, "pool", 1).read_bytes())
    runs = read_runs(tmp_path, ["pool"])["pool"]
    assert len(runs) == 4
    assert StormStats.of(runs[1]).makespan_s == pytest.approx(makespan_of(4, 2))
    assert runs[3] == runs[0]  # run 10 after run 3
    with pytest.raises(ConfigError, match="has no run of candidate 'other'"):
        read_runs(tmp_path, ["other"])
    with pytest.raises(ConfigError, match="measured_dir: not a directory"):
        read_runs(tmp_path / "missing", ["pool"])


# -- the command line --------------------------------------------------------


def _table_rows(out: str, names: tuple[str, ...]) -> list[str]:
    """The tables' rows of ``names`` (indented by the tables' padding), not a
    verdict wrapped at 80 columns whose second line begins with a name
    (``baseline < pool``, when the runs' order is noted)."""
    return [
        ln
        for ln in out.splitlines()
        if ln.startswith(" ") and ln.lstrip().split(" ", 1)[0] in names
    ]


def _exit_code(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.fixture
def files(tmp_path: Path, profile: Profile) -> Path:
    """Candidate configs, a profile, and recorded runs of each in ``runs/``."""
    (tmp_path / "pool.yaml").write_text(POOL.to_yaml())
    (tmp_path / "limit.yaml").write_text(LIMIT.to_yaml())
    (tmp_path / "local.yaml").write_text(profile.to_yaml())
    runs = tmp_path / "runs"
    runs.mkdir()
    for name, config, scale in (("baseline", None, 1.0), ("pool", POOL, 1.2), ("limit", LIMIT, 2)):
        for k in (1, 2):
            write_trace(synthetic_trace(6, scale=scale * k, config=config), run_path(runs, name, k))
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--candidates", "missing.yaml"], "error: candidates: missing.yaml: no such file"),
        (["--candidates", "no=such.yaml"], "error: candidates: no=such.yaml: no such file"),
        (["--candidates", "bad.yaml"], "error: candidates: bad.yaml: line 2: malformed YAML"),
        (
            ["--candidates", "pool.yaml", "--repeats", "0"],
            "error: repeats: must be in 1..100 (got 0)",
        ),
        (
            ["--candidates", "pool.yaml", "--candidates", "x/pool.yaml"],
            "error: candidates: duplicate name 'pool' (pool.yaml and x/pool.yaml); name them",
        ),
        (
            ["--candidates", "baseline=pool.yaml"],
            "error: candidates: duplicate name 'baseline' (--baseline and baseline=pool.yaml)",
        ),
        (
            ["--candidates", "pool.yaml", "--no-baseline"],
            "error: candidates: a ranking needs at least two candidates",
        ),
        (
            ["--candidates", "pool.yaml", "--min-spearman", "2"],
            "error: min_spearman: must be a number in -1..1 (got 2.0)",
        ),
        (
            ["--candidates", "pool.yaml", "--config", "pool.yaml"],
            "error: config: with --candidates",
        ),
        (
            ["--candidates", "pool.yaml", "--measured", "x.jsonl"],
            "error: measured: with --candidates",
        ),
        (["--measured-dir", "runs"], "error: measured_dir: runs holds the runs of --candidates"),
        (
            ["--candidates", "pool.yaml", "--measured-dir", "runs"],
            "error: profile: --measured-dir compares recorded storms and runs none here",
        ),
        (
            ["--candidates", "pool.yaml", "--measured-dir", "nowhere", "--profile", "local.yaml"],
            "error: measured_dir: not a directory: 'nowhere'",
        ),
        (
            [
                "--candidates",
                "limit.yaml",
                "--measured-dir",
                "runs",
                "--profile",
                "local.yaml",
                "--candidates",
                "pool.yaml",
                "--candidates",
                "other=pool.yaml",
            ],
            "error: measured_dir: 'runs' has no run of candidate 'other'",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    files: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(files)
    (files / "x").mkdir()
    (files / "x" / "pool.yaml").write_text(POOL.to_yaml())
    (files / "bad.yaml").write_text("pools: [netns\n")
    assert _exit_code(["validate", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_config_the_testbed_cannot_run_fails_before_any_storm(
    files: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(files)
    (files / "odd.yaml").write_text("limits: {Boot: 2}\n")
    argv = ["validate", "--candidates", "odd.yaml", "--profile", "local.yaml"]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: candidates: odd: config.limits: unknown stage 'Boot'"), err


def test_measured_dir_prints_a_row_per_candidate_and_the_ranking(
    files: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(files)
    base = ["validate", "--candidates", "pool.yaml", "--candidates", "limit.yaml"]
    base += ["--measured-dir", "runs", "--profile", "local.yaml", "--executor", EXECUTOR]
    assert _exit_code([*base, "--json", "--threshold", "100", "--min-spearman", "-1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in data["candidates"]] == ["baseline", "pool", "limit"]
    assert [r["runs"] for r in data["candidates"]] == [2, 2, 2]
    assert data["candidates"][1]["pools"] == {"netns": 6}
    assert data["candidates"][2]["limits"] == {"AddCNI": 2}
    assert [r["measured_rank"] for r in data["candidates"]] == [1, 2, 3]
    assert data["measured_best"] == "baseline" and data["repeats"] == 2
    assert data["candidates"][0]["measured_makespan_s"] == pytest.approx(makespan_of(6, 1.5))
    assert data["within"] is True and isinstance(data["spearman_makespan"], float)
    # The table: one row per candidate, then the ranking line.
    code = _exit_code([*base, "--threshold", "1e-9", "--min-spearman", "-1"])
    out = capsys.readouterr().out
    assert code == 1
    names = ("baseline", "pool", "limit")
    rows = _table_rows(out, names)
    # The figures' table, then the settings' (two tables fit 80 columns).
    assert [r.split()[0] for r in rows] == [*names, *names]
    assert "netns=6" in rows[4] and "AddCNI=2" in rows[5]
    assert "ranking: Spearman" in out and "makespan outside ±0%" in out


def test_measured_dir_writes_a_report_of_every_candidate_and_run(
    files: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(files)
    base = ["validate", "--candidates", "pool.yaml", "--candidates", "limit.yaml"]
    base += ["--measured-dir", "runs", "--profile", "local.yaml", "--executor", EXECUTOR]
    argv = [*base, "--threshold", "100", "--min-spearman", "-1", "--report", "v.html"]
    assert _exit_code(argv) == 0
    page = (files / "v.html").read_text()
    assert "ranked by measured makespan" in page and "netns=6" in page and "AddCNI=2" in page
    assert "Makespan: every run against the prediction" in page
    assert "Stages: measured beside predicted" in page
    # Without --candidates there is no ranking to report: refused before any work.
    assert _exit_code(["validate", "--measured", "x.jsonl.gz", "--report", "v.html"]) == 2
    assert "report: goes with --candidates" in capsys.readouterr().err


def test_trace_out_keeps_every_run_as_it_ends(
    files: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run path of the command, with the testbed replaced by synthetic storms."""
    import bootstorm.workflows.validate as validate_workflow

    fake = FakeStorms({"baseline": 1.0, "pool": 0.5})
    monkeypatch.setattr(validate_workflow, "candidate_runner", lambda **_: fake)
    monkeypatch.chdir(files)
    argv = ["validate", "--candidates", "pool.yaml", "--profile", "local.yaml", "--sandboxes", "5"]
    argv += ["--repeats", "2", "--trace-dir", "out", "--no-vm", "--executor", EXECUTOR]
    assert _exit_code([*argv, "--threshold", "100", "--min-spearman", "-1"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in (files / "out").iterdir()) == [
        "baseline-run1.jsonl.gz",
        "baseline-run2.jsonl.gz",
        "pool-run1.jsonl.gz",
        "pool-run2.jsonl.gz",
    ]
    assert sorted(fake.calls[:2]) == sorted(fake.calls[2:]) == ["baseline", "pool"]
    assert read_trace(files / "out" / "pool-run1.jsonl.gz").header.config == POOL
    assert out.count("round 1/2: ") == 2 and out.count("round 2/2: ") == 2


# -- real storms (root) ------------------------------------------------------


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, cgroups, tracefs)")
@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_two_configs_on_this_host(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 candidates × 2 interleaved runs × 6 sandboxes, no microVMs."""
    (tmp_path / "pool.yaml").write_text(POOL.to_yaml())
    (tmp_path / "local.yaml").write_text(profile.to_yaml())
    out_dir = tmp_path / "runs"
    argv = ["validate", "--candidates", str(tmp_path / "pool.yaml"), "--sandboxes", "6"]
    argv += ["--repeats", "2", "--no-vm", "--profile", str(tmp_path / "local.yaml")]
    argv += ["--runtime", "threads"]  # the profile is the thread harness's
    loose = ["--threshold", "1000", "--min-spearman", "-1"]
    code = _exit_code([*argv, *loose, "--trace-dir", str(out_dir)])
    out = capsys.readouterr().out
    assert code == 0, out
    names = ("baseline", "pool")
    rows = _table_rows(out, names)
    assert [r.split()[0] for r in rows] == [*names, *names]  # figures, then settings
    assert "netns=6" in rows[3]
    assert out.count("round 1/2: ") == 2 and out.count("round 2/2: ") == 2
    runs = read_runs(out_dir, ["baseline", "pool"])
    assert [len(v) for v in runs.values()] == [2, 2]
    assert runs["pool"][0].header.config == POOL and runs["baseline"][0].header.config is None
    assert runs["pool"][0].header.scenario.pools == {"netns": 6}
    assert all(t.header.scenario.sandboxes == 6 for v in runs.values() for t in v)
    # Read back without running anything: the same measured numbers.
    again = ["validate", "--candidates", str(tmp_path / "pool.yaml"), "--measured-dir"]
    again += [str(out_dir), "--profile", str(tmp_path / "local.yaml"), "--json", *loose]
    assert _exit_code(again) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in data["candidates"]] == ["baseline", "pool"]
    assert all(r["runs"] == 2 and r["measured_makespan_s"] > 0 for r in data["candidates"])
