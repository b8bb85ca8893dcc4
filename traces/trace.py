"""A whole trace in memory, and its JSON Lines file (``.gz`` by suffix).

The writer never leaves half a file: it streams to a temporary file in the
target's directory (same file system, so the rename is atomic), syncs it and
renames it over the target. The reader refuses a malformed file with one
line naming the file, the line number and the field:
``storm.jsonl:17: span.end_s: Input should be a valid number (got 'x')``.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from pydantic import TypeAdapter, ValidationError

from .._params import ConfigError
from ._errors import TraceFormatError
from .files import open_bounded
from .schema import (
    AdmitSpan,
    Arrival,
    ExecSpan,
    LockSpan,
    PoolLevelSample,
    PoolTake,
    Record,
    SoftirqSpan,
    StageSpan,
    TraceHeader,
)

__all__ = [
    "MAX_TRACE_BYTES",
    "MAX_TRACE_LINE_BYTES",
    "Trace",
    "TraceFormatError",
    "read_trace",
    "write_trace",
]

_RECORD: TypeAdapter[Record] = TypeAdapter(Record)
_GZIP_LEVEL = 6
"""Level 9 costs several times the CPU for a few percent on traces."""


@dataclass(frozen=True, kw_only=True, eq=True)
class Trace:
    """A header and the records of one storm, grouped by kind, in file order."""

    header: TraceHeader
    spans: tuple[StageSpan, ...] = ()
    locks: tuple[LockSpan, ...] = ()
    softirqs: tuple[SoftirqSpan, ...] = ()
    admits: tuple[AdmitSpan, ...] = ()
    arrivals: tuple[Arrival, ...] = field(default=())
    #: Processes the sandboxes ran (the ``cni`` runtime); readers that
    #: look at the other kinds never see them.
    execs: tuple[ExecSpan, ...] = ()
    #: Sandboxes' takes from device pools, in time order (a storm with pools).
    pool_takes: tuple[PoolTake, ...] = ()
    #: A node agent's pool levels sampled while the storm ran, in time order
    #: (a storm through an agent: its pools refill between takes).
    pool_levels: tuple[PoolLevelSample, ...] = ()

    @classmethod
    def of(cls, header: TraceHeader, records: Iterable[Record]) -> Trace:
        """Group ``records`` by kind, keeping their order within each kind."""
        groups: dict[type[Any], list[Any]] = {
            StageSpan: [],
            LockSpan: [],
            SoftirqSpan: [],
            AdmitSpan: [],
            Arrival: [],
            ExecSpan: [],
            PoolTake: [],
            PoolLevelSample: [],
        }
        for rec in records:
            groups[type(rec)].append(rec)
        return cls(
            header=header,
            spans=tuple(groups[StageSpan]),
            locks=tuple(groups[LockSpan]),
            softirqs=tuple(groups[SoftirqSpan]),
            admits=tuple(groups[AdmitSpan]),
            arrivals=tuple(groups[Arrival]),
            execs=tuple(groups[ExecSpan]),
            pool_takes=tuple(groups[PoolTake]),
            pool_levels=tuple(groups[PoolLevelSample]),
        )

    @property
    def empty_pool_starts(self) -> int:
        """Sandboxes that found a pool empty at least once (and made that
        device on their own critical path): each once, as the model counts
        :attr:`Result.empty_starts <bootstorm.simulator.Result.empty_starts>`."""
        return len({t.sandbox for t in self.pool_takes if not t.taken})

    def records(self) -> Iterator[Record]:
        """Every record after the header, in the order the writer puts them."""
        yield from self.arrivals
        yield from self.spans
        yield from self.admits
        yield from self.pool_takes
        yield from self.pool_levels
        yield from self.locks
        yield from self.softirqs
        yield from self.execs

    def write(self, path: str | os.PathLike[str]) -> None:
        write_trace(self, path)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Trace:
        return read_trace(path)


def _is_gzip(path: Path) -> bool:
    return path.name.endswith(".gz")


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` as JSON Lines to ``path`` (gzip if it ends in ``.gz``), atomically."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            if _is_gzip(target):
                # mtime=0 and no file name: the same trace gives the same bytes.
                with gzip.GzipFile(
                    filename="", mode="wb", fileobj=raw, compresslevel=_GZIP_LEVEL, mtime=0
                ) as gz:
                    _write_lines(trace, gz.write)
            else:
                _write_lines(trace, raw.write)
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a trace is meant to be shared
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _write_lines(trace: Trace, write: Callable[[bytes], object]) -> None:
    # Blocks of lines: few calls into the file or the compressor.
    block: list[bytes] = [trace.header.model_dump_json().encode()]
    for rec in trace.records():
        block.append(rec.model_dump_json(exclude_none=True).encode())
        if len(block) >= 4096:
            write(b"\n".join(block) + b"\n")
            block.clear()
    if block:
        write(b"\n".join(block) + b"\n")


_MAX_SHOWN_CHARS = 80


def _short(value: object) -> str:
    """``repr(value)`` cut to one readable line (a 1 MiB string is not)."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN_CHARS else f"{text[: _MAX_SHOWN_CHARS - 20]}…"


