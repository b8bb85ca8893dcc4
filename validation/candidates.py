"""Validated decisions: does the model rank tuned configs as this host does?

A planner picks the config the model predicts fastest, so the model must
rank configs right, not only predict one storm. This module runs the real
storm of every candidate config (``bootstorm validate --candidates``),
simulates each one under the node's profile and compares the two rankings.

- :func:`measure_candidates` runs the storms *interleaved*: round ``r`` runs
  every candidate once, in an order drawn per round (:func:`run_order`), so
  a slow drift of the host, or the kernel still tearing down the previous
  storm's namespaces, does not favour one config.
- :func:`compare_candidates` simulates each candidate's storm as its traces
  recorded it (the pools and limits of the trace header, through
  :meth:`StormStats.scenario <bootstorm.calibration.trace_fit.StormStats.scenario>`)
  and returns a :class:`CandidateComparison`: per candidate the measured and
  predicted makespan, mean and p99 startup, and over the candidates the
  Spearman rank correlation of predicted against measured makespan.
- :func:`run_path` and :func:`read_runs` name and read recorded runs:
  ``DIR/<candidate>-run<k>.jsonl.gz``, ``k`` from 1.

The testbed (which needs root) is imported only when a storm is run, so this
module imports anywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from .._params import Matches, NonEmpty, Rules, validate
from ..models import ConfigError, Profile, Scenario, TunedConfig
from ..traces import Trace

if TYPE_CHECKING:
    import pandas as pd

    from .testbed import StormOptions

__all__ = [
    "BASELINE",
    "NAME_PATTERN",
    "Candidate",
    "CandidateComparison",
    "CandidateMeasurement",
    "DiscordantPair",
    "StormRunner",
    "compare_candidates",
    "measure_candidates",
    "read_runs",
    "run_order",
    "run_path",
    "storm_options",
    "testbed_storm",
]

#: The name of the candidate without a config (no pools, no limits).
BASELINE = "baseline"
#: What a candidate's name may be: it names its trace files.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A config to rank: ``config`` ``None`` is the baseline (no pools, no limits).

    ``name`` names the candidate's trace files, so it is letters, digits,
    ``.``, ``_`` and ``-`` (:data:`NAME_PATTERN`); a :class:`ConfigError`
    otherwise.
    """

    name: str
    config: TunedConfig | None = None

    __rules__: ClassVar[Rules] = Rules(
        name=Matches(
            NAME_PATTERN,
            "letters, digits, '.', '_' or '-' starting with a letter or digit "
            "(it names trace files)",
        )
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def pools(self) -> dict[str, int]:
        return dict(self.config.pools) if self.config is not None else {}

    @property
    def limits(self) -> dict[str, int]:
        return dict(self.config.limits) if self.config is not None else {}


@dataclass(frozen=True, kw_only=True)
class CandidateMeasurement:
    """One candidate's recorded runs against its simulated storm.

    Measured: ``measured_makespan_s`` is the median of the runs' makespans,
    ``measured_mean_s`` the mean startup over every sandbox of every run (as
    :meth:`StormStats.pooled` pools them), ``measured_p99_s`` the median of
    the runs' p99 startups. Predicted: the same storm simulated once (the
    pools and limits its traces recorded, as ``scenario``).
    """

    candidate: Candidate
    traces: tuple[Trace, ...] = field(repr=False)
    #: The simulated storm: the recorded size, pools and limits.
    scenario: Scenario
    predicted_makespan_s: float
    predicted_mean_s: float
    predicted_p99_s: float
    measured_makespan_s: float
    measured_mean_s: float
    measured_p99_s: float
    #: Each run's makespan, in the order the runs were given.
    run_makespans_s: tuple[float, ...] = ()
    #: Mean time per sandbox in each stage: over every sandbox of every run,
    #: and in the simulated storm (the stages the model names).
    measured_stage_mean_s: Mapping[str, float] = field(default_factory=dict)
    predicted_stage_mean_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.candidate.name

    @property
    def makespan_error(self) -> float:
        """(predicted − measured) / measured makespan."""
        return _rel_error(self.predicted_makespan_s, self.measured_makespan_s)

    @property
    def mean_error(self) -> float:
        """(predicted − measured) / measured mean startup."""
        return _rel_error(self.predicted_mean_s, self.measured_mean_s)

    @property
    def p99_error(self) -> float:
        """(predicted − measured) / measured p99 startup."""
        return _rel_error(self.predicted_p99_s, self.measured_p99_s)

    @property
    def run_range_s(self) -> tuple[float, float]:
        """(fastest, slowest) of the runs' makespans; the median twice if none are kept."""
        runs = self.run_makespans_s or (self.measured_makespan_s,)
        return min(runs), max(runs)

    @property
    def run_spread(self) -> float:
        """(slowest − fastest) run makespan over the median: how much repeated
        runs of this one config differ on the host (0 with a single run)."""
        lo, hi = self.run_range_s
        return (hi - lo) / self.measured_makespan_s if self.measured_makespan_s else 0.0


@dataclass(frozen=True, kw_only=True)
class DiscordantPair:
    """Two candidates the model orders otherwise than their measured medians."""

    measured_faster: str
    predicted_faster: str
    #: Whether every run of ``measured_faster`` beat every run of the other; if
    #: not, their runs overlap and the host's own spread does not order them.
    separated_by_runs: bool


def _spearman(predicted: Sequence[float], measured: Sequence[float]) -> float:
    if len(predicted) < 2 or len(set(predicted)) < 2 or len(set(measured)) < 2:
        return math.nan
    from scipy import stats

    rho = float(stats.spearmanr(predicted, measured).statistic)
    # spearmanr is Pearson's r of the ranks, off by ~1e-16 from the exact
    # rational value (0.9999999999999999 for a perfect ranking, which would
    # fail a `>= 1.0` check): rounded to 12 places.
    return float(np.clip(round(rho, 12), -1.0, 1.0))


def _rel_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else math.inf


@dataclass(frozen=True, kw_only=True)
class CandidateComparison:
    """Every candidate measured and predicted, and how the two rankings agree.

    ``repeats`` is the number of runs per candidate (the fewest, if recorded
    runs differ in number); ``sandboxes`` the size of every storm.
    """

    rows: tuple[CandidateMeasurement, ...]
    repeats: int
    sandboxes: int

    __rules__: ClassVar[Rules] = Rules(rows=NonEmpty())

    def __post_init__(self) -> None:
        validate(self)

    @property
    def spearman_makespan(self) -> float:
        """Spearman's rank correlation of predicted against measured makespan
        over the candidates (``scipy.stats.spearmanr``; ties get mean ranks).

        1.0: the model orders the candidates as the host did; -1.0: reversed.
        ``nan`` where it is undefined: fewer than 2 candidates, or all
        predicted (or all measured) makespans equal, i.e. one side ranks
        nothing. A caller that acts on the ranking must treat ``nan`` as "the
        model cannot tell these configs apart", not as agreement.
        """
        return _spearman(
            [r.predicted_makespan_s for r in self.rows],
            [r.measured_makespan_s for r in self.rows],
        )

    @property
    def spearman_mean(self) -> float:
        """:attr:`spearman_makespan` for the mean startup: the latency each
        sandbox sees, which stage limits move even where the makespan (the
        host's total work, on a CPU-bound node) stays put."""
        return _spearman(
            [r.predicted_mean_s for r in self.rows], [r.measured_mean_s for r in self.rows]
        )

    @property
    def measured_best(self) -> CandidateMeasurement:
        """The candidate with the shortest measured makespan (the first such, on a tie)."""
        return min(self.rows, key=lambda r: r.measured_makespan_s)

    @property
    def predicted_best(self) -> CandidateMeasurement:
        """The candidate with the shortest predicted makespan (the first such, on a tie)."""
        return min(self.rows, key=lambda r: r.predicted_makespan_s)

    @property
    def best_agrees(self) -> bool:
        """Whether the measured best is the predicted best."""
        return self.measured_best.name == self.predicted_best.name

    @property
    def median_abs_error(self) -> float:
        """The median over the candidates of the absolute relative makespan error."""
        return float(np.median([abs(r.makespan_error) for r in self.rows]))

    def discordant_pairs(self) -> list[DiscordantPair]:
        """Pairs of candidates the model orders otherwise than the medians do.
        A pair not ``separated_by_runs`` (the slowest run of the one measured
        faster is slower than the fastest run of the other) is a swap within
        what the measurement can tell, not a model error it shows."""
        out: list[DiscordantPair] = []
        for i, a in enumerate(self.rows):
            for b in self.rows[i + 1 :]:
                dm = a.measured_makespan_s - b.measured_makespan_s
                dp = a.predicted_makespan_s - b.predicted_makespan_s
                if dm * dp >= 0:
                    continue
                fast, slow = (a, b) if dm < 0 else (b, a)
                out.append(
                    DiscordantPair(
                        measured_faster=fast.name,
                        predicted_faster=slow.name,
                        separated_by_runs=fast.run_range_s[1] < slow.run_range_s[0],
                    )
                )
        return out

    def measured_ranks(self) -> tuple[int, ...]:
        """Each row's rank by measured makespan: 1 the fastest, ties share the lower rank."""
        return _ranks([r.measured_makespan_s for r in self.rows])

    def predicted_ranks(self) -> tuple[int, ...]:
        """Each row's rank by predicted makespan: 1 the fastest, ties share the lower rank."""
        return _ranks([r.predicted_makespan_s for r in self.rows])

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per candidate (the columns of :meth:`frame`; JSON-ready)."""
        measured_ranks, predicted_ranks = self.measured_ranks(), self.predicted_ranks()
        return [
            {
                "name": r.name,
                "pools": dict(r.scenario.pools),
                "limits": dict(r.scenario.limits),
                "runs": len(r.traces),
                "measured_makespan_s": r.measured_makespan_s,
                "predicted_makespan_s": r.predicted_makespan_s,
                "makespan_error": r.makespan_error,
                "measured_mean_s": r.measured_mean_s,
                "predicted_mean_s": r.predicted_mean_s,
                "mean_error": r.mean_error,
                "measured_p99_s": r.measured_p99_s,
                "predicted_p99_s": r.predicted_p99_s,
                "p99_error": r.p99_error,
                "measured_rank": m,
                "predicted_rank": p,
                "run_makespans_s": list(r.run_makespans_s),
                "run_range_s": list(r.run_range_s),
                "run_spread": r.run_spread,
            }
            for r, m, p in zip(self.rows, measured_ranks, predicted_ranks, strict=True)
        ]

    def frame(self) -> pd.DataFrame:
        """:meth:`records` as a pandas DataFrame, one row per candidate."""
        import pandas as pd

        return pd.DataFrame(self.records())


def _ranks(values: Sequence[float]) -> tuple[int, ...]:
    from scipy import stats

    return tuple(int(x) for x in stats.rankdata(values, method="min"))


class StormRunner(Protocol):
    """Runs one real storm of ``candidate`` and returns its trace (or raises)."""

    def __call__(self, candidate: Candidate, *, sandboxes: int, vm: bool) -> Trace: ...


def storm_options(
    candidate: Candidate, *, sandboxes: int, vm: bool, runtime: str = "threads"
) -> StormOptions:
    """The testbed's options for ``candidate``'s storm on ``runtime``; a
    :class:`ConfigError` naming the candidate if the testbed cannot run its
    config (an unknown stage, a pool kind the runtime has not)."""
    from pydantic import ValidationError

    from .testbed import StormOptions

    try:
        return StormOptions.model_validate(
            {"sandboxes": sandboxes, "vm": vm, "config": candidate.config, "runtime": runtime}
        )
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            loc = ".".join(str(p) for p in e["loc"])
            msg = str(e["msg"]).removeprefix("Value error, ")
            lines.append(f"{candidate.name}: {loc + ': ' if loc else ''}{msg}")
        raise ConfigError("\n".join(lines)) from None


def testbed_storm(candidate: Candidate, *, sandboxes: int, vm: bool) -> Trace:
    """The default :class:`StormRunner`: one storm on this host's testbed
    (root). A sandbox that failed, or a testbed that cannot run here, is a
    :class:`ConfigError` (one line, as ``bootstorm validate`` reports it)."""
    from .testbed import TestbedError, run_storm

    options = storm_options(candidate, sandboxes=sandboxes, vm=vm)
    try:
        result = run_storm(options)
    except (TestbedError, OSError) as exc:
        raise ConfigError(f"testbed: {exc}") from None
    if result.failures:
        raise ConfigError(
            f"testbed: candidate {candidate.name!r}: {len(result.failures)} sandboxes failed: "
            f"{result.failures[0]}"
        )
    return result.trace


def _check_candidates(candidates: Sequence[Candidate]) -> None:
    if not candidates:
        raise ConfigError("candidates: give at least one candidate")
    seen: set[str] = set()
    for c in candidates:
        if c.name in seen:
            raise ConfigError(f"candidates: duplicate name {c.name!r}")
        seen.add(c.name)


def run_order(names: Sequence[str], *, repeats: int, order_seed: int = 0) -> list[tuple[str, ...]]:
    """The order :func:`measure_candidates` runs the storms in: ``repeats``
    rounds, each a permutation of ``names`` drawn from
    ``numpy.random.default_rng(order_seed)``, redrawn while it equals the
    previous round's (so with two or more names no two consecutive rounds
    share an order). The same seed gives the same order."""
    if repeats < 1:
        raise ConfigError(f"repeats: must be at least 1, but got {repeats}")
    rng = np.random.default_rng(order_seed)
    rounds: list[tuple[str, ...]] = []
    for _ in range(repeats):
        while True:
            order = tuple(names[int(i)] for i in rng.permutation(len(names)))
            if len(names) < 2 or not rounds or order != rounds[-1]:
                break
        rounds.append(order)
    return rounds


def measure_candidates(
    candidates: Sequence[Candidate],
    *,
    sandboxes: int,
    repeats: int = 3,
    vm: bool = True,
    run_storm: StormRunner | None = None,
    order_seed: int = 0,
    on_run: Callable[[Candidate, int, Trace], None] | None = None,
) -> dict[str, list[Trace]]:
    """Run ``repeats`` storms of ``sandboxes`` per candidate, interleaved.

    Round ``r`` runs every candidate once, in the order :func:`run_order`
    draws for it. ``run_storm`` runs one storm (default
    :func:`testbed_storm`: this host's testbed, root; every candidate's
    config is checked against it before the first storm). ``on_run(candidate,
    r, trace)`` is called after each storm (``r`` from 0: the candidate's
    run ``r + 1``), e.g. to write the trace at once. Returns each
    candidate's traces, in the order they ran, keyed by name in the order
    of ``candidates``.
    """
    _check_candidates(candidates)
    if sandboxes < 1:
        raise ConfigError(f"sandboxes: must be at least 1, but got {sandboxes}")
    rounds = run_order([c.name for c in candidates], repeats=repeats, order_seed=order_seed)
    if run_storm is None:
        for c in candidates:  # a config the testbed refuses fails before the first storm
            storm_options(c, sandboxes=sandboxes, vm=vm)
        run_storm = testbed_storm
    by_name = {c.name: c for c in candidates}
    traces: dict[str, list[Trace]] = {c.name: [] for c in candidates}
    for r, order in enumerate(rounds):
        for name in order:
            trace = run_storm(by_name[name], sandboxes=sandboxes, vm=vm)
            traces[name].append(trace)
            if on_run is not None:
                on_run(by_name[name], r, trace)
    return traces


def _check_recorded_config(candidate: Candidate, traces: Sequence[Trace]) -> None:
    """Each trace was recorded under the candidate's limits and pools."""
    want = (candidate.limits, candidate.pools)
    for k, trace in enumerate(traces, start=1):
        recorded = trace.header.config
        got = (dict(recorded.limits), dict(recorded.pools)) if recorded is not None else ({}, {})
        if got != want:
            raise ConfigError(
                f"measured: candidate {candidate.name!r}: run {k} was recorded with limits "
                f"{got[0]} and pools {got[1]}, but the candidate has limits {want[0]} and "
                f"pools {want[1]}"
            )


