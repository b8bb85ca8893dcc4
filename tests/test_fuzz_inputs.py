"""Every parser a user can reach, fuzzed: each input ends in success or in a
validation error that names the file or the field and the value (issue 23).

- a scenario file, a profile file, a tuned config file (YAML: generated
  documents, fields of the wrong type or range, aliases, deep nesting, huge
  numbers, bytes that are not UTF-8, documents cut short);
- a trace (plain JSONL and gzip: streams cut short or with flipped bytes,
  lines nested deeply, huge ints, records with fields of the wrong type);
- ``bootstorm simulate`` with generated option values (sandboxes, QoS and
  security-group rules, tenants, pool/limit/priority strings, profile paths).

What must hold: no other exception, no example past :data:`EXAMPLE_LIMIT_S`
(a watchdog turns a hang into a failure), no file half-written, an error of
a few lines of one line each. Sizes stay small (a valid storm has at most
24 sandboxes) so the suite runs in CI in well under a minute; the counts of
cases run are printed when the module ends.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import math
import os
import signal
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bootstorm import simulate
from bootstorm.cli import main
from bootstorm.models import (
    CNI_NAMES,
    ConfigError,
    Scenario,
    TunedConfig,
    available_profiles,
    load_profile,
    scenario_pool_kinds,
    scenario_stages,
)
from bootstorm.models.scenario import (
    MAX_BACKGROUND_FLOWS,
    MAX_CORES,
    MAX_MEMORY_MIB,
    MAX_QOS_RULES,
    MAX_SANDBOXES,
    MAX_SG_RULES,
)
from bootstorm.simulator import ProgramError
from bootstorm.traces import (
    Arrival,
    HostFacts,
    LockSpan,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceFormatError,
    TraceHeader,
    read_trace,
    write_trace,
)
from bootstorm.validation.recording import to_recording

EXAMPLE_LIMIT_S = 60.0
"""No example may take longer: far past the slowest (a 24-sandbox storm and
its what-if re-runs, ~1 s), so only a hang reaches it."""
MAX_ERROR_LINES = 11  # ten problems, then "… and N more"
MAX_LINE_CHARS = 600  # a path of 200 characters, a field, a message, a value of 80

PROFILES = Path(__file__).resolve().parents[1] / "models" / "profiles"
TESTBED_PROFILE = Path(__file__).resolve().parents[1] / "traces" / "data" / "plan" / "local.yaml"

CASES: Counter[str] = Counter()


def _examples(n: int) -> int:
    """``n`` examples, times ``BOOTSTORM_FUZZ_SCALE`` (default 1: CI's budget;
    a longer hunt on a workstation: ``BOOTSTORM_FUZZ_SCALE=20``)."""
    return max(1, round(n * float(os.environ.get("BOOTSTORM_FUZZ_SCALE", "1"))))


SETTINGS = settings(
    deadline=None,  # the watchdog below bounds an example; timing CI's load is not the point
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@pytest.fixture(scope="module", autouse=True)
def _report_cases(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not CASES:
        return
    parsers = sorted({key.split("/")[0] for key in CASES})
    parts = []
    for parser in parsers:
        total = CASES[parser]
        ends = ", ".join(
            f"{key.split('/')[1]} {n}"
            for key, n in sorted(CASES.items())
            if key.startswith(f"{parser}/")
        )
        parts.append(f"{parser} {total} ({ends})")
    line = f"fuzz cases: {'; '.join(parts)}; {sum(CASES[p] for p in parsers)} in all"
    # Past the output capture (it takes fd 1 during teardown too), so the line
    # shows in a plain `pytest` run; under xdist, in the worker's output.
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)
    else:
        print(line)


def _ended(parser: str, how: str) -> None:
    CASES[f"{parser}/{how}"] += 1


class _Hang(BaseException):
    """An example outlived EXAMPLE_LIMIT_S (a BaseException: no handler in the
    code under test may swallow it)."""


@contextlib.contextmanager
def _watchdog(seconds: float = EXAMPLE_LIMIT_S, *, what: object = None) -> Iterator[None]:
    def fire(_signum: int, _frame: object) -> None:
        raise _Hang(f"an example ran past {seconds} s: {what!r}"[:2000])

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _check_message(message: str, *, starts: str | None = None) -> None:
    """A refusal: a few lines, each one readable line, naming where."""
    lines = message.splitlines()
    assert 1 <= len(lines) <= MAX_ERROR_LINES, message
    for line in lines:
        assert line.strip() and len(line) <= MAX_LINE_CHARS, line[:200]
        assert ": " in line, line  # `where: what`
        if starts is not None:
            assert line.startswith(starts), (line, starts)


# -- generated YAML ----------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 50),
    st.integers(),
    st.integers(-(10**80), 10**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["paper-000", "veth", "ipvtap", "fastiov", "AddCNI", "netns", "StartVM"]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8) | _scalars, inner)
    ),
    max_leaves=12,
)
_ABUSE = (
    "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n",
    "x: " + "[" * 60 + "]" * 60 + "\n",
    "x: " + "{a: " * 40 + "1" + "}" * 40 + "\n",
    "sandboxes: " + "9" * 5000 + "\n",
    "seed: 0x" + "f" * 100 + "\n",
    "!!python/object:os.system {}\n",
    "- a\n- list\n",
    "just a string\n",
    "",
    "a: [unclosed\n",
    "? [a, b]\n: c\n",
    "1: 2\n",
    "null: 3\n",
)


def _yaml_bytes(
    fields: tuple[str, ...], plausible: st.SearchStrategy[dict[str, Any]] | None = None
) -> st.SearchStrategy[bytes]:
    """A document over ``fields`` (and stray ones) with values of any type, or
    a ``plausible`` one, or an abusive snippet; any of them cut short or with
    a byte that is not UTF-8."""
    keys = st.sampled_from(fields) | st.text(min_size=1, max_size=10)
    docs = st.dictionaries(keys, _values, max_size=6)
    if plausible is not None:
        docs = docs | plausible | plausible
    base = docs.map(lambda d: yaml.safe_dump(d, allow_unicode=True).encode()) | st.sampled_from(
        _ABUSE
    ).map(str.encode)
    return st.tuples(
        base, st.sampled_from(["as is", "cut", "not utf-8"]), st.integers(0, 10**6)
    ).map(_damage)


def _damage(case: tuple[bytes, str, int]) -> bytes:
    data, how, at = case
    if how == "cut" and data:
        return data[: at % len(data)]
    if how == "not utf-8":
        i = at % (len(data) + 1)
        return data[:i] + b"\xff\xfe" + data[i:]
    return data


def _file(directory: str, name: str, data: bytes) -> Path:
    path = Path(directory) / name
    path.write_bytes(data)
    return path


_SCENARIO_FIELDS = tuple(Scenario.model_fields) + ("config",)
_plausible_scenarios = st.fixed_dictionaries(
    {},
    optional={
        "cni": st.sampled_from(CNI_NAMES),
        "sandboxes": st.integers(-2, 2000) | st.integers(),
        "tenants": st.integers(0, 1200),
        "qos_rules": st.integers(-1, 150),
        "sg_rules": st.integers(-1, 1500),
        "memory_mib": st.integers(0, 2**27),
        "vcpus": st.floats(0, 1e4) | st.none(),
        "limits": st.dictionaries(
            st.sampled_from(("AddCNI", "StartVM", "x")), st.integers(-1, 2**31)
        ),
        "pools": st.dictionaries(st.sampled_from(("netns", "vport", "x")), st.integers(-1, 2**31)),
        "rtnl_priority": st.dictionaries(st.sampled_from(("AddCNI", "Cgroup")), st.integers()),
        "arrival_s": st.lists(st.floats(0, 1e8), max_size=5),
        "seed": st.integers(-1, 2**64),
        "background_load": st.floats(0, 1e7),
        "flow_gbps": st.floats(0, 2e4),
        "profile": st.sampled_from(["paper-000", "paper-001", "p" * 5000, ""]),
    },
)


@settings(SETTINGS, max_examples=_examples(200))
@given(data=_yaml_bytes(_SCENARIO_FIELDS, _plausible_scenarios))
def test_a_scenario_file_loads_or_names_the_problem(data: bytes) -> None:
    CASES["scenario file"] += 1
    with tempfile.TemporaryDirectory() as d, _watchdog():
        path = _file(d, "scenario.yaml", data)
        try:
            scenario = Scenario.from_yaml(path)
        except ConfigError as exc:
            _check_message(str(exc), starts=str(path))
            _ended("scenario file", "refused")
            return
    assert isinstance(scenario, Scenario)
    _ended("scenario file", "loaded")


@settings(SETTINGS, max_examples=_examples(150))
@given(
    data=_yaml_bytes(
        ("limits", "pools", "rtnl_priority", "lease_ttl_s", "origin", "kind"),
        st.fixed_dictionaries(
            {},
            optional={
                "limits": st.dictionaries(st.sampled_from(("AddCNI", "StartVM")), st.integers()),
                "pools": st.dictionaries(st.sampled_from(("netns", "ipvtap")), st.integers()),
                "rtnl_priority": st.dictionaries(st.sampled_from(("AddCNI",)), st.integers()),
                "lease_ttl_s": st.floats(allow_nan=True, allow_infinity=True),
            },
        ),
    )
)
def test_a_tuned_config_file_loads_or_names_the_problem(data: bytes) -> None:
    CASES["config file"] += 1
    with tempfile.TemporaryDirectory() as d, _watchdog():
        path = _file(d, "tuned.yaml", data)
        try:
            config = TunedConfig.from_yaml(path)
            # Applied to a storm, as `simulate --config` does.
            Scenario(cni="ipvtap", sandboxes=5, config=path)
        except ConfigError as exc:
            _check_message(str(exc))
            assert str(path) in str(exc), str(exc)
            _ended("config file", "refused")
            return
    assert isinstance(config, TunedConfig)
    _ended("config file", "loaded")


# -- profile files: a built-in one with a few of its leaves changed -------------------

_BASES = {
    "paper-000": ("ipvtap", yaml.safe_load((PROFILES / "paper-000.yaml").read_text())),
    "paper-001": ("fastiov", yaml.safe_load((PROFILES / "paper-001.yaml").read_text())),
    "testbed": ("testbed-veth", yaml.safe_load(TESTBED_PROFILE.read_text())),
}


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path of mappings in ``node``: its leaves and the mappings themselves."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))] + [path]
    return [path]


_number_like = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e3, max_value=1e3),
    st.integers(-(10**70), 10**70),
    st.sampled_from([0, -1, 1e-308, 1e308, 2**63, 10**64, 0.0]),
)


@st.composite
def _profiles(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(_BASES)))
    cni, base = _BASES[name]
    doc = copy.deepcopy(base)
    paths = [p for p in _leaves(doc) if p and p[0] != "sources"]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:  # an earlier change may have replaced a node above
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        how = draw(st.sampled_from(["scaled"] * 3 + ["any", "missing"]))
        with contextlib.suppress(IndexError, KeyError, TypeError):
            old = parent[path[-1]]
            if how == "missing" and isinstance(parent, dict):
                parent.pop(path[-1])  # a field missing
            elif how == "scaled" and isinstance(old, int | float) and not isinstance(old, bool):
                # A plausible other value (a refit): mostly within the ranges.
                factor = draw(st.sampled_from([0.0, 0.1, 0.5, 2.0, 10.0, 1e3]))
                parent[path[-1]] = type(old)(old * factor)
            else:
                parent[path[-1]] = draw(_number_like | _values)
    if draw(st.integers(0, 4)) == 0:
        doc[draw(st.text(min_size=1, max_size=8))] = draw(_scalars)  # a stray field
    text = yaml.safe_dump(doc, allow_unicode=True).encode()
    how = draw(st.sampled_from(["as is"] * 6 + ["cut", "not utf-8"]))
    return cni, _damage((text, how, draw(st.integers(0, 10**6))))


def _storm_or_refusal(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except (ConfigError, ProgramError) as exc:
        _check_message(str(exc))
        return None


@settings(SETTINGS, max_examples=_examples(60))
@given(case=_profiles())
def test_a_profile_file_runs_or_names_the_problem(case: tuple[str, bytes]) -> None:
    """Loaded, then a 5-sandbox storm simulated on it by SimPy and the compiled
    kernel: a number the model cannot use is refused, never run into inf."""
    CASES["profile file"] += 1
    cni, data = case
    with tempfile.TemporaryDirectory() as d, _watchdog():
        path = _file(d, "profile.yaml", data)
        try:
            profile = load_profile(path)
        except ConfigError as exc:
            _check_message(str(exc))
            _ended("profile file", "refused")
            return
        scenario = Scenario(cni=cni, sandboxes=5, profile=str(path))
        for executor in ("simpy", "compiled"):
            result = _storm_or_refusal(lambda e=executor: simulate(scenario, executor=e))
            if result is not None:
                assert math.isfinite(result.makespan_s) and result.makespan_s >= 0.0
        assert profile.name
        _ended("profile file", "ran" if result is not None else "loaded, storm refused")


# -- traces ------------------------------------------------------------------------

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**70), 10**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


def _good_trace() -> Trace:
    header = TraceHeader(
        source="testbed",
        origin_s=10.0,
        host=HostFacts(kernel="6.1", cores=2, memory_mib=1024),
        scenario=ScenarioFacts(sandboxes=3, cni="veth-peer-in-netns"),
    )
    records: list[Any] = [Arrival(sandbox=i, t_s=10.0) for i in range(3)]
    records += [
        StageSpan(sandbox=i, stage=s, start_s=10.0 + j, end_s=10.5 + j)
        for i in range(3)
        for j, s in enumerate(("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM"))
    ]
    records.append(LockSpan(lock="rtnl", sandbox=1, stage="AddCNI", start_s=11.1, end_s=11.2))
    return Trace.of(header, records)


def _trace_lines() -> list[bytes]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.jsonl"
        write_trace(_good_trace(), path)
        return path.read_bytes().splitlines(keepends=True)


_LINES = _trace_lines()


@st.composite
def _bad_lines(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["nested", "huge int", "wrong type", "json", "bytes", "long"]))
    if kind == "nested":
        depth = draw(st.integers(1, 200_000))
        return b"[" * depth + b"]" * draw(st.integers(0, depth)) + b"\n"
    if kind == "huge int":
        digits = draw(st.integers(19, 6000))
        return b'{"record":"arrival","sandbox":' + b"7" * digits + b',"t_s":1.0}\n'
    if kind == "wrong type":
        record = json.loads(draw(st.sampled_from(_LINES[1:])))
        record[draw(st.sampled_from(sorted(record)))] = draw(_json_values)
        return json.dumps(record).encode() + b"\n"
    if kind == "json":
        return json.dumps(draw(_json_values)).encode() + b"\n"
    if kind == "long":
        return b" " * draw(st.integers(1, 3 << 20)) + b"\n"
    return draw(st.binary(max_size=64)) + b"\n"


@st.composite
def _traces(draw: st.DrawFn) -> tuple[str, bytes]:
    lines = list(_LINES)
    for _ in range(draw(st.integers(0, 3))):
        lines.insert(draw(st.integers(0, len(lines))), draw(_bad_lines()))
    data = b"".join(lines)
    gz = draw(st.booleans())
    if gz:
        data = gzip.compress(data, mtime=0)
    how = draw(st.sampled_from(["as is", "cut", "flip"]))
    at = draw(st.integers(0, 10**7))
    if how == "cut":
        data = data[: at % (len(data) + 1)]
    elif how == "flip" and data:
        i = at % len(data)
        data = data[:i] + bytes([data[i] ^ (1 + draw(st.integers(0, 254)))]) + data[i + 1 :]
    return ("t.jsonl.gz" if gz else "t.jsonl"), data


@settings(SETTINGS, max_examples=_examples(200))
@given(case=_traces())
def test_a_trace_reads_or_names_the_line(case: tuple[str, bytes]) -> None:
    CASES["trace file"] += 1
    name, data = case
    with tempfile.TemporaryDirectory() as d, _watchdog():
        path = _file(d, name, data)
        try:
            trace = read_trace(path)
        except TraceFormatError as exc:
            _check_message(str(exc), starts=name)
            _ended("trace file", "refused")
            return
        # What `bootstorm report TRACE` does with it next.
        recording = to_recording(trace)
    assert recording.n_sandboxes >= 1
    _ended("trace file", "read")


# -- the command line --------------------------------------------------------------


def _invalid_count(past: int, least: int = 0) -> st.SearchStrategy[str]:
    """A count no storm takes: past its bound (``past`` on), below its least
    valid value (``least``), huge (400 digits, 5 000: past what Python
    converts), or not a number."""
    return st.one_of(
        st.integers(min(-(10**3), least - 10**3), least - 1).map(str),
        st.integers(past, max(past, 10**12)).map(str),
        st.integers(past, max(past, 10**12)).map(lambda n: f"{n:_}"),  # int() takes 1_000
        st.integers(max(len(str(past)), 10), 500).map(lambda n: "9" * n),
        st.text(max_size=8).filter(_not_an_int),
        st.sampled_from(["", "1e3", "0x10", "nan", "9" * 5000]),
    )


def _not_an_int(text: str) -> bool:
    """Whether Python's int() refuses ``text`` (it takes " 1_0 " and "١٢")."""
    try:
        int(text)
    except ValueError:
        return True
    return False


