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
Files are read through :mod:`bootstorm.traces.files`: a regular file only
(a FIFO, ``/dev/zero`` or a directory is refused unopened) with a size cap,
so a runaway file ends in one line rather than filling the memory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .._params import KEY_LIKE
from ..traces import files as _files

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
    loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader


def _line(event: Any) -> str:
    mark = getattr(event, "start_mark", None)
    return f"line {mark.line + 1}: " if mark is not None else ""


class _Mapping:
    """A mapping being parsed: whether its next node is a key, and the
    scalar keys it has had (a key given twice is refused: the loader keeps
    the last, so ``sandboxes: 20`` then ``sandboxes: 30`` silently ran 30)."""

    __slots__ = ("at_key", "keys")

    def __init__(self) -> None:
        self.at_key = True
        self.keys: set[str] = set()


def _key_problem(event: Any) -> str | None:
    """Why the mapping key that ``event`` starts is not shown, or None if it
    looks like a key. A line of a foreign file read as YAML (``root:*:20228:0:
    99999:7:::`` of /etc/shadow is a key with a null value) must not be echoed
    in an error: only a short name that looks like one of ours is."""
    import yaml

    if isinstance(event, yaml.ScalarEvent) and KEY_LIKE.fullmatch(event.value):
        return None
    return f"{_line(event)}a line that is not a mapping key (expected name: value)"


def _check_events(text: str, loader: type[Any], *, mapping_keys: bool) -> None:
    """Refuse aliases, deep nesting and huge numbers (and, if ``mapping_keys``,
    keys that are not names) before any tree is built."""
    import yaml

    depth = 0
    # Open mappings and lists, innermost last: a mapping's nodes alternate key, value.
    open_nodes: list[_Mapping | None] = []
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            raise YamlInputError(
                f"{_line(event)}YAML aliases are not accepted (got *{event.anchor})"
            )
        if isinstance(event, yaml.NodeEvent) and open_nodes:  # a scalar, alias, or a start
            inner = open_nodes[-1]
            if inner is not None:
                if mapping_keys and inner.at_key and (problem := _key_problem(event)):
                    raise YamlInputError(problem)
                if inner.at_key and isinstance(event, yaml.ScalarEvent):
                    if event.value in inner.keys:
                        shown = (
                            repr(event.value)
                            if KEY_LIKE.fullmatch(event.value)
                            else "a key given before"
                        )
                        raise YamlInputError(f"{_line(event)}{shown} is given twice in a mapping")
                    inner.keys.add(event.value)
                inner.at_key = not inner.at_key
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise YamlInputError(
                    f"{_line(event)}nested deeper than {MAX_YAML_DEPTH} levels "
                    "(got a mapping or list at level "
                    f"{depth})"
                )
            open_nodes.append(_Mapping() if isinstance(event, yaml.MappingStartEvent) else None)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            open_nodes.pop()
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


def parse_yaml(text: str, *, mapping_keys: bool = False) -> Any:
    """The document in ``text``, built by the safe loader once :func:`_check_events`
    passed; :class:`YamlInputError` for malformed YAML or a refused feature.

    With ``mapping_keys``, every mapping key must look like a name
    (:data:`bootstorm._params.KEY_LIKE`): a file's errors quote its keys, so a file that is not
    ours (``/etc/shadow``) is refused at its first line that is not one,
    by line number, without a byte of it shown."""
    import yaml

    loader = _loader_class()
    try:
        _check_events(text, loader, mapping_keys=mapping_keys)
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
    """``path``'s bytes through the one bounded reader
    (:func:`bootstorm.traces.files.read_bytes_bounded`): :class:`ConfigError`
    naming the file if it is not a regular file (a FIFO, a device, a
    directory), is larger than ``max_bytes`` or cannot be read."""
    raw: bytes = _files.read_bytes_bounded(path, max_bytes=max_bytes)
    return raw


def decode_utf8(path: Path, raw: bytes) -> str:
    """``raw`` as UTF-8 text, or :class:`ConfigError` naming the file and the first bad byte."""
    text: str = _files.decode_utf8(path, raw)
    return text


def read_text_bounded(path: Path, *, max_bytes: int = MAX_YAML_BYTES) -> str:
    """``path``'s UTF-8 text through the one bounded reader: :class:`ConfigError`
    naming the file if it is not a regular file, is larger than ``max_bytes``,
    cannot be read or is not UTF-8."""
    text: str = _files.read_text_bounded(path, max_bytes=max_bytes)
    return text


def shown_path(path: Path) -> str:
    """The path for an error line (:func:`bootstorm.traces.files.shown_path`)."""
    text: str = _files.shown_path(path)
    return text