def compare_candidates(
    traces_by_name: Mapping[str, Sequence[Trace]],
    candidates: Sequence[Candidate],
    profile: Profile,
    *,
    seed: int = 0,
    executor: str = "compiled",
) -> CandidateComparison:
    """Each candidate's recorded runs against its storm simulated under ``profile``.

    The simulated storm is the recorded one (``StormStats.pooled(traces)
    .scenario()``: its size, and the pools and limits its trace headers
    record), with seed ``seed`` on ``executor``. Rows follow ``candidates``;
    runs of names not among them are ignored. :class:`ConfigError` if a
    candidate has no runs, runs recorded under another config than its own,
    runs of different storms, or if the candidates' storms differ in size
    (a ranking is of configs at one size).
    """
    from ..calibration.trace_fit import StormStats
    from ..models import run_scenario

    _check_candidates(candidates)
    rows = []
    for c in candidates:
        traces = tuple(traces_by_name.get(c.name, ()))
        if not traces:
            raise ConfigError(f"measured: no recorded runs of candidate {c.name!r}")
        _check_recorded_config(c, traces)
        try:
            stats = StormStats.pooled(traces)
        except ValueError as exc:
            raise ConfigError(f"measured: candidate {c.name!r}: {exc}") from None
        scenario = stats.scenario()
        result = run_scenario(scenario, seed=seed, profile=profile, executor=executor)
        rows.append(
            CandidateMeasurement(
                candidate=c,
                traces=traces,
                scenario=scenario,
                predicted_makespan_s=result.makespan_s,
                predicted_mean_s=result.startup.mean,
                predicted_p99_s=result.startup.p99,
                measured_makespan_s=stats.makespan_s,
                measured_mean_s=float(stats.latency_s.mean()),
                measured_p99_s=stats.p99_s,
                run_makespans_s=stats.makespans_s or (stats.makespan_s,),
                measured_stage_mean_s={
                    k: float(v.mean()) for k, v in stats.stage_s.items() if v.size
                },
                predicted_stage_mean_s={k: v.mean_s for k, v in result.stages.items()},
            )
        )
    sizes = sorted({r.scenario.sandboxes for r in rows})
    if len(sizes) > 1:
        shown = ", ".join(f"{r.name} {r.scenario.sandboxes}" for r in rows)
        raise ConfigError(
            f"measured: candidates are ranked at one storm size, but the runs have {shown} "
            "sandboxes"
        )
    return CandidateComparison(
        rows=tuple(rows), repeats=min(len(r.traces) for r in rows), sandboxes=sizes[0]
    )


