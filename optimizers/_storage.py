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
missing driver, a directory that cannot be written, a journal path that is a
device, a FIFO or a directory) is a :class:`~bootstorm.models.ConfigError`
naming ``storage`` and the reason, so the CLI prints one line, not a driver's
traceback.

**A damaged journal.** A full disk, a killed writer or a hand's edit can
leave a journal ending in a torn line (no newline), a line that is not an
Optuna record, or garbage. Optuna's reader then fails on every later open,
and appending after the damage merges the next record into it: the study's
completed trials could no longer be read at all. So opening a journal for
writing (:func:`repair_journal`) keeps every whole record before the first
damaged line, moves everything from that line on into
``<journal>.corrupt-<UTC time>`` beside it (synced before the journal is
cut), truncates the journal back to its last good line, logs one WARNING
line (logger ``bootstorm.optimizers._storage``) and goes on.

Whole records *after* a damaged line are set aside with it, not kept: the
journal is a log of operations that refer to each other by position (the
n-th ``create_trial`` record is trial n, later records name trials and
studies by those numbers), so once a record is lost every later one may
mean something else: a lost ``create_trial`` would hand the next trial's
values to the one before. The set-aside file keeps them for a person to
look at; the warning says how many whole records it holds. Reading a study
(``open_storage(..., read_only=True)``, what ``report`` does) changes
nothing: it reads the whole records before the damage.

**Appends are whole lines or nothing.** One ``write`` of whole lines; a
short write or a refused one (``ENOSPC``, ``EDQUOT``) is taken back with
``ftruncate`` to where it began and is a one-line ``ConfigError`` naming the
journal, so no torn tail is left for the next worker. Several workers append
to the file at once (``O_APPEND``), so a worker may cut only its own bytes:
appends hold a shared ``flock`` on the journal (Optuna's lock file off a
local file system), and taking back and repairing hold it exclusively (and
Optuna's lock file, which Optuna's own writers take); under it a worker cuts
its piece only when the file ends exactly where its own write ended (a
writer outside both locks may have appended since: then it cuts nothing,
and the next open sets the damage aside).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import logging
import os
import re
import stat
import time
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from ..models import ConfigError
from ..traces.files import shown_path

__all__ = [
    "HEARTBEAT_ATTR",
    "LOCAL_FILE_SYSTEMS",
    "PROCESS_ATTR",
    "HeartbeatJournalStorage",
    "JournalDamage",
    "UnsyncedJournalFileBackend",
    "file_system_of",
    "is_url",
    "open_storage",
    "prepare_journal",
    "repair_journal",
    "safe_storage_name",
    "scan_journal",
    "stamps_on_claim",
]

