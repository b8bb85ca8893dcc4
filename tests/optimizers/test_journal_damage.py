"""A study survives a damaged journal (issue 35).

A torn last line (a full disk, a killed writer) or garbage appended used to
be written into by the next search (a merged line), after which Optuna's own
reader, ``report`` and ``optimize`` all failed: the completed trials could
no longer be read. Opening a journal now sets the damage aside, and an
append is whole lines or nothing. Every test counts the completed trials
with Optuna's *own* reader (``JournalStorage(JournalFileBackend(path))``),
not ours.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from bootstorm.models import ConfigError
from bootstorm.optimizers import _storage
from bootstorm.optimizers._storage import open_storage, scan_journal

NAME = "s"


@pytest.fixture(autouse=True)
def _quiet_optuna() -> Iterator[None]:
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(before)


def _objective(trial: optuna.Trial) -> float:
    return trial.suggest_float("x", 0.0, 1.0)


def _run(path: Path, trials: int, objective: Callable[[optuna.Trial], float] = _objective) -> None:
    """``trials`` more completed trials in the journal's study (made if missing)."""
    study = optuna.create_study(
        study_name=NAME, storage=open_storage(str(path)), load_if_exists=True
    )
    study.optimize(objective, n_trials=trials)


def completed_by_optuna(path: Path) -> list[int]:
    """The completed trials' numbers, as Optuna's own journal reader sees them."""
    study = optuna.load_study(
        study_name=NAME, storage=JournalStorage(JournalFileBackend(str(path)))
    )
    return [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]


def _set_aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.corrupt-*"))


def test_a_torn_last_line_is_set_aside_and_the_study_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "study.log"
    _run(path, 5)
    whole = path.read_bytes()
    torn = b'{"op_code":6,"worker_id":"w","trial_id":5,"sta'  # a write cut short
    with path.open("ab") as f:
        f.write(torn)
    with caplog.at_level(logging.WARNING, logger="bootstorm"):
        _run(path, 3)  # used to merge its first record into the torn line
    assert completed_by_optuna(path) == list(range(8))
    (aside,) = _set_aside(path)
    assert aside.read_bytes() == torn  # moved beside it, byte for byte
    assert path.read_bytes().startswith(whole)
    lines = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert f"byte {len(whole):,}" in lines[0] and aside.name in lines[0]
    assert "no newline" in lines[0]


def test_garbage_appended_is_set_aside_and_the_study_resumes(tmp_path: Path) -> None:
    path = tmp_path / "study.log"
    _run(path, 4)
    size = path.stat().st_size
    garbage = b"\x00\xff not json\n123\n" + os.urandom(300)
    with path.open("ab") as f:
        f.write(garbage)
    _run(path, 2)
    assert completed_by_optuna(path) == list(range(6))
    (aside,) = _set_aside(path)
    assert aside.read_bytes() == garbage
    _run(path, 1)  # the next open finds nothing to repair
    assert len(_set_aside(path)) == 1
    assert path.stat().st_size > size


@pytest.mark.parametrize(
    "content",
    [b"my notes\nline two\n", bytes(range(256)), b"[1, 2]\n"],
    ids=["text", "binary", "json"],
)
def test_a_file_that_is_no_journal_is_refused_and_left_as_it_was(
    tmp_path: Path, content: bytes
) -> None:
    """A file named by mistake was "repaired": all of it moved aside and a
    study written where it was. Nothing of a journal at its start: refused."""
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="is not an Optuna journal"):
        open_storage(str(path))
    assert path.read_bytes() == content and not _set_aside(path)


def test_a_journal_whose_first_append_was_torn_is_still_repaired(tmp_path: Path) -> None:
    """Only an unfinished first record (a crash in the first append) is a journal's damage."""
    path = tmp_path / "study.log"
    path.write_bytes(b'{"op_code": 0, "worker')
    _run(path, 2)
    assert completed_by_optuna(path) == [0, 1] and len(_set_aside(path)) == 1


