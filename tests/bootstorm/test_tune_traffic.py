"""``tune --workload``'s loop without root: the "real" runs are the workload
simulated under a known node profile, recorded as the testbed records one
through a node agent (arrivals, pool takes, the pools' sampled levels), so
what the loop measures is known. It must write the config that met the SLO
at the least memory, none when nothing met it or when no pool is needed,
and read a run's memory from the pools' levels as the model counts it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bootstorm.calibration import trace_fit
from bootstorm.models import (
    ConfigError,
    PoolRefill,
    Profile,
    Scenario,
    TunedConfig,
    compile_scenario,
)
from bootstorm.models.refill import REFILL
from bootstorm.models.testbed import TESTBED_CNIS, traffic_cautions
from bootstorm.simulator import run_with
from bootstorm.traces import Arrival, HostFacts, PoolLevelSample, PoolTake, Trace
from bootstorm.traces.workload import Workload
from bootstorm.validation.candidates import Candidate
from bootstorm.validation.recording import from_recording
from bootstorm.workflows import RecordingProgress, tune_traffic, workload_scenario
from bootstorm.workflows.tuning_traffic import (
    PEAK_BURST,
    TrafficFigures,
    TrafficRow,
    _choose,
    measured_traffic,
    peak_burst_config,
    predicted_traffic,
)

CNI = "testbed-veth"


#: Kernel memory of a pooled device, MiB (this host's, measured by measure-ops).
DEVICE_MIB = {"netns": 0.160, "veth": 0.072, "tap": 0.036, "netns-veth": 0.244}


def node(**values: float) -> Profile:
    start = trace_fit.testbed_template(cores=2, memory_mib=2048, service_cv=0.05)
    fitted = start.with_values(
        {"testbed.rcu_grace_s": 0.013, "testbed.vm_boot_s": 0.07, **values}, source="test node"
    )
    assert fitted.testbed is not None
    testbed = fitted.testbed.model_copy(update={"pool_device_mib": DEVICE_MIB})
    sources = {f"testbed.pool_device_mib.{k}": "measure-ops on this host" for k in DEVICE_MIB}
    return fitted.model_copy(update={"testbed": testbed, "sources": {**fitted.sources, **sources}})


def bursts(*, count: int = 6, size: int = 8, gap_s: float = 4.0) -> Workload:
    """``count`` bursts of ``size`` starts 20 ms apart, ``gap_s`` apart."""
    starts = [b * gap_s + 0.02 * i for b in range(count) for i in range(size)]
    return Workload(
        starts=np.asarray(starts),
        function=np.zeros(len(starts), dtype=np.int64),
        functions=("f",),
        source="bursts",
        duration_s=starts[-1],
        invocations=len(starts),
    )


class SimulatedTraffic:
    """A run on the workload's schedule under ``truth``, as the testbed's trace
    of a run through an agent: arrivals, a take per pooled start, and the
    pools' levels sampled every ``sample_s``."""

    def __init__(
        self, truth: Profile, workload: Workload, *, sample_s: float = 0.05, seed: int | None = None
    ) -> None:
        self.truth = truth
        self.workload = workload
        self.sample_s = sample_s
        self.seed = seed
        self.runs = 0

    def __call__(self, candidate: Any, *, sandboxes: int, vm: bool) -> Trace:
        self.runs += 1
        arrival = tuple(float(t) for t in self.workload.starts)
        storm = Scenario(cni=CNI, profile="local").replace(
            sandboxes=len(arrival), arrival_s=arrival, config=candidate.config
        )
        program = compile_scenario(
            storm, seed=self.runs if self.seed is None else self.seed, profile=self.truth
        )
        result = run_with(program, "simpy", record=True)
        assert result.recording is not None
        trace = from_recording(result.recording, cni=TESTBED_CNIS[CNI].recorded)
        origin = 100.0  # the trace's clock: the first arrival at 100 s
        empty = set(result.empty_start_sandboxes.tolist())
        pooled = sorted(result.pool_timelines)
        takes = [
            PoolTake(sandbox=i, kind=k, t_s=origin + arrival[i], taken=i not in empty)
            for i in range(len(arrival))
            for k in pooled
        ]
        end = float((result.arrival_s + result.startup_latency_s).max())
        times = np.arange(0.0, end, self.sample_s)
        levels = [
            PoolLevelSample(kind=k, t_s=origin + float(t), ready=int(r))
            for k in pooled
            for t, r in zip(times, result.pool_timelines[k].ready_at(times), strict=True)
        ]
        header = trace.header.model_copy(
            update={
                "source": "testbed",
                "origin_s": origin,
                "host": HostFacts(kernel="6.1", cores=2, memory_mib=2048),
                "config": candidate.config,
                "scenario": trace.header.scenario.model_copy(update={"pools": {}}),
            }
        )
        shift = origin  # the recording's times are from the first arrival at 0
        return dataclasses.replace(
            trace,
            header=header,
            # The agent refills out of the sandboxes' sight: no span of theirs.
            spans=tuple(
                s.model_copy(update={"start_s": s.start_s + shift, "end_s": s.end_s + shift})
                for s in trace.spans
                if s.stage != REFILL
            ),
            locks=(),
            softirqs=(),
            admits=(),
            arrivals=tuple(Arrival(sandbox=i, t_s=origin + t) for i, t in enumerate(arrival)),
            pool_takes=tuple(takes),
            pool_levels=tuple(levels),
        )


