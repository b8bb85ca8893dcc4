"""One way to declare and check the parameters of a value object, and one error.

Every frozen value object (a variant, a search range, a measured timing) says
what its fields must hold as data, next to the fields, and checks them with
one call from ``__post_init__``::

    @dataclass(frozen=True, kw_only=True, slots=True)
    class IntRange:
        low: int
        high: int

        __rules__: ClassVar[Rules] = Rules(
            low=Interval(int, low=0),
            checks=(Check("high", lambda r: r.high >= r.low, "must be >= low"),),
        )

        def __post_init__(self) -> None:
            validate(self)

A broken rule raises :class:`ConfigError` (a ``ValueError``) with one line per
object, ``field: rule (got value)``: the format
:func:`format_validation_error` gives pydantic's errors too, and the one the
CLI prints (exit 2) and the node agent returns (HTTP 400). The first broken
rule is reported, in the order declared: fields, then checks.

This module is a leaf: it imports nothing of bootstorm, so every layer, the
bottom one (``traces``) included, may use it.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "KEY_LIKE",
    "Check",
    "ConfigError",
    "Depends",
    "Distinct",
    "DuplicateKeyError",
    "Each",
    "InstanceOf",
    "Interval",
    "Keys",
    "Matches",
    "Maybe",
    "NonEmpty",
    "OneOf",
    "Rule",
    "Rules",
    "Satisfies",
    "Shown",
    "Values",
    "format_problem",
    "format_validation_error",
    "own_error_line",
    "parse_seeds",
    "refuse_given",
    "short_repr",
    "unique_keys",
    "validate",
]


class ConfigError(ValueError):
    """A scenario, profile or config is malformed; the message names field and value."""


def format_problem(field: str, rule: str, value: object) -> str:
    """The one message format: ``field: rule (got value)``."""
    return f"{field}: {rule} (got {short_repr(value)})"


#: The most seeds one option takes: each is a storm (or a storm per trial).
MAX_SEEDS = 1000
_SEED_PART = re.compile(r"(\d{1,9})(?:-(\d{1,9}))?")


def parse_seeds(text: str, *, field: str = "seeds") -> tuple[int, ...]:
    """Every command's seeds, one syntax: ``1001-1010``, ``0,1,2`` or a mix
    (``1-3,7``), in the order given; a seed given twice is refused."""
    seeds: list[int] = []
    seen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = _SEED_PART.fullmatch(part)
        if m is None:
            raise ConfigError(
                f"{field}: expected N, N-M or a comma-separated list of them "
                f"(1001-1010, 0,1,2, 1-3,7), got {short_repr(text)}"
            )
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ConfigError(f"{field}: {short_repr(part)} must be N-M with N <= M")
        if len(seeds) + hi - lo >= MAX_SEEDS:
            raise ConfigError(f"{field}: at most {MAX_SEEDS} seeds, got more ({short_repr(text)})")
        # A seed twice (``1,1``, ``1-3,2``) would be one storm counted twice in
        # a mean, or silently one storm fewer than typed: refused either way.
        for s in range(lo, hi + 1):
            if s in seen:
                raise ConfigError(f"{field}: seed {s} given twice (got {short_repr(text)})")
            seen.add(s)
            seeds.append(s)
    return tuple(seeds)


#: What a key of ours looks like: a field, a stage, a lock, a pool kind, a
#: dotted profile path (the longest shipped is 37 characters). Anything else,
#: a line with colons and hashes say, is not quoted back in an error.
KEY_LIKE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")


class DuplicateKeyError(ValueError):
    """A JSON object with a key twice (:func:`unique_keys`)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook`` that refuses a key given twice
    (``json.loads`` keeps the last value, unsaid): a :class:`DuplicateKeyError`,
    a ValueError as a JSON syntax error is; only a key that looks like a
    name is quoted back."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            shown = repr(key) if KEY_LIKE.fullmatch(key) else "a key given before"
            raise DuplicateKeyError(f"{shown} is given twice in an object")
        out[key] = value
    return out


# -- rules -------------------------------------------------------------------------


