"""An Optuna study over a :class:`SearchSpace`: run it, share it, read it back.

A :class:`StudySpec` says everything a worker needs to join a search, so
that any number of processes — here or on other machines — run the same
study on one storage (a journal file, see :mod:`._storage`; PostgreSQL for
many machines without a shared file system).
``trials`` is the study's total of completed trials, exactly, whatever the
number of workers: a worker claims a trial only while the study's completed,
running and queued trials number fewer, and a trial that two workers'
claims raced past the total is failed at once, marked ``bootstorm:surplus``,
before it runs. Running a worker again resumes an unfinished study.

A worker that dies mid-trial leaves that trial RUNNING. The next worker to
look fails it and queues its parameters again (Optuna's
``RetryHeartbeatStaleTrialCallback``), so no finished trial is lost and no
point of the search is dropped: at once if the dead worker ran on the same
machine (its process is gone, :mod:`._workers`), else when its heartbeat
(every storage but memory) has been silent for the grace period. Meanwhile
the other workers wait for it rather than exceed the total.

Each worker seeds its sampler with ``sampler_seed`` plus the number of its
first trial, which no other worker shares: two identical commands on one
study sample different points, and one worker alone is reproducible.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import multiprocessing
import os
import re
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, TypeVar

import optuna
from optuna.storages import BaseStorage
from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled
from optuna.study import Study
from optuna.trial import FrozenTrial, Trial, TrialState
from pydantic import ValidationError

from .._params import (
    Check,
    Each,
    InstanceOf,
    Interval,
    Maybe,
    Rules,
    Satisfies,
    short_key,
    validate,
)
from ..models import ConfigError, ConfigOrigin, Scenario, TunedConfig, load_profile
from ..simulator import ExecutorName, KernelCall
from ._evaluate import Evaluator, Robust
from ._objectives import Constraints, Metrics, check_objectives
from ._samplers import make_sampler
from ._space import LIMIT_PREFIX, POOL_PREFIX, REFILL_PREFIX, IntRange, SearchSpace
from ._storage import PROCESS_ATTR, open_storage, safe_storage_name, stamps_on_claim
from ._workers import die_with_parent, is_dead, process_tag

__all__ = [
    "Callback",
    "OptimizeResult",
    "StudySpec",
    "TrialOutcome",
    "optimize",
    "read_study",
    "run_worker",
    "searched_scenario",
    "trial_outcomes",
    "trial_scenario",
]

log = logging.getLogger(__name__)

Callback = Callable[[Study, FrozenTrial], None]
_T = TypeVar("_T")

_SPEC_ATTR = "bootstorm:search"
#: A trial's tuned config (searches that choose a refill policy record it).
CONFIG_ATTR = "config"
_SURPLUS_ATTR = "bootstorm:surplus"
_SAMPLER_ATTR = "bootstorm:sampler"
_RETRIES = 3
_CLAIMS = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
_POLL_S = 0.05
"""How often a worker looks again while the study's last trials run elsewhere."""
_JOIN_WAIT_S = 30.0
"""How long a worker waits for the worker that created a study to finish setting it up."""

MAX_TRIALS = 100_000
"""Most completed trials one study may be asked for. Every worker replays the
whole study into memory when it opens it, the samplers' cost grows with the
trials they have seen, and a trial is 10 ms to seconds of simulation: 10⁵
trials is about a day of searching and a journal of some hundreds of MB;
``--trials 10**20`` was accepted and simply never ended."""

MAX_STUDY_NAME_CHARS = 512
"""Longest study name: Optuna's database storages keep it in a VARCHAR(512)
(``optuna.storages._rdb.models.MAX_INDEXED_STRING_LENGTH``; PostgreSQL
refuses longer), and a tuned config's origin records it. A longer name
failed only after the whole search, writing the config."""

MAX_STORAGE_CHARS = 1024
"""Longest storage name: a tuned config's origin records it as text of at
most 1 024 characters (:class:`~bootstorm.models.ConfigOrigin`)."""

MAX_HEARTBEAT_S = 3600
"""Longest heartbeat interval (s). A dead worker's trial is run again only
after three silent intervals: beyond an hour that is a search stalled for
hours, and far beyond it the heartbeat thread's wait overflowed the clock."""