def _fail(name: str, lineno: int, err: ValidationError, *, prefix: str = "") -> TraceFormatError:
    lines = []
    for e in err.errors()[:_MAX_PROBLEMS_SHOWN]:
        loc = ".".join(_short(p) if len(str(p)) > 64 else str(p) for p in e["loc"])
        msg = " ".join(e["msg"].split("\n"))
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        if e["type"] == "union_tag_invalid":
            loc, msg = "record", f"unknown record kind (known: {e['ctx']['expected_tags']})"
        if e["type"] == "union_tag_not_found":
            loc, msg = "record", "missing field naming the record kind"
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {_short(got)})"
        where = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "(line)"
        lines.append(f"{name}:{lineno}: {where}: {msg}{shown}")
    return TraceFormatError("\n".join(lines))


_MAX_PROBLEMS_SHOWN = 10

#: Longest line of a trace, bytes. The longest recorded is ~1.2 KB (a header
#: with its notes; traces/data/cni/ranking): a line of a mebibyte is not a
#: record, and reading one without a bound could take all the memory.
MAX_TRACE_LINE_BYTES = 1 << 20
#: Most bytes a trace holds once decompressed. The largest recorded is 3.3 MB
#: and 19 400 lines (a 150-sandbox CNI storm with its kernel lock spans);
#: 256 MiB is ~80 times that, read in ~18 s into ~2 GB of records, where a
#: gzip bomb of a few MB would otherwise expand without end.
MAX_TRACE_BYTES = 256 << 20


@contextlib.contextmanager
def _open_binary(path: Path, *, max_bytes: int) -> Iterator[IO[bytes]]:
    """The file's bytes (decompressed if ``.gz``) through the one bounded
    reader: a FIFO, a device or a directory is refused unopened, and a file
    of more than ``max_bytes`` on disk before it is read."""
    with open_bounded(path, max_bytes=max_bytes) as raw:
        if _is_gzip(path):
            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                yield cast(IO[bytes], gz)
        else:
            yield raw


def _shown_name(path: Path) -> str:
    name = path.name if path.name else str(path)
    if not name.isprintable():
        name = repr(name)
    return name if len(name) <= 120 else f"{name[:100]}… ({len(name)} characters)"