_SOFTWARE_CNIS = CNI_NAMES[:9]  # what paper-000 runs (its `costs`)
_CHOICE_OPTIONS = ("--qos-rules", "--sg-rules", "--tenants", "--memory-mib", "--cores", "--seed")
_ABUSABLE = (
    "--sandboxes",
    "--cni",
    *_CHOICE_OPTIONS,
    "--vcpus",
    "--background-flows",
    "--pool",
    "--limit",
    "--rtnl-priority",
    "--profile",
    "--executor",
    "--trace",
)


@st.composite
def _simulate_args(draw: st.DrawFn, directory: str) -> tuple[str | None, list[str]]:
    """``simulate`` options, all valid and small, but for at most one (the
    abused one, returned) that no storm takes."""
    abused = draw(st.one_of(st.none(), st.sampled_from(_ABUSABLE)))

    def bad(option: str) -> bool:
        return option == abused

    sandboxes = draw(st.integers(1, 24))
    args = ["simulate", "--sandboxes", str(sandboxes)]
    if bad("--sandboxes"):
        args[-1] = draw(_invalid_count(MAX_SANDBOXES + 1, least=1))
    cni = draw(st.sampled_from(_SOFTWARE_CNIS))
    if bad("--cni"):
        args += ["--cni", draw(st.text(max_size=10).filter(lambda t: t not in CNI_NAMES))]
    elif draw(st.booleans()):
        args += ["--cni", cni]
    else:
        cni = "ipvtap"  # the default
    valid = {  # (valid values, the first past the bound, the least valid)
        "--qos-rules": (st.integers(0, 3), MAX_QOS_RULES + 1, 0),
        "--sg-rules": (st.integers(0, 20), MAX_SG_RULES + 1, 0),
        "--tenants": (st.integers(1, min(5, sandboxes)), max(sandboxes + 1, 6), 1),
        "--memory-mib": (st.integers(64, 4096), MAX_MEMORY_MIB + 1, 1),
        "--cores": (st.integers(1, 64), MAX_CORES + 1, 1),
        "--seed": (st.integers(0, 2**63 - 1), 2**63, 0),
    }
    for option in _CHOICE_OPTIONS:
        good, past, least = valid[option]
        if bad(option):
            args += [option, draw(_invalid_count(past, least))]
        elif draw(st.integers(0, 2)) == 0:
            args += [option, str(draw(good))]
    if bad("--vcpus"):
        args += ["--vcpus", draw(st.sampled_from(["0", "-1", "nan", "inf", "1e308", "x", "1e-9"]))]
    elif draw(st.integers(0, 3)) == 0:
        args += ["--vcpus", draw(st.sampled_from(["0.5", "1", "2"]))]
    if bad("--background-flows"):
        args += ["--background-flows", draw(_invalid_count(MAX_BACKGROUND_FLOWS + 1))]
    elif cni != "no-network" and draw(st.integers(0, 3)) == 0:  # no data path to load
        args += ["--background-flows", str(draw(st.integers(0, 4)))]
    for option, names, good, past, least in (
        ("--pool", scenario_pool_kinds(cni), st.integers(0, 40), MAX_SANDBOXES + 1, 0),
        ("--limit", scenario_stages(cni), st.integers(1, 40), MAX_SANDBOXES + 1, 1),
        ("--rtnl-priority", scenario_stages(cni), st.integers(-3, 3), 10_001, -10_000),
    ):
        if bad(option):
            how = draw(st.sampled_from(["count", "name", "form"]))
            if how == "count" or not names:
                name = draw(st.sampled_from(names or ("x",)))
                value = f"{name}={draw(_invalid_count(past, least))}"
            elif how == "name":
                name = draw(st.text(max_size=8).filter(lambda t, n=names: t not in n))
                value = f"{name}={draw(good)}"
            else:
                value = draw(st.text(max_size=12).filter(lambda t: "=" not in t))
            args += [option, value]
        elif names and draw(st.integers(0, 3)) == 0:
            args += [option, f"{draw(st.sampled_from(names))}={draw(good)}"]
    bad_profile = Path(directory) / "bad-profile.yaml"
    bad_profile.write_bytes(b"host: {cores: " + b"9" * 100 + b"}\n\xff")
    if bad("--profile"):
        profile = draw(
            st.one_of(
                st.sampled_from(["nope", "/dev/zero", str(bad_profile), str(TESTBED_PROFILE)]),
                st.text(max_size=30).filter(lambda t: t not in available_profiles()),
                st.integers(200, 5000).map(lambda n: "p" * n),
            )
        )
        args += ["--profile", profile]
    elif draw(st.integers(0, 3)) == 0:
        args += ["--profile", "paper-000"]
    executor = "numba" if bad("--executor") else draw(st.sampled_from(["simpy", "compiled"]))
    if bad("--trace"):
        args += ["--trace", "missing/dir/trace.json"]  # no such folder: nothing written
        executor = "simpy"
    elif executor == "simpy" and draw(st.integers(0, 3)) == 0:
        args += ["--trace", "out/trace.json"]  # written whole, or not at all
    args += ["--executor", executor, "--json"]
    return abused, args


