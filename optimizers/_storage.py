"""Where a study lives: a journal file (the default), a database URL, or memory.

A search's trial costs a few milliseconds of simulation. Optuna's RDB layer
(SQLite by default before) cost about six times that per trial: it reads the
whole study several times a trial through SQLAlchemy. Its journal storage
appends each change to a file as one JSON line and keeps the study in
memory, replaying only the lines other workers added: 300 trials take
1.2x their time in memory. It survives a killed worker (appends are whole
lines, atomic on a local file system and under Optuna's lock file on NFS,
where a lock left by a dead worker expires), and several worker processes
(or machines, on NFS) share one file; optuna-dashboard reads it
(``optuna-dashboard study.log``).

Optuna's journal storage has no heartbeat, so :class:`HeartbeatJournalStorage`
adds one: each running trial stamps the time into its system attributes
every ``heartbeat_interval_s``, and a running trial whose last stamp is older
than the grace period is failed and retried by the next worker, as on a
database (the retry does not inherit the stamp, which made it look stale
at once). PostgreSQL (``postgresql://...``) remains the storage for many
machines without a shared file system; ``sqlite:///...`` URLs still open
studies written before the journal became the default. Workers starting at
once on a new database create its tables under a lock, and on SQLite every
transaction holds the write lock from its first statement (see
:func:`_sqlite_connect`), so that what a worker read still holds when it writes.

A storage that cannot be opened (an unreachable server, an unknown scheme, a
missing driver, a directory that cannot be written) is a
:class:`~bootstorm.models.ConfigError` naming ``storage`` and the reason, so
the CLI prints one line, not a driver's traceback.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import time
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from ..models import ConfigError

__all__ = [
    "HEARTBEAT_ATTR",
    "LOCAL_FILE_SYSTEMS",
    "PROCESS_ATTR",
    "HeartbeatJournalStorage",
    "UnsyncedJournalFileBackend",
    "file_system_of",
    "is_url",
    "open_storage",
    "safe_storage_name",
    "stamps_on_claim",
]

HEARTBEAT_ATTR = "bootstorm:heartbeat"
"""The trial system attribute a journal study's heartbeat stamps (Unix time, s)."""

PROCESS_ATTR = "bootstorm:process"
"""The trial system attribute naming the process that runs it (see :mod:`._workers`)."""

StaleTrialCallback = Callable[[Study, FrozenTrial], None]


class _RetryStaleTrial:
    """Optuna's ``RetryHeartbeatStaleTrialCallback``, without handing the dead
    trial's heartbeat stamp and process to its retry: the retry copies the
    trial's system attributes, and with them it looked stale (and its worker
    dead) the moment it started, before its own worker stamped it."""

    def __init__(self, *, max_retry: int) -> None:
        with warnings.catch_warnings():  # "experimental" since Optuna 2.8, stable in use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=max_retry)

    def __call__(self, study: Study, trial: FrozenTrial) -> None:
        trial = copy.copy(trial)
        trial.system_attrs = {
            k: v for k, v in trial.system_attrs.items() if k not in (HEARTBEAT_ATTR, PROCESS_ATTR)
        }
        self._retry(study, trial)


