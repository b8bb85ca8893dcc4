"""Workload readers, keep-alive policies and the MMPP (traces/workload.py, traces/keepalive.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bootstorm._params import ConfigError
from bootstorm.traces.keepalive import FixedKeepAlive, HybridHistogram, cold_starts
from bootstorm.traces.workload import (
    AZURE_2019_INVOCATION_COLUMNS,
    Invocations,
    MmppParameters,
    Workload,
    format_workload,
    mmpp,
    read_azure_2019,
    read_azure_2021,
    read_start_times_csv,
    read_workload,
)

APP = "a" * 64
FUNC = "f" * 64


def write_2019(path: Path, rows: dict[tuple[str, str], dict[int, int]]) -> Path:
    """The published layout: HashOwner,HashApp,HashFunction,Trigger,1..1440."""
    lines = [",".join(AZURE_2019_INVOCATION_COLUMNS)]
    for (app, func), counts in rows.items():
        minutes = [str(counts.get(m, 0)) for m in range(1, 1441)]
        lines.append(",".join(["o" * 64, app, func, "http", *minutes]))
    path.write_text("\n".join(lines) + "\n")
    return path


def inv_of(times: list[float], apps: list[int], ends: list[float] | None = None) -> Invocations:
    t = np.asarray(times, dtype=float)
    a = np.asarray(apps, dtype=np.int32)
    names = tuple(f"app{i}" for i in range(max(apps) + 1))
    return Invocations(
        times=t,
        ends=t.copy() if ends is None else np.asarray(ends, dtype=float),
        app=a,
        function=a.copy(),
        apps=names,
        functions=names,
        memory_mib=(math.nan,) * len(names),
        source="test",
        parameters={},
        begin_s=0.0,
        end_s=float(t.max()) + 1,
    )


def test_2019_counts_become_times_inside_their_minutes(tmp_path: Path) -> None:
    path = write_2019(tmp_path / "inv.csv", {(APP, FUNC): {1: 3, 3: 2}})
    inv = read_azure_2019(path, seed=7)
    assert len(inv) == 5
    assert np.all((inv.times[:3] >= 0) & (inv.times[:3] < 60))
    assert np.all((inv.times[3:] >= 120) & (inv.times[3:] < 180))
    again = read_azure_2019(path, seed=7)
    assert np.array_equal(inv.times, again.times)
    assert inv.functions == (f"{APP}/{FUNC}",)


def test_2019_durations_and_memory_in_their_published_layouts(tmp_path: Path) -> None:
    path = write_2019(tmp_path / "inv.csv", {(APP, FUNC): {1: 1}})
    durations = tmp_path / "dur.csv"
    pct = ",".join(f"percentile_Average_{p}" for p in (0, 1, 25, 50, 75, 99, 100))
    durations.write_text(
        f"HashOwner,HashApp,HashFunction,Average,Count,Minimum,Maximum,{pct}\n"
        f"{'o' * 64},{APP},{FUNC},2500,1,2500,2500,{','.join(['2500'] * 7)}\n"
    )
    memory = tmp_path / "mem.csv"
    cols = ",".join(f"AverageAllocatedMb_pct{p}" for p in (1, 5, 25, 50, 75, 95, 99, 100))
    memory.write_text(
        f"HashOwner,HashApp,SampleCount,AverageAllocatedMb,{cols}\n"
        f"{'o' * 64},{APP},12,170,{','.join(['170'] * 8)}\n"
    )
    inv = read_azure_2019(path, durations_csv=durations, memory_csv=memory)
    assert inv.ends[0] - inv.times[0] == pytest.approx(2.5)
    assert inv.memory_mib == (170.0,)


def test_2021_rows_out_of_order_are_sorted(tmp_path: Path) -> None:
    path = tmp_path / "2021.csv"
    path.write_text(
        "app,func,end_timestamp,duration\n"
        f"{APP},{FUNC},5253.883348941803,42.372\n"
        f"{APP},{FUNC},5219.518173933029,0.108\n"
    )
    inv = read_azure_2021(path)
    assert inv.times.tolist() == pytest.approx([5211.511348941803, 5219.410173933029])


def test_start_times_and_workload_file_round_trip(tmp_path: Path) -> None:
    w = Workload(
        starts=np.array([0.5, 1.0, 2.25]),
        function=np.array([0, 1, 0], dtype=np.int32),
        functions=("x", "y"),
        source="csv",
        parameters={"policy": "none"},
        duration_s=3.0,
        invocations=3,
        memory_mib=(128.0, math.nan),
    )
    path = tmp_path / "w.csv"
    path.write_text(format_workload(w))
    back = read_workload(path)
    assert back.starts.tolist() == [0.5, 1.0, 2.25]
    assert [back.functions[i] for i in back.function] == ["x", "y", "x"]
    assert back.memory_mib[back.functions.index("x")] == 128.0
    assert len(read_start_times_csv(path)) == 3


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("app,func,end_timestamp\nx,y,1\n", "header: missing column duration"),
        ("start_s\n1\n0.5\n", "start_s: must not be before the previous row's 1 (got 0.5)"),
        ("start_s\n-1\n", "start_s: must be within 0..1e+07 s (115 days) (got -1.0)"),
        (
            "app,func,end_timestamp,duration\nx,y,5,-1\n",
            "duration: must be within 0..1e+07 s (115 days) (got -1.0)",
        ),
        # Past what the simulator takes: refused here, not after a traceback there.
        ("start_s\n1e300\n", "start_s: must be within 0..1e+07 s (115 days) (got 1e+300)"),
        ("start_s\n1\n1e9\n", "line 3: start_s: must be within 0..1e+07 s"),
        ("app,func,end_timestamp,duration\nx,y,1e300,1\n", "end_timestamp: must be within"),
        ("start_s,start_s\n1,2\n", "line 1: header: names column start_s twice"),
        ("app,func,end_timestamp,duration,duration\nx,y,5,1,2\n", "names column duration twice"),
    ],
)
def test_bad_rows_are_one_line_naming_field_and_value(
    tmp_path: Path, text: str, needle: str
) -> None:
    from bootstorm.traces.workload import read_trace_file

    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_trace_file(path)
    message = str(info.value)
    assert needle in message and "\n" not in message and str(path) in message


def test_2019_negative_count_and_missing_column(tmp_path: Path) -> None:
    path = write_2019(tmp_path / "inv.csv", {(APP, FUNC): {5: -2}})
    with pytest.raises(
        ConfigError, match=r"line 2: minute 5: must be a count within 0..10,000,000 \(got -2\)"
    ):
        read_azure_2019(path)
    path.write_text("HashOwner,HashApp,Trigger,1\no,a,http,1\n")
    with pytest.raises(ConfigError, match="header: missing column HashFunction"):
        read_azure_2019(path)


@pytest.mark.parametrize("count", [10**22, 10**11])
def test_2019_counts_past_the_cap_are_refused_before_they_are_drawn(
    tmp_path: Path, count: int
) -> None:
    """A count past int64 fell through to an assertion; one of 10^11 was
    drawn (800 GB) before the cap refused it: both are a line now."""
    path = write_2019(tmp_path / "inv.csv", {(APP, FUNC): {5: count}})
    with pytest.raises(
        ConfigError, match=r"line 2: minute 5: must be a count within 0..10,000,000"
    ):
        read_azure_2019(path, node_share=1.0)


def test_2019_side_files_bound_their_values(tmp_path: Path) -> None:
    inv = write_2019(tmp_path / "inv.csv", {(APP, FUNC): {1: 1}})
    durations = tmp_path / "durations.csv"
    durations.write_text(f"HashOwner,HashApp,HashFunction,Average\no,{APP},{FUNC},1e300\n")
    with pytest.raises(ConfigError, match=r"Average: must be within 0..1e\+10 ms \(got 1e\+300\)"):
        read_azure_2019(inv, durations_csv=durations)


@pytest.mark.parametrize(
    ("header", "needle"),
    [
        (
            '{"starts": 2, "memory_mib": {"a": null}}',
            "memory_mib.a: must be within 0..1,048,576 MiB (got nothing)",
        ),
        ('{"starts": 2, "memory_mib": {"a": [1]}}', "memory_mib.a: must be within"),
        ('{"starts": 2, "memory_mib": {"a": NaN}}', "memory_mib.a: must be within"),
        ('{"starts": 2, "duration_s": [1]}', "duration_s: must be within 0..1e+07 s (got a list)"),
        ('{"starts": 2, "duration_s": -5}', "duration_s: must be within 0..1e+07 s (got -5)"),
        ('{"starts": 2, "duration_s": 0.1}', "duration_s: must be at least the last start's 1 s"),
        (
            '{"starts": 2, "invocations": -7}',
            "invocations: must be 0 (not known) or a count of at least the starts' 2",
        ),
        ('{"starts": true}', "starts: must be a count of rows (got true/false)"),
        ('{"duration_s": 5}', "starts: must be a count of rows (got nothing)"),
        ('{"starts": 2, "parameters": [1, 2]}', "parameters: must be a JSON object (got a list)"),
        ('{"starts": 2, "source": {"a": 1}}', "source: must be a name"),
        ('{"starts": 2, "bogus": 1}', "bogus: unknown field of the header"),
        ("[" * 100_000 + "]" * 100_000, "header: must be a '#' line of a JSON object"),
        # json.loads kept the last: a file said 5 starts, then 2, and was read.
        ('{"starts": 5, "starts": 2}', "header: 'starts' is given twice in an object"),
    ],
)
def test_a_workload_files_header_is_checked_field_by_field(
    tmp_path: Path, header: str, needle: str
) -> None:
    """Each field the header holds was taken on trust: a null memory, a
    list for a span or a deep nest were tracebacks, a negative span and an
    unknown field silently kept."""
    path = tmp_path / "w.csv"
    path.write_text(f"# bootstorm workload 1\n# {header}\nstart_s,function\n0.5,a\n1,a\n")
    with pytest.raises(ConfigError) as info:
        read_workload(path)
    message = str(info.value)
    assert f"line 2: {needle}" in message and "\n" not in message


def test_window_past_the_end(tmp_path: Path) -> None:
    path = write_2019(tmp_path / "inv.csv", {(APP, FUNC): {1: 1}})
    with pytest.raises(
        ConfigError, match=r"window: starts past the trace's end at 86400 s \(got 90000"
    ):
        read_azure_2019(path, window=(90000.0, 99999.0))


def test_fixed_ttl_known_answer() -> None:
    # app0: 0, 5 (warm: 5 <= 0+10), 30 (cold), 39 (warm), 100 (cold);
    # app1: 4 (cold), 14 (warm: exactly at the TTL), 24.5 (cold).
    inv = inv_of([0, 4, 5, 14, 24.5, 30, 39, 100], [0, 1, 0, 1, 1, 0, 0, 0])
    cold = cold_starts(inv, FixedKeepAlive(10.0))
    assert cold.tolist() == [True, True, False, False, True, True, False, True]


def test_fixed_ttl_counts_from_the_end_of_execution() -> None:
    inv = inv_of([0, 50], [0, 0], ends=[45, 50])
    assert cold_starts(inv, FixedKeepAlive(10.0)).tolist() == [True, False]


def test_hybrid_periodic_app_prewarms_and_keeps_alive() -> None:
    policy = HybridHistogram()
    period = 30 * 60.0
    counts = np.zeros(policy.bins, dtype=np.int64)
    counts[30] = 20  # every idle time is 30 min
    prewarm, keep = policy.windows(counts, 0)
    assert prewarm == pytest.approx(30 * 60 * 0.9)  # the head bin's start less 10 %
    assert prewarm + keep == pytest.approx(31 * 60 * 1.1)  # the tail bin's end plus 10 %
    times = [i * period for i in range(48)]
    inv = inv_of(times, [0] * 48)
    assert cold_starts(inv, policy).sum() == 1  # a fixed 10 min: every one cold
    assert cold_starts(inv, FixedKeepAlive(600.0)).sum() == 48


def test_hybrid_flat_histogram_falls_back() -> None:
    policy = HybridHistogram(fallback_keep_alive_s=123.0)
    counts = np.ones(policy.bins, dtype=np.int64)  # a coefficient of variation of 0
    assert policy.windows(counts, 0) == (0.0, 123.0)
    assert policy.windows(np.zeros(policy.bins, dtype=np.int64), 5) == (0.0, 123.0)


def test_mmpp_long_run_rate_matches_the_stationary_rate() -> None:
    params = MmppParameters(duration_s=200_000.0)
    inv = mmpp(params, np.random.default_rng(12345))
    rate = len(inv) / params.duration_s
    # 200 000 s hold ~650 sojourn cycles; the rate's standard error is ~3 %.
    assert rate == pytest.approx(params.stationary_rate, rel=0.10)
    assert np.all(np.diff(inv.times) >= 0)


@settings(max_examples=40, deadline=None)
@given(
    share=st.floats(0.05, 1.0),
    begin=st.floats(0, 1000),
    length=st.floats(1, 3000),
    compress=st.floats(1, 100),
    seed=st.integers(0, 2**32),
)
def test_invariants(share: float, begin: float, length: float, compress: float, seed: int) -> None:
    from bootstorm.workflows.workloads import workload

    params = MmppParameters(duration_s=3600.0, rate_high=10.0)
    window = (begin, begin + length)
    out = workload(mmpp_parameters=params, node_share=share, window=window, seed=seed)
    starts = out.workload.starts
    assert np.all(np.diff(starts) >= 0)
    assert np.all((starts >= 0) & (starts < length))
    squeezed = workload(
        mmpp_parameters=params, node_share=share, window=window, seed=seed, compress=compress
    )
    assert np.allclose(squeezed.workload.starts, starts / compress)
    smaller = workload(mmpp_parameters=params, node_share=share / 2, window=window, seed=seed)
    big = set(zip(starts.tolist(), out.workload.function.tolist(), strict=True))
    small = set(
        zip(smaller.workload.starts.tolist(), smaller.workload.function.tolist(), strict=True)
    )
    assert small <= big


def test_a_trace_s_clock_ends_where_the_simulators_arrivals_do() -> None:
    """What the readers take, the simulator runs (its arrivals' bound)."""
    from bootstorm.models.scenario import MAX_ARRIVAL_S
    from bootstorm.traces.workload import MAX_TIME_S

    assert MAX_TIME_S == MAX_ARRIVAL_S


def test_a_byte_that_is_not_utf8_is_blamed_on_its_own_line(tmp_path: Path) -> None:
    """The text wrapper decoded ahead in blocks and blamed line 1."""
    from bootstorm.traces.workload import read_trace_file

    path = tmp_path / "latin.csv"
    path.write_bytes(b"start_s,function\n1,caf\xe9\n")
    with pytest.raises(ConfigError, match=r"line 2: not UTF-8 text \(byte 0xe9 at column 6\)"):
        read_trace_file(path)
