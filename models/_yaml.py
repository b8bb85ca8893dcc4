"""Reading YAML that a user or a remote client wrote: bounded, without aliases.

Every document bootstorm reads (a scenario, a profile, a tuned config, a
``PUT /config`` body, an inventory) is a small tree of mappings, lists and
scalars. A YAML parser accepts much more, and three features of it turn a
few hundred bytes into seconds of work or a crash:

- **aliases** (``&a`` / ``*a``): nine levels of nine aliases are 9**9 leaves
  once anything walks the tree (validation, an error's ``repr``): a 390-byte
  "billion laughs" blocked the agent's event loop for 5.8 s. No document of
  ours needs them, so any alias is refused, before the tree is built;
- **nesting**: the composer recurses per level, so ``[[[[...]]]]`` ends in a
  ``RecursionError``; more than :data:`MAX_YAML_DEPTH` levels are refused;
- **huge numbers**: Python refuses to convert an integer of over 4 300 digits
  (a ``ValueError`` from inside the constructor), and smaller ones are no
  quantity of ours either; an unquoted number of more than
  :data:`MAX_NUMBER_CHARS` characters is refused.

The check is a pass over the parser's events (libyaml's when PyYAML has
it, so ~1 ms for a 14 KiB profile), then the safe loader builds the tree.
Files are read with a size cap, so ``/dev/zero`` or a runaway file ends in
one line rather than filling the memory.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from ._errors import ConfigError

__all__ = [
    "MAX_NUMBER_CHARS",
    "MAX_YAML_BYTES",
    "MAX_YAML_DEPTH",
    "YamlInputError",
    "decode_utf8",
    "parse_yaml",
    "read_bytes_bounded",
    "read_text_bounded",
    "shown_path",
]

#: Largest YAML document read (bytes). The largest we write, a fitted
#: profile, is ~14 KiB; a scenario or config is under 1 KiB.
MAX_YAML_BYTES = 4 * 1024 * 1024
#: Deepest nesting of mappings and lists (a profile nests 4 levels).
MAX_YAML_DEPTH = 32
#: Longest unquoted number (characters): a float's 17 significant digits and
#: its exponent fit many times over; a count of sandboxes, far more so.
MAX_NUMBER_CHARS = 64

# What YAML 1.1's resolver may read as an int or a float (digits, signs,
# separators, a point, an exponent, a base prefix): a plain scalar longer than
# MAX_NUMBER_CHARS that looks like this is a number nobody meant.
_NUMBER_LIKE = re.compile(r"[-+]?[0-9][0-9_.:]*([eE][-+]?[0-9]+)?|[-+]?0[xXoObB][0-9a-fA-F_]+")


class YamlInputError(ValueError):
    """A YAML text refused by :func:`parse_yaml`; the message says where and why."""


def _loader_class() -> type[Any]:
    import yaml

    # libyaml's parser when PyYAML was built with it: the same documents, the
    # same resolver (so the same values), about 20x faster than the
    # pure-Python reader (a 14 KiB profile: ~1.5 ms against ~30 ms).
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _line(event: Any) -> str:
    mark = getattr(event, "start_mark", None)
    return f"line {mark.line + 1}: " if mark is not None else ""


def _check_events(text: str, loader: type[Any]) -> None:
    """Refuse aliases, deep nesting and huge numbers before any tree is built."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            raise YamlInputError(
                f"{_line(event)}YAML aliases are not accepted (got *{event.anchor})"
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise YamlInputError(
                    f"{_line(event)}nested deeper than {MAX_YAML_DEPTH} levels "
                    "(got a mapping or list at level "
                    f"{depth})"
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.ScalarEvent):
            value = event.value
            if (
                not event.style  # plain (unquoted): what the resolver may type as a number
                and len(value) > MAX_NUMBER_CHARS
                and _NUMBER_LIKE.fullmatch(value)
            ):
                raise YamlInputError(
                    f"{_line(event)}a number of {len(value)} characters "
                    f"(at most {MAX_NUMBER_CHARS}; got {value[:20]}…)"
                )


def parse_yaml(text: str) -> Any:
    """The document in ``text``, built by the safe loader once :func:`_check_events`
    passed; :class:`YamlInputError` for malformed YAML or a refused feature."""
    import yaml

    loader = _loader_class()
    try:
        _check_events(text, loader)
        return yaml.load(text, Loader=loader)  # a safe loader (C or Python)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlInputError(f"{where}malformed YAML: {problem}") from None
    except (ValueError, RecursionError) as exc:
        # A scalar the resolver types but Python cannot convert (an out-of-range
        # date, say): one line, not a traceback.
        if isinstance(exc, YamlInputError):
            raise
        raise YamlInputError(f"a value YAML cannot convert: {str(exc)[:120]}") from None


def read_bytes_bounded(path: Path, *, max_bytes: int = MAX_YAML_BYTES) -> bytes:
    """``path``'s bytes, reading at most ``max_bytes`` (+1 to tell it is more):
    :class:`ConfigError` naming the file if it cannot be read or is larger.

    Opened without blocking, so a FIFO nobody writes to reads as empty rather
    than waiting forever in ``open()``; a device that never ends (``/dev/zero``)
    stops at the cap.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{shown_path(path)}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:  # an embedded NUL in the path, say
        raise ConfigError(f"{shown_path(path)}: cannot read ({exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            # A pipe with a writer or a device: wait for its data as a read would.
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:  # EISDIR, EIO, ...
        raise ConfigError(f"{shown_path(path)}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise ConfigError(
            f"{shown_path(path)}: larger than {max_bytes} bytes; not a bootstorm file"
        )
    return raw


def decode_utf8(path: Path, raw: bytes) -> str:
    """``raw`` as UTF-8 text, or :class:`ConfigError` naming the file and the first bad byte."""
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        byte = raw[exc.start]
        raise ConfigError(
            f"{shown_path(path)}: not UTF-8 text (byte 0x{byte:02x} at offset {exc.start})"
        ) from None


def read_text_bounded(path: Path, *, max_bytes: int = MAX_YAML_BYTES) -> str:
    """``path``'s UTF-8 text, reading at most ``max_bytes`` (+1 to tell it is more):
    :class:`ConfigError` naming the file if it cannot be read, is larger, or is
    not UTF-8."""
    return decode_utf8(path, read_bytes_bounded(path, max_bytes=max_bytes))


_MAX_PATH_SHOWN = 200


def shown_path(path: Path) -> str:
    """The path for an error line: as given, or its start and its length when
    it is longer than a line (a 4 000-character name), quoted if unprintable."""
    text = str(path)
    if not text.isprintable():
        text = repr(text)
    if len(text) <= _MAX_PATH_SHOWN:
        return text
    return f"{text[: _MAX_PATH_SHOWN - 40]}… ({len(text)} characters)"