def _parse_line(name: str, lineno: int, raw: bytes) -> Any:
    """One line's JSON value, or :class:`TraceFormatError` naming the line and why."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            f"{name}:{lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
            f"{exc.start + 1})"
        ) from None
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{name}:{lineno}: malformed JSON: {exc.msg} (column {exc.colno})"
        ) from None
    except ValueError:
        # An int of over 4 300 digits (Python's limit on converting one); a
        # shorter one goes on to its field's range. (A hook per number to
        # refuse long ones sooner made reading half again as slow.)
        raise TraceFormatError(
            f"{name}:{lineno}: a number of more than {sys.get_int_max_str_digits()} digits"
        ) from None
    except RecursionError:
        raise TraceFormatError(f"{name}:{lineno}: JSON nested too deeply") from None


def _check_sandbox(name: str, lineno: int, record: Record, sandboxes: int) -> None:
    sandbox = getattr(record, "sandbox", None)
    if sandbox is not None and sandbox >= sandboxes:
        raise TraceFormatError(
            f"{name}:{lineno}: sandbox: must be below the header's scenario.sandboxes "
            f"({sandboxes}), but got {sandbox}"
        )


def _check_stage(
    name: str, lineno: int, record: Record, stages: tuple[str, ...], seen: set[tuple[int, str]]
) -> None:
    """A stage span or admission wait names one of the header's stages, and
    a sandbox is in a stage once: a stage of another name was counted as a
    stage of its own, and a span twice as two visits, each changing a fit."""
    if not isinstance(record, StageSpan | AdmitSpan):
        return
    if record.stage not in stages:
        raise TraceFormatError(
            f"{name}:{lineno}: stage: must be one of the header's stages "
            f"({', '.join(stages)}), but got {_short(record.stage)}"
        )
    if isinstance(record, StageSpan):
        key = (record.sandbox, record.stage)
        if key in seen:
            raise TraceFormatError(
                f"{name}:{lineno}: span: sandbox {record.sandbox} is in stage {record.stage} "
                "a second time"
            )
        seen.add(key)


def read_trace(path: str | os.PathLike[str], *, max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """Read a trace file; a malformed one raises :class:`TraceFormatError`.

    The file is read line by line with bounds (:data:`MAX_TRACE_LINE_BYTES`,
    ``max_bytes`` decompressed, the schema's ranges): a corrupt or
    truncated gzip stream, a line that is not UTF-8 or JSON, nested too
    deeply, a huge number, a record of the wrong shape or a sandbox the
    header does not count all end in one line naming the file and the line.
    """
    source = Path(path)
    name = _shown_name(source)
    header: TraceHeader | None = None
    records: list[Record] = []
    spans_seen: set[tuple[int, str]] = set()
    total = 0
    try:
        with _open_binary(source, max_bytes=max_bytes) as fh:
            lineno = 0
            while raw := fh.readline(MAX_TRACE_LINE_BYTES + 1):
                lineno += 1
                total += len(raw)
                if len(raw) > MAX_TRACE_LINE_BYTES:
                    raise TraceFormatError(
                        f"{name}:{lineno}: a line longer than {MAX_TRACE_LINE_BYTES} bytes; "
                        "not a trace record"
                    )
                if total > max_bytes:
                    raise TraceFormatError(
                        f"{name}: more than {max_bytes} bytes"
                        f"{' once decompressed' if _is_gzip(source) else ''} "
                        f"(at line {lineno}); not a trace bootstorm reads"
                    )
                if not raw.strip():
                    continue
                data = _parse_line(name, lineno, raw)
                if not isinstance(data, dict):
                    raise TraceFormatError(
                        f"{name}:{lineno}: expected a JSON object, but got {type(data).__name__}"
                    )
                if header is None:
                    if data.get("record") != "header":
                        raise TraceFormatError(
                            f"{name}:{lineno}: record: the first record must be the "
                            f"header, but got {_short(data.get('record'))}"
                        )
                    try:
                        header = TraceHeader.model_validate(data)
                    except ValidationError as exc:
                        raise _fail(name, lineno, exc, prefix="header.") from None
                    continue
                try:
                    record = _RECORD.validate_python(data)
                except ValidationError as exc:
                    raise _fail(name, lineno, exc) from None
                _check_sandbox(name, lineno, record, header.scenario.sandboxes)
                _check_stage(name, lineno, record, header.stages, spans_seen)
                records.append(record)
    except (OSError, EOFError, zlib.error) as exc:  # a corrupt or truncated gzip stream
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TraceFormatError(f"{name}: cannot read: {reason}") from None
    except ConfigError as exc:  # the reader's refusal: not a file, too large, unreadable
        raise TraceFormatError(str(exc)) from None
    if header is None:
        raise TraceFormatError(f"{name}:1: header: missing (the file is empty)")
    return Trace.of(header, records)
