"""Where a study lives: a journal file by default, database URLs as before.

The journal keeps a study through a reopen and through a killed worker (a
heartbeat fails its trial and queues its parameters again, as on PostgreSQL,
``test_postgres.py``), and studies kept in SQLite before still open.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from bootstorm.models import Scenario
from bootstorm.optimizers import (
    HeartbeatJournalStorage,
    IntRange,
    SearchSpace,
    StudySpec,
    open_storage,
    optimize,
    read_study,
)
from bootstorm.optimizers._storage import HEARTBEAT_ATTR, UnsyncedJournalFileBackend
from bootstorm.workflows import default_study_storage

SMALL = Scenario(cni="ipvtap", sandboxes=20)


def _space() -> SearchSpace:
    return SearchSpace(cni="ipvtap", limits={"AddCNI": IntRange(low=1, high=20)})


def _spec(storage: str | None, *, trials: int, name: str = "s") -> StudySpec:
    return StudySpec(
        scenario=SMALL, space=_space(), trials=trials, storage=storage, study_name=name
    )


def test_the_default_storage_is_a_journal_file_in_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = default_study_storage()
    assert path == tmp_path / "bootstorm" / "studies.log"
    path.parent.mkdir()
    storage = _spec(str(path), trials=1).make_storage()
    assert isinstance(storage, HeartbeatJournalStorage)
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_study_storage() == Path.home() / ".local/state/bootstorm/studies.log"


def test_a_journal_study_survives_reopening_and_resumes(tmp_path: Path) -> None:
    path = str(tmp_path / "study.log")
    first = optimize(_spec(path, trials=3))
    assert first.completed == 3
    # Another process (here: a fresh storage object) sees the same study ...
    again = read_study(_spec(path, trials=3))
    assert again.completed == 3
    assert [o.number for o in again.best] == [o.number for o in first.best]
    # ... and a larger total resumes it instead of starting over.
    assert optimize(_spec(path, trials=5)).completed == 5
    study = optuna.load_study(study_name="s", storage=open_storage(path))
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 5


def test_a_study_kept_in_sqlite_still_opens(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optimize(_spec(url, trials=2))
    assert read_study(_spec(url, trials=2)).completed == 2
    assert isinstance(open_storage(url), optuna.storages.RDBStorage)


def test_a_journal_is_written_in_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    backend = UnsyncedJournalFileBackend(str(path))
    backend.append_logs([{"a": 1}, {"b": [2, 3]}])
    backend.append_logs([{"c": "x"}])
    assert path.read_text() == '{"a":1}\n{"b":[2,3]}\n{"c":"x"}\n'
    assert list(backend.read_logs(0)) == [{"a": 1}, {"b": [2, 3]}, {"c": "x"}]


def test_the_journal_reads_what_another_writer_appended_and_waits_for_a_whole_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.log"
    backend = UnsyncedJournalFileBackend(str(path))
    backend.append_logs([{"a": 1}])
    assert list(backend.read_logs(0)) == [{"a": 1}]
    assert list(backend.read_logs(1)) == []  # nothing new: one fstat
    with open(path, "ab") as other:  # another worker, mid-write
        other.write(b'{"b":')
        other.flush()
        assert list(backend.read_logs(1)) == []  # not whole yet: read again later
        other.write(b"2}\n")
    assert list(backend.read_logs(1)) == [{"b": 2}]
    assert list(backend.read_logs(0)) == [{"a": 1}, {"b": 2}]  # from the start again


def test_a_broken_line_inside_the_journal_is_an_error_as_in_optuna(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    path.write_bytes(b'{"a":1}\nnot json\n{"c":3}\n')
    with pytest.raises(ValueError):
        list(UnsyncedJournalFileBackend(str(path)).read_logs(0))
    with pytest.raises(ValueError):
        list(JournalFileBackend(str(path)).read_logs(0))


def test_optunas_own_journal_and_ours_share_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.log")
    ours = optuna.create_study(study_name="s", storage=open_storage(path))
    stock = optuna.load_study(
        study_name="s",
        storage=optuna.storages.JournalStorage(JournalFileBackend(path)),
    )
    ours.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    stock.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    ours.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert [t.number for t in ours.get_trials()] == list(range(6))
    assert [t.params for t in stock.get_trials()] == [t.params for t in ours.get_trials()]


def test_the_file_system_of_a_path_is_its_longest_mount_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bootstorm.optimizers import _storage

    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "30 22 0:40 / /srv/shared\\040studies rw shared:9 - nfs4 host:/export rw,vers=4.2\n"
        "31 22 0:41 / /srv/shared rw - tmpfs tmpfs rw\n"
    )
    monkeypatch.setattr(_storage, "_MOUNTINFO", mountinfo)
    assert _storage.file_system_of(Path("/srv/shared studies/s.log")) == "nfs4"
    assert _storage.file_system_of(Path("/srv/shared/s.log")) == "tmpfs"
    assert _storage.file_system_of(Path("/srv/sharedx/s.log")) == "ext4"
    monkeypatch.setattr(_storage, "_MOUNTINFO", tmp_path / "missing")
    assert _storage.file_system_of(Path("/srv/shared/s.log")) is None


def test_appends_take_optunas_lock_file_only_off_a_local_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bootstorm.optimizers import _storage

    locked: list[str] = []
    lock = optuna.storages.journal.JournalFileSymlinkLock  # Optuna's, as the backend takes it
    monkeypatch.setattr(lock, "acquire", lambda self: locked.append("acquire") or True)
    monkeypatch.setattr(lock, "release", lambda self: None)
    for kind, takes_it in (("ext4", False), ("nfs4", True), (None, True)):
        monkeypatch.setattr(_storage, "file_system_of", lambda path, kind=kind: kind)
        locked.clear()
        backend = UnsyncedJournalFileBackend(str(tmp_path / f"{kind}.log"))
        backend.append_logs([{"a": 1}])
        assert backend.locks is takes_it
        assert locked == (["acquire"] if takes_it else [])


_APPENDER = """
import sys
from bootstorm.optimizers._storage import UnsyncedJournalFileBackend
backend = UnsyncedJournalFileBackend(sys.argv[1])
assert not backend.locks
for i in range(2000):
    backend.append_logs([{"w": sys.argv[2], "i": i, "pad": "x" * 3000}, {"w": sys.argv[2]}])
