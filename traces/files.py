"""Reading a file a user named: a regular file, bounded, in one line if not.

Every file bootstorm reads on a user's word (a scenario, a tuned config, a
profile, a trace — plain or gzip —, a measured-ops JSON, an inventory, a
token file) comes through here, so that one rule holds for all of them:

- **a regular file only.** A FIFO blocks ``open()`` until a writer comes
  (``report fifo.jsonl``, ``agent serve --token-file fifo`` hung), a
  character device may never end (``/dev/zero``) or block (``/dev/tty``),
  and a directory is a confusing ``EISDIR`` later on. The path is
  ``stat``-ed before it is opened — so a device is never opened, with
  whatever opening it does (a tape rewinds, a terminal becomes ours) — and
  opened without blocking, then ``fstat``-ed again, so that a path swapped
  for a FIFO between the two cannot block either;
- **a size cap.** A file larger than the caller's cap is refused before it
  is read, and a read stops one byte past the cap (a file that grows while
  it is read);
- **one line naming the file** (:func:`shown_path`: as given, cut if it is
  longer than a line) and why, a :class:`ConfigError`: the command line
  prints it and exits 2. No line quotes the file's contents.

This module is in ``traces`` (the bottom layer that reads files) so that
every layer above it may use it; it imports only the leaf
:mod:`bootstorm._params`.
"""

from __future__ import annotations

import io
import os
import stat
from typing import TYPE_CHECKING, BinaryIO

from .._params import ConfigError

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "MAX_TOKEN_BYTES",
    "check_regular_file",
    "decode_utf8",
    "file_kind",
    "open_bounded",
    "read_bytes_bounded",
    "read_text_bounded",
    "read_token_file",
    "shown_path",
]

#: Largest token file (bytes). A bearer token is tens of characters; a file
#: of kilobytes is not one (a key pair, a log, a device named by mistake).
#: The agent takes a token of up to 4 096 characters (its header limit,
#: ``validation.agent._protocol.MAX_TOKEN_CHARS``): the file may hold that
#: and the newline and white space an editor adds.
MAX_TOKEN_BYTES = 4096 + 64

_MAX_PATH_SHOWN = 200


def shown_path(path: str | os.PathLike[str]) -> str:
    """The path for an error line: as given, or its start and its length when
    it is longer than a line (a 4 000-character name), quoted if unprintable."""
    text = os.fspath(path)
    if not text.isprintable():
        text = repr(text)
    if len(text) <= _MAX_PATH_SHOWN:
        return text
    return f"{text[: _MAX_PATH_SHOWN - 40]}… ({len(text)} characters)"


def file_kind(mode: int) -> str | None:
    """What a file of ``mode`` is, when it is not a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse_kind(path: str | os.PathLike[str], mode: int, max_bytes: int, size: int) -> None:
    kind = file_kind(mode)
    if kind is not None:
        raise ConfigError(
            f"{shown_path(path)}: {kind}, not a regular file; bootstorm reads only files"
        )
    if size > max_bytes:
        raise ConfigError(_too_large(path, max_bytes))


def _too_large(path: str | os.PathLike[str], max_bytes: int) -> str:
    return f"{shown_path(path)}: larger than {max_bytes} bytes; not a bootstorm file"


def _cannot_read(path: str | os.PathLike[str], exc: OSError | ValueError) -> ConfigError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ConfigError(f"{shown_path(path)}: cannot read ({reason})")


def _open_regular(path: str | os.PathLike[str], *, max_bytes: int) -> int:
    """A descriptor of ``path`` opened for reading, once it is known to be a
    regular file of at most ``max_bytes``; :class:`ConfigError` if not."""
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, but got {max_bytes}")
    try:
        st = os.stat(path)  # before open(): a device is refused unopened
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise _cannot_read(path, exc) from None
    _refuse_kind(path, st.st_mode, max_bytes, st.st_size)
    try:
        # O_NONBLOCK: should the path have become a FIFO since the stat, open()
        # returns at once instead of waiting for a writer; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except (OSError, ValueError) as exc:
        raise _cannot_read(path, exc) from None
    try:
        st = os.fstat(fd)
        _refuse_kind(path, st.st_mode, max_bytes, st.st_size)
        os.set_blocking(fd, True)  # a regular file: reads behave as usual
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular_file(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> None:
    """Refuse ``path`` in the reader's words (missing, a FIFO, a device, a
    directory; larger than ``max_bytes`` if given) without opening it: for a
    command that checks the files it will read before its work starts."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:
        raise _cannot_read(path, exc) from None
    _refuse_kind(path, st.st_mode, st.st_size if max_bytes is None else max_bytes, st.st_size)


