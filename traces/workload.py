"""Workloads: function invocations from real traces or a generator, and the
sandbox starts a keep-alive policy makes of them on one node.

Sources (each read streaming, row by row, bounded by :data:`MAX_TRACE_BYTES`
and :data:`MAX_INVOCATIONS`; a bad row is one line naming the file, the line,
the field and the value):

- **Azure Functions 2019** (:func:`read_azure_2019`). The layout is the
  published one, `AzureFunctionsDataset2019.md` of
  https://github.com/Azure/AzurePublicDataset (revision 2, 2020-06-18):
  ``invocations_per_function_md.anon.dNN.csv`` has the columns ``HashOwner,
  HashApp, HashFunction, Trigger`` and then ``1`` .. ``1440``, the number of
  invocations of the function in each minute of the day;
  ``function_durations_percentiles.anon.dNN.csv`` has ``HashOwner, HashApp,
  HashFunction, Average, Count, Minimum, Maximum, percentile_Average_0`` ..
  (milliseconds; ``Average`` is used as each invocation's execution time);
  ``app_memory_percentiles.anon.dNN.csv`` has ``HashOwner, HashApp,
  SampleCount, AverageAllocatedMb, AverageAllocatedMb_pct1`` .. (MB;
  ``AverageAllocatedMb`` is kept per application). A minute's invocations
  are spread over the minute **uniformly at random** from a generator seeded
  by ``seed`` and the function's id: given its count, a Poisson stream's
  arrivals in a minute are independent and uniform, and spreading them
  evenly instead would line every function's lone invocation up at the same
  second of the minute, a burst the trace never showed. Seeding per function
  keeps a function's times the same whatever else the node holds.
- **Azure Functions 2021** (:func:`read_azure_2021`), from
  `AzureFunctionsInvocationTrace2021.md` of the same repository (revision 1,
  2021-11-30): one row per invocation, ``app, func, end_timestamp,
  duration`` (seconds; ``func`` is unique only within its ``app``). Rows are
  not in time order in the published file (its own sample is not): they are
  sorted here; an invocation starts at ``end_timestamp - duration`` (cut at 0).
- **A CSV of start times** (:func:`read_start_times_csv`): a header with a
  ``start_s`` column (seconds, in non-decreasing order) and optionally
  ``function``; lines starting with ``#`` are comments, so a workload file
  written here is one too.
- **A Markov-modulated Poisson process** (:func:`mmpp`): two states, each a
  Poisson stream of its own rate, left after an exponential sojourn.

A node takes a share of the applications (:func:`app_selected`: a stable hash
of the application's id, so the same share picks the same applications on
every run and a larger share holds every application a smaller one does), a
window of the trace's time and a compression (times divided by a factor).

:mod:`bootstorm.traces.keepalive` decides which invocations start a sandbox.
This module is in the bottom layer: it imports only the leaf ``_params`` and
:mod:`bootstorm.traces.files`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from .._params import ConfigError, DuplicateKeyError, Shown, format_problem, unique_keys
from .files import open_bounded, shown_path

__all__ = [
    "AZURE_2019_INVOCATION_COLUMNS",
    "AZURE_2021_COLUMNS",
    "MAX_INVOCATIONS",
    "MAX_TRACE_BYTES",
    "MINUTES_PER_DAY",
    "WORKLOAD_FORMAT",
    "Invocations",
    "MmppParameters",
    "Workload",
    "app_selected",
    "format_workload",
    "mmpp",
    "read_azure_2019",
    "read_azure_2021",
    "read_start_times_csv",
    "read_trace_file",
    "read_workload",
    "trace_layout",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]

#: Largest trace file read (bytes). A day of the 2019 invocation counts is
#: about 140 MB and the whole 2021 trace about 130 MB; a file of gigabytes is
#: not one day of a trace.
MAX_TRACE_BYTES = 2 << 30
#: Most invocations (in the window, on the node's share) held at once: 8 bytes
#: of start, 8 of end and 8 of indices each, 240 MB at the cap. Cut a larger
#: trace with ``--node-share`` or ``--window``.
MAX_INVOCATIONS = 10_000_000
#: Minutes in one file of the 2019 trace (columns ``1`` .. ``1440``).
MINUTES_PER_DAY = 1440
#: Latest time a trace's clock may show, s (115 days: the 2021 trace spans
#: two weeks, a 2019 file one day). The simulator takes arrivals up to the
#: same (``models.scenario.MAX_ARRIVAL_S``, held equal by a test), so a
#: workload this reads is one it can run.
MAX_TIME_S = 1e7
#: Most memory an application of the 2019 trace may say it allocated (MiB):
#: 1 TiB, beyond any node's sandbox (the trace's are tens to thousands).
MAX_FUNCTION_MIB = float(1 << 20)
AZURE_2019_KEYS = ("HashOwner", "HashApp", "HashFunction", "Trigger")
AZURE_2019_INVOCATION_COLUMNS = (*AZURE_2019_KEYS, *(str(m) for m in range(1, 1441)))
AZURE_2019_DURATION_COLUMNS = ("HashOwner", "HashApp", "HashFunction", "Average")
AZURE_2019_MEMORY_COLUMNS = ("HashOwner", "HashApp", "AverageAllocatedMb")
AZURE_2021_COLUMNS = ("app", "func", "end_timestamp", "duration")
START_TIMES_COLUMN = "start_s"
#: The first line of a workload file, then a ``#`` line of JSON (the header).
WORKLOAD_FORMAT = "# bootstorm workload 1"
_LONGEST_NAME = 200  # characters of an app or function id (the hashes are 64)


# -- records -----------------------------------------------------------------------


def _frozen(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.flags.writeable = False
    return array


@dataclass(frozen=True, slots=True, eq=False)
class Invocations:
    """Function invocations, sorted by start: what a keep-alive policy reads.

    ``times`` and ``ends`` are seconds of the trace's clock (an end is the
    start plus the execution time, the start itself where that is unknown);
    ``app`` and ``function`` index ``apps`` and ``functions`` (a function's
    name is ``app/function``); ``memory_mib`` is per function (NaN: unknown).
    ``begin_s`` .. ``end_s`` is the span of the trace they were read from (or
    its window)."""

    times: FloatArray
    ends: FloatArray
    app: IntArray
    function: IntArray
    apps: tuple[str, ...]
    functions: tuple[str, ...]
    memory_mib: tuple[float, ...]
    source: str
    parameters: Mapping[str, Any]
    begin_s: float
    end_s: float

    def __len__(self) -> int:
        return int(self.times.size)


@dataclass(frozen=True, slots=True, eq=False)
class Workload:
    """One node's sandbox starts: ``starts`` in seconds from 0, sorted, with
    the function each belongs to (``function`` indexes ``functions``), where
    they came from (``source``) and every parameter that made them (the
    reader's, the node's and the policy's), ``duration_s`` the stream's span
    and ``invocations`` how many invocations the starts were chosen from."""

    starts: FloatArray
    function: IntArray
    functions: tuple[str, ...]
    source: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    invocations: int = 0
    memory_mib: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.starts.shape != self.function.shape:
            raise ValueError("starts and function must be of one length")
        if self.starts.size and np.any(np.diff(self.starts) < 0):
            raise ValueError("starts must be sorted")

    def __len__(self) -> int:
        return int(self.starts.size)


# -- node share --------------------------------------------------------------------


def _unit_hash(name: str) -> float:
    """``name``'s place in [0, 1): the first 8 bytes of its SHA-256."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def app_selected(app: str, share: float) -> bool:
    """Whether a node holding ``share`` of the applications holds ``app``: its
    hash is below the share, so the choice is the same on every run and a
    larger share holds every application a smaller one does. Applications,
    not functions: Azure Functions allocates and warms whole applications
    (`AzureFunctionsDataset2019.md`, Introduction)."""
    return share >= 1.0 or _unit_hash(app) < share


def _seed_of(seed: int, name: str) -> list[int]:
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
    return [seed, int.from_bytes(digest[:8], "big")]


class _Filter:
    """The node's share and the window, decided while a trace streams."""

    def __init__(self, share: float, window: tuple[float, float] | None) -> None:
        self.share = share
        self.begin = 0.0 if window is None else window[0]
        self.end = math.inf if window is None else window[1]
        self._apps: dict[str, bool] = {}

    def app(self, app: str) -> bool:
        kept = self._apps.get(app)
        if kept is None:
            kept = self._apps[app] = app_selected(app, self.share)
        return kept

    def time(self, t: float) -> bool:
        return self.begin <= t < self.end


def check_window(window: tuple[float, float] | None) -> None:
    if window is None:
        return
    begin, end = window
    if not (math.isfinite(begin) and begin >= 0):
        raise ConfigError(format_problem("window", "must start at a time >= 0 s", begin))
    if not (end > begin):
        raise ConfigError(
            format_problem("window", "must end after it starts", Shown(f"{begin:g}:{end:g}"))
        )


def check_share(share: float) -> None:
    if not (math.isfinite(share) and 0 < share <= 1):
        raise ConfigError(format_problem("node_share", "must be a fraction in (0, 1]", share))


def _check_window_in_trace(
    window: tuple[float, float] | None, trace_end: float, path: str | os.PathLike[str] | None
) -> None:
    if window is not None and window[0] >= trace_end:
        where = f"{shown_path(path)}: " if path is not None else ""
        raise ConfigError(
            where
            + format_problem("window", f"starts past the trace's end at {trace_end:g} s", window[0])
        )


# -- CSV reading -------------------------------------------------------------------


def _rows(path: str | os.PathLike[str]) -> Generator[tuple[int, list[str]], None, None]:
    """``path``'s CSV rows with their line numbers, ``#`` lines and blank
    lines skipped; not UTF-8 or not CSV is one line naming the file."""
    with open_bounded(path, max_bytes=MAX_TRACE_BYTES) as raw:
        # Decoded line by line: a text wrapper decodes ahead in blocks, and
        # blamed the block's first line for a bad byte further on.
        for number, data in enumerate(raw, start=1):
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"{shown_path(path)}: line {number}: not UTF-8 text (byte "
                    f"0x{data[exc.start]:02x} at column {exc.start + 1})"
                ) from None
            if line.startswith("#") or not line.strip():
                continue
            try:
                yield number, next(csv.reader([line]))
            except csv.Error as exc:
                raise ConfigError(f"{shown_path(path)}: line {number}: not CSV ({exc})") from None


