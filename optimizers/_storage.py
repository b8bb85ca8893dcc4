"""Where a study lives: a journal file (the default), a database URL, or memory.

A search's trial costs a few milliseconds of simulation. Optuna's RDB layer
(SQLite by default before) cost about six times that per trial: it reads the
whole study several times a trial through SQLAlchemy. Its journal storage
appends each change to a file as one JSON line and keeps the study in
memory, replaying only the lines other workers added: per trial it costs
about a tenth of the simulation. It survives a killed worker (appends are
whole lines under a file lock, and a lock left by a dead worker expires), and
several worker processes (or machines, on NFS) share one file;
optuna-dashboard reads it (``optuna-dashboard study.log``).

Optuna's journal storage has no heartbeat, so :class:`HeartbeatJournalStorage`
adds one: each running trial stamps the time into its system attributes
every ``heartbeat_interval_s``, and a running trial whose last stamp is older
than the grace period is failed and retried by the next worker, as on a
database. PostgreSQL (``postgresql://...``) remains the storage for many
machines without a shared file system; ``sqlite:///...`` URLs still open
studies written before the journal became the default.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "HEARTBEAT_ATTR",
    "HeartbeatJournalStorage",
    "UnsyncedJournalFileBackend",
    "is_url",
    "open_storage",
    "safe_storage_name",
]

HEARTBEAT_ATTR = "bootstorm:heartbeat"
"""The trial system attribute a journal study's heartbeat stamps (Unix time, s)."""

StaleTrialCallback = Callable[[Study, FrozenTrial], None]


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
    """A journal file whose appends are not forced to the disk (no ``fsync``).

    Optuna's backend syncs every change, about nine a trial: on this
    project's disk that was 0.4 ms each, a fifth of the simulation. Without
    it a killed worker still loses nothing (what it wrote is in the kernel's
    page cache, whole lines, appended under the file lock in one ``write``);
    only an operating-system crash may lose the last trials, which running
    the study again redoes: the trade SQLite's WAL with ``synchronous=NORMAL``
    made before. Pass ``sync=True`` to :func:`open_storage` for Optuna's own.
    """

    def __init__(self, file_path: str) -> None:
        self._append_lock = JournalFileSymlinkLock(file_path)
        self._append_path = file_path
        super().__init__(file_path, lock_obj=self._append_lock)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
        self._append_lock.acquire()
        try:
            # Unbuffered: one write() of whole lines, at the end (O_APPEND).
            with open(self._append_path, "ab", buffering=0) as f:
                f.write(text.encode("utf-8"))
        finally:
            self._append_lock.release()


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
    """
    stale_callback = None
    if heartbeat_interval_s is not None:
        with warnings.catch_warnings():  # "experimental" since Optuna 2.8, stable in use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            stale_callback = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=retries)
    if not is_url(storage):
        path = Path(storage).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        backend = JournalFileBackend(str(path)) if sync else UnsyncedJournalFileBackend(str(path))
        if heartbeat_interval_s is None:
            return JournalStorage(backend)
        return HeartbeatJournalStorage(
            backend,
            heartbeat_interval_s=heartbeat_interval_s,
            grace_period_s=3 * heartbeat_interval_s,
            stale_trial_callback=stale_callback,
        )
    return _rdb_storage(storage, heartbeat_interval_s=heartbeat_interval_s, callback=stale_callback)


def _rdb_storage(
    url: str, *, heartbeat_interval_s: int | None, callback: StaleTrialCallback | None
) -> BaseStorage:
    import sqlalchemy  # only databases need it (~0.1 s to import)

    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Several local workers write one file: wait for its lock, don't fail.
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(
            url,
            engine_kwargs=engine_kwargs,
            heartbeat_interval=heartbeat_interval_s,
            grace_period=None if heartbeat_interval_s is None else 3 * heartbeat_interval_s,
            heartbeat_stale_trial_callback=callback,
        )
    if url.startswith("sqlite"):
        sqlalchemy.event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()  # so that every connection from now on has them
    return storage


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # A trial commits a few times; with SQLite's default rollback journal and
    # synchronous=FULL each commit waits for fsync (~0.2 s a trial on this
    # project's disk, as long as the simulation). WAL with synchronous=NORMAL
    # stays consistent if a worker is killed and lets readers (the dashboard,
    # other workers) run beside the writer; only an OS crash may lose the last
    # trials, which a resumed study runs again.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def safe_storage_name(storage: str | None) -> str | None:
    """``storage`` without a database URL's password (a tuned config is shared
    and committed); a journal file's path as given."""
    if storage is None or not is_url(storage):
        return storage
    from sqlalchemy.engine import make_url

    return make_url(storage).render_as_string(hide_password=True)
