"""One error type for bad configuration, with one readable line per problem.

:class:`ConfigError` and the message format are defined in the leaf
:mod:`bootstorm._params` (every layer may raise them); they are re-exported
here, where ``from bootstorm.models import ConfigError`` has always found them.
"""

from __future__ import annotations

import os
import stat as _stat
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from .._params import ConfigError, format_validation_error
from .._params import short_repr as _short_repr

# YAML and pydantic load on first use: this module is imported for
# ConfigError alone by every command, `bootstorm --help` included.
if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["ConfigError", "format_validation_error", "load_yaml_model", "load_yaml_model_shared"]


M = TypeVar("M", bound="BaseModel")


def load_yaml_model(model: type[M], path: Path) -> M:
    """Read ``path`` as YAML into ``model``, with errors that name the file."""
    from ._yaml import read_text_bounded

    return _parse_yaml_model(model, path, read_text_bounded(path))


def _parse_yaml_model(model: type[M], path: Path, text: str) -> M:
    from pydantic import ValidationError

    from ._yaml import YamlInputError, parse_yaml, shown_path

    shown = shown_path(path)
    try:
        # Bounded (no aliases, no deep nesting, no huge numbers), and keys that
        # are names: an error quotes a key, never a line of a foreign file.
        data = parse_yaml(text, mapping_keys=True)
    except YamlInputError as exc:
        raise ConfigError(f"{shown}: {exc}") from None
    if data is None:  # an empty file, or a pipe nobody wrote to
        raise ConfigError(f"{shown}: empty (expected a YAML mapping of fields)")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{shown}: expected a mapping at the top level, but got {type(data).__name__}"
        )
    for key in data:
        if not isinstance(key, str):  # YAML's `1: x` or `null: x`; **data needs names
            raise ConfigError(
                f"{shown}: (top level): expected field names, but got the key {_short_repr(key)}"
            )
    try:
        # Through the constructor, so a model's own __init__ checks apply too.
        return model(**data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"{shown}: ")) from None
    except ConfigError as exc:
        raise ConfigError("\n".join(f"{shown}: {line}" for line in str(exc).splitlines())) from None


_SHARED_MAX_ENTRIES = 64
"""Models kept by :func:`load_yaml_model_shared`, least recently used dropped first."""
_shared: OrderedDict[tuple[type[BaseModel], bytes], BaseModel] = OrderedDict()
_shared_lock = threading.Lock()
_settled: dict[tuple[type[BaseModel], str], tuple[tuple[int, ...], BaseModel]] = {}
"""Models by (type, path), with the ``stat`` of a file that had settled when read."""
_SETTLED_NS = 2_000_000_000
"""How long a file must have been left alone before its ``stat`` alone vouches for it."""


def load_yaml_model_shared(model: type[M], path: Path) -> M:
    """:func:`load_yaml_model`, returning the same object again while the file's
    bytes are the same.

    For frozen models read on every call (a profile: every compile reads it).
    The key is a digest of the bytes, not the path and mtime: a file
    rewritten within the clock's tick with the same size is still re-read.
    Reading and hashing a profile costs ~0.1 ms here, parsing it ~1.5 ms; a
    file that has not changed for :data:`_SETTLED_NS` is not even read again
    while its ``stat`` (device, inode, size, mtime, ctime) is the same: any
    later write changes its ctime, which the clock cannot give back within
    the tick that the settling time leaves behind (git's "racily clean").
    Callers share the object, so they must not mutate it (its dicts
    included); ``model_copy`` or ``with_values`` make a changed one.
    """
    import hashlib  # here: OpenSSL's loading is a few ms of every command's start

    from ._yaml import decode_utf8, read_bytes_bounded

    try:
        st = os.stat(path)
        # A regular file only: a pipe or a device is read every time.
        signature: tuple[int, ...] | None = (
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
        )
        if not _stat.S_ISREG(st.st_mode):
            signature = None
    except (OSError, ValueError):
        signature = None  # read_bytes_bounded says why, in one line
    stat_key = (model, str(path))
    if signature is not None:
        with _shared_lock:
            settled = _settled.get(stat_key)
        if settled is not None and settled[0] == signature:
            return cast(M, settled[1])
    raw = read_bytes_bounded(path)  # names the file and why it cannot be read
    key = (model, hashlib.blake2b(raw, digest_size=16).digest())
    with _shared_lock:
        loaded = _shared.get(key)
        if loaded is not None:
            _shared.move_to_end(key)
    if loaded is None:
        loaded = _parse_yaml_model(model, path, decode_utf8(path, raw))
    with _shared_lock:
        _shared[key] = loaded
        while len(_shared) > _SHARED_MAX_ENTRIES:
            _shared.popitem(last=False)
        if signature is not None and time.time_ns() - max(signature[3:]) > _SETTLED_NS:
            _settled[stat_key] = (signature, loaded)
            while len(_settled) > _SHARED_MAX_ENTRIES:
                _settled.pop(next(iter(_settled)))
    return cast(M, loaded)