def _tune(tmp_path: Path, truth: Profile, model: Profile, workload: Workload, **kw: Any) -> Any:
    profile = tmp_path / "model.yaml"
    profile.write_text(model.to_yaml())
    args: dict[str, Any] = {
        "workload": workload,
        "slo_p99_s": 0.6,
        "trials": 24,
        "candidates": 2,
        "repeats": 2,
        "profile_path": profile,
        "measured_ops": None,
        "plan_sandboxes": None,
        "plan_runs": 1,
        "pool_kinds": ("netns-veth",),
        "limit_stages": (),
        "output": tmp_path / "tuned.yaml",
        "trace_dir": tmp_path / "runs",
        "report": tmp_path / "tune.html",
        "vm": False,
        "window_s": 5.0,
        "progress": RecordingProgress(),
        "run_storm": SimulatedTraffic(truth, workload),
        "runtime": "threads",
    }
    args.update(kw)
    return tune_traffic(**args)


#: Making a namespace and its pair is dear on this node: bursts of 8 without a
#: pool reach 0.76 s at p99; a pool of 8 refilled devices 0.51 s, of 6 0.55 s.
DEAR = {"testbed.netns_create_cpu_s": 0.06, "testbed.rtnl_veth_hold_s": 0.02}


def test_tune_traffic_writes_the_least_memory_config_that_met_the_slo(tmp_path: Path) -> None:
    truth = node(**DEAR)
    w = bursts()
    outcome = _tune(tmp_path, truth, truth, w)
    names = [r.name for r in outcome.rows]
    assert names[:2] == ["baseline", PEAK_BURST] and len(names) >= 3
    assert not outcome.row("baseline").meets_slo  # pools are needed on this node
    assert outcome.row(PEAK_BURST).meets_slo
    assert outcome.chosen is not None and outcome.chosen != PEAK_BURST
    chosen = outcome.row(outcome.chosen)
    assert chosen.meets_slo
    met = [r for r in outcome.rows if r.meets_slo and r.config is not None]
    assert chosen.measured.memory_mib == min(r.measured.memory_mib for r in met)
    # Bursts all of one size: less than the peak-burst pool's memory, not far less.
    ratio = outcome.memory_vs_peak_burst
    assert ratio is not None and ratio < 1.0
    written = TunedConfig.from_yaml(tmp_path / "tuned.yaml")
    assert written.pool_refill is not None and written.pools.get("netns-veth", 0) >= 1
    assert written.origin is not None
    assert written.origin.predicted["p99_s"] == pytest.approx(chosen.predicted.p99_s)
    # The run is the model's own: measured and predicted agree (only the seeds differ).
    assert chosen.measured.p99_s == pytest.approx(chosen.predicted.p99_s, rel=0.25)
    assert chosen.measured.memory_mib == pytest.approx(chosen.predicted.memory_mib, rel=0.25)
    assert len(list((tmp_path / "runs").glob("*.jsonl.gz"))) == 2 * len(names)
    page = (tmp_path / "tune.html").read_text()
    assert "Memory held against p99 startup" in page and outcome.chosen in page


def test_tune_traffic_writes_nothing_when_the_node_needs_no_pool(tmp_path: Path) -> None:
    """A cheap node meets a loose SLO bare: the least memory is no pool."""
    truth = node()
    outcome = _tune(tmp_path, truth, truth, bursts(size=3), slo_p99_s=5.0, trials=8)
    assert outcome.row("baseline").meets_slo
    assert outcome.chosen is None and "without pools" in outcome.why
    assert not (tmp_path / "tuned.yaml").exists()


def test_tune_traffic_prints_the_traffic_cautions_under_the_search(tmp_path: Path) -> None:
    """The search's predictions rest on what the plan cannot see of a
    schedule's tail: tune says so before it runs anything, as simulate,
    optimize and validate do, and keeps it in its outcome."""
    truth = node()
    progress = RecordingProgress()
    outcome = _tune(
        tmp_path, truth, truth, bursts(size=3), slo_p99_s=5.0, trials=4, progress=progress
    )
    threads = next(name for name, v in TESTBED_CNIS.items() if v.runtime == "threads")
    expected = traffic_cautions(
        workload_scenario(Scenario(cni=threads, profile="local"), bursts(size=3)), truth
    )
    assert expected and outcome.cautions == expected
    assert outcome.to_dict()["cautions"] == list(expected)
    notes = progress.notes()
    search_ends = next(i for i, n in enumerate(notes) if n.startswith("baseline run 1"))
    assert [f"caution: {c}" for c in expected] == [
        n for n in notes[:search_ends] if n.startswith("caution: ")
    ]