log = logging.getLogger(__name__)

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
    made before. Pass ``sync=True`` (here or to :func:`open_storage`) to sync
    every append, as Optuna's own backend does.

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
    There an append holds a shared ``flock`` instead (two system calls),
    which only a worker taking back a failed write, or repairing the file,
    holds exclusively (see the module's doc).

    ``read_only``: no descriptor to append with (a journal that may not be
    written, as ``report`` reads it), and reads stop at ``read_upto`` bytes
    (the whole records before a damaged line, see :func:`scan_journal`).

    A path that is not a regular file (``/dev/null``, a FIFO, a directory)
    is a :class:`~bootstorm.models.ConfigError`: a device swallowed the
    appends, and Optuna then failed with an ``AssertionError``; a FIFO hung.
    """

    def __init__(
        self,
        file_path: str,
        *,
        sync: bool = False,
        read_only: bool = False,
        read_upto: int | None = None,
    ) -> None:
        # Made here if missing (unless only read), and checked before Optuna's
        # own open, which would wait on a FIFO for ever.
        create = 0 if read_only else os.O_CREAT
        self._read_fd = _open_regular(file_path, os.O_RDONLY | create)
        self._append_fd = -1
        self._closed = weakref.finalize(self, _close_all, (self._read_fd,))
        self._sync = sync
        self._read_only = read_only
        self._read_upto = read_upto
        super().__init__(file_path)  # Optuna's symlink lock, as self._lock
        self.locks = file_system_of(Path(file_path)) not in LOCAL_FILE_SYSTEMS
        """Whether appends take Optuna's lock file (off a local file system)."""
        if not read_only:
            self._append_fd = _open_regular(file_path, os.O_WRONLY | os.O_APPEND)
            self._closed.detach()
            self._closed = weakref.finalize(self, _close_all, (self._read_fd, self._append_fd))

    def __getstate__(self) -> dict[str, Any]:
        # Descriptors do not cross into another process: it opens its own.
        return {
            "file_path": self._file_path,
            "sync": self._sync,
            "read_only": self._read_only,
            "read_upto": self._read_upto,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["file_path"],
            sync=state.get("sync", False),
            read_only=state.get("read_only", False),
            read_upto=state.get("read_upto"),
        )

    def close(self) -> None:
        """Close the file's descriptors (also done when the backend is collected)."""
        self._closed()

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        start = self._log_number_offset.get(log_number_from)
        if start is None:  # not where a read ended before: Optuna's own reader
            yield from super().read_logs(log_number_from)
            return
        size = os.fstat(self._read_fd).st_size
        if self._read_upto is not None:
            size = min(size, self._read_upto)
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
        if self._read_only:
            raise ConfigError(f"storage: the journal {self._file_path!r} was opened to read only")
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
        data = text.encode("utf-8")
        if not self.locks:
            fcntl.flock(self._append_fd, fcntl.LOCK_SH)  # a repair waits for it
            try:
                self._append(data)
            finally:
                fcntl.flock(self._append_fd, fcntl.LOCK_UN)
            return
        self._lock.acquire()
        try:
            self._append(data)
        finally:
            self._lock.release()

    def _append(self, data: bytes) -> None:
        # One write() of whole lines, at the end (O_APPEND). A regular file
        # takes it whole unless it cannot (no space, a quota, a fatal signal):
        # not finished by a second write, which another worker's line could
        # precede, but taken back, so that no torn line is left.
        try:
            written = os.write(self._append_fd, data)
        except OSError as exc:  # nothing written
            raise self._refused(exc.strerror or str(exc)) from None
        if written < len(data):
            end = os.lseek(self._append_fd, 0, os.SEEK_CUR)  # where our piece ends
            taken_back = self._take_back(start=end - written, end=end)
            raise self._refused(
                f"only {written:,} of {len(data):,} bytes written (no space or quota left)",
                taken_back=taken_back,
            )
        if self._sync:
            os.fsync(self._append_fd)

    def _take_back(self, *, start: int, end: int) -> bool:
        """Cut the file back to ``start`` if it still ends at ``end`` (nobody
        appended after our piece), holding every writer off meanwhile."""
        if not self.locks:
            # Shared to exclusive (not atomic: another append may slip in
            # between, and the size check below sees it).
            fcntl.flock(self._append_fd, fcntl.LOCK_EX)
        if os.fstat(self._append_fd).st_size != end:
            return False
        os.ftruncate(self._append_fd, start)
        return True

    def _refused(self, reason: str, *, taken_back: bool = True) -> ConfigError:
        what = (
            "the change was not written"
            if taken_back
            else "another writer appended after the torn piece, which the next open sets aside"
        )
        return ConfigError(
            f"storage: cannot append to the journal {self._file_path!r}: {reason}; {what}"
        )


def _open_regular(path: str, flags: int) -> int:
    """A descriptor of ``path``, which must be a regular file (``O_NONBLOCK``:
    a FIFO is refused, not waited on; it changes nothing for a regular file)."""
    with contextlib.suppress(FileNotFoundError):  # what it is, before an open's errno
        _refuse_irregular(path, os.stat(path).st_mode)
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    try:
        _refuse_irregular(path, os.fstat(fd).st_mode)  # swapped in since the stat
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refuse_irregular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise ConfigError(
            f"storage: {path!r} is {_kind_of(mode)}, not a journal file; "
            "name a file (or a database URL, or 'memory')"
        )


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


@dataclass(frozen=True, kw_only=True, slots=True)
class JournalDamage:
    """Where a journal stops being whole Optuna records (:func:`scan_journal`)."""

    good_bytes: int
    """The length of the whole records before the damage (where the journal is cut)."""
    good_records: int
    """Whole records before the damage (kept)."""
    size_bytes: int
    """The file's size when it was scanned."""
    torn_tail: bool
    """The damage is only a last line without its newline (a write cut short,
    or one still being written when read without the lock)."""
    records_after: int
    """Whole records after the first damaged line (set aside with it)."""

    def what(self) -> str:
        if self.torn_tail:
            return "its last line has no newline (a torn write)"
        return "a line is not an Optuna journal record"


def _is_record(line: bytes) -> bool:
    """A line Optuna's replay can apply: a JSON object naming its operation and worker."""
    try:
        log = json.loads(line)
    except ValueError:  # not JSON, or not UTF-8
        return False
    return (
        isinstance(log, dict)
        and type(log.get("op_code")) is int
        and log["op_code"] in _OP_CODES
        and isinstance(log.get("worker_id"), str)
    )


_OP_CODES = frozenset(int(op) for op in optuna.storages.journal._storage.JournalOperation)


def scan_journal(fd: int) -> JournalDamage | None:
    """The first damage in the journal open as ``fd`` (``None``: every line is
    a whole record), read with ``pread`` a mebibyte at a time (not mapped: a
    writer taking back its torn write would cut a mapping short under us)."""
    return _scan(fd, start=0, records=0)[0]


def _scan(fd: int, *, start: int, records: int) -> tuple[JournalDamage | None, int, int]:
    """:func:`scan_journal` from byte ``start``, after ``records`` whole
    records known good; also the whole records' length and number."""
    size = os.fstat(fd).st_size
    good = start
    after = 0
    damaged = torn = False
    for offset, line, whole in _lines(fd, size, start=start):
        if not damaged:
            if whole and _is_record(line):
                records += 1
                good = offset + len(line) + 1
                continue
            damaged, torn = True, not whole
        elif whole:
            after += _is_record(line)  # set aside with the damage: count them
    if not damaged:
        return None, good, records
    damage = JournalDamage(
        good_bytes=good,
        good_records=records,
        size_bytes=size,
        torn_tail=torn,
        records_after=after,
    )
    return damage, good, records


_VERIFIED: dict[tuple[int, int], tuple[int, int, bytes]] = {}
"""Per journal file (device, inode) this process repaired: the length and
number of the whole records it found, and their last 64 bytes (which name a
worker's random id: another file on a reused inode does not end the same).
A search checks its journal before it starts and opens it again at once;
the second look reads only what was appended since. Those bytes never
change under it: an append only adds, a worker takes back only its own torn
write after them, and a repair cuts only at damage, which whole records are
not. (A journal rewritten in place by hand while a search runs is not seen.)"""


_CHUNK_BYTES = 1 << 20


def _lines(fd: int, size: int, *, start: int = 0) -> Iterator[tuple[int, bytes, bool]]:
    """Each line of ``fd``'s bytes from ``start`` to ``size``: its offset, its
    bytes without the newline, and whether it had one (only the last may not)."""
    buf = bytearray()
    base, pos = start, 0  # the file offset of buf[0]; where the next line starts in buf
    searched = 0  # buf before this holds no newline after pos
    read_to = start
    while True:
        nl = buf.find(b"\n", max(pos, searched))
        if nl >= 0:
            yield base + pos, bytes(buf[pos:nl]), True
            pos = searched = nl + 1
            continue
        del buf[:pos]  # once per chunk: the lines before are done
        base, searched, pos = base + pos, len(buf), 0  # what is left has no newline
        if read_to >= size:
            break
        chunk = os.pread(fd, min(_CHUNK_BYTES, size - read_to), read_to)
        if not chunk:
            break  # cut short since the size was taken
        read_to += len(chunk)
        buf += chunk
    if buf:
        yield base, bytes(buf), False


def repair_journal(path: Path) -> Path | None:
    """Set aside a damaged tail of the journal at ``path`` (see the module's
    doc); the file it went to, or ``None`` if the journal was whole.

    Holds Optuna's lock file and an exclusive ``flock`` (every append of
    :class:`UnsyncedJournalFileBackend` holds it shared), so no writer is
    mid-append while the file is judged and cut. The set-aside file is
    written and synced before the journal is cut: a crash in between leaves
    the damage in both, never in neither. Logs one WARNING line.
    """
    fd = _open_regular(str(path), os.O_RDWR)
    lock = JournalFileSymlinkLock(str(path))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        lock.acquire()
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            start, records, last = _VERIFIED.get(key, (0, 0, b""))
            if start > st.st_size or os.pread(fd, len(last), start - len(last)) != last:
                start, records = 0, 0  # cut, or another file on a reused inode
            damage, good, records = _scan(fd, start=start, records=records)
            _VERIFIED[key] = (good, records, os.pread(fd, min(good, 64), good - min(good, 64)))
            if damage is None:
                return None
            if damage.good_records == 0 and not (damage.torn_tail and os.pread(fd, 1, 0) == b"{"):
                # Not a journal whose tail was damaged but no journal at all (a
                # file named by mistake): "repairing" it would move all of it
                # aside and write a study where it was.
                raise ConfigError(
                    f"storage: {str(path)!r} is not an Optuna journal (its first line is no "
                    "journal record); name a new file or an existing journal"
                )
            try:
                aside = _set_aside(fd, path, damage)
            except OSError as exc:  # a full disk, most likely: cut nothing
                raise ConfigError(
                    f"storage: the journal {str(path)!r} is damaged at byte "
                    f"{damage.good_bytes:,}, where {damage.what()}, and the damage cannot be "
                    f"set aside ({exc.strerror or exc}); free some space and run again"
                ) from None
            os.ftruncate(fd, damage.good_bytes)
            os.fsync(fd)
        finally:
            lock.release()
    finally:
        os.close(fd)  # lets go of the flock
    after = (
        f", {damage.records_after:,} whole records after the damage among them "
        "(a journal's records refer to earlier ones by position)"
        if damage.records_after
        else ""
    )
    log.warning(
        "storage: the journal %s was damaged at byte %s, where %s; kept its %s whole "
        "records before it and moved the %s bytes from there on into %s%s",
        path,
        f"{damage.good_bytes:,}",
        damage.what(),
        f"{damage.good_records:,}",
        f"{damage.size_bytes - damage.good_bytes:,}",
        aside.name,
        after,
    )
    return aside


def _set_aside(fd: int, path: Path, damage: JournalDamage) -> Path:
    """Copy the journal's bytes from the damage on into a new
    ``<journal>.corrupt-<UTC time>`` beside it, synced."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    for n in range(100):
        aside = path.with_name(f"{path.name}.corrupt-{stamp}" + (f"-{n}" if n else ""))
        try:
            out = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - a hundred repairs in one microsecond
        raise ConfigError(f"storage: cannot name a file to set {str(path)!r}'s damage aside in")
    try:
        offset = damage.good_bytes
        while offset < damage.size_bytes:
            chunk = os.pread(fd, min(1 << 20, damage.size_bytes - offset), offset)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            offset += len(chunk)
        os.fsync(out)
    except BaseException:
        os.close(out)
        aside.unlink(missing_ok=True)
        raise
    os.close(out)
    return aside


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
    read_only: bool = False,
) -> BaseStorage:
    """The Optuna storage ``storage`` names: a database URL, or else the path
    of a journal file (created if missing; a damaged tail set aside, see
    :func:`repair_journal`).

    ``heartbeat_interval_s``: running trials report that often, and one
    silent for three intervals is failed and its parameters queued again
    (at most ``retries`` times); ``None``: no heartbeat (reading a study).
    ``sync``: a journal file is synced to the disk at every change (see
    :class:`UnsyncedJournalFileBackend` for why it is not by default).
    ``read_only``: only read the study (``report``): a journal is neither
    created, nor repaired, nor written (one that may not be written opens),
    and a SQLite file that does not exist is refused, not created.

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
            read_only=read_only,
        )
    return _rdb_storage(
        storage,
        heartbeat_interval_s=heartbeat_interval_s,
        callback=stale_callback,
        read_only=read_only,
    )