def run_path(directory: str | Path, name: str, k: int) -> Path:
    """Where run ``k`` (from 1) of candidate ``name`` is kept: ``DIR/<name>-run<k>.jsonl.gz``."""
    return Path(directory) / f"{name}-run{k}.jsonl.gz"


def read_runs(directory: str | Path, names: Sequence[str]) -> dict[str, list[Trace]]:
    """The recorded runs of each of ``names`` in ``directory`` (``<name>-run<k>.jsonl``
    or ``.jsonl.gz``, as :func:`run_path` names them), in the order of ``k``.

    :class:`ConfigError` naming ``measured_dir`` if the directory is missing,
    a name has no run, or one run is there twice; a malformed file is the
    reader's :class:`~bootstorm.traces.TraceFormatError`.
    """
    from ..traces import read_trace

    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"measured_dir: not a directory: {str(root)!r}")
    files = sorted(p.name for p in root.iterdir())
    out: dict[str, list[Trace]] = {}
    for name in names:
        pattern = re.compile(rf"{re.escape(name)}-run([0-9]+)\.jsonl(?:\.gz)?")
        found: dict[int, str] = {}
        for file in files:
            m = pattern.fullmatch(file)
            if m is None:
                continue
            k = int(m.group(1))
            if k in found:
                raise ConfigError(
                    f"measured_dir: {str(root)!r}: run {k} of {name!r} is there twice "
                    f"({found[k]} and {file})"
                )
            found[k] = file
        if not found:
            raise ConfigError(
                f"measured_dir: {str(root)!r} has no run of candidate {name!r} "
                f"(expected {name}-run1.jsonl.gz, ...)"
            )
        out[name] = [read_trace(root / found[k]) for k in sorted(found)]
    return out