_SEED_MODULUS = 2**32
"""NumPy's seeds are 32-bit: a worker's seed (``sampler_seed`` plus its first
trial's number) is taken modulo this."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StudySpec:
    """One search: the storm, what may change, what to minimise, where trials go.

    Parameters
    ----------
    scenario:
        The storm to shorten (its size and seed are the defaults of ``sizes`` and ``seeds``).
    space:
        The limits and pools to search; default: limits ``1..sandboxes`` on
        the four stages of seed 000 §5.2.
    objectives:
        One name (``makespan``, ``mean``, ``p99``, ``memory``), or two for a Pareto front.
    sampler:
        ``tpe``, ``gp``, ``cmaes``, ``nsga2`` or ``random``.
    trials:
        Completed trials the study should hold in total (at most :data:`MAX_TRIALS`).
    seeds, sizes, robust:
        The storms every trial runs (common random numbers) and how metrics
        are aggregated over them (``mean`` or ``worst``).
    constraints:
        A memory budget and a p99 SLO, both optional.
    storage:
        The path of a journal file (``study.log``; workers on one machine or
        on a shared file system share it), or a database URL
        (``postgresql://...``, ``sqlite:///study.db``); ``None`` keeps the
        study in memory (one process only).
    study_name:
        The study's name in the storage; workers with the same name share it
        (at most :data:`MAX_STUDY_NAME_CHARS` characters).
    sampler_seed:
        Seed of the sampler; a worker uses ``sampler_seed`` plus the number
        of its first trial (unique among workers; 0 for the first worker of
        a new study), modulo 2**32.
    heartbeat_interval_s:
        How often a running trial reports it is alive (storage URLs only);
        a trial silent for three intervals is failed and retried (at most
        :data:`MAX_HEARTBEAT_S`).
    executor:
        What runs each storm: ``compiled`` (default) or ``simpy``. Both give the
        same numbers, so it is not part of what makes a search (the fingerprint).
    starts_from:
        Configs the study tries first, after the storm as it is (each as the
        space's parameters: :meth:`SearchSpace.params_of`): a point known to
        meet a constraint that random starts rarely hit (a pool sized for the
        workload's largest burst), from which the sampler looks for cheaper
        ones. Not part of the fingerprint (they are trials like others).
    """

    scenario: Scenario
    space: SearchSpace | None = None
    objectives: tuple[str, ...] = ("makespan",)
    sampler: str = "tpe"
    trials: int = 100
    seeds: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    robust: Robust = "mean"
    constraints: Constraints = field(default_factory=Constraints)
    storage: str | None = None
    study_name: str | None = None
    sampler_seed: int = 0
    heartbeat_interval_s: int = 10
    executor: ExecutorName = "compiled"
    starts_from: tuple[TunedConfig, ...] = ()

    __rules__: ClassVar[Rules] = Rules(
        # Types first: StudySpec(scenario=None) was an AttributeError deep in
        # the default space; sizes=200 a TypeError from max().
        scenario=InstanceOf(Scenario, "a Scenario"),
        space=Maybe(InstanceOf(SearchSpace, "a SearchSpace")),
        seeds=(
            InstanceOf((tuple, list), "a tuple of seeds"),
            Each(Interval(int, 0, 2**63 - 1)),
        ),
        sizes=(
            InstanceOf((tuple, list), "a tuple of sandbox counts"),
            Each(Interval(int, 1, None)),
        ),
        constraints=InstanceOf(Constraints, "a Constraints"),
        starts_from=(
            InstanceOf((tuple, list), "a tuple of TunedConfigs"),
            Each(InstanceOf(TunedConfig, "a TunedConfig")),
        ),
        trials=Interval(int, 1, MAX_TRIALS),
        sampler_seed=Interval(int, 0, _SEED_MODULUS - 1),
        heartbeat_interval_s=Interval(int, 1, MAX_HEARTBEAT_S, unit="s"),
        study_name=Maybe(
            Satisfies(
                lambda n: isinstance(n, str) and 0 < len(n) <= MAX_STUDY_NAME_CHARS,
                f"must be a name of 1..{MAX_STUDY_NAME_CHARS} characters",
                lambda n: f"{len(n):,} characters" if isinstance(n, str) else repr(n),
            )
        ),
        storage=Maybe(
            Satisfies(
                lambda n: isinstance(n, str) and 0 < len(n) <= MAX_STORAGE_CHARS,
                f"must be a path or URL of 1..{MAX_STORAGE_CHARS} characters",
                lambda n: f"{len(n):,} characters" if isinstance(n, str) else repr(n),
            )
        ),
        checks=(
            Check(
                "space",
                lambda s: s.space is None or s.space.cni == s.scenario.cni,
                lambda s: f"must be built for the scenario's cni={s.scenario.cni!r}",
            ),
        ),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "objectives", check_objectives(self.objectives))
        validate(self)
        if self.space is None:
            object.__setattr__(
                self,
                "space",
                SearchSpace.default(
                    cni=self.scenario.cni,
                    sandboxes=max((*self.sizes, self.scenario.sandboxes)),
                    profile=load_profile(self.scenario.profile),
                ),
            )
        if self.study_name is None:
            object.__setattr__(self, "study_name", self._default_name())
        # Built now so that bad sampler names and combinations fail before any trial.
        self.make_sampler(worker=0)

    def _default_name(self) -> str:
        s = self.scenario
        return f"bootstorm-{s.cni}-{s.sandboxes}-{'-'.join(self.objectives)}-{self.sampler}"

    @property
    def directions(self) -> list[Literal["minimize"]]:
        return ["minimize"] * len(self.objectives)

    def make_sampler(self, *, worker: int) -> optuna.samplers.BaseSampler:
        return make_sampler(
            self.sampler,
            seed=(self.sampler_seed + worker) % _SEED_MODULUS,
            n_objectives=len(self.objectives),
            constrained=self.constraints.active,
        )

    def evaluator(self) -> Evaluator:
        return Evaluator(
            base=self.scenario,
            seeds=self.seeds,
            sizes=self.sizes,
            robust=self.robust,
            executor=self.executor,
        )

    def fingerprint(self) -> str:
        """What makes two searches the same search (a study must not mix two)."""
        assert self.space is not None
        return json.dumps(
            {
                # A lifetime only where set: a study kept before scenarios had
                # one is still the same search.
                "scenario": self.scenario.model_dump(
                    mode="json",
                    exclude={"lifetime_s"} if self.scenario.lifetime_s is None else None,
                ),
                "limits": {k: [r.low, r.high, r.log] for k, r in self.space.limits.items()},
                "pools": {k: [r.low, r.high] for k, r in self.space.pools.items()},
                "objectives": list(self.objectives),
                "seeds": list(self.seeds),
                "sizes": list(self.sizes),
                "robust": self.robust,
                "memory_budget_mib": self.constraints.memory_budget_mib,
                "p99_slo_s": self.constraints.p99_slo_s,
                # Only where set: a study kept before it existed is still the same search.
                **(
                    {"unbound_limit": self.space.unbound_limit}
                    if self.space.unbound_limit is not None
                    else {}
                ),
            },
            sort_keys=True,
        )

    def make_storage(self) -> BaseStorage | None:
        if self.storage is None:
            return None
        return open_storage(
            self.storage, heartbeat_interval_s=self.heartbeat_interval_s, retries=_RETRIES
        )

    def baseline_params(self) -> dict[str, int]:
        """The scenario as given, as the search's parameters: every limit at its
        high end (it does not bind) unless the scenario sets one, pools as given."""
        assert self.space is not None
        s = self.scenario
        params = {}
        for name, rng in self.space.parameters.items():
            kind, _, key = name.partition(":")
            if kind + ":" == LIMIT_PREFIX:
                params[name] = min(max(s.limits.get(key, rng.high), rng.low), rng.high)
            elif kind + ":" == REFILL_PREFIX:
                params[name] = _baseline_refill(s, key, rng)
            else:
                params[name] = min(max(s.pools.get(key, rng.low), rng.low), rng.high)
        return params

    def open_study(self, *, worker: int = 0, storage: BaseStorage | None = None) -> Study:
        """Create the study, or join it if it exists and is the same search.

        Several workers may start at once on a new storage: only the one
        whose ``create_study`` made the study sets it up (its search, metric
        names and the baseline trial); the others wait for that.
        """
        assert self.study_name is not None
        storage = storage if storage is not None else self.make_storage()
        sampler = self.make_sampler(worker=worker)
        try:
            study = optuna.create_study(
                storage=storage,
                sampler=sampler,
                study_name=self.study_name,
                directions=self.directions,
            )
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            assert storage is not None  # a new in-memory storage holds no study
            study = optuna.load_study(study_name=self.study_name, storage=storage, sampler=sampler)
            created = False
        mine = self.fingerprint()
        theirs = None if created else _wait_for_spec(study)
        if theirs is None:
            # Ours, or one made without bootstorm (or whose maker died setting it up).
            # The first trial is the storm as it is (no limit binds, pools as
            # given), so a search never recommends something worse than it.
            study.enqueue_trial(self.baseline_params(), skip_if_exists=True)
            assert self.space is not None
            for config in self.starts_from:
                study.enqueue_trial(self.space.params_of(config), skip_if_exists=True)
            # Named objectives: Optuna's own plots and dashboard label their axes
            # (an "experimental" API since Optuna 3.2, stable in use: no warning).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names(list(self.objectives))
            study.set_user_attr(_SAMPLER_ATTR, self.sampler)
            study.set_user_attr(_SPEC_ATTR, mine)  # last: it says the study is set up
        elif theirs != mine:
            raise ConfigError(
                f"study_name: study {self.study_name!r} in this storage is a different search "
                "(another storm, space, objective or constraint); choose another --study-name"
            )
        else:
            # A study searched by another sampler would hand back that sampler's
            # trials (all of them, once it holds enough) as if this one found them.
            theirs_sampler = study.user_attrs.get(_SAMPLER_ATTR)
            if theirs_sampler is not None and theirs_sampler != self.sampler:
                raise ConfigError(
                    f"sampler: study {self.study_name!r} in this storage was searched with "
                    f"{theirs_sampler!r}, not {self.sampler!r}; choose another --study-name, "
                    f"or --sampler {theirs_sampler} to resume it"
                )
        return study


def _baseline_refill(s: Scenario, key: str, rng: IntRange) -> int:
    """A refill parameter of the scenario as given (its own policy, or none)."""
    policy = s.pool_refill
    if key == "workers":
        value = policy.concurrency if policy is not None else rng.low
    elif key == "follow":
        value = int(policy is not None and policy.follow_rate is not None)
    else:  # cover_s
        follow = policy.follow_rate if policy is not None else None
        value = round(follow.cover_s) if follow is not None else rng.low
    return min(max(value, rng.low), rng.high)


def _wait_for_spec(study: Study) -> str | None:
    """The search a study records, waiting a while for the worker that is
    setting it up; ``None`` if it records none (an empty study made elsewhere)."""
    deadline = time.monotonic() + _JOIN_WAIT_S
    while True:
        record = study.user_attrs.get(_SPEC_ATTR)
        if record is not None:
            return str(record)
        finished = any(t.state.is_finished() for t in study.get_trials(deepcopy=False))
        if finished or time.monotonic() > deadline:
            # Trials ran, yet no search: not made by bootstorm (adopt it), or
            # its maker died setting it up.
            return None
        time.sleep(_POLL_S)


def run_worker(
    spec: StudySpec,
    *,
    worker: int = 0,
    callbacks: Sequence[Callback] = (),
    study: Study | None = None,
    overlap: bool = True,
) -> Study:
    """Run trials of ``spec``'s study until it holds exactly ``spec.trials`` completed ones.

    Any number of workers may run it at once, in this process's ``--jobs``
    or anywhere else. ``worker`` names this one among them (0: the first);
    ``study``: an already opened study of ``spec`` (needed for an in-memory one).
    ``callbacks`` run after each trial this worker completes. ``overlap``:
    simulate a trial on a thread while the sampler chooses the next point
    (the default); ``False`` simulates each trial on this thread before the
    next is chosen (a debugger's view; the benchmarks' anchor).
    """
    assert spec.space is not None
    space, constraints, objectives = spec.space, spec.constraints, spec.objectives
    evaluator = spec.evaluator()
    if study is None:
        study = spec.open_study(worker=worker)
    params = space.parameters

    def suggest(trial: Trial) -> TunedConfig:
        point = {n: trial.suggest_int(n, r.low, r.high, log=r.log) for n, r in params.items()}
        return space.config_of(point)

    def finish(running: _Running) -> None:
        """Wait for ``running``'s simulation, tell the study, run the callbacks."""
        with running.heartbeat:
            try:
                metrics = running.read()
                trial = running.trial
                trial.set_user_attr("metrics", metrics.as_dict())
                for name, excess in constraints.named_values(metrics).items():
                    trial.set_constraint(name, excess)
                values = tuple(metrics.value(o) for o in objectives)
            except BaseException:
                study.tell(running.trial, state=TrialState.FAIL, skip_if_finished=True)
                raise
        frozen = study.tell(
            running.trial, values[0] if len(values) == 1 else values, skip_if_finished=True
        )
        if frozen.state != TrialState.COMPLETE:
            # Failed meanwhile by a worker that took this one for dead (its
            # heartbeat late); the retry it queued runs the point again.
            log.warning("trial %d was failed by another worker while it ran", frozen.number)
            return
        for callback in callbacks:
            callback(study, frozen)

    # Which process runs a trial: several machines may share one study, and
    # a dead worker's trial is failed at once when it ran on this machine.
    host = f"{socket.gethostname()}:{os.getpid()}"
    tag = process_tag()
    seeded = False
    # One trial's simulation runs on a thread while this one has the sampler
    # choose the next trial's point: the compiled kernel releases the GIL, so
    # the two overlap on two cores. The order never depends on timing (a
    # point is chosen with exactly the previous trial in flight, which is then
    # told before the next simulation starts), so a seeded worker is
    # reproducible, as with no overlap.
    running: _Running | None = None
    pool: Executor = (
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="bootstorm-trial")
        if overlap
        else _ThisThread()
    )
    beats = _Heartbeat(study._storage)
    with pool, contextlib.closing(beats):
        try:
            while True:
                _fail_abandoned(study)
                claimed = _claim(study, spec.trials, wait=running is None)
                if claimed is _BUSY:
                    # The study's last places are taken, one of them by our own
                    # trial in flight: finish it before waiting on the others.
                    assert running is not None
                    finish(running)
                    running = None
                    continue
                if claimed is None:
                    break
                assert isinstance(claimed, Trial)
                trial = claimed
                if not seeded:
                    # The number of this worker's first trial: no other worker has it.
                    study.sampler = spec.make_sampler(worker=trial.number)
                    seeded = True
                heartbeat = contextlib.ExitStack()
                heartbeat.enter_context(beats.beating(trial._trial_id))
                try:
                    # Named after its first heartbeat: a trial without a worker's
                    # name died before it had one (see _fail_abandoned).
                    trial.set_user_attr("worker", host)
                    if tag is not None:
                        study._storage.set_trial_system_attr(trial._trial_id, PROCESS_ATTR, tag)
                    config = suggest(trial)
                    if space.refill is not None:
                        # The whole config, refill policy included: a report of the
                        # study re-runs a trial's storm from it (its params alone
                        # need the space to read).
                        trial.set_user_attr(CONFIG_ATTR, config.model_dump(mode="json"))
                except BaseException:
                    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                    heartbeat.close()
                    raise
                if running is not None:
                    previous, running = running, None
                    try:
                        finish(previous)
                    except BaseException:
                        study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                        heartbeat.close()
                        raise
                running = _start(evaluator, config, pool, trial=trial, heartbeat=heartbeat)
                if not overlap:
                    previous, running = running, None
                    finish(previous)
            if running is not None:
                previous, running = running, None
                finish(previous)
        except BaseException:
            if running is not None:  # not left RUNNING for the next worker to time out
                running.simulation.cancel()
                study.tell(running.trial, state=TrialState.FAIL, skip_if_finished=True)
                running.heartbeat.close()
            raise
    return study


@dataclass(frozen=True, kw_only=True, slots=True)
class _Running:
    """A trial whose point is chosen and whose simulation runs on the pool's thread."""

    trial: Trial
    heartbeat: contextlib.ExitStack
    simulation: Future[Any]
    read: Callable[[], Metrics]
    """Wait for the simulation; its metrics (on the caller's thread)."""


def _start(
    evaluator: Evaluator,
    config: TunedConfig,
    pool: Executor,
    *,
    trial: Trial,
    heartbeat: contextlib.ExitStack,
) -> _Running:
    """Start simulating ``config`` on ``pool``.

    On the compiled executor only the loop itself goes to the pool's thread:
    it lets go of the GIL, while compiling the storms and summarising them
    need it and stay on this thread. And this thread waits until the pool's
    thread has started: else that one, wanting the GIL to call the loop,
    would queue behind the sampler's Python for up to a switch interval
    (5 ms, longer than the loop) and the two would not overlap at all.
    """
    if evaluator.executor != "compiled":
        whole = pool.submit(evaluator.evaluate, config)
        return _Running(trial=trial, heartbeat=heartbeat, simulation=whole, read=whole.result)
    calls = [KernelCall(p) for p in evaluator.programs(config)]
    started = threading.Event()

    def run() -> None:
        started.set()
        for call in calls:
            call.run()

    simulation = pool.submit(run)
    started.wait()

    def read() -> Metrics:
        simulation.result()
        return evaluator.aggregate([call.summary() for call in calls])

    return _Running(trial=trial, heartbeat=heartbeat, simulation=simulation, read=read)


class _ThisThread(Executor):
    """An executor that runs each call at once, on the caller's thread."""

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        future: Future[_T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # handed to whoever reads the future, as a thread would
            future.set_exception(e)
        return future


class _Busy:
    """:func:`_claim`'s answer when the study's last places are all taken."""


_BUSY = _Busy()


class _Heartbeat:
    """One thread that stamps every trial this worker runs, every interval.

    A thread per trial cost more than the rest of the storage: starting one
    waits for the scheduler while the simulation holds the other core (about
    1 ms, 300 times a search). This one starts with the worker's first trial
    and stops with the worker.
    """

    def __init__(self, storage: BaseStorage) -> None:
        self._storage = storage if is_heartbeat_enabled(storage) else None
        self._trial_ids: set[int] = set()
        # Held while stamping: a trial that leaves is never stamped after it left.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def beating(self, trial_id: int) -> Iterator[None]:
        """Stamp trial ``trial_id`` while in the block: once now, then every interval."""
        storage = self._storage
        if storage is None:
            yield  # in memory: one process, nobody to tell
            return
        assert isinstance(storage, BaseHeartbeat)
        if stamps_on_claim(storage):
            storage.record_heartbeat(trial_id)  # now, not when the thread gets to it
        with self._lock:
            self._trial_ids.add(trial_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._beat, args=(storage,), name="bootstorm-heartbeat", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._trial_ids.discard(trial_id)

    def _beat(self, storage: BaseHeartbeat) -> None:
        interval_s = storage.get_heartbeat_interval()
        while not self._stop.wait(interval_s):
            with self._lock:
                try:
                    for trial_id in sorted(self._trial_ids):
                        storage.record_heartbeat(trial_id)
                except ConfigError as exc:
                    # The storage refused a stamp (a full disk): the trial's own
                    # next write fails the same way and ends the worker in one
                    # line; a traceback from this thread would only add noise.
                    log.warning("heartbeat stopped: %s", exc)
                    return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def _fail_abandoned(study: Study) -> None:
    """Fail the running trials whose workers are gone, and queue their parameters again.

    Known at once for a worker of this machine (its process has exited);
    else when its heartbeat has been silent for the grace period, or, for a
    trial that never got a worker's name (its worker died within
    milliseconds of starting it, before a heartbeat that a database would
    show), when it has run that long.
    """
    storage = study._storage
    if not is_heartbeat_enabled(storage):
        return  # in memory: one process, no one else's trials
    assert isinstance(storage, BaseHeartbeat)
    with warnings.catch_warnings():  # "experimental" since Optuna 2.9, stable in use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    grace_s = 3 * (storage.get_heartbeat_interval() or 0)  # as open_storage sets it
    retry = storage.get_heartbeat_stale_trial_callback()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        started = t.datetime_start
        age_s = 0.0 if started is None else (datetime.now() - started).total_seconds()
        unnamed_too_long = "worker" not in t.user_attrs and age_s > grace_s
        if not (unnamed_too_long or is_dead(t.system_attrs.get(PROCESS_ATTR))):
            continue
        try:
            if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker got there first
        worker = t.user_attrs.get("worker", "(unnamed)")
        log.warning("trial %d: its worker %s has died; its point runs again", t.number, worker)
        if retry is not None:
            retry(study, copy.deepcopy(storage.get_trial(t._trial_id)))


def _claim(study: Study, total: int, *, wait: bool = True) -> Trial | _Busy | None:
    """The next trial this worker runs, or ``None`` once the study holds ``total`` completed.

    A trial counts against the total from the moment it is asked (queued
    ones from when they are queued) until it fails. Two workers may ask at
    the same moment for the last place: trial numbers order them, and the
    later one, past the total, is failed at once as surplus, before it runs.
    While the last places are taken by trials running elsewhere, wait: one
    of them may fail (its worker killed) and need this worker; or, with
    ``wait=False``, return ``_BUSY`` at once.
    """
    while True:
        trials = study.get_trials(deepcopy=False)
        if sum(t.state == TrialState.COMPLETE for t in trials) >= total:
            return None
        claims = sum(t.state in _CLAIMS for t in trials)
        if claims >= total and not any(t.state == TrialState.WAITING for t in trials):
            if not wait:
                return _BUSY
            time.sleep(_POLL_S)
            _fail_abandoned(study)
            continue
        with warnings.catch_warnings():  # this loop runs the heartbeat Optuna's optimize would
            warnings.filterwarnings("ignore", "Heartbeat of storage is supposed", UserWarning)
            trial = study.ask()  # a queued trial first, else a new one
        ahead = sum(
            t.state in _CLAIMS and t.number < trial.number for t in study.get_trials(deepcopy=False)
        )
        if ahead < total:
            return trial
        study._storage.set_trial_system_attr(trial._trial_id, _SURPLUS_ATTR, True)
        study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


def _worker_main(spec: StudySpec, worker: int, parent_pid: int) -> None:
    die_with_parent(parent_pid)  # a killed `--jobs` parent takes its workers with it
    logging.basicConfig(level=logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run_worker(spec, worker=worker)


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialOutcome:
    """A finished trial: its config, what it gave, and whether it met the constraints."""

    number: int
    config: TunedConfig
    metrics: Metrics
    feasible: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizeResult:
    """What a study found: the baseline, the best trial(s), how many trials ran.

    ``best`` holds the best feasible trial for one objective, or the Pareto
    front of the feasible trials (sorted by the first objective) for two;
    it is empty when no trial met the constraints.
    """

    spec: StudySpec
    baseline: Metrics
    best: tuple[TrialOutcome, ...]
    completed: int
    feasible: int
    #: The Optuna study itself, for its own tools (plots, dashboard, dataframes).
    study: Study | None = field(default=None, repr=False, compare=False)

    def tuned_config(self, outcome: TrialOutcome | None = None) -> TunedConfig:
        """The complete config of ``outcome`` (default: the first best), with its origin filled.

        A node takes the config alone, not the what-if it was searched on: so
        it carries the searched storm's own limits, pools and RTNL priority
        with the trial's searched values laid over them (the searched values
        win), exactly as the evaluator applied them. Applied to the storm
        without any of them (``Scenario(..., config=...)``) it gives the
        trial's storm, and ``origin.predicted`` holds that storm's metrics
        (at the scenario's own size and seed, also when the search ran others).
        """
        chosen = outcome if outcome is not None else (self.best[0] if self.best else None)
        if chosen is None:
            raise ConfigError(
                "constraints: no trial met the memory budget and p99 SLO; "
                "relax them or search more trials"
            )
        s = self.spec.scenario
        storm = s.replace(config=chosen.config)  # the trial's storm, as the evaluator ran it
        config = TunedConfig(
            limits=storm.limits,
            pools=storm.pools,
            rtnl_priority=storm.rtnl_priority,
            lease_ttl_s=chosen.config.lease_ttl_s,
            pool_refill=storm.pool_refill,
        )
        if self.spec.sizes in ((), (s.sandboxes,)) and self.spec.seeds in ((), (s.seed,)):
            predicted = chosen.metrics  # the search ran this very storm
        else:
            # The trial's metrics aggregate several storms; the config's origin names one.
            predicted = Evaluator(base=s, executor=self.spec.executor).evaluate(config)
        origin = ConfigOrigin(
            profile=s.profile,
            cni=s.cni,
            sandboxes=s.sandboxes,
            study_name=self.spec.study_name,
            storage=safe_storage_name(self.spec.storage),
            trial_number=chosen.number,
            sampler=self.spec.sampler,
            predicted=predicted.as_dict(),
            created_at=datetime.now(UTC),
        )
        return config.model_copy(update={"origin": origin})


def _pareto(outcomes: list[TrialOutcome], objectives: tuple[str, ...]) -> list[TrialOutcome]:
    def values(o: TrialOutcome) -> tuple[float, ...]:
        return tuple(o.metrics.value(n) for n in objectives)

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b

    front: list[TrialOutcome] = []
    seen: set[tuple[float, ...]] = set()
    for o in sorted(outcomes, key=lambda o: (values(o), o.number)):
        v = values(o)
        if v in seen or any(dominates(values(f), v) for f in outcomes):
            continue
        seen.add(v)
        front.append(o)
    return front


def searched_scenario(study: Study) -> Scenario | None:
    """The what-if a bootstorm study searched, with the limits and pools of
    its best completed trial by the first objective (feasible or not), or
    ``None`` for a study bootstorm did not make."""
    record = study.user_attrs.get(_SPEC_ATTR)
    if record is None:
        return None
    scenario = _recorded_scenario(study.study_name, record)
    best = _best_completed(study, feasible_only=False)
    return scenario if best is None else trial_scenario(scenario, best)


def feasible_best_trial(study: Study) -> tuple[int, Scenario] | None:
    """The study's best feasible completed trial by its first objective (the
    one ``optimize --output`` writes) and the what-if it ran; ``None`` for a
    study bootstorm did not make, or with no feasible trial."""
    record = study.user_attrs.get(_SPEC_ATTR)
    if record is None:
        return None
    best = _best_completed(study, feasible_only=True)
    if best is None:
        return None
    return best.number, trial_scenario(_recorded_scenario(study.study_name, record), best)


def trial_feasible(trial: FrozenTrial) -> bool:
    """Whether a trial met the study's constraints (Optuna keeps them, each
    ``<= 0`` when met, in the trial's system attributes)."""
    return all(c <= 0.0 for c in trial.system_attrs.get("constraints", ()))


def _best_completed(study: Study, *, feasible_only: bool) -> FrozenTrial | None:
    """The completed trial best by the first objective (the lower number on a
    tie); with ``feasible_only``, among those whose constraints all hold."""
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not feasible_only or trial_feasible(t)
    ]
    return min(done, key=lambda t: (t.values[0], t.number)) if done else None


def trial_scenario(scenario: Scenario, trial: FrozenTrial) -> Scenario:
    """``scenario`` as ``trial`` ran it: its recorded config if it has one
    (a search that chose a refill policy), else its limits and pools."""
    recorded = trial.user_attrs.get(CONFIG_ATTR)
    if isinstance(recorded, dict):
        return scenario.replace(config=TunedConfig(**recorded))
    best = trial
    limits, pools = dict(scenario.limits), dict(scenario.pools)
    for name, value in best.params.items():
        if name.startswith(LIMIT_PREFIX):
            limits[name.removeprefix(LIMIT_PREFIX)] = int(value)
        elif name.startswith(POOL_PREFIX):
            pools[name.removeprefix(POOL_PREFIX)] = int(value)
    return scenario.replace(limits=limits, pools=pools)


def _recorded_scenario(study_name: str, record: object) -> Scenario:
    """The scenario a study's search record holds; a record that is not one
    (edited by hand, written by another tool) is a one-line ConfigError that
    names what is wrong in it, never its values."""
    where = f"study {short_key(study_name)}: its search record ({_SPEC_ATTR!r})"
    try:
        parsed = json.loads(record) if isinstance(record, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("scenario"), dict):
        raise ConfigError(f"{where} is not a search bootstorm wrote (no scenario in it)")
    try:
        return Scenario.model_validate(parsed["scenario"])
    except ValueError as exc:  # pydantic's ValidationError, a ConfigError
        # The key at fault, not its value: the record is a file's contents.
        first = (
            exc.errors()[0] if isinstance(exc, ValidationError) else {"loc": (), "msg": str(exc)}
        )
        key = ".".join(short_key(part) for part in first["loc"])
        if not key:  # the scenario's own validator: "Value error, <key>: <problem>"
            found = re.match(r"(?:Value error, )?([\w.\[\]-]+):", str(first["msg"]))
            key = short_key(found.group(1)) if found else "?"
        raise ConfigError(
            f"{where} holds a scenario bootstorm cannot read (at scenario.{key})"
        ) from None


def trial_outcomes(spec: StudySpec, study: Study) -> list[TrialOutcome]:
    """Every completed trial of ``spec``'s ``study``: its config, metrics and
    whether it meets the constraints, in trial order."""
    assert spec.space is not None
    outcomes: list[TrialOutcome] = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        metrics = Metrics(**t.user_attrs["metrics"])
        outcomes.append(
            TrialOutcome(
                number=t.number,
                config=spec.space.config_of(t.params),
                metrics=metrics,
                feasible=spec.constraints.feasible(metrics),
            )
        )
    return outcomes


def read_study(spec: StudySpec, *, study: Study | None = None) -> OptimizeResult:
    """The outcome of ``spec``'s study as the storage holds it now."""
    if study is None:
        study = spec.open_study()
    outcomes = trial_outcomes(spec, study)
    feasible = [o for o in outcomes if o.feasible]
    if len(spec.objectives) == 1:
        name = spec.objectives[0]
        best = sorted(feasible, key=lambda o: (o.metrics.value(name), o.number))[:1]
    else:
        best = _pareto(feasible, spec.objectives)
    return OptimizeResult(
        spec=spec,
        baseline=spec.evaluator().evaluate(None),
        best=tuple(best),
        completed=len(outcomes),
        feasible=len(feasible),
        study=study,
    )


def optimize(
    spec: StudySpec, *, jobs: int = 1, callbacks: Sequence[Callback] = ()
) -> OptimizeResult:
    """Run ``spec``'s study to ``spec.trials`` completed trials and read its outcome.

    ``jobs > 1`` starts ``jobs - 1`` more worker processes on the same storage
    (a storage URL is needed: an in-memory study lives in one process);
    ``callbacks`` run in this process after each of its own trials.
    """
    if jobs < 1:
        raise ConfigError(f"jobs: must be at least 1, but got {jobs}")
    if jobs > 1 and spec.storage is None:
        raise ConfigError(f"jobs: {jobs} workers need a storage URL (got an in-memory study)")
    study = spec.open_study()  # create it (and check it) before the workers race to
    context = multiprocessing.get_context("spawn")
    helpers = [
        context.Process(target=_worker_main, args=(spec, i, os.getpid()), daemon=True)
        for i in range(1, jobs)
    ]
    for p in helpers:
        p.start()
    try:
        run_worker(spec, worker=0, callbacks=callbacks, study=study)
    except BaseException:
        for p in helpers:  # not left searching unseen; their trials are failed at the next start
            p.terminate()
        raise
    finally:
        for p in helpers:
            p.join()
    failed = [p.exitcode for p in helpers if p.exitcode not in (0, None)]
    if failed:
        log.warning("%d of %d helper workers exited with errors: %s", len(failed), jobs - 1, failed)
    return read_study(spec, study=study)