def test_records_after_a_damaged_line_are_set_aside_with_it_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What an older writer left: a torn line, then its next records after it
    (the first one merged into the torn line). The later records may refer
    to one lost in the damage (a journal's trials are numbered by position),
    so they are set aside with it, and the line says how many."""
    path = tmp_path / "study.log"
    _run(path, 3)
    after = b'{"op_code":2,"worker_id":"w","study_id":0,"user_attr":{"k":"v"}}\n'
    with path.open("ab") as f:
        f.write(b'{"op_code":4,"worker_id":"w","stu' + after + after)  # merged, then whole
    with pytest.raises(ValueError):  # what every later open met
        completed_by_optuna(path)
    with caplog.at_level(logging.WARNING, logger="bootstorm"):
        _run(path, 2)
    assert completed_by_optuna(path) == list(range(5))
    study = optuna.load_study(study_name=NAME, storage=open_storage(str(path)))
    assert "k" not in study.user_attrs
    (line,) = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert "1 whole records after the damage" in line


def test_a_refused_append_leaves_no_torn_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk without root: the journal's write() takes part of the
    change, and then nothing more (what ENOSPC does)."""
    path = tmp_path / "study.log"
    _run(path, 3)
    size = path.stat().st_size
    journal = os.stat(path).st_ino
    real_write = os.write
    full = [True]

    def write(fd: int, data: bytes) -> int:
        if full[0] and os.fstat(fd).st_ino == journal:
            if os.fstat(fd).st_size == size:  # room for part of the first write only
                return real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(ConfigError) as refused:
        _run(path, 1)
    assert "\n" not in str(refused.value)
    assert str(path) in str(refused.value) and "not written" in str(refused.value)
    assert path.stat().st_size == size  # taken back whole
    assert completed_by_optuna(path) == [0, 1, 2]
    full[0] = False  # space freed: the next search resumes
    _run(path, 2)
    assert completed_by_optuna(path) == list(range(5))
    assert _set_aside(path) == []  # there was nothing to repair


def test_a_write_refused_outright_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "study.log"
    _run(path, 2)
    journal = os.stat(path).st_ino
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if os.fstat(fd).st_ino == journal:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(ConfigError, match="Disk quota exceeded"):
        _run(path, 1)
    monkeypatch.undo()
    assert completed_by_optuna(path) == [0, 1]


def test_a_torn_write_followed_by_another_writers_line_is_not_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cutting back one's own torn write is only safe while the file ends
    where it ended: when another writer (outside the lock: Optuna's own, say)
    appended meanwhile, the cut would take its line too. Nothing is cut; the
    error says so, and the next open sets the damage aside."""
    path = tmp_path / "study.log"
    _run(path, 2)
    journal = os.stat(path).st_ino
    real_write = os.write
    armed = [True]
    other = b'{"op_code":2,"worker_id":"o","study_id":0,"user_attr":{"o":1}}\n'

    def write(fd: int, data: bytes) -> int:
        if armed[0] and os.fstat(fd).st_ino == journal:
            armed[0] = False
            n = real_write(fd, bytes(data[:5]))
            with path.open("ab") as f:  # another writer, right after our piece
                f.write(other)
            return n
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="another writer appended"):
        _run(path, 1)
    monkeypatch.undo()
    assert path.read_bytes().startswith(before) and path.read_bytes().endswith(other)
    _run(path, 1)  # sets aside from our torn piece on, the other's line with it
    assert completed_by_optuna(path) == [0, 1, 2]
    (aside,) = _set_aside(path)
    assert aside.read_bytes().endswith(other)


def test_damage_that_cannot_be_set_aside_is_left_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "study.log"
    _run(path, 2)
    with path.open("ab") as f:
        f.write(b"garbage")
    before = path.read_bytes()

    def full(*_args: object) -> Path:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_storage, "_set_aside", full)
    with pytest.raises(ConfigError, match=r"cannot be set aside \(No space left") as refused:
        open_storage(str(path))
    assert "\n" not in str(refused.value)
    assert path.read_bytes() == before  # never cut before its copy is safe


def test_a_damaged_journal_is_read_not_repaired_when_only_read(tmp_path: Path) -> None:
    path = tmp_path / "study.log"
    _run(path, 3)
    with path.open("ab") as f:
        f.write(b"not json\n" + b'{"op_code":2,"worker_id":"w","study_id":0,"user_attr":{}}\n')
    before = path.read_bytes()
    study = optuna.load_study(study_name=NAME, storage=open_storage(str(path), read_only=True))
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 3
    assert path.read_bytes() == before and _set_aside(path) == []
    with pytest.raises(ConfigError, match="read only"):
        study.enqueue_trial({"x": 0.5})


def test_the_scan_finds_every_line_across_read_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_storage, "_CHUNK_BYTES", 7)  # lines straddle every chunk
    record = b'{"op_code":2,"worker_id":"w","study_id":0,"user_attr":{"k":"%d"}}\n'
    lines = [record % i for i in range(30)]
    path = tmp_path / "j.log"
    path.write_bytes(b"".join(lines))
    with path.open("rb") as f:
        assert scan_journal(f.fileno()) is None
    path.write_bytes(b"".join(lines[:10]) + b"[1]\n" + b"".join(lines[10:]) + b'{"op')
    with path.open("rb") as f:
        damage = scan_journal(f.fileno())
    assert damage is not None
    assert damage.good_records == 10 and damage.good_bytes == len(b"".join(lines[:10]))
    assert damage.records_after == 20 and not damage.torn_tail


_APPENDER = """
import sys
import optuna
from bootstorm.optimizers._storage import open_storage
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(study_name="s", storage=open_storage(sys.argv[1]), load_if_exists=True)
pad = "x" * int(sys.argv[2])
def objective(trial):
    trial.set_user_attr("pad", pad)  # one long line: a kill lands inside its write
    return trial.suggest_float("x", 0, 1)
study.optimize(objective, n_trials=10**6)
"""

_PAD_BYTES = 16_000_000


def _kill_mid_append(path: Path) -> bool:
    """Run a worker appending trials, SIGKILL it while a line is half in the
    file; whether it left a torn last line."""
    worker = subprocess.Popen([sys.executable, "-c", _APPENDER, str(path), str(_PAD_BYTES)])
    try:
        deadline = time.monotonic() + 120
        while not path.exists():
            assert worker.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        fd = os.open(path, os.O_RDONLY)
        try:
            while True:
                assert worker.poll() is None and time.monotonic() < deadline
                size = os.fstat(fd).st_size
                if size > 3 * _PAD_BYTES and os.pread(fd, 1, size - 1) != b"\n":
                    worker.send_signal(signal.SIGKILL)  # mid-write: the line is not whole
                    break
        finally:
            os.close(fd)
    finally:
        worker.kill()
        worker.wait()
    return not path.read_bytes().endswith(b"\n")


def test_a_worker_killed_mid_append_loses_no_completed_trial(tmp_path: Path) -> None:
    for attempt in range(6):  # a kill lands mid-write about 9 times in 10
        path = tmp_path / f"study{attempt}.log"
        if _kill_mid_append(path):
            break
    else:
        pytest.fail("no kill landed inside a write")
    done = completed_by_optuna(path)  # Optuna reads up to the torn line
    assert len(done) >= 2
    _run(path, 2)
    after = completed_by_optuna(path)
    assert after[: len(done)] == done and len(after) == len(done) + 2
    assert len(_set_aside(path)) == 1


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts a tmpfs)")
def test_a_full_disk_leaves_every_completed_trial_readable_and_the_study_resumes(
    tmp_path: Path,
) -> None:
    """On a 64 KiB tmpfs: the search fills it, stops in one line (it used to
    leave a 65 536-byte journal ending in a torn line), and resumes once
    there is room, with every trial it completed."""
    from bootstorm.models import Scenario
    from bootstorm.optimizers import IntRange, SearchSpace, StudySpec, optimize

    def spec(trials: int) -> StudySpec:
        return StudySpec(
            scenario=Scenario(cni="ipvtap", sandboxes=20),
            space=SearchSpace(cni="ipvtap", limits={"AddCNI": IntRange(low=1, high=20)}),
            trials=trials,
            storage=str(path),
            study_name=NAME,
            # The trial the full disk stopped is left running, by this live
            # process: the resume runs it again after three silent heartbeats.
            heartbeat_interval_s=1,
        )

    with _tmpfs(tmp_path / "disk", "64k") as disk:
        path = disk / "study.log"
        completed: list[int] = []
        with pytest.raises(ConfigError) as refused:
            optimize(spec(1000), callbacks=[lambda s, t: completed.append(t.number)])
        assert "\n" not in str(refused.value) and str(path) in str(refused.value)
        assert path.read_bytes().endswith(b"\n")  # no torn tail
        assert len(completed) >= 5
        kept = completed_by_optuna(path)
        assert set(completed) <= set(kept)
        subprocess.run(["mount", "-o", "remount,size=1m", str(disk)], check=True)
        assert optimize(spec(len(kept) + 3)).completed == len(kept) + 3
        resumed = completed_by_optuna(path)
        assert resumed[: len(kept)] == kept and len(resumed) == len(kept) + 3
        assert _set_aside(path) == []  # nothing was torn


def test_a_heartbeat_refused_by_a_full_disk_ends_its_thread_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial's own next write ends the worker in one line; the heartbeat
    thread used to add a traceback of its own."""
    from bootstorm.optimizers import _study

    def refuse(trial_id: int) -> None:
        raise ConfigError("storage: cannot append to the journal 'j': No space left on device")

    storage = open_storage(str(tmp_path / "j.log"), heartbeat_interval_s=1)
    monkeypatch.setattr(storage, "_heartbeat_interval_s", 0.01)
    monkeypatch.setattr(storage, "record_heartbeat", refuse)
    thrown: list[object] = []
    monkeypatch.setattr(threading, "excepthook", thrown.append)
    beats = _study._Heartbeat(storage)
    with beats.beating(0):
        time.sleep(0.2)
    beats.close()
    assert thrown == []


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite://", "sqlite:///:memory:"])
def test_a_sqlite_url_with_no_file_is_refused(url: str) -> None:
    """Each connection opened a database of its own: Optuna's tables made on
    one were missing on the next, a 128-line traceback."""
    with pytest.raises(ConfigError, match="names no database file"):
        open_storage(url)
