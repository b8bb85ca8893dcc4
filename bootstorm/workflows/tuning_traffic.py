"""``tune --workload``: the traffic question answered on this node and proved on it.

The storm loop (:mod:`bootstorm.workflows.tuning`) asks which config shortens
N sandboxes released at once. On a node in production the question is the
planner's: which pool policy (targets, refill workers, a target that follows
the start rate) and which stage limits keep p99 startup under an SLO for
this node's traffic, at the least memory held by idle pooled devices. The
loop, step by step:

1. the node's profile (given, or fitted to a calibration plan run here);
2. a search on the model of the workload's starts with refilling pools
   (:func:`bootstorm.workflows.study_spec` with ``refill``): the least
   memory that meets the SLO; its best distinct configs are the candidates;
3. every candidate, the baseline (no pools, no limits) and the reference a
   planner would otherwise ship (a static pool sized for the workload's
   largest burst) run for real on the workload's schedule through the node
   agent, which refills the pools as it does in production, interleaved
   over rounds;
4. the config that *met the SLO for real* at the least memory held is
   written, with its origin; none when the baseline already meets it (no
   pool is the least memory) or none met it.

Each run gets a fresh agent on loopback: its pools filled to their targets
and its rate window empty when the first start arrives, as the model's run
begins.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._io import write_atomically
from ..models import ConfigError, PoolRefill, Profile, Scenario, TunedConfig
from ..models.testbed import traffic_cautions
from ..traces.workload import Workload
from ._progress import Progress, SilentProgress
from .traffic import DEFAULT_WINDOW_S, check_window_s, traffic_what_if, workload_scenario
from .tuning import describe_config, node_profile_for_tune

if TYPE_CHECKING:
    from ..traces import Trace
    from ..validation.candidates import Candidate, StormRunner

__all__ = [
    "PEAK_BURST",
    "TrafficFigures",
    "TrafficRow",
    "TrafficTuneOutcome",
    "agent_traffic_runner",
    "describe_refill",
    "measured_traffic",
    "peak_burst_config",
    "predicted_traffic",
    "search_traffic_candidates",
    "tune_traffic",
]

#: The reference candidate's name: static pools sized for the largest burst.
PEAK_BURST = "peak-burst"
#: The agent's pool id in ``tune --workload`` (its device names carry it):
#: apart from an agent a user runs (0 by default) and the tests' ids.
TUNE_AGENT_POOL_ID = 77
#: Longest wait for a fresh agent's pools to reach their targets before a run.
POOL_FILL_TIMEOUT_S = 300.0


@dataclass(frozen=True, kw_only=True, slots=True)
class TrafficFigures:
    """One run of a workload read as an SLO is read."""

    p99_s: float
    """p99 startup over the whole run (what the SLO bounds, as the search does)."""
    p99_window_median_s: float
    """The median over windows with starts of their p99 startup."""
    empty_starts: float
    """Starts that found a pool empty (made their own device)."""
    memory_mib: float | None
    """Mean memory the idle pooled devices held from the first start to the
    last sandbox up, MiB; None where the run cannot tell (an agent's pools
    not sampled)."""

    def to_dict(self) -> dict[str, float | None]:
        return {
            "p99_s": self.p99_s,
            "p99_window_median_s": self.p99_window_median_s,
            "empty_starts": self.empty_starts,
            "memory_mib": self.memory_mib,
        }


@dataclass(frozen=True, kw_only=True)
class TrafficRow:
    """A candidate measured (medians over its runs) and predicted."""

    name: str
    config: TunedConfig | None
    predicted: TrafficFigures
    measured: TrafficFigures
    run_p99_s: tuple[float, ...]
    """Each run's p99 startup, in the order they ran."""
    slo_p99_s: float

    @property
    def meets_slo(self) -> bool:
        """Measured: the median run's p99 startup is within the SLO."""
        return self.measured.p99_s <= self.slo_p99_s

    @property
    def runs_meeting_slo(self) -> int:
        return sum(p <= self.slo_p99_s for p in self.run_p99_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": describe_config(self.config),
            "predicted": self.predicted.to_dict(),
            "measured": self.measured.to_dict(),
            "run_p99_s": list(self.run_p99_s),
            "meets_slo": self.meets_slo,
            "runs_meeting_slo": self.runs_meeting_slo,
        }


