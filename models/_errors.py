"""One error type for bad configuration, with one readable line per problem."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

# YAML and pydantic load on first use: this module is imported for
# ConfigError alone by every command, `bootstorm --help` included.
if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

__all__ = ["ConfigError", "format_validation_error", "load_yaml_model", "load_yaml_model_shared"]


class ConfigError(ValueError):
    """A scenario, profile or config is malformed; the message names field and value."""


def format_validation_error(err: ValidationError, *, prefix: str = "") -> str:
    """Pydantic's errors as ``field: problem (got value)``, one per line (the
    first :data:`_MAX_PROBLEMS_SHOWN`, then how many more)."""
    problems = err.errors()
    lines = []
    for e in problems[:_MAX_PROBLEMS_SHOWN]:
        loc = ".".join(_short_key(p) for p in e["loc"]) or "(top level)"
        msg = " ".join(e["msg"].split("\n"))  # a validator's message: one line too
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {_short_repr(got)})"
        lines.append(f"{prefix}{loc}: {msg}{shown}")
    if len(problems) > _MAX_PROBLEMS_SHOWN:
        lines.append(f"{prefix}… and {len(problems) - _MAX_PROBLEMS_SHOWN} more problems")
    return "\n".join(lines)


_MAX_PROBLEMS_SHOWN = 10
"""A file with thousands of bad values gets the first ten, not a screenful each."""


def _short_key(part: object) -> str:
    """A path part (a field, an index, a map's key), shortened like a value."""
    text = str(part)
    if len(text) <= _MAX_SHOWN_CHARS and text.isprintable():
        return text
    return _short_repr(text)  # quoted: a newline in a key must not break the line


_MAX_SHOWN_CHARS = 80  # one readable line; a whole object (a Profile, say) is not
_CHEAP_REPR_BITS = 4096  # ~1 233 digits: well inside Python's 4 300-digit str() limit
_LOG10_2 = 0.30102999566398120


def _short_repr(value: object) -> str:
    """``repr(value)``, or its type and the start of it when that is too long."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # None of ours is this long (77 digits). repr() of an int of over 4 300
        # digits raises, and a shorter one is quadratic to print: the count of
        # digits (from the bits, within one) and, where cheap, the first ones.
        sign = "-" if value < 0 else ""
        if value.bit_length() <= _CHEAP_REPR_BITS:
            digits = str(abs(value))
            return f"a {len(digits)}-digit int: {sign}{digits[:20]}…"
        about = int(value.bit_length() * _LOG10_2) + 1
        return f"{'a negative' if sign else 'an'} int of about {about} digits"
    try:
        text = repr(value)
    except Exception:  # the error being shown must not become another
        return f"a {type(value).__name__}"
    if len(text) <= _MAX_SHOWN_CHARS:
        return text
    return f"a {type(value).__name__}: {text[: _MAX_SHOWN_CHARS - 20]}…"


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
        data = parse_yaml(text)  # bounded: no aliases, no deep nesting, no huge numbers
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


def load_yaml_model_shared(model: type[M], path: Path) -> M:
    """:func:`load_yaml_model`, returning the same object again while the file's
    bytes are the same.

    For frozen models read on every call (a profile: every compile reads it).
    The key is a digest of the bytes, not the path and mtime: a file
    rewritten within the clock's tick with the same size is still re-read
    (reading and hashing a profile costs ~20 µs; parsing it, ~1.5 ms).
    Callers share the object, so they must not mutate it (its dicts
    included); ``model_copy`` or ``with_values`` make a changed one.
    """
    import hashlib  # here: OpenSSL's loading is a few ms of every command's start

    from ._yaml import decode_utf8, read_bytes_bounded

    raw = read_bytes_bounded(path)  # names the file and why it cannot be read
    key = (model, hashlib.blake2b(raw, digest_size=16).digest())
    with _shared_lock:
        hit = _shared.get(key)
        if hit is not None:
            _shared.move_to_end(key)
            return cast(M, hit)
    text = decode_utf8(path, raw)
    loaded = _parse_yaml_model(model, path, text)
    with _shared_lock:
        _shared[key] = loaded
        while len(_shared) > _SHARED_MAX_ENTRIES:
            _shared.popitem(last=False)
    return loaded
