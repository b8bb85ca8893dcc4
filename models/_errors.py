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
    """Pydantic's errors as ``field: problem (got value)``, one per line."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {_short_repr(got)})"
        lines.append(f"{prefix}{loc}: {msg}{shown}")
    return "\n".join(lines)


_MAX_SHOWN_CHARS = 80  # one readable line; a whole object (a Profile, say) is not


def _short_repr(value: object) -> str:
    """``repr(value)``, or its type and the start of it when that is too long."""
    text = repr(value)
    if len(text) <= _MAX_SHOWN_CHARS:
        return text
    return f"a {type(value).__name__}: {text[: _MAX_SHOWN_CHARS - 20]}…"


M = TypeVar("M", bound="BaseModel")


def load_yaml_model(model: type[M], path: Path) -> M:
    """Read ``path`` as YAML into ``model``, with errors that name the file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return _parse_yaml_model(model, path, text)


def _parse_yaml_model(model: type[M], path: Path, text: str) -> M:
    import yaml
    from pydantic import ValidationError

    # libyaml's parser when PyYAML was built with it: the same documents, the
    # same resolver (so the same values), about 20x faster than the pure-Python
    # reader (a 14 KiB profile: ~1.5 ms against ~30 ms).
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # a safe loader (C or Python)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}:{where}: malformed YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping at the top level, but got {type(data).__name__}"
        )
    try:
        # Through the constructor, so a model's own __init__ checks apply too.
        return model(**data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"{path}: ")) from None
    except ConfigError as exc:
        raise ConfigError("\n".join(f"{path}: {line}" for line in str(exc).splitlines())) from None


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

    try:
        raw = path.read_bytes()
    except OSError:
        return load_yaml_model(model, path)  # names the file and why it cannot be read
    key = (model, hashlib.blake2b(raw, digest_size=16).digest())
    with _shared_lock:
        hit = _shared.get(key)
        if hit is not None:
            _shared.move_to_end(key)
            return cast(M, hit)
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return load_yaml_model(model, path)  # the same error as an uncached read
    loaded = _parse_yaml_model(model, path, text)
    with _shared_lock:
        _shared[key] = loaded
        while len(_shared) > _SHARED_MAX_ENTRIES:
            _shared.popitem(last=False)
    return loaded