@dataclass(frozen=True, kw_only=True)
class TrafficTuneOutcome:
    """What ``tune --workload`` found: every config run, and the one written."""

    rows: tuple[TrafficRow, ...]
    chosen: str | None
    """The config written; None when none was (see :attr:`why`)."""
    why: str
    """Why that one, or why none, in one sentence."""
    slo_p99_s: float
    rounds: int
    profile: Profile
    cautions: tuple[str, ...] = ()
    """What the model's predictions on this workload rest on that the
    profile did not identify (:func:`bootstorm.models.testbed.traffic_cautions`):
    the same for every config, printed under the search's predictions."""

    def row(self, name: str) -> TrafficRow:
        return next(r for r in self.rows if r.name == name)

    @property
    def memory_vs_peak_burst(self) -> float | None:
        """Measured memory held by the chosen config over the peak-burst pool's."""
        if self.chosen is None:
            return None
        mine, peak = self.row(self.chosen).measured.memory_mib, self.row(PEAK_BURST).measured
        if mine is None or peak.memory_mib is None or peak.memory_mib <= 0:
            return None
        return mine / peak.memory_mib

    def to_dict(self) -> dict[str, Any]:
        return {
            "slo_p99_s": self.slo_p99_s,
            "rounds": self.rounds,
            "chosen": self.chosen,
            "why": self.why,
            "memory_vs_peak_burst": self.memory_vs_peak_burst,
            "cautions": list(self.cautions),
            "rows": [r.to_dict() for r in self.rows],
        }


def peak_burst_config(workload: Workload, pool_kinds: Sequence[str]) -> TunedConfig:
    """What a planner ships without this tool: every pooled kind kept at the
    workload's largest burst (starts each within a second of the previous),
    refilled by one worker, the agent's default."""
    from .workloads import workload_stats

    burst = max(workload_stats(workload).burst_max, 1)
    return TunedConfig(pools={k: burst for k in pool_kinds}, pool_refill=PoolRefill())


def predicted_traffic(
    scenario: Scenario,
    workload: Workload,
    *,
    profile: Profile,
    window_s: float = DEFAULT_WINDOW_S,
    executor: str = "compiled",
) -> TrafficFigures:
    """The model's figures for ``scenario`` (its config in force) on ``workload``."""
    run = traffic_what_if(scenario, workload, window_s=window_s, profile=profile, executor=executor)
    r = run.result
    end_s = float((r.arrival_s + r.startup_latency_s).max() - r.arrival_s.min())
    memory = sum(
        line.ready_device_s(until_s=end_s) * line.memory_mib_per_device
        for line in r.pool_timelines.values()
    )
    return TrafficFigures(
        p99_s=float(r.startup.p99),
        p99_window_median_s=run.p99_window_median_s,
        empty_starts=float(r.empty_starts),
        memory_mib=memory / end_s if end_s > 0 else 0.0,
    )


