"""Files written whole or not at all; the one console every command prints to."""

from __future__ import annotations

import functools
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .models import ConfigError
from .traces.files import file_kind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rich.console import Console

__all__ = [
    "check_output_path",
    "shown_name",
    "shown_text",
    "terminal_console",
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


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    Never half a file: on any error the temporary file is removed and ``path``
    is left as it was; a file system's refusal (no such folder, no space, no
    permission) is a :class:`ConfigError` naming ``path``.
    """
    target = Path(path)
    if _exists_not_regular(target):
        # The rename below would replace a device or a FIFO with a plain file.
        raise ConfigError(
            f"{shown_name(str(target), max_chars=200)}: "
            f"{file_kind(target.stat().st_mode)}, not a regular file; bootstorm writes only files"
        )
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


def check_output_path(
    field: str, path: Path, *, inputs: Mapping[str, Path | str | None] | None = None
) -> None:
    """Refuse an output path that cannot be written, before any work is done
    (a storm simulated for a minute, then lost to a missing folder).

    An existing output must be a regular file: every writer here writes a
    temporary file and renames it over the path, which would replace a
    device (``--output /dev/null`` as root) or a FIFO with a plain file; nor
    may it be one of the command's ``inputs`` (by field), which the write
    would replace with what was read from it."""
    parent = path.parent if str(path.parent) else Path(".")
    shown = shown_name(str(path), max_chars=200)
    for name, source in (inputs or {}).items():
        if source is not None and _same_file(path, Path(source)):
            raise ConfigError(f"{field}: {shown} is also the {name} read; write elsewhere")
    try:
        mode = path.lstat().st_mode if path.exists() or path.is_symlink() else None
        target = path.stat().st_mode if mode is not None and path.exists() else None
        parent_ok = parent.is_dir()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)[:80]
        raise ConfigError(f"{field}: cannot write {shown} ({reason})") from None
    if target is not None and stat.S_ISDIR(target):
        raise ConfigError(f"{field}: {shown} is a directory; give a file name")
    if target is not None and not stat.S_ISREG(target):
        raise ConfigError(
            f"{field}: {shown} is {file_kind(target)}, not a regular file; "
            "bootstorm writes only files"
        )
    if not parent_ok:
        raise ConfigError(
            f"{field}: no directory {shown_name(str(parent), max_chars=200)} "
            f"to write {shown_name(path.name)} in"
        )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # either missing, or a name no file can have
        return False


def _exists_not_regular(path: Path) -> bool:
    """Whether ``path`` names something that is there and not a regular file."""
    try:
        return path.exists() and not path.is_file()
    except (OSError, ValueError):
        return False