def test_tune_traffic_writes_nothing_when_nothing_met_the_slo(tmp_path: Path) -> None:
    truth = node(**DEAR)
    outcome = _tune(tmp_path, truth, truth, bursts(), slo_p99_s=1e-4, trials=8)
    assert outcome.chosen is None and "no config met" in outcome.why
    assert not (tmp_path / "tuned.yaml").exists()


def test_choose_prefers_least_measured_memory_then_p99() -> None:
    def row(name: str, p99: float, mib: float | None, config: bool = True) -> TrafficRow:
        f = TrafficFigures(p99_s=p99, p99_window_median_s=p99, empty_starts=0, memory_mib=mib)
        return TrafficRow(
            name=name,
            config=TunedConfig(pools={"netns": 1}) if config else None,
            predicted=f,
            measured=f,
            run_p99_s=(p99,),
            slo_p99_s=1.0,
        )

    rows = [row("a", 0.5, 10.0), row("b", 0.9, 4.0), row("c", 0.8, 4.0), row("d", 2.0, 1.0)]
    assert _choose(rows, slo_p99_s=1.0)[0] == "c"
    assert _choose([row("e", 0.5, None)], slo_p99_s=1.0)[0] is None  # memory unseen: not chosen


@pytest.mark.parametrize(
    ("field", "kw", "needle"),
    [
        ("slo", {"slo_p99_s": 0.0}, "slo_p99"),
        ("trials", {"trials": 0}, "trials"),
        ("window", {"window_s": -1.0}, "window_s"),
    ],
)
def test_tune_traffic_refuses_bad_input_in_one_line(
    tmp_path: Path, field: str, kw: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle):
        _tune(tmp_path, node(), node(), bursts(), **kw)


def test_peak_burst_pools_every_kind_at_the_largest_burst() -> None:
    config = peak_burst_config(bursts(size=5), ("netns", "veth"))
    assert config.pools == {"netns": 5, "veth": 5}
    assert config.pool_refill is not None and config.pool_refill.follow_rate is None


def test_predicted_memory_counts_idle_devices_over_the_run() -> None:
    truth = node(**DEAR)
    w = bursts(count=2, size=3)
    bare = predicted_traffic(Scenario(cni=CNI, profile="local"), w, profile=truth, window_s=5.0)
    assert bare.memory_mib == 0.0 and bare.empty_starts == 0
    pooled = predicted_traffic(
        Scenario(cni=CNI, profile="local").replace(config=peak_burst_config(w, ("netns-veth",))),
        w,
        profile=truth,
        window_s=5.0,
    )
    mib = truth.testbed.pool_device_mib["netns-veth"]  # type: ignore[union-attr]
    # Three devices held nearly all the time: a little under 3 × MiB on average.
    assert 2.0 * mib < pooled.memory_mib <= 3.0 * mib  # type: ignore[operator]


def test_a_run_of_the_model_itself_reads_back_as_the_model_predicts_it() -> None:
    """The same run (same seed) recorded as a trace and read by
    :func:`measured_traffic`: p99 and empty-pool starts exactly, the memory
    held from levels sampled every 10 ms within a sampling step's error."""
    truth = node(**DEAR)
    w = bursts(count=3, size=6)
    config = TunedConfig(pools={"netns-veth": 2}, pool_refill=PoolRefill(concurrency=1))
    run = SimulatedTraffic(truth, w, sample_s=0.01, seed=0)
    trace = run(Candidate(name="p", config=config), sandboxes=len(w), vm=False)
    mib = truth.testbed.pool_device_mib  # type: ignore[union-attr]
    got = measured_traffic(trace, device_mib=dict(mib), window_s=5.0)
    want = predicted_traffic(
        Scenario(cni=CNI, profile="local").replace(config=config), w, profile=truth, window_s=5.0
    )
    assert want.empty_starts > 0  # two devices for bursts of six: some starts find it empty
    assert got.empty_starts == want.empty_starts
    assert got.p99_s == pytest.approx(want.p99_s, rel=1e-9)
    assert got.p99_window_median_s == pytest.approx(want.p99_window_median_s, rel=1e-9)
    assert got.memory_mib == pytest.approx(want.memory_mib, rel=0.05)


def test_tune_traffic_predicts_the_runs_with_their_lifetime(tmp_path: Path) -> None:
    """The real runs stop each VM ``lifetime_s`` after it came up: the
    model's search and predictions stop them the same way (stops that land
    on the next burst, dear on this node, slow it)."""
    truth = node(**DEAR, **{"testbed.vm_stop_cpu_s": 0.05})
    w = bursts()
    outcome = _tune(tmp_path, truth, truth, w, lifetime_s=3.6, trials=8, candidates=1, repeats=1)
    got = outcome.row("baseline").predicted
    node_scenario = Scenario(cni=CNI, profile="local", through_agent=True)
    stopping = predicted_traffic(
        node_scenario.replace(lifetime_s=3.6), w, profile=outcome.profile, window_s=5.0
    )
    up = predicted_traffic(node_scenario, w, profile=outcome.profile, window_s=5.0)
    assert got == stopping and got.p99_s > up.p99_s