"""


def test_two_processes_appending_without_the_lock_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    path.touch()
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, str(path), w]) for w in ("a", "b")]
    assert [p.wait(120) for p in procs] == [0, 0]
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    logs = [json.loads(line) for line in lines[:-1]]  # every line whole
    assert len(logs) == 8000
    for w in ("a", "b"):  # each worker's pair of lines stays together, in order
        mine = [i for i, log in enumerate(logs) if log["w"] == w]
        assert all(logs[mine[j]]["i"] == j // 2 for j in range(0, len(mine), 2))
        assert all(mine[j + 1] == mine[j] + 1 for j in range(0, len(mine), 2))


def test_a_journal_backend_travels_to_another_process_as_its_path(tmp_path: Path) -> None:
    import pickle

    backend = UnsyncedJournalFileBackend(str(tmp_path / "j.log"))
    backend.append_logs([{"a": 1}])
    copy = pickle.loads(pickle.dumps(backend))
    assert list(copy.read_logs(0)) == [{"a": 1}]
    backend.close()
    copy.append_logs([{"b": 2}])
    assert (tmp_path / "j.log").read_text() == '{"a":1}\n{"b":2}\n'


def test_one_heartbeat_thread_beats_for_all_of_a_workers_trials(tmp_path: Path) -> None:
    import threading

    seen: set[tuple[str, int | None]] = set()

    def look(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        seen.update((t.name, t.ident) for t in threading.enumerate() if "heartbeat" in t.name)

    spec = _spec(str(tmp_path / "study.log"), trials=8)
    optimize(spec, callbacks=[look])
    # A thread per trial cost about a millisecond to start, each trial.
    assert len(seen) == 1, seen
    assert not [t for t in threading.enumerate() if "heartbeat" in t.name]  # stopped with it


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_a_silent_running_trial_is_failed_and_its_parameters_queued_again(
    tmp_path: Path,
) -> None:
    spec = _spec(str(tmp_path / "study.log"), trials=1)
    study = spec.open_study()
    study.ask()  # the enqueued baseline: its worker "dies" here, mid-trial
    dead = study.ask({"limit:AddCNI": optuna.distributions.IntDistribution(1, 20)})
    storage = study._storage
    assert isinstance(storage, HeartbeatJournalStorage)
    storage.set_trial_system_attr(dead._trial_id, HEARTBEAT_ATTR, time.time() - 3600)
    with warnings.catch_warnings():  # "experimental" since Optuna 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    by_number = {t.number: t for t in study.trials}
    assert by_number[dead.number].state == TrialState.FAIL
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == dead.number]
    assert retry and retry[0].state == TrialState.WAITING
    assert retry[0].params == {"limit:AddCNI": dead.params["limit:AddCNI"]}
    # A trial without a stamp is judged by its start: a moment ago, not stale.
    assert by_number[0].state == TrialState.RUNNING


def _worker(storage: str, out: Path, *, trials: int) -> subprocess.Popen[str]:
    """``bootstorm optimize`` in its own process, as a second worker would run it."""
    args = [
        "optimize",
        "--executor",
        "simpy",  # ~0.1 s a trial: a wide window to kill it in
        "--storage",
        storage,
        "--study-name",
        "killed",
        "--trials",
        str(trials),
        "--sandboxes",
        "400",
        "--heartbeat-s",
        "1",
        "--output",
        str(out),
    ]
    return subprocess.Popen(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_a_killed_worker_loses_no_finished_trial_and_the_journal_study_resumes(
    tmp_path: Path,
) -> None:
    storage, trials = str(tmp_path / "study.log"), 12
    for attempt in range(5):
        victim = _worker(storage, tmp_path / f"victim{attempt}.yaml", trials=trials)
        deadline = time.monotonic() + 240
        caught = None
        while caught is None:
            assert time.monotonic() < deadline, "the victim never ran a trial"
            assert victim.poll() is None, victim.communicate()
            time.sleep(0.02)
            try:
                study = optuna.load_study(study_name="killed", storage=open_storage(storage))
            except KeyError:
                continue
            if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < 3:
                continue  # kill mid-study: after some trials have finished
            running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            tag = f":{victim.pid}"
            caught = next(
                (t for t in running if str(t.user_attrs.get("worker", "")).endswith(tag)), None
            )
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        study = optuna.load_study(study_name="killed", storage=open_storage(storage))
        finished = {t.number for t in study.get_trials(states=(TrialState.COMPLETE,))}
        if caught.number not in finished:
            break
    else:
        pytest.fail("five kills in a row landed between trials")
    killed_at = time.monotonic()
    # Started after the grace period (3 heartbeats of 1 s): the survivor finds
    # the killed trial stale, fails it and runs its queued retry.
    time.sleep(max(0.0, killed_at + 4.0 - time.monotonic()))
    survivor = _worker(storage, tmp_path / "survivor.yaml", trials=trials)
    _, err = survivor.communicate(timeout=240)
    assert survivor.returncode == 0, err

    study = optuna.load_study(study_name="killed", storage=open_storage(storage))
    by_number = {t.number: t for t in study.trials}
    assert all(by_number[n].state == TrialState.COMPLETE for n in finished)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) >= trials
    assert by_number[caught.number].state == TrialState.FAIL
    retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == caught.number]
    assert retries and retries[0].state == TrialState.COMPLETE
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
