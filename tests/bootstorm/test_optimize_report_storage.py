"""``optimize`` refuses bad options and storages before its search, and
``report`` only reads a study (issue 35).

Each ``optimize`` case runs with the search replaced by one that fails the
test: a refusal must come before any trial (it used to come after the whole
search, which ``--storage memory`` then lost, or as a traceback).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from bootstorm.cli import main


def _refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line ``bootstorm ARGS`` exits 2 with."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.strip()


@pytest.fixture
def no_search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import bootstorm.workflows

    def search(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the search started")

    monkeypatch.setattr(bootstorm.workflows, "run_search", search)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)


def _optimize(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    base = ["optimize", "--storage", "memory", "--trials", "3", "--sandboxes", "20"]
    return _refusal(capsys, *base, *args)


@pytest.mark.usefixtures("no_search")
@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("", "output: . is a directory"),
        ("/", "output: / is a directory"),
        ("missing/tuned.yaml", "output: no directory missing to write tuned.yaml in"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_the_search(
    capsys: pytest.CaptureFixture[str], output: str, says: str
) -> None:
    assert _optimize(capsys, "--output", output).startswith(f"error: {says}")


@pytest.mark.usefixtures("no_search")
@pytest.mark.parametrize("kind", ["device", "FIFO", "directory"])
def test_a_storage_that_is_not_a_file_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    """``/dev/null`` took the journal's appends and lost them (Optuna then
    failed with ``AssertionError: Should not reach.``); a FIFO hung."""
    where = {"device": "/dev/null", "FIFO": str(tmp_path / "fifo"), "directory": str(tmp_path)}
    if kind == "FIFO":
        os.mkfifo(where[kind])
    line = _optimize(capsys, "--storage", where[kind])
    assert line == (
        f"error: storage: {where[kind]!r} is a {kind}, not a journal file; "
        "name a file (or a database URL, or 'memory')"
    )


@pytest.mark.usefixtures("no_search")
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--study-name", "n" * 5000), "study_name: must be a name of 1..512 characters"),
        (("--trials", str(10**20)), "trials: must be an integer within 1..100000"),
        (("--sampler-seed", "-1"), "sampler_seed: must be an integer within 0..4294967295"),
        (
            ("--heartbeat-s", "99999999999"),
            "heartbeat_s: must be in 1..3,600",
        ),
    ],
)
def test_an_option_out_of_range_is_refused_before_the_search(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], says: str
) -> None:
    line = _optimize(capsys, *args)
    assert line.startswith(f"error: {says} (got ")
    assert len(line) < 200  # the 5 000 characters are counted, not shown


def test_a_large_sampler_seed_still_seeds_every_worker() -> None:
    """A worker's seed is ``sampler_seed`` plus its first trial's number:
    taken modulo 2**32 (NumPy's range), not refused mid-search."""
    from bootstorm.models import Scenario
    from bootstorm.optimizers import StudySpec

    spec = StudySpec(scenario=Scenario(sandboxes=20), sampler_seed=2**32 - 1, sampler="random")
    assert spec.make_sampler(worker=5) is not None


def _plain_study(path: Path, *, search: str | None = None) -> None:
    """A study of three trials in a journal (made without bootstorm's search)."""
    from bootstorm.optimizers import open_storage

    study = optuna.create_study(study_name="s", storage=open_storage(str(path)))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    if search is not None:
        study.set_user_attr("bootstorm:search", search)


@pytest.mark.parametrize(
    ("search", "says"),
    [
        ("{not json", "is not a search bootstorm wrote"),
        ('{"objectives": ["makespan"]}', "is not a search bootstorm wrote"),
        ('{"scenario": {"cni": "s3cr3t-cni"}}', "cannot read (at scenario.cni)"),
        ('{"scenario": {"sandboxes": "s3cr3t"}}', "cannot read (at scenario.sandboxes)"),
    ],
)
def test_a_hand_edited_search_record_is_one_line_in_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, search: str, says: str
) -> None:
    journal = tmp_path / "studies.log"
    _plain_study(journal, search=search)
    line = _refusal(capsys, "report", str(journal), "-o", str(tmp_path / "r.html"))
    assert line.startswith("error: study s: its search record ('bootstorm:search') ")
    assert says in line and "s3cr3t" not in line  # the key, never the value
    assert not (tmp_path / "r.html").exists()


def test_report_does_not_make_a_missing_sqlite_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = tmp_path / "missing.db"
    line = _refusal(capsys, "report", f"sqlite:///{db}", "-o", str(tmp_path / "r.html"))
    assert line == f"error: storage: no such database {str(db)!r}"
    assert not db.exists()


def test_report_names_an_empty_storage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """It showed ``storage=<optuna.storages._rdb.storage.RDBStorage object at 0x...>``."""
    db = tmp_path / "empty.db"
    from bootstorm.optimizers import open_storage

    open_storage(f"sqlite:///{db}")  # tables, no study
    line = _refusal(capsys, "report", f"sqlite:///{db}", "-o", str(tmp_path / "r.html"))
    assert line == f"error: source: sqlite:///{db} holds no study"


def test_report_reads_a_journal_it_may_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``report`` only reads: a journal opened for writing was refused (here
    the refusal is made by hand, so the test holds for root too)."""
    journal = tmp_path / "studies.log"
    _plain_study(journal)
    before = journal.read_bytes()
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(journal) and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    main(["report", str(journal), "-o", str(tmp_path / "r.html")])
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert journal.read_bytes() == before


@contextlib.contextmanager
def _read_only_bind(folder: Path) -> Iterator[None]:
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a read-only bind mount)")
def test_report_reads_a_journal_on_a_read_only_file_system(tmp_path: Path) -> None:
    studies = tmp_path / "studies"
    studies.mkdir()
    journal = studies / "studies.log"
    _plain_study(journal)
    with _read_only_bind(studies):
        with pytest.raises(OSError):  # truly read-only, for root too
            journal.open("ab")
        main(["report", str(journal), "-o", str(tmp_path / "r.html")])
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