def measured_traffic(
    trace: Trace, *, device_mib: dict[str, float], window_s: float = DEFAULT_WINDOW_S
) -> TrafficFigures:
    """A real run's figures, read from its trace as :func:`predicted_traffic`
    reads the model's: the idle pooled devices from the pools' levels the
    trace recorded (sampled from an agent, or a made-before pool's takes),
    each at ``device_mib`` of its kind."""
    from ..calibration.trace_fit import StormStats, idle_device_s_by_kind, window_p99_median

    stats = StormStats.of(trace)
    if stats.arrival_s is None:
        raise ConfigError("trace: a storm released at once is no workload's run")
    # Seconds after the first arrival, as the model's run counts them.
    arrival = np.asarray(stats.arrival_s)[stats.complete]
    latency = np.asarray(stats.latency_s)
    end_s = float((arrival + latency).max())
    held = idle_device_s_by_kind(trace, until_s=end_s)
    memory: float | None
    if held is None:
        # No pool in the run holds nothing; one whose level went unseen is unknown.
        memory = 0.0 if not trace.header.scenario.pools and not trace.pool_takes else None
    else:
        memory = sum(s * device_mib.get(k, 0.0) for k, s in held.items()) / end_s
    return TrafficFigures(
        p99_s=float(np.percentile(latency, 99.0)),
        p99_window_median_s=window_p99_median(arrival, latency, window_s),
        empty_starts=float(trace.empty_pool_starts),
        memory_mib=memory,
    )


def _median_figures(runs: Sequence[TrafficFigures]) -> TrafficFigures:
    memories = [r.memory_mib for r in runs if r.memory_mib is not None]
    return TrafficFigures(
        p99_s=float(np.median([r.p99_s for r in runs])),
        p99_window_median_s=float(np.median([r.p99_window_median_s for r in runs])),
        empty_starts=float(np.median([r.empty_starts for r in runs])),
        memory_mib=float(np.median(memories)) if memories else None,
    )


def search_traffic_candidates(
    profile: Profile,
    workload: Workload,
    *,
    slo_p99_s: float,
    trials: int,
    candidates: int,
    pool_kinds: Sequence[str],
    limit_stages: Sequence[str],
    cni: str,
    seed: int = 0,
    max_refill_workers: int | None = None,
    lifetime_s: float | None = None,
) -> list[tuple[TunedConfig, float, float]]:
    """Step 2: the search of ``optimize --workload --slo-p99`` on the model of
    this node; the ``candidates`` best distinct configs that meet the SLO
    (config, predicted p99 s, predicted mean memory MiB), least memory first.
    ``max_refill_workers``: the most refill workers the node's agent runs
    (None: the search's range); ``lifetime_s``: each VM stops that long after
    it came up, as the real runs stop it."""
    import tempfile

    import optuna

    from ..optimizers import trial_outcomes
    from .search import run_search, study_spec
    from .traffic import workload_scenario
    from .workloads import workload_stats

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the caller shows the outcome
    with tempfile.TemporaryDirectory(prefix="bootstorm-tune-") as tmp:
        # A search names its profile (its workers load it by name or path).
        path = Path(tmp) / "local.yaml"
        path.write_text(profile.to_yaml())
        # Its runs go through the node agent: a lease of a limited stage is two
        # HTTP calls, a pool take one (the profile's measured call costs).
        node = Scenario(cni=cni, profile=str(path), through_agent=True, lifetime_s=lifetime_s)
        base = workload_scenario(node, workload)
        spec = study_spec(
            base,
            trials=trials,
            objectives=("memory",),
            sampler="tpe",
            stages=",".join(limit_stages) if limit_stages else None,
            pools=",".join(pool_kinds),
            seeds=(),
            sizes=(),
            robust="mean",
            memory_budget_mib=None,
            p99_slo_s=slo_p99_s,
            storage="memory",
            study_name=None,
            sampler_seed=seed,
            heartbeat_s=10,
            executor="compiled",
            refill=True,
            max_pool=max(2 * workload_stats(workload).burst_max, 8),
            max_refill_workers=max_refill_workers,
            # The pool a planner ships without this tool is tried first: it
            # meets an SLO random starts rarely do, and the sampler looks for
            # less from it.
            starts_from=(peak_burst_config(workload, pool_kinds),),
        )
        run = run_search(spec)
    assert run.result.study is not None
    feasible = [o for o in trial_outcomes(spec, run.result.study) if o.feasible]
    feasible.sort(key=lambda o: (o.metrics.memory_mib, o.metrics.p99_s, o.number))
    out: list[tuple[TunedConfig, float, float]] = []
    seen: set[str] = set()
    for outcome in feasible:
        # The whole config a node takes (the storm's own settings under the trial's).
        config = run.result.tuned_config(outcome).model_copy(update={"origin": None})
        key = config.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        out.append((config, outcome.metrics.p99_s, outcome.metrics.memory_mib))
        if len(out) == candidates:
            break
    return out