def is_url(storage: str) -> bool:
    """A database URL (``sqlite:///``, ``postgresql://``), not a journal file's path."""
    return "://" in storage


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal storage with the heartbeat its RDB storage has.

    Parameters
    ----------
    backend:
        Where the journal is kept (a :class:`~optuna.storages.journal.JournalFileBackend`).
    heartbeat_interval_s:
        How often a running trial stamps the time.
    grace_period_s:
        How old a running trial's last stamp may get before it is failed.
    stale_trial_callback:
        Called on each trial failed that way (Optuna's
        ``RetryHeartbeatStaleTrialCallback`` queues its parameters again).

    The stamps use this machine's clock: workers on several machines must
    keep their clocks within the grace period of each other.
    """

    def __init__(
        self,
        backend: JournalFileBackend,
        *,
        heartbeat_interval_s: int,
        grace_period_s: int,
        stale_trial_callback: StaleTrialCallback | None = None,
    ) -> None:
        super().__init__(backend)
        self._heartbeat_interval_s = heartbeat_interval_s
        self._grace_period_s = grace_period_s
        self._stale_trial_callback = stale_trial_callback

    def record_heartbeat(self, trial_id: int) -> None:
        # Another worker may have found it stale and failed it meanwhile.
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        stale = []
        for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            beat = trial.system_attrs.get(HEARTBEAT_ATTR)
            if beat is None and trial.datetime_start is not None:
                beat = trial.datetime_start.timestamp()  # dead before its first stamp
            if beat is not None and now - float(beat) > self._grace_period_s:
                stale.append(trial._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self._heartbeat_interval_s

    def get_heartbeat_stale_trial_callback(self) -> StaleTrialCallback | None:
        return self._stale_trial_callback


class UnsyncedJournalFileBackend(JournalFileBackend):
    """A journal file whose appends are not forced to the disk (no ``fsync``),
    read and written through descriptors kept open.

    Optuna's backend syncs every change, about eleven a trial: on this
    project's disk that was 0.4 ms each, a fifth of the simulation. Without
    it a killed worker still loses nothing (what it wrote is in the kernel's
    page cache, whole lines, appended under the file lock in one ``write``);
    only an operating-system crash may lose the last trials, which running
    the study again redoes: the trade SQLite's WAL with ``synchronous=NORMAL``
    made before. Pass ``sync=True`` to :func:`open_storage` for Optuna's own.

    Optuna's backend also opens the file for every read (the storage reads
    the lines other workers added before each of its calls, about twenty a
    trial) and every append. Here one descriptor reads, with ``pread`` (no
    file offset that a forked process would share), one appends
    (``O_APPEND``), and a read with nothing new costs one ``fstat``. The lines
    are Optuna's: its own workers and optuna-dashboard share the file.

    Optuna takes a lock file around every append (a symlink made, renamed
    and removed: a third of a journal's cost here) because on NFS an append
    is not atomic. On a local file system an ``O_APPEND`` ``write`` of whole
    lines is (the kernel holds the inode's lock through it), so two workers'
    lines never interleave, Optuna's own included: the lock is taken only
    where the file's file system is not one of :data:`LOCAL_FILE_SYSTEMS`.
    """

    def __init__(self, file_path: str) -> None:
        super().__init__(file_path)  # Optuna's symlink lock, as self._lock
        self.locks = file_system_of(Path(file_path)) not in LOCAL_FILE_SYSTEMS
        """Whether appends take Optuna's lock file (off a local file system)."""
        self._read_fd = os.open(file_path, os.O_RDONLY)
        self._append_fd = os.open(file_path, os.O_WRONLY | os.O_APPEND)
        self._closed = weakref.finalize(self, _close_all, (self._read_fd, self._append_fd))

    def __getstate__(self) -> dict[str, Any]:
        # Descriptors do not cross into another process: it opens its own.
        return {"file_path": self._file_path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["file_path"])  # type: ignore[misc]

    def close(self) -> None:
        """Close the file's descriptors (also done when the backend is collected)."""
        self._closed()

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        start = self._log_number_offset.get(log_number_from)
        if start is None:  # not where a read ended before: Optuna's own reader
            yield from super().read_logs(log_number_from)
            return
        size = os.fstat(self._read_fd).st_size
        if size <= start:
            return
        lines = os.pread(self._read_fd, size - start, start).split(b"\n")
        # The last piece is empty after a newline, or a line still being
        # written: read again next time, as Optuna's reader does.
        complete = len(lines) - 1
        offset, number = start, log_number_from
        for i in range(complete):
            line = lines[i]
            try:
                log = json.loads(line)
            except json.JSONDecodeError:
                if i + 1 < complete or lines[-1]:
                    raise  # a broken line with lines after it: Optuna raises too
                return  # the last line, not yet whole: read again next time
            offset += len(line) + 1
            number += 1
            self._log_number_offset[number] = offset
            yield log

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
        data = text.encode("utf-8")
        if not self.locks:
            self._append(data)
            return
        self._lock.acquire()
        try:
            self._append(data)
        finally:
            self._lock.release()

    def _append(self, data: bytes) -> None:
        # One write() of whole lines, at the end (O_APPEND).
        written = os.write(self._append_fd, data)
        while written < len(data):  # a regular file takes it whole; never wrong to finish
            written += os.write(self._append_fd, data[written:])


LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "zfs", "f2fs"}
)
"""File systems on which an ``O_APPEND`` write is atomic against other appends."""

