"""Many workers on one study: none crashes, the total is exact, none repeats another.

Workers here are forked processes that meet at a barrier, so that they race
for the storage at the same instant (the harshest case), or ``bootstorm
optimize`` processes where the command itself is under test. Storages: the
journal file (the default), SQLite, and PostgreSQL when
``BOOTSTORM_TEST_POSTGRES_URL`` is set (``.ci/postgres.sh``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from bootstorm.cli import main
from bootstorm.models import Scenario
from bootstorm.optimizers import IntRange, SearchSpace, StudySpec, open_storage, run_worker

SMALL = Scenario(cni="ipvtap", sandboxes=20)
PG_URL = os.environ.get("BOOTSTORM_TEST_POSTGRES_URL")
FORK = multiprocessing.get_context("fork")
NewStorage = Callable[[str], contextlib.AbstractContextManager[str]]


def _space() -> SearchSpace:
    # Wide ranges: two distinct random points never coincide by chance.
    return SearchSpace(
        cni="ipvtap",
        limits={name: IntRange(low=1, high=400) for name in ("AddCNI", "Cgroup", "AttachIf")},
    )


def _spec(storage: str, *, trials: int, **kw: Any) -> StudySpec:
    return StudySpec(
        scenario=kw.pop("scenario", SMALL),
        space=_space(),
        trials=trials,
        storage=storage,
        study_name="s",
        **kw,
    )


@contextlib.contextmanager
def _pg_schema() -> Iterator[str]:
    """A PostgreSQL URL whose tables go to a new, empty schema (a new database, in effect)."""
    import sqlalchemy

    assert PG_URL is not None
    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = sqlalchemy.create_engine(PG_URL)
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as c:
            c.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        engine.dispose()


STORAGES = [
    "journal",
    "sqlite",
    pytest.param(
        "postgresql",
        marks=pytest.mark.skipif(not PG_URL, reason="BOOTSTORM_TEST_POSTGRES_URL is not set"),
    ),
]


@pytest.fixture
def new_storage(tmp_path: Path) -> Iterator[NewStorage]:
    """``new_storage(kind)``: a context giving the address of a storage nobody has used."""
    count = iter(range(1000))

    @contextlib.contextmanager
    def make(kind: str) -> Iterator[str]:
        n = next(count)
        if kind == "journal":
            yield str(tmp_path / f"study{n}.log")
        elif kind == "sqlite":
            yield f"sqlite:///{tmp_path / f'study{n}.db'}"
        else:
            with _pg_schema() as url:
                yield url

    yield make


def _work(spec: StudySpec, barrier: Any) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    barrier.wait(timeout=60)
    run_worker(spec)


def _together(spec: StudySpec, n: int) -> list[int | None]:
    """Run ``n`` workers of ``spec`` that start at one instant; their exit codes."""
    spec.evaluator().evaluate(None)  # compiled before the fork, not once per worker
    barrier = FORK.Barrier(n)
    procs = [FORK.Process(target=_work, args=(spec, barrier)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        if p.is_alive():
            p.kill()
    return [p.exitcode for p in procs]


def _trials(storage: str, state: TrialState) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="s", storage=open_storage(storage))
    return study.get_trials(states=(state,))


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORAGES)
def test_workers_starting_together_on_a_new_storage_never_crash(
    kind: str, new_storage: NewStorage
) -> None:
    # Before: two processes on a new SQLite file crashed in 3 starts of 12
    # (`table studies already exists`), or both ran the one queued trial.
    for _ in range(6):
        with new_storage(kind) as storage:
            spec = _spec(storage, trials=4)
            assert _together(spec, 3) == [0, 0, 0]
            done = _trials(storage, TrialState.COMPLETE)
            assert len(done) == 4
            baseline = [t for t in done if t.params == spec.baseline_params()]
            assert len(baseline) == 1  # set up once, by one of them
            assert not _trials(storage, TrialState.RUNNING)


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORAGES)
def test_any_number_of_workers_and_resumes_complete_exactly_the_total(
    kind: str, new_storage: NewStorage
) -> None:
    # Before: `--jobs 2` and a resumed run finished 201 trials for 200.
    with new_storage(kind) as storage:
        for total, workers in ((10, 2), (20, 3), (21, 2)):
            assert _together(_spec(storage, trials=total), workers) == [0] * workers
            assert len(_trials(storage, TrialState.COMPLETE)) == total
            assert not _trials(storage, TrialState.RUNNING)
        # The extra trials of a race were failed before they ran, and say so.
        for t in _trials(storage, TrialState.FAIL):
            assert t.system_attrs.get("bootstorm:surplus") is True and not t.user_attrs


@pytest.mark.slow
def test_jobs_2_completes_exactly_the_total(tmp_path: Path) -> None:
    # ~0.1 s a trial: the second worker, a second or two to start, joins mid-study.
    storage, total = str(tmp_path / "study.log"), 60
    out = subprocess.run(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", "optimize"]
        + ["--executor", "simpy", "--sandboxes", "200", "--sampler", "random"]
        + ["--trials", str(total)]
        + ["--storage", storage, "--study-name", "s", "--jobs", "2"]
        + ["--output", str(tmp_path / "t.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    # Folded at 80 columns where the storage's path is long: read it as one line.
    assert f"{total} completed trials" in " ".join(out.stdout.split())
    done = _trials(storage, TrialState.COMPLETE)
    assert len(done) == total
    assert len({t.user_attrs["worker"] for t in done}) == 2  # both workers ran trials


@pytest.mark.slow
def test_identical_workers_sample_different_points(tmp_path: Path) -> None:
    # Before: every worker seeded its sampler alike; two identical commands
    # evaluated the same parameters (15 trials of 201).
    storage = str(tmp_path / "study.log")
    spec = _spec(storage, trials=16, sampler="tpe", sampler_seed=7)
    assert _together(spec, 2) == [0, 0]
    points = [tuple(sorted(t.params.items())) for t in _trials(storage, TrialState.COMPLETE)]
    assert len(points) == 16
    assert len(set(points)) == len(points)


def test_one_worker_with_a_seed_is_reproducible(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        storage = str(tmp_path / f"{name}.log")
        run_worker(_spec(storage, trials=12, sampler_seed=3))
        trials = sorted(_trials(storage, TrialState.COMPLETE), key=lambda t: t.number)
        runs.append([t.params for t in trials])
    assert runs[0] == runs[1]


def _hang_in_first_trial(spec: StudySpec) -> None:
    # A worker whose trial never ends, as if it were killed in the middle of one.
    import bootstorm.optimizers._study as study_module

    def forever(self: Any, *_: Any) -> Any:
        time.sleep(3600)

    # The compiled executor's loop (on the trial's thread), and any other's evaluation.
    study_module.KernelCall.run = forever
    study_module.Evaluator.evaluate = forever
    run_worker(spec)


def test_a_dead_workers_trial_is_failed_at_the_next_start(tmp_path: Path) -> None:
    # Before: it stayed RUNNING until a run more than 30 s (the grace period) later.
    storage = str(tmp_path / "study.log")
    spec = _spec(storage, trials=5, heartbeat_interval_s=10)
    victim = FORK.Process(target=_hang_in_first_trial, args=(spec,))
    victim.start()
    deadline = time.monotonic() + 60
    # Wait until it is inside the trial: its point drawn, the storm running.
    assert spec.space is not None
    drawn = len(spec.space.parameters)

    # Its steady state: the first trial's loop hangs on its thread while the
    # next trial, claimed meanwhile, has its point drawn too (a trial killed
    # between its claim and its worker's name is found only after the grace
    # period, which is what this test is not about).
    def settled() -> bool:
        running = _trials_or_none(storage, TrialState.RUNNING)
        return len(running) == 2 and all(len(t.params) == drawn for t in running)

    while not settled():
        assert time.monotonic() < deadline and victim.is_alive()
        time.sleep(0.02)
    os.kill(victim.pid or 0, signal.SIGKILL)
    victim.join()
    # The trial it simulated, and the next one if its sampler had drawn it
    # meanwhile (a worker chooses the next point while a trial simulates).
    killed = _trials(storage, TrialState.RUNNING)
    assert len(killed) == 2
    assert killed[0].params == spec.baseline_params()  # the first trial: the storm as it is

    started = time.monotonic()
    run_worker(spec)
    assert time.monotonic() - started < 20  # not after the grace period (30 s)
    study = optuna.load_study(study_name="s", storage=open_storage(storage))
    by_number = {t.number: t for t in study.trials}
    for dead in killed:
        assert by_number[dead.number].state == TrialState.FAIL
        retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == dead.number]
        assert [t.state for t in retries] == [TrialState.COMPLETE]
        assert retries[0].params == dead.params  # its point, run again
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 5
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))


def _trials_or_none(storage: str, state: TrialState) -> list[optuna.trial.FrozenTrial]:
    try:
        return _trials(storage, state)
    except KeyError:  # the study is not made yet
        return []


@pytest.mark.slow
def test_jobs_workers_die_with_their_killed_parent(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.log")
    parent = subprocess.Popen(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", "optimize"]
        + ["--executor", "simpy", "--sandboxes", "400", "--trials", "5000"]
        + ["--storage", storage, "--study-name", "s", "--jobs", "2"]
        + ["--output", str(tmp_path / "t.yaml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    helpers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not helpers:  # the worker that is not the parent has run a trial
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.1)
            workers = {
                str(t.user_attrs.get("worker", ""))
                for t in _trials_or_none(storage, TrialState.COMPLETE)
            }
            pids = {int(w.rpartition(":")[2]) for w in workers if w}
            helpers = sorted(pids - {parent.pid})
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in helpers):
            assert time.monotonic() < deadline, f"worker {helpers} outlived its parent"
            time.sleep(0.05)
    finally:
        for pid in helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    "storage",
    [
        "postgresql+psycopg://bootstorm:s3cret@127.0.0.1:1/bootstorm",  # nothing on port 1
        "postgresql://bootstorm:s3cret@127.0.0.1:1/bootstorm",  # psycopg2: not installed
        "sqlite:////nonexistent-dir/study.db",
        "nosuchdb://host/db",
        "{tmp}/a-file/study.log",  # a journal under something that is not a directory
    ],
)
def test_a_storage_that_cannot_be_opened_is_one_line(
    storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: a 147-line SQLAlchemy traceback.
    (tmp_path / "a-file").write_text("")
    storage = storage.format(tmp=tmp_path)
    argv = ["optimize", "--trials", "1", "--sandboxes", "20", "--storage", storage]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--output", str(tmp_path / "t.yaml")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: storage: ")
    assert "s3cret" not in err[0]
    assert not (tmp_path / "t.yaml").exists()


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_a_trial_whose_worker_died_before_its_first_heartbeat_is_failed(tmp_path: Path) -> None:
    # A database keeps no heartbeat for it: Optuna never finds it stale, and
    # the study, whose total it counts against, would wait for it forever.
    import sqlalchemy

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    spec = _spec(storage, trials=3, heartbeat_interval_s=1)
    orphan = spec.open_study().ask()  # the baseline, whose worker dies at once
    engine = sqlalchemy.create_engine(storage)
    with engine.begin() as c:
        c.exec_driver_sql(
            "UPDATE trials SET datetime_start = ? WHERE trial_id = ?",
            (datetime.now() - timedelta(seconds=60), orphan._trial_id),
        )
    engine.dispose()
    assert _together(spec, 1) == [0]
    study = optuna.load_study(study_name="s", storage=open_storage(storage))
    assert study.trials[orphan.number].state == TrialState.FAIL
    retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == orphan.number]
    assert [t.state for t in retries] == [TrialState.COMPLETE]
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 3
