"""Several worker processes share one study on a real PostgreSQL server.

The server comes from ``.ci/postgres.sh`` (CI runs it and exports its URL);
without ``BOOTSTORM_TEST_POSTGRES_URL`` these tests are skipped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

URL = os.environ.get("BOOTSTORM_TEST_POSTGRES_URL")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not URL,
        reason="BOOTSTORM_TEST_POSTGRES_URL is not set; start a server with "
        '`export BOOTSTORM_TEST_POSTGRES_URL="$(.ci/postgres.sh)"` (CI does)',
    ),
]


@pytest.fixture
def study_name() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    assert URL is not None
    with contextlib.suppress(KeyError):
        optuna.delete_study(study_name=name, storage=URL)


def _worker(
    study_name: str, out: Path, *, trials: int, sandboxes: int, executor: str = "compiled"
) -> subprocess.Popen[str]:
    """``bootstorm optimize`` as its own process, as a worker on another machine would run it."""
    assert URL is not None
    args = [
        "optimize",
        "--executor",
        executor,
        "--storage",
        URL,
        "--study-name",
        study_name,
        "--trials",
        str(trials),
        "--sandboxes",
        str(sandboxes),
        "--heartbeat-s",
        "1",
        "--output",
        str(out),
    ]
    code = "from bootstorm.cli import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> None:
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err


def test_three_workers_share_one_study(study_name: str, tmp_path: Path) -> None:
    # SimPy trials of 400 sandboxes (~0.1 s each, ~4 s in all): no worker can
    # finish the study alone while the others still import.
    trials = 40
    procs = [
        _worker(study_name, tmp_path / f"w{i}.yaml", trials=trials, sandboxes=400, executor="simpy")
        for i in range(3)
    ]
    for p in procs:
        _finish(p)
    study = optuna.load_study(study_name=study_name, storage=URL)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    # Workers stop when the study holds `trials`; a worker may finish the one
    # it had started when another reached the total.
    assert trials <= len(done) <= trials + len(procs) - 1
    workers = {t.user_attrs["worker"] for t in done}
    assert len(workers) == 3, workers  # every process ran trials of the one study
    assert len({t.number for t in study.trials}) == len(study.trials)
    assert all((tmp_path / f"w{i}.yaml").is_file() for i in range(3))


def _kill_mid_trial(
    study_name: str, tmp_path: Path, *, trials: int, sandboxes: int
) -> tuple[int, set[int]]:
    """Start a victim worker, SIGKILL it inside a trial; the trial's number and the
    trials finished at that moment. A kill that lands just after the trial
    finished is retried with a new victim (the window is a few milliseconds)."""
    for attempt in range(5):
        # On the SimPy executor a trial takes ~0.1 s: a wide window to land in.
        victim = _worker(
            study_name,
            tmp_path / f"victim{attempt}.yaml",
            trials=trials,
            sandboxes=sandboxes,
            executor="simpy",
        )
        tag = f":{victim.pid}"
        deadline = time.monotonic() + 240
        caught = None
        while caught is None:
            assert time.monotonic() < deadline, "the victim never ran a trial"
            assert victim.poll() is None, victim.communicate()
            try:
                study = optuna.load_study(study_name=study_name, storage=URL)
            except KeyError:
                continue
            if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < 3:
                continue  # kill mid-study: after some trials have finished
            running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            caught = next(
                (t for t in running if str(t.user_attrs.get("worker", "")).endswith(tag)), None
            )
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        assert victim.returncode == -signal.SIGKILL
        study = optuna.load_study(study_name=study_name, storage=URL)
        finished = {t.number for t in study.get_trials(states=(TrialState.COMPLETE,))}
        if caught.number not in finished:
            return caught.number, finished
    pytest.fail("five kills in a row landed between trials")


def test_a_killed_worker_loses_no_finished_trial_and_the_study_resumes(
    study_name: str, tmp_path: Path
) -> None:
    trials = 40
    # The victim runs alone until it is killed mid-trial (a survivor started
    # first could finish the whole study while the victim still imports), then
    # a second worker carries the study on.
    killed_number, finished_before = _kill_mid_trial(
        study_name, tmp_path, trials=trials, sandboxes=400
    )
    assert finished_before, "the kill should land mid-study"

    killed_at = time.monotonic()
    survivor = _worker(study_name, tmp_path / "survivor.yaml", trials=trials, sandboxes=400)
    _finish(survivor)
    # Running a worker again resumes the study. Started after the grace period
    # (3 heartbeats of 1 s), it finds the killed trial stale even if the
    # survivor finished first, fails it and runs its queued retry.
    time.sleep(max(0.0, killed_at + 4.0 - time.monotonic()))
    again = _worker(study_name, tmp_path / "again.yaml", trials=trials, sandboxes=400)
    _finish(again)

    study = optuna.load_study(study_name=study_name, storage=URL)
    by_number = {t.number: t for t in study.trials}
    # No finished trial is lost.
    assert all(by_number[n].state == TrialState.COMPLETE for n in finished_before)
    # The study reached its total without the victim.
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) >= trials
    # The killed trial's heartbeat stopped: it was failed and its parameters run again.
    killed = by_number[killed_number]
    assert killed.state == TrialState.FAIL
    # A retry's ``failed_trial`` names the first trial of its line (the killed
    # one may itself retry a trial an earlier victim left); its
    # ``retry_history`` ends with the trial it retries.
    retries = [
        t for t in study.trials if t.system_attrs.get("retry_history", [None])[-1] == killed_number
    ]
    assert retries and retries[0].state == TrialState.COMPLETE
    # The retry keeps what the killed trial had been given (it may have died
    # before all its parameters were suggested).
    assert killed.params.items() <= retries[0].params.items()
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