def agent_traffic_runner(
    workload: Workload,
    *,
    lifetime_s: float | None,
    runtime: str,
    progress: Progress | None = None,
    pool_id: int = TUNE_AGENT_POOL_ID,
) -> StormRunner:
    """A :class:`~bootstorm.validation.candidates.StormRunner` that runs a
    candidate's storm on ``workload``'s schedule through a node agent of its
    own: ``bootstorm agent serve`` in its own process on loopback (as on a
    node: one in this process would share its GIL with the sandboxes'
    threads), a fresh token, started with the candidate's config and waited
    on until its pools are at their targets (root)."""
    import secrets

    from ..validation.agent import (
        AgentAdmission,
        AgentClient,
        AgentError,
        AgentProcessError,
        agent_process,
        wait_pools_ready,
    )
    from .storms import storm_trace

    arrival_s = tuple(float(t) for t in workload.starts.tolist())
    if runtime == "cni":
        _agent_cni_settings()  # the plugins are there, or one line before any storm

    def run(candidate: Candidate, *, sandboxes: int, vm: bool) -> Trace:
        token = secrets.token_urlsafe(32)
        what = f"candidate {candidate.name!r}"
        try:
            with (
                agent_process(
                    token=token,
                    pool_id=pool_id,
                    config=candidate.config,
                    cni_plugin="bridge" if runtime == "cni" else None,
                ) as agent,
                AgentClient(agent.url, token=token) as client,
            ):
                wait_pools_ready(client, timeout_s=POOL_FILL_TIMEOUT_S)
                return storm_trace(
                    len(arrival_s),
                    candidate.config,
                    vm=vm,
                    # Leases only where the config limits (its agent runs no other).
                    admission=AgentAdmission(
                        client,
                        limited=() if candidate.config is None else tuple(candidate.config.limits),
                    ),
                    what=f"{what}: ",
                    runtime=runtime,
                    progress=progress,
                    arrival_s=arrival_s,
                    lifetime_s=lifetime_s,
                )
        except (AgentProcessError, AgentError) as exc:
            raise ConfigError(f"agent: {what}: {exc}") from None

    return run


def _check_runnable(
    workload: Workload,
    configs: Sequence[TunedConfig | None],
    *,
    runtime: str,
    vm: bool,
    lifetime_s: float | None,
) -> None:
    """A :class:`ConfigError` (one line) if the testbed cannot run one of
    ``configs`` on ``workload``'s schedule (too many sandboxes for one
    bridge, a pool kind the runtime has not)."""
    from .storms import checked_storm_options

    arrival_s = tuple(float(t) for t in workload.starts.tolist())
    for config in configs:
        checked_storm_options(
            sandboxes=len(arrival_s),
            vm=vm,
            config=config,
            runtime=runtime,
            arrival_s=arrival_s,
            lifetime_s=lifetime_s,
        )


def _agent_cni_settings() -> Any:
    """The agent's plumbing for the ``cni`` runtime's pooled namespaces: the
    bridge plugin, from this host's CNI plugin directory."""
    from ..validation.agent import CniPoolSettings

    try:
        return CniPoolSettings.discover("bridge")
    except ValueError as exc:
        raise ConfigError(f"testbed: {exc}") from None