class Rule:
    """What one value must be. :meth:`problem` is ``None`` if ``value`` holds,
    else the broken rule's path (below ``field``) and text and the value shown."""

    __slots__ = ()

    def text(self) -> str:
        raise NotImplementedError

    def holds(self, value: Any) -> bool:
        raise NotImplementedError

    def problem(self, field: str, value: Any) -> tuple[str, str, Any] | None:
        return None if self.holds(value) else (field, self.text(), value)


Closed = Literal["both", "left", "right", "neither"]


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclass(frozen=True, slots=True)
class Interval(Rule):
    """A number of ``kind`` (``int``: an integral number, NumPy's too, no bool;
    ``float``: any finite real, an int too) between ``low`` and ``high`` (``None``: unbounded),
    each end in or out as ``closed`` says (scikit-learn's convention)."""

    kind: type[int] | type[float]
    low: float | None = None
    high: float | None = None
    closed: Closed = "both"
    unit: str = ""

    def holds(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind is int and not isinstance(value, numbers.Integral):
            return False
        # An int compares exactly with a float bound (float() of a huge one overflows).
        x: float = int(value) if isinstance(value, numbers.Integral) else float(value)
        if isinstance(x, float) and not math.isfinite(x):
            return False
        low_out = self.closed in ("right", "neither")
        high_out = self.closed in ("left", "neither")
        if self.low is not None and (x < self.low or (x == self.low and low_out)):
            return False
        return self.high is None or not (x > self.high or (x == self.high and high_out))

    def text(self) -> str:
        what = "an integer" if self.kind is int else "a finite number"
        unit = f" {self.unit}" if self.unit else ""
        low_in = self.closed in ("both", "left")
        high_in = self.closed in ("both", "right")
        if self.low is not None and self.high is not None:
            if low_in and high_in:
                return f"must be {what} within {_num(self.low)}..{_num(self.high)}{unit}"
            lo = f"{'>=' if low_in else '>'} {_num(self.low)}"
            hi = f"{'<=' if high_in else '<'} {_num(self.high)}"
            return f"must be {what} {lo} and {hi}{unit}"
        if self.low is not None:
            return f"must be {what} {'>=' if low_in else '>'} {_num(self.low)}{unit}"
        if self.high is not None:
            return f"must be {what} {'<=' if high_in else '<'} {_num(self.high)}{unit}"
        return f"must be {what}"


@dataclass(frozen=True, slots=True)
class InstanceOf(Rule):
    """An instance of ``types`` (a bool is not an int here); ``what`` names
    it (``a Scenario``). The problem shows the value's type: a notebook's
    ``None`` or ``5`` where a tuple belongs says more than its repr."""

    types: type | tuple[type, ...]
    what: str

    def holds(self, value: Any) -> bool:
        if isinstance(value, bool) and bool not in _as_tuple(self.types):
            return False
        return isinstance(value, self.types)

    def text(self) -> str:
        return f"must be {self.what}"

    def problem(self, field: str, value: Any) -> tuple[str, str, Any] | None:
        if self.holds(value):
            return None
        name = type(value).__name__
        article = "an" if name[:1] in ("a", "e", "i", "o", "u") else "a"
        return (field, self.text(), Shown(f"{article} {name}: {short_repr(value)}"))


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


@dataclass(frozen=True, slots=True)
class OneOf(Rule):
    """One of ``options``; ``what`` names them (``the stages of cni 'veth'``)."""

    options: tuple[Any, ...]
    what: str = ""

    def holds(self, value: Any) -> bool:
        try:
            return value in self.options
        except TypeError:  # an unhashable value in a set of options
            return False

    def text(self) -> str:
        shown = ", ".join(str(o) for o in self.options) if self.options else "none"
        return f"must be one of {self.what}: {shown}" if self.what else f"must be one of {shown}"


@dataclass(frozen=True, slots=True)
class NonEmpty(Rule):
    """A string or collection with at least one element."""

    def holds(self, value: Any) -> bool:
        try:
            return len(value) > 0
        except TypeError:
            return False

    def text(self) -> str:
        return "must not be empty"


@dataclass(frozen=True, slots=True)
class Matches(Rule):
    """A string ``pattern`` matches whole; ``what`` says it in words."""

    pattern: re.Pattern[str]
    what: str

    def holds(self, value: Any) -> bool:
        return isinstance(value, str) and self.pattern.fullmatch(value) is not None

    def text(self) -> str:
        return f"must be {self.what}"


@dataclass(frozen=True, slots=True)
class Shown:
    """What a problem shows after ``got`` when the value's repr is not it (a
    count, the part of a record at fault): shown as is, unquoted."""

    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Satisfies(Rule):
    """``predicate(value)`` holds; ``rule`` says what it asks (``must ...``);
    ``shown(value)``, if given, is what the problem shows of the value."""

    predicate: Callable[[Any], bool]
    rule: str
    shown: Callable[[Any], str] | None = None

    def holds(self, value: Any) -> bool:
        return bool(self.predicate(value))

    def text(self) -> str:
        return self.rule

    def problem(self, field: str, value: Any) -> tuple[str, str, Any] | None:
        if self.holds(value):
            return None
        return (field, self.rule, value if self.shown is None else Shown(self.shown(value)))


@dataclass(frozen=True, slots=True)
class Distinct(Rule):
    """A collection holding each value once."""

    def holds(self, value: Any) -> bool:
        items = list(value)
        return len(set(items)) == len(items)

    def text(self) -> str:
        return "must hold each value once"


@dataclass(frozen=True, slots=True)
class Maybe(Rule):
    """``None``, or a value ``rule`` holds for."""

    rule: Rule

    def holds(self, value: Any) -> bool:
        return value is None or self.rule.holds(value)

    def text(self) -> str:
        return f"{self.rule.text()}, or None"

    def problem(self, field: str, value: Any) -> tuple[str, str, Any] | None:
        return None if value is None else self.rule.problem(field, value)


@dataclass(frozen=True, slots=True)
class Each(Rule):
    """Every element of a sequence holds ``rule``; the problem names the
    element as ``field[i]``."""

    rule: Rule

    def holds(self, value: Any) -> bool:
        return self.problem("", value) is None

    def text(self) -> str:
        return f"each {self.rule.text()}"

    def problem(self, field: str, value: Any) -> tuple[str, str, Any] | None:
        for i, item in enumerate(_iterate(value)):
            found = self.rule.problem(f"{field}[{i}]", item)
            if found is not None:
                return found
        return None


@dataclass(frozen=True, slots=True)
class Keys(Rule):
    """Every key of a mapping holds ``rule`` (the problem shows the key)."""

    rule: Rule

    def holds(self, value: Any) -> bool:
        return self.problem("", value) is None

    def text(self) -> str:
        return f"each key {self.rule.text()}"

    def problem(self, field: str, value: Any) -> tuple[str, str, Any] | None:
        for key in value:
            if not self.rule.holds(key):
                return (field, f"each key {self.rule.text()}", key)
        return None


@dataclass(frozen=True, slots=True)
class Values(Rule):
    """Every value of a mapping holds ``rule``; the problem names it ``field.key``."""

    rule: Rule

    def holds(self, value: Any) -> bool:
        return self.problem("", value) is None

    def text(self) -> str:
        return f"each value {self.rule.text()}"

    def problem(self, field: str, value: Any) -> tuple[str, str, Any] | None:
        for key, item in value.items():
            found = self.rule.problem(f"{field}.{key}", item)
            if found is not None:
                return found
        return None


@dataclass(frozen=True, slots=True)
class Depends:
    """A rule that depends on the object's other fields: ``make(obj)`` gives it."""

    make: Callable[[Any], Rule]


@dataclass(frozen=True, slots=True)
class Check:
    """A rule across fields: ``holds(obj)``, else ``field: rule (got value)``
    with ``field``'s value. ``rule`` may be a function of the object, to name
    the other fields' values."""

    field: str
    holds: Callable[[Any], bool]
    rule: str | Callable[[Any], str]


FieldRule = Rule | Depends | tuple[Rule | Depends, ...]


class Rules:
    """A value object's rules: per field (one rule or several, in order), then
    the checks across fields."""

    __slots__ = ("checks", "fields")

    def __init__(self, *, checks: Sequence[Check] = (), **fields: FieldRule) -> None:
        self.fields: dict[str, tuple[Rule | Depends, ...]] = {
            name: rule if isinstance(rule, tuple) else (rule,) for name, rule in fields.items()
        }
        self.checks: tuple[Check, ...] = tuple(checks)

    def problem(self, obj: object) -> str | None:
        """The first broken rule of ``obj``, formatted, or ``None``."""
        for name, rules in self.fields.items():
            value = getattr(obj, name)
            for rule in rules:
                concrete = rule.make(obj) if isinstance(rule, Depends) else rule
                found = concrete.problem(name, value)
                if found is not None:
                    return format_problem(*found)
        for check in self.checks:
            if not check.holds(obj):
                text = check.rule if isinstance(check.rule, str) else check.rule(obj)
                return format_problem(check.field, text, getattr(obj, check.field))
        return None


def validate(obj: object, rules: Rules | None = None) -> None:
    """:class:`ConfigError` naming the first rule ``obj`` breaks: its class's
    ``__rules__``, or ``rules``."""
    declared = rules if rules is not None else type(obj).__rules__  # type: ignore[attr-defined]
    problem = declared.problem(obj)
    if problem is not None:
        raise ConfigError(problem)


def _iterate(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        return value.values()
    return value  # type: ignore[no-any-return]


# -- pydantic's errors, in the same format -----------------------------------------


def format_validation_error(err: ValidationError, *, prefix: str = "") -> str:
    """Pydantic's errors as ``field: problem (got value)``, one per line (the
    first :data:`_MAX_PROBLEMS_SHOWN`, then how many more)."""
    problems = err.errors()
    lines = []
    for e in problems[:_MAX_PROBLEMS_SHOWN]:
        loc = ".".join(short_key(p) for p in e["loc"]) or "(top level)"
        msg = " ".join(e["msg"].split("\n"))  # a validator's message: one line too
        if e["type"] == "value_error":
            own = own_error_line([short_key(p) for p in e["loc"]], msg)
            if own is not None:
                lines.append(prefix + own)
                continue
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        got = e.get("input")
        # An unknown field's value helps nobody fix it and may be a secret
        # (a kubeconfig's ``token:`` given as --config): the key alone is shown.
        quiet = isinstance(got, dict) or e["type"] == "extra_forbidden"
        shown = "" if quiet else f" (got {short_repr(got)})"
        lines.append(f"{prefix}{loc}: {msg}{shown}")
    if len(problems) > _MAX_PROBLEMS_SHOWN:
        lines.append(f"{prefix}… and {len(problems) - _MAX_PROBLEMS_SHOWN} more problems")
    return "\n".join(lines)


_FIELD_FIRST = re.compile(r"[a-z_][a-z0-9_.]*: ")
"""A message that begins with the field it is about."""


def own_error_line(loc: Sequence[str], msg: str) -> str | None:
    """A pydantic ``value_error`` at ``loc`` as one line, when its message
    names its field first: a model's own check (``peer: ... applies to
    ...``) without pydantic's "(top level): Value error, ", or a nested
    model's own one-line error (PoolRefill's, raised from its ``__init__``,
    which pydantic calls for a nested mapping too), whose path starts at
    the field it sits in: the outer path joins it once. None otherwise."""
    own = msg.removeprefix("Value error, ")
    if not _FIELD_FIRST.match(own):
        return None
    if loc and not own.startswith((f"{loc[-1]}.", f"{loc[-1]}:")):
        return None
    return "".join(f"{p}." for p in loc[:-1]) + own


_MAX_PROBLEMS_SHOWN = 10
"""A file with thousands of bad values gets the first ten, not a screenful each."""


def short_key(part: object) -> str:
    """A path part (a field, an index, a map's key), shortened like a value."""
    text = str(part)
    if len(text) <= _MAX_SHOWN_CHARS and text.isprintable():
        return text
    return short_repr(text)  # quoted: a newline in a key must not break the line


_MAX_SHOWN_CHARS = 80  # one readable line; a whole object (a Profile, say) is not
_CHEAP_REPR_BITS = 4096  # ~1 233 digits: well inside Python's 4 300-digit str() limit
_LOG10_2 = 0.30102999566398120


def short_repr(value: object) -> str:
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


def refuse_given(rule: str, options: Iterable[tuple[str, object]]) -> None:
    """Refuse the first of ``options`` (name, value) that was given (its value
    not None): ``name: <rule>, but got <value>``. For the options of another
    mode, which a command would otherwise read and ignore; a list shows
    comma-joined."""
    for name, value in options:
        if value is not None:
            shown = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
            raise ConfigError(f"{name}: {rule}, but got {short_repr(shown)}")