_MOUNTINFO = Path("/proc/self/mountinfo")


def file_system_of(path: Path) -> str | None:
    """The type of the file system ``path`` is on (``None``: not known, as on
    a system without ``/proc``), from the longest mount point above it."""
    try:
        lines = _MOUNTINFO.read_text().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        # mountinfo escapes space, tab, newline and backslash in octal.
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, right.split()[0]
    return kind


def stamps_on_claim(storage: BaseStorage) -> bool:
    """Whether a worker must stamp a trial's heartbeat as it claims it.

    Optuna's database storages never judge a trial without a stamp stale,
    so a worker that died before its first interval would leave it running
    for ever. :class:`HeartbeatJournalStorage` judges such a trial from its
    start: one write a trial less."""
    return not isinstance(storage, HeartbeatJournalStorage)


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def open_storage(
    storage: str,
    *,
    heartbeat_interval_s: int | None = None,
    retries: int = 3,
    sync: bool = False,
) -> BaseStorage:
    """The Optuna storage ``storage`` names: a database URL, or else the path
    of a journal file (created if missing).

    ``heartbeat_interval_s``: running trials report that often, and one
    silent for three intervals is failed and its parameters queued again
    (at most ``retries`` times); ``None``: no heartbeat (reading a study).
    ``sync``: a journal file is synced to the disk at every change (see
    :class:`UnsyncedJournalFileBackend` for why it is not by default).

    Raises :class:`~bootstorm.models.ConfigError` when it cannot be opened.
    """
    stale_callback = None
    if heartbeat_interval_s is not None:
        stale_callback = _RetryStaleTrial(max_retry=retries)
    if not is_url(storage):
        return _journal_storage(
            storage,
            heartbeat_interval_s=heartbeat_interval_s,
            callback=stale_callback,
            sync=sync,
        )
    return _rdb_storage(storage, heartbeat_interval_s=heartbeat_interval_s, callback=stale_callback)


def _journal_storage(
    storage: str,
    *,
    heartbeat_interval_s: int | None,
    callback: StaleTrialCallback | None,
    sync: bool,
) -> BaseStorage:
    path = Path(storage).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        backend = JournalFileBackend(str(path)) if sync else UnsyncedJournalFileBackend(str(path))
        with open(path, "ab"):  # every worker appends to it: fail now, not mid-trial
            pass
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        if exc.filename is not None and str(exc.filename) != str(path):
            reason += f": {str(exc.filename)!r}"
        raise ConfigError(f"storage: cannot open the journal file {storage!r}: {reason}") from None
    if heartbeat_interval_s is None:
        return JournalStorage(backend)
    return HeartbeatJournalStorage(
        backend,
        heartbeat_interval_s=heartbeat_interval_s,
        grace_period_s=3 * heartbeat_interval_s,
        stale_trial_callback=callback,
    )


_CONNECT_TIMEOUT_S = 10
"""How long to wait for a database server that does not answer (libpq's default: forever)."""

_INIT_LOCK_KEY = 0x6F7074756E61
"""The PostgreSQL advisory lock ("optuna") held while Optuna creates its tables."""


