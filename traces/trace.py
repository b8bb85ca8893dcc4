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
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError

from ._errors import TraceFormatError
from .schema import (
    AdmitSpan,
    Arrival,
    ExecSpan,
    LockSpan,
    Record,
    SoftirqSpan,
    StageSpan,
    TraceHeader,
)

__all__ = ["Trace", "TraceFormatError", "read_trace", "write_trace"]

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
        )

    def records(self) -> Iterator[Record]:
        """Every record after the header, in the order the writer puts them."""
        yield from self.arrivals
        yield from self.spans
        yield from self.admits
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


def _fail(path: Path, lineno: int, err: ValidationError, *, prefix: str = "") -> TraceFormatError:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        if e["type"] == "union_tag_invalid":
            loc, msg = "record", f"unknown record kind (known: {e['ctx']['expected_tags']})"
        if e["type"] == "union_tag_not_found":
            loc, msg = "record", "missing field naming the record kind"
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        where = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "(line)"
        lines.append(f"{path.name}:{lineno}: {where}: {msg}{shown}")
    return TraceFormatError("\n".join(lines))


def _open_text(path: Path) -> IO[str]:
    if _is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace file; a malformed one raises :class:`TraceFormatError`."""
    source = Path(path)
    header: TraceHeader | None = None
    records: list[Record] = []
    try:
        with _open_text(source) as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceFormatError(
                        f"{source.name}:{lineno}: malformed JSON: {exc.msg} (column {exc.colno})"
                    ) from None
                if not isinstance(data, dict):
                    raise TraceFormatError(
                        f"{source.name}:{lineno}: expected a JSON object, "
                        f"but got {type(data).__name__}"
                    )
                if header is None:
                    if data.get("record") != "header":
                        raise TraceFormatError(
                            f"{source.name}:{lineno}: record: the first record must be the "
                            f"header, but got {data.get('record')!r}"
                        )
                    try:
                        header = TraceHeader.model_validate(data)
                    except ValidationError as exc:
                        raise _fail(source, lineno, exc, prefix="header.") from None
                    continue
                try:
                    records.append(_RECORD.validate_python(data))
                except ValidationError as exc:
                    raise _fail(source, lineno, exc) from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # incl. a corrupt gzip stream
        raise TraceFormatError(f"{source.name}: cannot read: {exc}") from None
    if header is None:
        raise TraceFormatError(f"{source.name}:1: header: missing (the file is empty)")
    return Trace.of(header, records)