@settings(SETTINGS, max_examples=_examples(60))
@given(data=st.data())
def test_simulate_options_run_or_name_the_problem(data: st.DataObject) -> None:
    """Valid options run (exit 0, one JSON line, the trace file whole); one
    option no storm takes ends in exit 2 and one ``error:`` line, nothing
    written."""
    with tempfile.TemporaryDirectory() as d:
        abused, args = data.draw(_simulate_args(d))
        (Path(d) / "out").mkdir()
        args = [str(Path(d) / a) if a.endswith("trace.json") else a for a in args]
        assume(all("\x00" not in a for a in args))  # argv cannot carry a NUL
        CASES["simulate options"] += 1
        _run_simulate(d, args, abused)


def _run_simulate(d: str, args: list[str], abused: str | None) -> None:
    with _watchdog(what=args):
        out, err = io.StringIO(), io.StringIO()
        code: int | str | None = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
            except SystemExit as exc:
                code = exc.code
        code = 0 if code is None else code
        written = sorted(p.name for p in (Path(d) / "out").iterdir())
    expected = 0 if abused is None else 2
    assert code == expected, (abused, code, args, err.getvalue()[-2000:])
    _ended("simulate options", f"exit {code}")
    if code == 2:
        _check_message(err.getvalue(), starts="error: ")
        assert len(err.getvalue().splitlines()) == 1, err.getvalue()  # one option, one line
        assert out.getvalue() == ""
        assert written == [], written  # nothing half-written
    else:
        (line,) = out.getvalue().splitlines()
        assert json.loads(line)["makespan_s"] >= 0.0
        if "--trace" in args:
            assert written == ["trace.json"], written  # no temp file beside it
            json.loads((Path(d) / "out" / "trace.json").read_text())
