"""What an agent keeps across restarts: the config in force, and where it came from.

A ``PUT /config`` is written here (temp file, fsync, rename, fsync of the
directory) before it is applied and answered, so a 200 means the config
survives a crash or a reboot; a restarted agent comes back with it, its
generation continuing.

Which config wins at start-up (:func:`resolve_startup`)::

    a push saved after the start-up file was last modified   -> the push
    the start-up file edited after the last push, or
    ``--force-config``, or a config handed to serve() in code -> the file
    no start-up file                                          -> what was saved
    nothing saved, no file                                    -> the default

Why: the last thing the operator did wins. A node's unit file keeps naming
the same ``--config``; a fleet push after it must not be undone by the next
restart (the bug this module fixes), but an operator who edits that file and
restarts the agent means the edit. ``--force-config`` says so explicitly
when the file is older (a restored backup, ``cp -p``).

One file per pool id (``pool-<id>.config.json``), as two agents on one host
run with two pool ids; an agent holds its pool id's owner lock before it
writes here. A file that cannot be read as a saved config (torn by a full
disk, hand-edited, a newer format, not a regular file) is renamed
``<name>.corrupt-<UTC time>`` with one log line, and the agent starts as if
nothing were saved: never a crash, never a silently different config.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from ...models import ConfigError, TunedConfig
from ...models._yaml import read_bytes_bounded

__all__ = [
    "CONFIG_SOURCES",
    "MAX_GENERATION",
    "MAX_STATE_BYTES",
    "STATE_FORMAT",
    "ConfigSource",
    "ConfigStore",
    "SavedConfig",
    "StartupConfig",
    "default_state_dir",
    "resolve_startup",
]

log = logging.getLogger(__name__)

#: Where the config in force came from: the built-in default (no limits, no
#: pools), a start-up file (``--config``), or a ``PUT /config``.
ConfigSource = Literal["default", "file", "push"]
CONFIG_SOURCES: tuple[str, ...] = get_args(ConfigSource)
#: The saved file's format tag; another tag is read as damage (set aside).
STATE_FORMAT = "bootstorm-agent-config/1"
#: Largest saved file read back (bytes): a config body is at most 64 KiB, and
#: its JSON dump with the record's fields fits many times over.
MAX_STATE_BYTES = 1024 * 1024
#: A generation beyond this in a saved file is damage: at one push a
#: millisecond it takes 285 000 years to get there, and it stays an exact
#: float for any JSON reader (2**53).
MAX_GENERATION = 2**53

#: A root agent's state directory (systemd's ``StateDirectory=`` wins when set).
ROOT_STATE_DIR = Path("/var/lib/bootstorm-agent")


def default_state_dir() -> Path:
    """``$STATE_DIRECTORY`` (systemd ``StateDirectory=``; its first entry), else
    :data:`ROOT_STATE_DIR` for root, else ``$XDG_STATE_HOME/bootstorm/agent``
    (``~/.local/state/bootstorm/agent``): all of them survive a reboot, unlike
    the run directory of the owner locks."""
    systemd = os.environ.get("STATE_DIRECTORY", "")
    if systemd.split(":")[0]:
        return Path(systemd.split(":")[0])
    if os.geteuid() == 0:
        return ROOT_STATE_DIR
    xdg = os.environ.get("XDG_STATE_HOME", "")
    # The XDG spec: a relative value is invalid and must be ignored.
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "bootstorm" / "agent"


@dataclass(frozen=True, kw_only=True)
class StartupConfig:
    """The config an agent is started with, and what it knows of its file."""

    config: TunedConfig
    #: The ``--config`` file it was read from; None: given in code.
    path: Path | None = None
    #: That file's last modification (wall clock, s); None: "now" (wins over a push).
    modified_at_s: float | None = None
    #: Win over a saved push even if the push is newer (``--force-config``).
    force: bool = False


@dataclass(frozen=True, kw_only=True)
class SavedConfig:
    """The config in force with its generation and origin, as saved on disk."""

    config: TunedConfig
    generation: int
    source: ConfigSource
    #: The start-up file's path when ``source`` is ``"file"`` (for the log and /healthz).
    file: str | None = None
    #: When it was saved (wall clock, s): compared with a start-up file's mtime.
    saved_at_s: float
    #: Read back from the state directory at start-up (not told this run).
    restored: bool = False

    def to_json(self) -> bytes:
        record = {
            "format": STATE_FORMAT,
            "generation": self.generation,
            "source": self.source,
            "file": self.file,
            "saved_at_s": self.saved_at_s,
            "config": self.config.model_dump(mode="json"),
        }
        return (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes) -> SavedConfig:
        """The record in ``raw``; ValueError (its reason, never the file's values) if damaged."""
        try:
            data: Any = json.loads(raw)
        except RecursionError:
            raise ValueError("nested too deeply") from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise ValueError(f"not JSON ({type(exc).__name__} at {_where(exc)})") from None
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        expected = {"format", "generation", "source", "file", "saved_at_s", "config"}
        if set(data) != expected:
            raise ValueError(f"expected the fields {sorted(expected)}")
        if data["format"] != STATE_FORMAT:
            raise ValueError(f"format: expected {STATE_FORMAT!r}")
        generation, source, file, saved_at_s = (
            data["generation"],
            data["source"],
            data["file"],
            data["saved_at_s"],
        )
        if type(generation) is not int or not 1 <= generation <= MAX_GENERATION:
            raise ValueError(f"generation: expected an integer within 1..{MAX_GENERATION}")
        if source not in CONFIG_SOURCES:
            raise ValueError(f"source: expected one of {', '.join(CONFIG_SOURCES)}")
        if file is not None and not isinstance(file, str):
            raise ValueError("file: expected a path or null")
        if type(saved_at_s) not in (int, float) or not math.isfinite(saved_at_s):
            raise ValueError("saved_at_s: expected a finite number")
        if not isinstance(data["config"], dict):
            raise ValueError("config: expected a mapping")
        problems = TunedConfig.problems(data["config"])
        if problems is not None:
            # The fields only: a hand-edited file's values stay out of the log.
            fields = sorted({".".join(str(p) for p in e["loc"]) for e in problems.errors()})
            raise ValueError(f"config: not a valid tuned config (fields {', '.join(fields[:5])})")
        return cls(
            config=TunedConfig(**data["config"]),
            generation=generation,
            source=source,
            file=file,
            saved_at_s=float(saved_at_s),
        )


def _where(exc: ValueError) -> str:
    pos = getattr(exc, "pos", None)
    if pos is None:
        pos = getattr(exc, "start", None)
    return f"offset {pos}" if pos is not None else "?"


class ConfigStore:
    """The saved config of one pool id in ``directory``."""

    def __init__(self, directory: Path, pool_id: int) -> None:
        self.directory = directory
        self.path = directory / f"pool-{pool_id}.config.json"

    def prepare(self) -> None:
        """Make the directory (mode 700) and check this user may write it:
        ConfigError naming ``state-dir`` if not, before the agent listens."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"state-dir: cannot create {str(self.directory)!r} ({exc.strerror or exc})"
            ) from None
        if not self.directory.is_dir():
            raise ConfigError(f"state-dir: {str(self.directory)!r} is not a directory")
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise ConfigError(
                f"state-dir: {str(self.directory)!r} is not writable by this user "
                "(the agent saves the config in force there)"
            )

    def load(self) -> SavedConfig | None:
        """The saved config, None if there is none or it was damaged (then set
        aside, one log line); ConfigError if the file cannot be read or moved."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(
                f"state-dir: cannot read {str(self.path)!r} ({exc.strerror or exc})"
            ) from None
        if not stat.S_ISREG(st.st_mode):
            # Never opened: a FIFO would block, a device never end.
            self._set_aside("not a regular file")
            return None
        try:
            raw = read_bytes_bounded(self.path, max_bytes=MAX_STATE_BYTES)
        except ConfigError as exc:
            if st.st_size <= MAX_STATE_BYTES:
                raise ConfigError(f"state-dir: {exc}") from None
            self._set_aside(f"larger than {MAX_STATE_BYTES} bytes")
            return None
        try:
            saved = SavedConfig.from_json(raw)
        except ValueError as exc:
            self._set_aside(str(exc))
            return None
        return SavedConfig(
            config=saved.config,
            generation=saved.generation,
            source=saved.source,
            file=saved.file,
            saved_at_s=saved.saved_at_s,
            restored=True,
        )

    def _set_aside(self, reason: str) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        try:
            os.replace(self.path, aside)
        except OSError as exc:
            raise ConfigError(
                f"state-dir: {str(self.path)!r} is damaged ({reason}) and cannot be set "
                f"aside ({exc.strerror or exc}); move it away to start"
            ) from None
        log.warning(
            "saved config %s is damaged (%s): set aside as %s; starting without it",
            self.path,
            reason,
            aside.name,
        )

    def remove_stale_temps(self) -> None:
        """Remove temp files a killed agent left half-written (never renamed into place)."""
        for temp in self.directory.glob(f"{self.path.name}.tmp-*"):
            # Harmless if it stays: never read; the next start tries again.
            with contextlib.suppress(OSError):
                temp.unlink()

    def save(self, saved: SavedConfig) -> None:
        """Write ``saved`` whole or not at all: a temp file, fsync, rename over
        the old one, fsync of the directory (so the rename survives a power
        cut). OSError if any step fails; the old file is then untouched."""
        temp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        data = saved.to_json()
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:  # a short write (a full disk) raises on the next call
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def resolve_startup(
    saved: SavedConfig | None, startup: StartupConfig | None, *, now_s: float
) -> tuple[SavedConfig, str]:
    """The config an agent starts with (the module doc's table) and one line
    saying why, for the log. The generation continues from ``saved``: the same
    config keeps its number, a different one takes the next."""
    if startup is None:
        if saved is not None:
            return saved, f"restored the saved config (generation {saved.generation})"
        return (
            SavedConfig(config=TunedConfig(), generation=1, source="default", saved_at_s=now_s),
            "no config given and none saved: no limits, no pools",
        )
    shown = str(startup.path) if startup.path is not None else "the given config"
    if saved is not None and saved.source == "push" and not startup.force:
        modified_s = startup.modified_at_s if startup.modified_at_s is not None else now_s
        if saved.saved_at_s >= modified_s:
            return saved, (
                f"restored the config pushed at {_utc(saved.saved_at_s)} (generation "
                f"{saved.generation}): newer than {shown} (modified {_utc(modified_s)}); "
                "pass --force-config to start with the file"
            )
    generation = 1
    if saved is not None:
        same = saved.config == startup.config
        generation = saved.generation if same else saved.generation + 1
    why = f"started with {shown}"
    if saved is not None and saved.source == "push":
        why += f", replacing the config pushed at {_utc(saved.saved_at_s)}"
        why += " (--force-config)" if startup.force else " (the file is newer)"
    return (
        SavedConfig(
            config=startup.config,
            generation=generation,
            source="file",
            file=None if startup.path is None else str(startup.path),
            saved_at_s=now_s,
        ),
        why,
    )


def _utc(wall_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_s))