def read_bytes_bounded(path: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """``path``'s bytes: :class:`ConfigError` naming the file if it is not a
    regular file, is larger than ``max_bytes`` or cannot be read."""
    fd = _open_regular(path, max_bytes=max_bytes)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(max_bytes + 1)  # +1: to tell a file that grew past the cap
    except OSError as exc:  # EIO, ...
        raise _cannot_read(path, exc) from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise ConfigError(_too_large(path, max_bytes))
    return raw


def decode_utf8(path: str | os.PathLike[str], raw: bytes) -> str:
    """``raw`` as UTF-8 text, or :class:`ConfigError` naming the file and
    the offset of the first bad byte (the byte's value, never the text)."""
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        byte = raw[exc.start]
        raise ConfigError(
            f"{shown_path(path)}: not UTF-8 text (byte 0x{byte:02x} at offset {exc.start})"
        ) from None


def read_text_bounded(path: str | os.PathLike[str], *, max_bytes: int) -> str:
    """``path``'s UTF-8 text: :class:`ConfigError` naming the file if it is
    not a regular file, is larger than ``max_bytes``, cannot be read or is not
    UTF-8."""
    return decode_utf8(path, read_bytes_bounded(path, max_bytes=max_bytes))


class _CappedReader(io.RawIOBase):
    """A regular file's bytes, refusing (in one line) to read past a cap: a
    file that grows while it is read is cut off, not followed."""

    def __init__(self, fd: int, *, path: str | os.PathLike[str], max_bytes: int) -> None:
        super().__init__()
        self._fd = fd
        self._path = path
        self._left = max_bytes
        self._max_bytes = max_bytes

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        # One byte past the cap at most: enough to tell that there is more.
        want = min(len(view), self._left + 1)
        n = os.readv(self._fd, [view[:want]])
        if n > self._left:
            raise ConfigError(_too_large(self._path, self._max_bytes))
        self._left -= n
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def open_bounded(path: str | os.PathLike[str], *, max_bytes: int) -> BinaryIO:
    """``path`` opened for reading as a buffered binary stream (to hand to
    ``gzip.GzipFile``, to read line by line), once it is known to be a regular
    file of at most ``max_bytes``; reading past ``max_bytes`` (a file that
    grew) raises :class:`ConfigError`. Close it (``with``)."""
    fd = _open_regular(path, max_bytes=max_bytes)
    try:
        raw = _CappedReader(fd, path=path, max_bytes=max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(raw)


def read_token_file(path: str | os.PathLike[str], *, field: str = "token_file") -> str:
    """The bearer token in ``path`` (surrounding white space stripped): a
    regular file of at most :data:`MAX_TOKEN_BYTES` of UTF-8 text holding one
    non-empty token. Refused in one line naming ``field`` and the file, never
    a byte of its contents (it is a secret)."""
    try:
        token = read_text_bounded(path, max_bytes=MAX_TOKEN_BYTES).strip()
    except ConfigError as exc:
        raise ConfigError(f"{field}: {exc}") from None
    if not token:
        raise ConfigError(f"{field}: {shown_path(path)}: empty (expected a token)")
    if any(c.isspace() or not c.isprintable() for c in token):
        # A bearer token is one word of printable characters: an HTTP header
        # cannot carry a newline, and a file of several lines is not a token.
        raise ConfigError(
            f"{field}: {shown_path(path)}: not one token (white space or an "
            "unprintable character inside it)"
        )
    return token