def _choose(rows: Sequence[TrafficRow], *, slo_p99_s: float) -> tuple[str | None, str]:
    """By measurement: the least memory held among the configs whose
    median run met the SLO (ties: the lower p99)."""
    met = [r for r in rows if r.meets_slo and r.measured.memory_mib is not None]
    if not met:
        return None, (
            f"no config met the p99 SLO of {slo_p99_s:g} s for real: nothing written "
            "(relax the SLO, or search larger pools or more workers)"
        )
    best = min(met, key=lambda r: (r.measured.memory_mib, r.measured.p99_s))
    if best.config is None:
        return None, (
            f"the node meets the p99 SLO of {slo_p99_s:g} s without pools or limits: "
            "nothing written (no pool is the least memory)"
        )
    return best.name, (
        f"{best.name} met the p99 SLO of {slo_p99_s:g} s for real at the least memory held"
    )


def tune_traffic(
    *,
    workload: Workload,
    slo_p99_s: float,
    trials: int,
    candidates: int,
    repeats: int,
    profile_path: Path | None,
    measured_ops: Path | None,
    plan_sandboxes: int | None,
    plan_runs: int,
    pool_kinds: Sequence[str] | None,
    limit_stages: Sequence[str],
    output: Path,
    trace_dir: Path | None,
    vm: bool,
    report: Path | None = None,
    lifetime_s: float | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    progress: Progress | None = None,
    run_storm: StormRunner | None = None,
    runtime: str = "cni",
) -> TrafficTuneOutcome:
    """The loop (see the module's docstring). ``run_storm``: one real run of
    a candidate on the workload's schedule (default :func:`agent_traffic_runner`,
    root), for tests."""
    from ..calibration.plan import check_plan_names, runtime_pool_kinds, runtime_variant
    from ..validation.candidates import BASELINE, Candidate, measure_candidates
    from .workloads import workload_stats

    if not (isinstance(slo_p99_s, int | float) and math.isfinite(slo_p99_s) and slo_p99_s > 0):
        raise ConfigError(f"slo_p99: must be a number of seconds > 0, but got {slo_p99_s!r}")
    for field, value in (("trials", trials), ("candidates", candidates), ("repeats", repeats)):
        if value < 1:
            raise ConfigError(f"{field}: must be at least 1, but got {value}")
    check_window_s(window_s)
    if len(workload) < 2:
        raise ConfigError(f"workload: {workload.source!r} has {len(workload)} start(s); 2 or more")
    if run_storm is None and os.geteuid() != 0:
        raise ConfigError("tune: runs real storms and needs root (sudo bootstorm tune ...)")
    if runtime not in ("threads", "cni"):
        raise ConfigError(f"runtime: one of threads, cni, but got {runtime!r}")
    try:
        check_plan_names(runtime=runtime, pool_kinds=pool_kinds, limit_stages=limit_stages)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    progress = progress or SilentProgress()
    cni = runtime_variant(runtime)
    kinds = tuple(pool_kinds) if pool_kinds else runtime_pool_kinds(runtime)
    if run_storm is None:  # what the testbed cannot run is refused before the first storm
        _check_runnable(
            workload,
            (None, peak_burst_config(workload, kinds)),
            runtime=runtime,
            vm=vm,
            lifetime_s=lifetime_s,
        )
    stats = workload_stats(workload)
    progress.note(
        f"workload {workload.source}: {stats.starts:,} starts over {stats.duration_s:,.0f} s, "
        f"largest burst {stats.burst_max}, busiest second {stats.peak_per_s}"
    )
    node = node_profile_for_tune(
        sandboxes=max(stats.burst_max, 8),
        profile_path=profile_path,
        measured_ops=measured_ops,
        plan_sandboxes=plan_sandboxes,
        plan_runs=plan_runs,
        pool_kinds=kinds,
        limit_stages=limit_stages,
        trace_dir=trace_dir,
        vm=vm,
        runtime=runtime,
        progress=progress,
    )
    profile = node.profile
    if profile.testbed is None:
        raise ConfigError(f"profile: {profile.name!r} has no testbed section (fit one first)")
    progress.step(
        f"2. search pool policies and limits for the least memory with p99 ≤ {slo_p99_s:g} s "
        f"({trials} TPE trials on the model)"
    )
    with progress.status("searching …"):
        found = search_traffic_candidates(
            profile,
            workload,
            slo_p99_s=slo_p99_s,
            trials=trials,
            candidates=candidates,
            pool_kinds=kinds,
            limit_stages=limit_stages,
            cni=cni,
            # The cni runtime's agent plumbs its namespaces with CNI ADDs on a
            # network of its own, through one set of device ops: one worker.
            max_refill_workers=1 if runtime == "cni" else None,
            lifetime_s=lifetime_s,
        )
    if not found:
        progress.note(
            "no trial met the SLO on the model; the peak-burst pool and the baseline are "
            "still run, to say what the node does",
            tone="warn",
        )
    peak = peak_burst_config(workload, kinds)
    # The search starts from the peak-burst pool: found again, it is run once.
    searched = [c for c, _, _ in found if c != peak]
    if run_storm is None:
        _check_runnable(workload, searched, runtime=runtime, vm=vm, lifetime_s=lifetime_s)
    chosen: list[Candidate] = [
        Candidate(name=BASELINE, config=None),
        Candidate(name=PEAK_BURST, config=peak),
    ] + [Candidate(name=f"candidate-{i + 1}", config=c) for i, c in enumerate(searched)]
    base = Scenario(cni=cni, profile="local", through_agent=True, lifetime_s=lifetime_s)
    predicted = {
        c.name: predicted_traffic(
            base.replace(config=c.config), workload, profile=profile, window_s=window_s
        )
        for c in chosen
    }
    for c in chosen:
        p = predicted[c.name]
        progress.note(
            f"{c.name}: predicted p99 {p.p99_s:.3f} s, {p.memory_mib or 0:.1f} MiB held "
            f"— {'; '.join(filter(None, (describe_config(c.config), describe_refill(c.config))))}"
        )
    # The same for every config: the schedule's tail, its stops, the growths.
    cautions = traffic_cautions(workload_scenario(base, workload), profile)
    for line in cautions:
        progress.note(f"caution: {line}", tone="warn")
    progress.step(
        f"3. run {len(chosen)} configs for real on the workload's schedule, {repeats} round(s), "
        "through a node agent that refills its pools"
    )
    device_mib = dict(profile.testbed.pool_device_mib)

    def on_run(candidate: Candidate, r: int, trace: Trace) -> None:
        from ..traces import write_trace

        got = measured_traffic(trace, device_mib=device_mib, window_s=window_s)
        progress.note(
            f"{candidate.name} run {r + 1}: p99 {got.p99_s:.3f} s, "
            f"{got.empty_starts:.0f} empty-pool starts",
            tone="dim",
        )
        if trace_dir is not None:
            trace_dir.mkdir(parents=True, exist_ok=True)
            write_trace(trace, trace_dir / f"{candidate.name}-run{r + 1}.jsonl.gz")

    if run_storm is None:
        run_storm = agent_traffic_runner(
            workload, lifetime_s=lifetime_s, runtime=runtime, progress=progress
        )
    traces = measure_candidates(
        chosen,
        sandboxes=len(workload),
        repeats=repeats,
        vm=vm,
        run_storm=run_storm,
        on_run=on_run,
    )
    rows = []
    for c in chosen:
        runs = [
            measured_traffic(t, device_mib=device_mib, window_s=window_s) for t in traces[c.name]
        ]
        rows.append(
            TrafficRow(
                name=c.name,
                config=c.config,
                predicted=predicted[c.name],
                measured=_median_figures(runs),
                run_p99_s=tuple(r.p99_s for r in runs),
                slo_p99_s=slo_p99_s,
            )
        )
    progress.step("4. choose: the least memory that met the SLO for real")
    name, why = _choose(rows, slo_p99_s=slo_p99_s)
    outcome = TrafficTuneOutcome(
        rows=tuple(rows),
        chosen=name,
        why=why,
        slo_p99_s=slo_p99_s,
        rounds=repeats,
        profile=profile,
        cautions=cautions,
    )
    progress.show(outcome)
    if name is not None:
        row = outcome.row(name)
        assert row.config is not None
        written = _with_origin(
            row, profile, workload=workload, output=output, cni=cni, window_s=window_s
        )
        write_atomically(output, written.to_yaml())
        ratio = outcome.memory_vs_peak_burst
        held = "" if ratio is None else f", {ratio:.2f}× the peak-burst pool's memory"
        progress.note(f"{why}{held}; written to {output}", tone="good")
    else:
        progress.note(why, tone="warn")
    if report is not None:
        _write_report(report, outcome, workload=workload, window_s=window_s, base=base)
        progress.note(f"report written to {report}", tone="strong")
    return outcome


