"""Files written whole or not at all; the one console every command prints to."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .models import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "check_output_path",
    "shown_name",
    "shown_text",
    "terminal_console",
    "wide_console",
    "write_atomically",
]


@functools.cache
def terminal_console() -> Console:
    """The console every command prints to. Piped or captured output takes
    ``$COLUMNS``, or 80 columns as a terminal would (it was widened to 120-160,
    which wrapped every line of a table in an 80-column pager or CI log);
    tables fold their headers to fit."""
    from rich.console import Console

    return Console()


@functools.cache
def wide_console() -> Console:
    """The console of the fit tables (``calibrate --trace``, ``--plan``,
    ``--check`` from Python): 120 columns when piped, as their documented
    output is. (Folding them into 80 columns is issue 37's.)"""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=120)


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    Never half a file: on any error the temporary file is removed and ``path``
    is left as it was; a file system's refusal (no such folder, no space, no
    permission) is a :class:`ConfigError` naming ``path``.
    """
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    except OSError as exc:
        raise ConfigError(
            f"{shown_name(str(target), max_chars=200)}: cannot write ({exc.strerror})"
        ) from None
    try:
        # mkstemp makes the file private; give it the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(
                f"{shown_name(str(target), max_chars=200)}: cannot write ({exc.strerror or exc})"
            ) from None
        raise


def shown_text(text: str) -> str:
    """``repr(text)``, cut to a readable part of one line."""
    shown = repr(text)
    return shown if len(shown) <= 80 else f"{shown[:60]}… ({len(text)} characters)"


def shown_name(text: str, *, max_chars: int = 80) -> str:
    """A name (a map's key, a path) as typed when it is short and printable,
    else :func:`shown_text`."""
    return text if len(text) <= max_chars and text.isprintable() else shown_text(text)


def check_output_path(field: str, path: Path) -> None:
    """Refuse an output path that cannot be written, before any work is done
    (a storm simulated for a minute, then lost to a missing folder)."""
    parent = path.parent if str(path.parent) else Path(".")
    try:
        is_dir = path.is_dir()
        parent_ok = parent.is_dir()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise ConfigError(
            f"{field}: cannot write {shown_name(str(path), max_chars=200)} ({exc})"
        ) from None
    if is_dir:
        raise ConfigError(
            f"{field}: {shown_name(str(path), max_chars=200)} is a directory; give a file name"
        )
    if not parent_ok:
        raise ConfigError(
            f"{field}: no directory {shown_name(str(parent), max_chars=200)} "
            f"to write {shown_name(path.name)} in"
        )