def _rdb_storage(
    url: str, *, heartbeat_interval_s: int | None, callback: StaleTrialCallback | None
) -> BaseStorage:
    import sqlalchemy  # only databases need it (~0.1 s to import)
    from sqlalchemy.engine import make_url

    shown = _shown_url(url)
    try:
        parsed = make_url(url)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        raise ConfigError(f"storage: {shown!r} is not a database URL") from None
    backend, _, driver = parsed.drivername.partition("+")  # no driver: the dialect's default
    engine_kwargs: dict[str, Any] = {}
    sqlite_file: Path | None = None
    if backend == "sqlite":
        # Several local workers write one file: wait for its lock, don't fail.
        engine_kwargs["connect_args"] = {"timeout": 60}
        plain_file = parsed.database not in (None, "", ":memory:") and "uri" not in parsed.query
        if driver in ("", "pysqlite") and plain_file:
            sqlite_file = Path(str(parsed.database)).expanduser().absolute()
    else:
        engine_kwargs["pool_pre_ping"] = True
        if backend == "postgresql" and "connect_timeout" not in parsed.query:
            engine_kwargs["connect_args"] = {"connect_timeout": _CONNECT_TIMEOUT_S}
    try:
        # Two workers starting on a new database both found no table and one
        # crashed creating them: Optuna creates them under a lock (the
        # directory's on SQLite, an advisory lock on PostgreSQL). Taking it
        # also tells an unreachable server, an unknown scheme or a missing
        # driver in one line.
        with contextlib.ExitStack() as held:
            if sqlite_file is not None:
                held.enter_context(_directory_lock(sqlite_file.parent))
            probe = sqlalchemy.create_engine(
                url, poolclass=sqlalchemy.pool.NullPool, **engine_kwargs
            )
            held.callback(probe.dispose)
            connection = held.enter_context(probe.connect())
            if backend == "postgresql":
                connection.execute(sqlalchemy.text(f"SELECT pg_advisory_lock({_INIT_LOCK_KEY})"))
                connection.commit()  # the lock is the session's: closing it lets go
            elif sqlite_file is not None:
                # Persistent, and only switched while no other worker has it open.
                connection.exec_driver_sql("PRAGMA journal_mode=WAL")
                connection.close()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=heartbeat_interval_s,
                    grace_period=None if heartbeat_interval_s is None else 3 * heartbeat_interval_s,
                    heartbeat_stale_trial_callback=callback,
                )
    except (
        sqlalchemy.exc.SQLAlchemyError,
        ImportError,
        OSError,
        optuna.exceptions.StorageInternalError,
    ) as exc:
        raise ConfigError(f"storage: cannot open {shown!r}: {_reason(exc)}") from None
    if backend == "sqlite" and driver in ("", "pysqlite"):
        sqlalchemy.event.listen(storage.engine, "connect", _sqlite_connect)
        sqlalchemy.event.listen(storage.engine, "begin", _sqlite_begin)
        storage.engine.dispose()  # so that every connection from now on is one of those
    return storage


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` (not on the database file:
    closing a descriptor of that file would drop SQLite's own POSIX locks)."""
    import fcntl

    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # lets go of the lock


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Python's sqlite3 (before 3.12) begins a transaction only at the first
    # INSERT or UPDATE: the SELECT before it runs outside any. Optuna reads,
    # then writes what it read decided (is the trial still WAITING? run it),
    # so two workers both popped one queued trial, and one crashed telling it.
    # The driver's own BEGIN is off; _sqlite_begin takes the write lock at the
    # start of every transaction, so the read and its write are one step
    # (another worker waits for it: the connection's timeout).
    dbapi_connection.isolation_level = None
    # A commit does not wait for fsync (~0.2 s a trial on this project's
    # disk); with WAL the file stays consistent if a worker is killed, and
    # readers (the dashboard) run beside the writer. Only an OS crash may
    # lose the last trials, which a resumed study runs again.
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def _sqlite_begin(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _shown_url(url: str) -> str:
    """``url`` without its password, for a message, also when it does not parse."""
    try:
        return safe_storage_name(url) or url
    except Exception:  # too broken to parse: show what follows the credentials
        return url.rpartition("@")[2]


def _reason(exc: BaseException) -> str:
    """The driver's own first line (what the user can act on), not the wrapping."""
    cause: BaseException | None = exc
    while cause is not None and not hasattr(cause, "orig") and cause.__cause__ is not None:
        cause = cause.__cause__  # Optuna wraps SQLAlchemy's errors in its own
    orig = getattr(cause, "orig", None)
    if isinstance(cause, OSError) and cause.strerror:
        return f"{cause.strerror}: {str(cause.filename)!r}" if cause.filename else cause.strerror
    text = str(orig if orig is not None else cause)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first or exc.__class__.__name__


def safe_storage_name(storage: str | None) -> str | None:
    """``storage`` without a database URL's password (a tuned config is shared
    and committed); a journal file's path as given."""
    if storage is None or not is_url(storage):
        return storage
    from sqlalchemy.engine import make_url

    return make_url(storage).render_as_string(hide_password=True)