def _write_report(
    path: Path, outcome: TrafficTuneOutcome, *, workload: Workload, window_s: float, base: Scenario
) -> None:
    """Every config run (predicted against measured), memory against p99,
    and the model's run of the chosen config (or the peak-burst pool's)."""
    from ..report import write_report

    shown = outcome.row(outcome.chosen or PEAK_BURST)
    run = traffic_what_if(
        base.replace(config=shown.config),
        workload,
        window_s=window_s,
        profile=outcome.profile,
    )
    ratio = outcome.memory_vs_peak_burst
    write_report(
        path,
        title=f"bootstorm tune: {workload.source} against p99 ≤ {outcome.slo_p99_s:g} s",
        facts=[
            ("starts", f"{len(workload):,}"),
            ("rounds", str(outcome.rounds)),
            ("chosen", outcome.chosen or "none"),
            ("why", outcome.why),
            ("memory vs the peak-burst pool", "—" if ratio is None else f"{ratio:.2f}×"),
            ("timeline below", f"{shown.name}, as the model runs it"),
        ],
        traffic=(run.result, run.windows),
        traffic_candidates=outcome.rows,
        slo_p99_s=outcome.slo_p99_s,
    )


def describe_refill(config: TunedConfig | None) -> str:
    """A config's pool policy in a few words ("refill: 2 workers, static
    targets"); "" where its pools, if any, are made before and never refilled."""
    refill = None if config is None else config.pool_refill
    if refill is None:
        return ""
    workers = f"{refill.concurrency} worker{'s' if refill.concurrency > 1 else ''}"
    follow = refill.follow_rate
    if follow is None:
        return f"refill: {workers}, static targets"
    return (
        f"refill: {workers}, targets follow the start rate ({follow.cover_s:g} s of "
        f"starts over {follow.window_s:g} s, at most {follow.max_devices})"
    )


def _with_origin(
    row: TrafficRow,
    profile: Profile,
    *,
    workload: Workload,
    output: Path,
    cni: str,
    window_s: float,
) -> TunedConfig:
    """The chosen config as written: with the profile it was predicted under
    (saved beside it) and what the model predicted for the workload."""
    from datetime import UTC, datetime

    from ..models import ConfigOrigin

    assert row.config is not None
    profile_path = output.with_name(output.stem + ".profile.yaml")
    write_atomically(profile_path, profile.to_yaml())
    p = row.predicted
    origin = ConfigOrigin(
        profile=str(profile_path),
        cni=cni,
        sandboxes=len(workload),
        sampler="tpe",
        predicted={
            "p99_s": p.p99_s,
            "p99_window_median_s": p.p99_window_median_s,
            "empty_starts": p.empty_starts,
            "pool_mean_memory_mib": p.memory_mib or 0.0,
            "window_s": window_s,
        },
        created_at=datetime.now(UTC),
    )
    return row.config.model_copy(update={"origin": origin})
