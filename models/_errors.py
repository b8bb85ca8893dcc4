"""One error type for bad configuration, with one readable line per problem."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

__all__ = ["ConfigError", "format_validation_error", "load_yaml_model"]


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


M = TypeVar("M", bound=BaseModel)


def load_yaml_model(model: type[M], path: Path) -> M:
    """Read ``path`` as YAML into ``model``, with errors that name the file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
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