def _problem(
    path: str | os.PathLike[str], line: int, name: str, rule: str, value: object
) -> ConfigError:
    return ConfigError(f"{shown_path(path)}: line {line}: {format_problem(name, rule, value)}")


def _columns(
    path: str | os.PathLike[str], line: int, header: Sequence[str], needed: Sequence[str]
) -> dict[str, int]:
    where: dict[str, int] = {}
    for i, name in enumerate(header):
        if where.setdefault(name.strip(), i) != i:
            raise _problem(
                path,
                line,
                "header",
                f"names column {name.strip()} twice",
                Shown(f"{len(header)} columns"),
            )
    for name in needed:
        if name not in where:
            raise _problem(
                path, line, "header", f"missing column {name}", Shown(f"{len(header)} columns")
            )
    return {name: where[name] for name in needed}


def _number(path: str | os.PathLike[str], line: int, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _problem(
            path, line, name, "must be a number", Shown(f"{len(text)} characters, not a number")
        ) from None
    if not math.isfinite(value):
        raise _problem(path, line, name, "must be a finite number", value)
    return value


def _seconds(path: str | os.PathLike[str], line: int, name: str, text: str) -> float:
    """A time of the trace's clock, or a duration: 0..:data:`MAX_TIME_S` s."""
    value = _number(path, line, name, text)
    if not 0.0 <= value <= MAX_TIME_S:
        raise _problem(path, line, name, f"must be within 0..{MAX_TIME_S:g} s (115 days)", value)
    return value


def _name(
    path: str | os.PathLike[str], line: int, column: str, text: str, *, slash: bool = False
) -> str:
    longest = 2 * _LONGEST_NAME + 1 if slash else _LONGEST_NAME
    if not text or len(text) > longest or not text.isprintable() or ("/" in text and not slash):
        raise _problem(
            path,
            line,
            column,
            f"must be an id of 1..{longest} printable characters" + ("" if slash else ", no '/'"),
            Shown(f"{len(text)} characters"),
        )
    return text


def _first_row(
    path: str | os.PathLike[str], rows: Iterator[tuple[int, list[str]]]
) -> tuple[int, list[str]]:
    try:
        return next(rows)
    except StopIteration:
        raise ConfigError(f"{shown_path(path)}: empty (expected a CSV header)") from None


def trace_layout(header: Sequence[str]) -> str | None:
    """Which source a CSV header is: ``azure-2019``, ``azure-2021``, ``csv``, or None."""
    names = {h.strip() for h in header}
    if "HashFunction" in names or "HashApp" in names:
        return "azure-2019"
    if "end_timestamp" in names or "func" in names:
        return "azure-2021"
    if START_TIMES_COLUMN in names:
        return "csv"
    return None


class _Collector:
    """Invocations gathered in arrays, chunk by chunk (never a dict a row)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.times: list[FloatArray] = []
        self.ends: list[FloatArray] = []
        self.function: list[IntArray] = []
        self.count = 0
        self.apps: dict[str, int] = {}
        self.functions: dict[str, int] = {}
        self.function_app: list[int] = []

    def function_index(self, app: str, func: str) -> int:
        name = f"{app}/{func}"
        index = self.functions.get(name)
        if index is None:
            index = self.functions[name] = len(self.functions)
            self.function_app.append(self.apps.setdefault(app, len(self.apps)))
        return index

    def check_room(self, more: int) -> None:
        """Refuse, naming the cap, before ``more`` invocations past it are made."""
        if self.count + more > MAX_INVOCATIONS:
            raise ConfigError(
                f"{shown_path(self.path)}: more than {MAX_INVOCATIONS:,} invocations in the "
                "window on this node; take a smaller --node-share or --window"
            )

    def add(self, times: FloatArray, ends: FloatArray, function: int) -> None:
        self.check_room(times.size)
        self.count += times.size
        self.times.append(times)
        self.ends.append(ends)
        self.function.append(np.full(times.size, function, dtype=np.int32))

    def invocations(
        self,
        *,
        source: str,
        parameters: Mapping[str, Any],
        begin_s: float,
        end_s: float,
        memory: Mapping[str, float] | None = None,
    ) -> Invocations:
        times = np.concatenate(self.times) if self.times else np.zeros(0)
        ends = np.concatenate(self.ends) if self.ends else np.zeros(0)
        function = np.concatenate(self.function) if self.function else np.zeros(0, dtype=np.int32)
        order = np.argsort(times, kind="stable")
        function_app = np.asarray(self.function_app, dtype=np.int32)
        apps = tuple(self.apps)
        functions = tuple(self.functions)
        memory_mib = tuple(
            float(memory.get(apps[function_app[i]], math.nan)) if memory else math.nan
            for i in range(len(functions))
        )
        return Invocations(
            times=_frozen(times[order].astype(np.float64)),
            ends=_frozen(ends[order].astype(np.float64)),
            app=_frozen(function_app[function[order]] if functions else function[order]),
            function=_frozen(function[order].astype(np.int32)),
            apps=apps,
            functions=functions,
            memory_mib=memory_mib,
            source=source,
            parameters=dict(parameters),
            begin_s=begin_s,
            end_s=end_s,
        )


# -- Azure Functions 2019 ----------------------------------------------------------


def _azure_2019_table(
    path: str | os.PathLike[str],
    keys: Sequence[str],
    value: str,
    keep: _Filter,
    *,
    high: float,
    unit: str,
) -> dict[str, float]:
    """``value`` (0..``high`` ``unit``) by ``/``-joined ``keys`` (app, or
    app/function) from a durations or memory file of the 2019 trace, for the
    node's applications."""
    rows = _rows(path)
    line, header = _first_row(path, rows)
    where = _columns(path, line, header, (*keys, value))
    out: dict[str, float] = {}
    for line, row in rows:
        if len(row) != len(header):
            raise _problem(
                path, line, "row", f"must have {len(header)} fields", Shown(str(len(row)))
            )
        app = _name(path, line, "HashApp", row[where["HashApp"]])
        if not keep.app(app):
            continue
        number = _number(path, line, value, row[where[value]])
        if not 0.0 <= number <= high:
            raise _problem(path, line, value, f"must be within 0..{high:g} {unit}", number)
        names = [_name(path, line, k, row[where[k]]) for k in keys if k != "HashOwner"]
        # A key twice keeps the last row, as before: whether the published
        # files repeat one (a function under two triggers, say) is not
        # something these small test files can tell, and a refusal would
        # make a real day unreadable.
        out["/".join(names)] = number
        if len(out) > MAX_INVOCATIONS:
            raise ConfigError(f"{shown_path(path)}: more than {MAX_INVOCATIONS:,} rows")
    return out


def read_azure_2019(
    invocations_csv: str | os.PathLike[str],
    *,
    durations_csv: str | os.PathLike[str] | None = None,
    memory_csv: str | os.PathLike[str] | None = None,
    seed: int = 0,
    node_share: float = 1.0,
    window: tuple[float, float] | None = None,
) -> Invocations:
    """The invocations of one day of the Azure Functions 2019 trace (the
    layout of `AzureFunctionsDataset2019.md`, see the module's docstring),
    on a node holding ``node_share`` of the applications, in ``window``
    (seconds of the day; its end is cut to the day's end).

    Each minute's count is spread uniformly over the minute by a generator
    seeded by ``seed`` and the function's id. With ``durations_csv`` an
    invocation ends ``Average`` ms after it starts (else at its start); with
    ``memory_csv`` each function carries its application's
    ``AverageAllocatedMb``. Read row by row: a day is never held as text."""
    check_share(node_share)
    check_window(window)
    day_s = 60.0 * MINUTES_PER_DAY
    _check_window_in_trace(window, day_s, invocations_csv)
    keep = _Filter(node_share, window)
    durations = (
        _azure_2019_table(
            durations_csv,
            ("HashOwner", "HashApp", "HashFunction"),
            "Average",
            keep,
            high=MAX_TIME_S * 1e3,
            unit="ms",
        )
        if durations_csv is not None
        else {}
    )
    memory = (
        _azure_2019_table(
            memory_csv,
            ("HashOwner", "HashApp"),
            "AverageAllocatedMb",
            keep,
            high=MAX_FUNCTION_MIB,
            unit="MiB",
        )
        if memory_csv is not None
        else None
    )
    rows = _rows(invocations_csv)
    line, header = _first_row(invocations_csv, rows)
    names = [h.strip() for h in header]
    if len(names) != len(AZURE_2019_INVOCATION_COLUMNS):
        _columns(invocations_csv, line, header, AZURE_2019_KEYS)  # a key missing: named
        raise _problem(
            invocations_csv,
            line,
            "header",
            f"must have {len(AZURE_2019_INVOCATION_COLUMNS)} columns "
            f"(HashOwner, HashApp, HashFunction, Trigger, 1..{MINUTES_PER_DAY})",
            Shown(str(len(names))),
        )
    for i, expected in enumerate(AZURE_2019_INVOCATION_COLUMNS):
        if names[i] != expected:
            raise _problem(
                invocations_csv,
                line,
                "header",
                f"column {i + 1} must be {expected}",
                Shown("another name"),
            )
    first_minute = int(keep.begin // 60)
    last_minute = min(MINUTES_PER_DAY, math.ceil(min(keep.end, day_s) / 60))
    collector = _Collector(invocations_csv)
    for line, row in rows:
        if len(row) != len(header):
            raise _problem(
                invocations_csv,
                line,
                "row",
                f"must have {len(header)} fields",
                Shown(str(len(row))),
            )
        app = _name(invocations_csv, line, "HashApp", row[1])
        func = _name(invocations_csv, line, "HashFunction", row[2])
        try:
            counts = np.array(row[4 + first_minute : 4 + last_minute], dtype=np.int64)
        except (ValueError, OverflowError):
            counts = None
        if counts is None or np.any(counts < 0) or np.any(counts > MAX_INVOCATIONS):
            for m, text in enumerate(row[4:], start=1):
                try:
                    n = int(text)
                except ValueError:
                    raise _problem(
                        invocations_csv,
                        line,
                        f"minute {m}",
                        "must be a count of invocations",
                        Shown(f"{text[:24]!r}, not an integer"),
                    ) from None
                if not 0 <= n <= MAX_INVOCATIONS:
                    raise _problem(
                        invocations_csv,
                        line,
                        f"minute {m}",
                        f"must be a count within 0..{MAX_INVOCATIONS:,}",
                        Shown(text[:24]),
                    )
        if not keep.app(app):
            continue
        assert counts is not None
        total = int(counts.sum())
        if total == 0:
            continue
        collector.check_room(total)  # before a day of them is drawn
        index = collector.function_index(app, func)
        rng = np.random.default_rng(_seed_of(seed, f"{app}/{func}"))
        minutes = np.repeat(np.arange(first_minute, last_minute, dtype=np.float64), counts)
        times = np.sort(60.0 * minutes + rng.uniform(0.0, 60.0, total))
        inside = (times >= keep.begin) & (times < keep.end)
        times = times[inside]
        seconds = durations.get(f"{app}/{func}", 0.0) / 1000.0
        collector.add(times, times + seconds, index)
    end_s = min(keep.end, day_s)
    return collector.invocations(
        source="azure-2019",
        parameters={
            "invocations_csv": os.fspath(invocations_csv),
            "durations_csv": None if durations_csv is None else os.fspath(durations_csv),
            "memory_csv": None if memory_csv is None else os.fspath(memory_csv),
            "spread": "uniform within each minute",
            "seed": seed,
        },
        begin_s=keep.begin,
        end_s=end_s,
        memory=memory,
    )


# -- Azure Functions 2021 ----------------------------------------------------------


def read_azure_2021(
    path: str | os.PathLike[str],
    *,
    node_share: float = 1.0,
    window: tuple[float, float] | None = None,
) -> Invocations:
    """The invocations of the Azure Functions 2021 trace (the layout of
    `AzureFunctionsInvocationTrace2021.md`: ``app, func, end_timestamp,
    duration`` in seconds, rows in any order), on a node holding
    ``node_share`` of the applications, starting in ``window``."""
    check_share(node_share)
    check_window(window)
    keep = _Filter(node_share, window)
    rows = _rows(path)
    line, header = _first_row(path, rows)
    where = _columns(path, line, header, AZURE_2021_COLUMNS)
    collector = _Collector(path)
    chunk_t: list[float] = []
    chunk_e: list[float] = []
    chunk_f: list[int] = []
    trace_end = 0.0

    def flush() -> None:
        if chunk_t:
            collector.add(np.asarray(chunk_t), np.asarray(chunk_e), 0)
            collector.function[-1] = np.asarray(chunk_f, dtype=np.int32)
            chunk_t.clear()
            chunk_e.clear()
            chunk_f.clear()

    for line, row in rows:
        if len(row) != len(header):
            raise _problem(
                path, line, "row", f"must have {len(header)} fields", Shown(str(len(row)))
            )
        end = _seconds(path, line, "end_timestamp", row[where["end_timestamp"]])
        duration = _seconds(path, line, "duration", row[where["duration"]])
        app = _name(path, line, "app", row[where["app"]])
        func = _name(path, line, "func", row[where["func"]])
        trace_end = max(trace_end, end)
        start = max(0.0, end - duration)
        if not (keep.app(app) and keep.time(start)):
            continue
        chunk_t.append(start)
        chunk_e.append(end)
        chunk_f.append(collector.function_index(app, func))
        if len(chunk_t) >= 65_536:
            flush()
    flush()
    _check_window_in_trace(window, trace_end, path)
    return collector.invocations(
        source="azure-2021",
        parameters={"trace_csv": os.fspath(path)},
        begin_s=keep.begin,
        end_s=min(keep.end, trace_end),
    )


# -- a CSV of start times ----------------------------------------------------------


def read_start_times_csv(
    path: str | os.PathLike[str],
    *,
    node_share: float = 1.0,
    window: tuple[float, float] | None = None,
) -> Invocations:
    """Start times from a CSV with a ``start_s`` column (seconds >= 0, in
    non-decreasing order) and optionally ``function`` (else every row is the
    function ``csv``); other columns are ignored, ``#`` lines are comments
    (a workload file written by :func:`format_workload` is one)."""
    check_share(node_share)
    check_window(window)
    keep = _Filter(node_share, window)
    rows = _rows(path)
    line, header = _first_row(path, rows)
    where = _columns(path, line, header, (START_TIMES_COLUMN,))
    func_at = next((i for i, h in enumerate(header) if h.strip() == "function"), None)
    collector = _Collector(path)
    chunk: list[float] = []
    chunk_f: list[int] = []
    last = -math.inf

    def flush() -> None:
        if chunk:
            times = np.asarray(chunk)
            collector.add(times, times, 0)
            collector.function[-1] = np.asarray(chunk_f, dtype=np.int32)
            chunk.clear()
            chunk_f.clear()

    for line, row in rows:
        if len(row) != len(header):
            raise _problem(
                path, line, "row", f"must have {len(header)} fields", Shown(str(len(row)))
            )
        t = _seconds(path, line, START_TIMES_COLUMN, row[where[START_TIMES_COLUMN]])
        if t < last:
            raise _problem(
                path, line, START_TIMES_COLUMN, f"must not be before the previous row's {last:g}", t
            )
        last = t
        func = "csv" if func_at is None else _name(path, line, "function", row[func_at], slash=True)
        if not (keep.app(func) and keep.time(t)):
            continue
        chunk.append(t)
        chunk_f.append(collector.function_index(func, "0") if func_at is not None else 0)
        if func_at is None and not collector.functions:
            collector.function_index("csv", "0")
        if len(chunk) >= 65_536:
            flush()
    flush()
    trace_end = max(last, 0.0)
    if math.isfinite(last):
        trace_end = last + 1e-9  # the last start lies inside the trace
    _check_window_in_trace(window, trace_end, path)
    inv = collector.invocations(
        source="csv",
        parameters={"start_times_csv": os.fspath(path)},
        begin_s=keep.begin,
        end_s=min(keep.end, trace_end),
    )
    # A start-time CSV's functions are plain names, not app/function pairs.
    functions = tuple(name.removesuffix("/0") for name in inv.functions)
    return Invocations(**{**_fields(inv), "functions": functions})


def _fields(inv: Invocations) -> dict[str, Any]:
    return {name: getattr(inv, name) for name in Invocations.__dataclass_fields__}


def read_trace_file(
    path: str | os.PathLike[str],
    *,
    durations_csv: str | os.PathLike[str] | None = None,
    memory_csv: str | os.PathLike[str] | None = None,
    seed: int = 0,
    node_share: float = 1.0,
    window: tuple[float, float] | None = None,
) -> Invocations:
    """Any of the three CSV sources, told apart by the header (see :func:`trace_layout`)."""
    rows = _rows(path)
    try:
        line, header = _first_row(path, rows)
    finally:
        rows.close()
    layout = trace_layout(header)
    if layout is None:
        raise _problem(
            path,
            line,
            "header",
            "must be the Azure Functions 2019 invocation counts (HashOwner, HashApp, "
            "HashFunction, Trigger, 1..1440), the 2021 invocations (app, func, "
            "end_timestamp, duration) or start times (start_s[, function])",
            Shown(f"{len(header)} other columns"),
        )
    if layout != "azure-2019" and (durations_csv is not None or memory_csv is not None):
        name = "durations" if durations_csv is not None else "memory"
        raise ConfigError(
            format_problem(
                name, "goes with an Azure Functions 2019 invocations file", Shown(layout)
            )
        )
    if layout == "azure-2019":
        return read_azure_2019(
            path,
            durations_csv=durations_csv,
            memory_csv=memory_csv,
            seed=seed,
            node_share=node_share,
            window=window,
        )
    if layout == "azure-2021":
        return read_azure_2021(path, node_share=node_share, window=window)
    return read_start_times_csv(path, node_share=node_share, window=window)


# -- a Markov-modulated Poisson process ---------------------------------------------


@dataclass(frozen=True, slots=True)
class MmppParameters:
    """A two-state MMPP: a quiet state and a burst state, each a Poisson
    stream of invocations, left after an exponentially distributed sojourn.

    The defaults are this module's assumption, not a fit to a trace: a quiet
    node at 2 invocations/s for a mean 5 min and bursts of 40/s for a mean
    20 s (a 20x peak-to-quiet ratio, a burst every ~5 min). Fit them to the
    per-minute counts of the 2019 trace (or read that trace instead) before
    taking a planning number from them."""

    rate_low: float = 2.0
    rate_high: float = 40.0
    mean_low_s: float = 300.0
    mean_high_s: float = 20.0
    duration_s: float = 3600.0
    functions: int = 1000
    """Invocations go to this many functions, uniformly (for the node's share)."""

    def __post_init__(self) -> None:
        for name in ("rate_low", "rate_high"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= 1e6):
                raise ConfigError(format_problem(name, "must be a rate in 0..1e6 per s", value))
        for name in ("mean_low_s", "mean_high_s", "duration_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.001 <= value <= 1e8):
                raise ConfigError(format_problem(name, "must be in 0.001..1e8 s", value))
        if not 1 <= self.functions <= 1_000_000:
            raise ConfigError(format_problem("functions", "must be in 1..1000000", self.functions))
        expected = self.stationary_rate * self.duration_s
        if expected > MAX_INVOCATIONS / 2:
            raise ConfigError(
                format_problem(
                    "duration_s",
                    f"makes {expected:.3g} invocations on average, more than "
                    f"{MAX_INVOCATIONS // 2:,}; shorten it or lower the rates",
                    self.duration_s,
                )
            )

    @property
    def stationary_rate(self) -> float:
        """The long-run rate: each state's rate weighted by its mean sojourn."""
        total = self.mean_low_s + self.mean_high_s
        return (self.rate_low * self.mean_low_s + self.rate_high * self.mean_high_s) / total


def mmpp(params: MmppParameters, rng: np.random.Generator) -> Invocations:
    """Invocations of a two-state MMPP over ``0 .. duration_s``, drawn from
    ``rng`` (the first state from the stationary distribution)."""
    p_high = params.mean_high_s / (params.mean_low_s + params.mean_high_s)
    state = int(rng.random() < p_high)
    chunks: list[FloatArray] = []
    t = 0.0
    while t < params.duration_s:
        mean = params.mean_high_s if state else params.mean_low_s
        rate = params.rate_high if state else params.rate_low
        stay = min(float(rng.exponential(mean)), params.duration_s - t)
        n = int(rng.poisson(rate * stay))
        chunks.append(t + rng.uniform(0.0, stay, n))
        t += stay
        state = 1 - state
    times = np.sort(np.concatenate(chunks)) if chunks else np.zeros(0)
    function = rng.integers(0, params.functions, times.size).astype(np.int32)
    names = tuple(f"mmpp-{i:06d}" for i in range(params.functions))
    return Invocations(
        times=_frozen(times),
        ends=_frozen(times.copy()),
        app=_frozen(function.copy()),
        function=_frozen(function),
        apps=names,
        functions=names,
        memory_mib=(math.nan,) * params.functions,
        source="mmpp",
        parameters={
            "rate_low": params.rate_low,
            "rate_high": params.rate_high,
            "mean_low_s": params.mean_low_s,
            "mean_high_s": params.mean_high_s,
            "duration_s": params.duration_s,
            "functions": params.functions,
            "defaults": "assumed (see MmppParameters), not fitted to a trace",
        },
        begin_s=0.0,
        end_s=params.duration_s,
    )


def select(
    inv: Invocations, *, node_share: float = 1.0, window: tuple[float, float] | None = None
) -> Invocations:
    """``inv`` on a node holding ``node_share`` of its applications, starting
    in ``window`` (for a source not filtered as it was read: the MMPP)."""
    check_share(node_share)
    check_window(window)
    _check_window_in_trace(window, inv.end_s, None)
    keep = _Filter(node_share, window)
    kept_apps = np.array([keep.app(a) for a in inv.apps], dtype=bool)
    mask = (inv.times >= keep.begin) & (inv.times < keep.end)
    if inv.apps:
        mask &= kept_apps[inv.app]
    return Invocations(
        **{
            **_fields(inv),
            "times": _frozen(inv.times[mask]),
            "ends": _frozen(inv.ends[mask]),
            "app": _frozen(inv.app[mask]),
            "function": _frozen(inv.function[mask]),
            "begin_s": max(inv.begin_s, keep.begin),
            "end_s": min(inv.end_s, keep.end),
        }
    )


# -- the workload file -------------------------------------------------------------


def format_workload(workload: Workload) -> str:
    """The workload file's text: a format line, a ``#`` line of JSON (source,
    parameters, span, counts, functions' memory), then ``start_s,function``
    rows in time order. Write it with a whole-or-nothing writer."""
    header = {
        "source": workload.source,
        "parameters": dict(workload.parameters),
        "duration_s": workload.duration_s,
        "invocations": workload.invocations,
        "starts": len(workload),
        "memory_mib": {
            name: mib
            for name, mib in zip(workload.functions, workload.memory_mib, strict=False)
            if math.isfinite(mib)
        },
    }
    out = io.StringIO()
    out.write(f"{WORKLOAD_FORMAT}\n# {json.dumps(header, sort_keys=True, allow_nan=False)}\n")
    out.write("start_s,function\n")
    names = workload.functions
    for t, f in zip(workload.starts.tolist(), workload.function.tolist(), strict=True):
        out.write(f"{t:.6f},{names[f]}\n")
    return out.getvalue()


def read_workload(path: str | os.PathLike[str]) -> Workload:
    """A workload file written by :func:`format_workload`, checked: its
    header (each field's type and range, no other field), its rows in time
    order, as many as the header says."""
    with open_bounded(path, max_bytes=MAX_TRACE_BYTES) as raw:
        first = raw.readline(256).decode("utf-8", "replace").rstrip("\n")
        second = raw.readline(1 << 20).decode("utf-8", "replace")
    if first != WORKLOAD_FORMAT:
        raise _problem(path, 1, "format", f"must be {WORKLOAD_FORMAT!r}", Shown("another line"))
    try:
        header = (
            json.loads(second[1:], object_pairs_hook=unique_keys)
            if second.startswith("#")
            else None
        )
    except DuplicateKeyError as exc:
        raise _problem(path, 2, "header", str(exc), Shown("a key twice")) from None
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        header = None
    if not isinstance(header, dict):
        raise _problem(
            path, 2, "header", "must be a '#' line of a JSON object", Shown("another line")
        )
    checked = _workload_header(path, header)
    inv = read_start_times_csv(path)
    if len(inv) != checked.starts:
        raise _problem(path, 2, "starts", f"says {checked.starts} rows", Shown(str(len(inv))))
    last = float(inv.times[-1]) if len(inv) else 0.0
    if checked.duration_s < last:
        raise _problem(
            path, 2, "duration_s", f"must be at least the last start's {last:g} s",
            checked.duration_s,
        )  # fmt: skip
    return Workload(
        starts=inv.times,
        function=inv.function,
        functions=inv.functions,
        source=checked.source,
        parameters=checked.parameters,
        duration_s=checked.duration_s,
        invocations=checked.invocations,
        memory_mib=tuple(float(checked.memory_mib.get(n, math.nan)) for n in inv.functions),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class _WorkloadHeader:
    """A workload file's header line, its fields checked."""

    starts: int
    invocations: int
    duration_s: float
    source: str
    parameters: dict[str, Any]
    memory_mib: dict[str, float]


def _workload_header(path: str | os.PathLike[str], header: dict[str, Any]) -> _WorkloadHeader:
    """The header's fields checked, each named in the error (line 2)."""

    def bad(name: str, rule: str, value: object) -> ConfigError:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _problem(path, 2, name, rule, value)
        kind = {type(None): "nothing", bool: "true/false", str: "text", list: "a list"}
        return _problem(path, 2, name, rule, Shown(kind.get(type(value), "an object")))

    unknown = sorted(set(header) - {f.name for f in fields(_WorkloadHeader)})
    if unknown:
        raise _problem(path, 2, unknown[0], "unknown field of the header", Shown(unknown[0][:40]))
    starts = header.get("starts")
    if not isinstance(starts, int) or isinstance(starts, bool) or starts < 0:
        raise bad("starts", "must be a count of rows", starts)
    invocations = header.get("invocations", starts)
    if (
        not isinstance(invocations, int)
        or isinstance(invocations, bool)
        or not (invocations == 0 or starts <= invocations <= 10 * MAX_INVOCATIONS)
    ):
        # 0: not known (a Workload made in code says none); else the starts' source.
        raise bad(
            "invocations", f"must be 0 (not known) or a count of at least the starts' {starts}",
            invocations,
        )  # fmt: skip
    duration = header.get("duration_s", 0.0)
    if (
        not isinstance(duration, int | float)
        or isinstance(duration, bool)
        or not 0.0 <= duration <= MAX_TIME_S  # NaN fails both
    ):
        raise bad("duration_s", f"must be within 0..{MAX_TIME_S:g} s", duration)
    source = header.get("source", "")
    if not isinstance(source, str) or len(source) > _LONGEST_NAME:
        raise bad("source", f"must be a name of at most {_LONGEST_NAME} characters", source)
    parameters = header.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise bad("parameters", "must be a JSON object", parameters)
    memory = header.get("memory_mib") or {}
    if not isinstance(memory, dict):
        raise bad("memory_mib", "must be a JSON object of MiB by function", memory)
    for name, mib in memory.items():
        if (
            not isinstance(mib, int | float)
            or isinstance(mib, bool)
            or not 0.0 <= mib <= MAX_FUNCTION_MIB
        ):
            raise bad(
                f"memory_mib.{name[:40]}", f"must be within 0..{MAX_FUNCTION_MIB:,.0f} MiB", mib
            )
    return _WorkloadHeader(
        starts=starts,
        invocations=invocations,
        duration_s=float(duration),
        source=source,
        parameters=parameters,
        memory_mib={str(k): float(v) for k, v in memory.items()},
    )