def _journal_storage(
    storage: str,
    *,
    heartbeat_interval_s: int | None,
    callback: StaleTrialCallback | None,
    sync: bool,
    read_only: bool,
) -> BaseStorage:
    path = Path(storage).expanduser()
    try:
        if read_only:
            backend = _read_only_backend(path)
        else:
            prepare_journal(path)
            backend = UnsyncedJournalFileBackend(str(path), sync=sync)
    except OSError as exc:
        raise _cannot_open(storage, path, exc) from None
    if heartbeat_interval_s is None:
        return JournalStorage(backend)
    return HeartbeatJournalStorage(
        backend,
        heartbeat_interval_s=heartbeat_interval_s,
        grace_period_s=3 * heartbeat_interval_s,
        stale_trial_callback=callback,
    )


def prepare_journal(path: Path) -> None:
    """Make the journal file at ``path`` (and its folder) if missing, check it
    is a regular file this process may append to (fail now, not mid-trial),
    and set a damaged tail aside (:func:`repair_journal`) before anything is
    appended. A search does this before it starts (so that a refusal or the
    repair's line comes before its progress bar), and every open again (a
    worker may start on its own).

    Raises :class:`~bootstorm.models.ConfigError` naming what is wrong.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(_open_regular(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT))
        repair_journal(path)
    except OSError as exc:
        raise _cannot_open(str(path), path, exc) from None


def _cannot_open(storage: str, path: Path, exc: OSError) -> ConfigError:
    reason = exc.strerror or exc.__class__.__name__
    if exc.filename is not None and str(exc.filename) != str(path):
        reason += f": {str(exc.filename)!r}"
    return ConfigError(f"storage: cannot open the journal file {storage!r}: {reason}")


def _read_only_backend(path: Path) -> UnsyncedJournalFileBackend:
    """A backend reading the whole records of ``path`` before any damage,
    and writing nothing (the damage is left for a writer to set aside)."""
    fd = _open_regular(str(path), os.O_RDONLY)
    try:
        # Shared: a writer taking back a torn write (exclusive) waits for the scan.
        fcntl.flock(fd, fcntl.LOCK_SH)
        damage = scan_journal(fd)
    finally:
        os.close(fd)
    if damage is not None and damage.good_records == 0 and not damage.torn_tail:
        # Not one record before the damage: not a journal at all (a log file,
        # a file named by mistake); nothing to read, nothing to say but that.
        raise ConfigError(
            f"storage: {shown_path(path)} is not an Optuna journal (its first line is no "
            "journal record)"
        )
    if damage is not None and not damage.torn_tail:
        # A torn last line may be a write still under way: read up to it, say nothing.
        log.warning(
            "storage: the journal %s is damaged at byte %s, where %s; reading its %s whole "
            "records before it (the next search on it sets the damage aside)",
            path,
            f"{damage.good_bytes:,}",
            damage.what(),
            f"{damage.good_records:,}",
        )
    upto = None if damage is None else damage.good_bytes
    return UnsyncedJournalFileBackend(str(path), read_only=True, read_upto=upto)


_CONNECT_TIMEOUT_S = 10
"""How long to wait for a database server that does not answer (libpq's default: forever)."""

_INIT_LOCK_KEY = 0x6F7074756E61
"""The PostgreSQL advisory lock ("optuna") held while Optuna creates its tables."""


def _rdb_storage(
    url: str,
    *,
    heartbeat_interval_s: int | None,
    callback: StaleTrialCallback | None,
    read_only: bool = False,
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
        if parsed.database in (None, "", ":memory:"):
            # Each connection would open a database of its own, empty: the
            # study's tables made on one were missing on the next.
            raise ConfigError(
                f"storage: {shown!r} names no database file (an in-memory SQLite database "
                "lives as long as one connection); give sqlite:///path/to/study.db"
            )
        # Several local workers write one file: wait for its lock, don't fail.
        engine_kwargs["connect_args"] = {"timeout": 60}
        plain_file = parsed.database not in (None, "", ":memory:") and "uri" not in parsed.query
        if driver in ("", "pysqlite") and plain_file:
            sqlite_file = Path(str(parsed.database)).expanduser().absolute()
            if read_only and not sqlite_file.is_file():
                # SQLite would make an empty database, and Optuna its tables in it.
                raise ConfigError(f"storage: no such database {str(sqlite_file)!r}")
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
