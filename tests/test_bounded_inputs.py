"""Issue 35: one bounded reader, no echoed file contents, options checked
before work starts, and one line (never a traceback) for a header-only trace
or a full disk."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bootstorm.cli import main
from bootstorm.models import ConfigError, Scenario
from bootstorm.traces import TraceFormatError, read_trace
from bootstorm.traces.files import (
    MAX_TOKEN_BYTES,
    open_bounded,
    read_bytes_bounded,
    read_text_bounded,
    read_token_file,
)

HEADER = (
    '{"record":"header","schema_version":1,"source":"testbed",'
    '"scenario":{"cni":"testbed-veth","sandboxes":2}}'
)


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Fail (rather than hang the suite) if the block outlives ``seconds``."""
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(seconds):
            os._exit(99)  # pragma: no cover - only on a regression to a hang

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        yield
    finally:
        done.set()


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code
    return (0 if code is None else int(code)), out.getvalue(), err.getvalue()


def _one_line(*args: str) -> str:
    code, _out, err = _run(*args)
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# -- the reader ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "read",
    [
        lambda p: read_bytes_bounded(p, max_bytes=100),
        lambda p: read_text_bounded(p, max_bytes=100),
        lambda p: open_bounded(p, max_bytes=100).close(),
        lambda p: read_token_file(p),
    ],
    ids=["bytes", "text", "stream", "token"],
)
def test_a_fifo_a_device_and_a_directory_are_refused_unopened(tmp_path: Path, read: object) -> None:
    """Was: a FIFO opened without blocking, then waited on; /dev/zero read to the cap."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/null"), "a character device")):
        with _deadline(30.0), pytest.raises(ConfigError, match=f"{kind}.*not a regular file"):
            read(path)  # type: ignore[operator]
    with pytest.raises(ConfigError, match="a directory, not a regular file"):
        read(tmp_path)  # type: ignore[operator]


def test_an_oversize_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(101)  # sparse: its size alone refuses it
    with pytest.raises(ConfigError, match=r"big\.yaml: larger than 100 bytes"):
        read_bytes_bounded(big, max_bytes=100)
    with pytest.raises(ConfigError, match=r"larger than 100 bytes"):
        open_bounded(big, max_bytes=100)


def test_a_stream_stops_at_its_cap_when_the_file_grows(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"x" * 50)
    with open_bounded(path, max_bytes=100) as fh:
        with path.open("ab") as grow:
            grow.write(b"y" * 500)  # after the size was checked
        with pytest.raises(ConfigError, match="larger than 100 bytes"):
            fh.read()


def test_a_token_file_is_one_token_and_never_echoed(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("  s3cr3t-token\n")
    assert read_token_file(token) == "s3cr3t-token"
    token.write_text("s3cr3t one\ns3cr3t two\n")
    with pytest.raises(ConfigError, match=r"token_file: .*not one token") as err:
        read_token_file(token)
    assert "s3cr3t" not in str(err.value)
    token.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        read_token_file(token)
    token.write_bytes(b"x" * (MAX_TOKEN_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than"):
        read_token_file(token)


def test_a_fifo_as_a_trace_does_not_hang_report(tmp_path: Path) -> None:
    """Was: ``report fifo.jsonl`` waited for a writer forever."""
    fifo = tmp_path / "storm.jsonl"
    os.mkfifo(fifo)
    with _deadline(60.0):
        with pytest.raises(TraceFormatError, match="a FIFO"):
            read_trace(fifo)
        line = _one_line("report", str(fifo), "-o", str(tmp_path / "r.html"))
    assert "a FIFO (named pipe), not a regular file" in line
    assert not (tmp_path / "r.html").exists()


def test_a_gzip_trace_is_read_through_the_bounded_stream(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(f"{HEADER}\n".encode()))
    assert read_trace(path).header.scenario.sandboxes == 2


# -- no file's contents in an error line --------------------------------------------

SHADOW = (
    "root:*:20228:0:99999:7:::\n"
    "daemon:*:20228:0:99999:7:::\n"
    "alice:$6$saltsalt$Zq9hashhashhash:20228:0:99999:7:::\n"
)


@pytest.mark.parametrize("how", ["scenario", "config", "profile"])
def test_a_foreign_file_is_refused_by_line_number_not_quoted(tmp_path: Path, how: str) -> None:
    """Was: ``simulate /etc/shadow`` printed ten of its entries, hashes included."""
    shadow = tmp_path / "shadow"
    shadow.write_text(SHADOW)
    args = {
        "scenario": (str(shadow),),
        "config": ("--config", str(shadow)),
        "profile": ("--profile", str(shadow)),
    }[how]
    line = _one_line("simulate", "--sandboxes", "3", *args)
    assert line.endswith("shadow: line 1: a line that is not a mapping key (expected name: value)")
    for secret in ("root", "daemon", "alice", "$6$", "20228", "hash"):
        assert secret not in line.replace(str(tmp_path), "")


def test_a_key_deep_in_a_file_is_checked_too(tmp_path: Path) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text("cni: veth\nlimits:\n  StartVM: 2\n  'p@ss:w0rd/secret': 3\n")
    with pytest.raises(ConfigError, match=r"line 4: a line that is not a mapping key") as err:
        Scenario.from_yaml(bad)
    assert "p@ss" not in str(err.value)


def test_an_unknown_field_shows_its_key_not_its_value(tmp_path: Path) -> None:
    """A kubeconfig's ``token:`` given as a config: the key is the problem."""
    bad = tmp_path / "c.yaml"
    bad.write_text("cni: veth\ntoken: s3cr3t-value\n")
    line = _one_line("simulate", str(bad))
    assert line == f"error: {bad}: token: unknown field"


# -- one line, not a traceback --------------------------------------------------------


def test_report_of_a_header_only_trace_is_one_line(tmp_path: Path) -> None:
    """Was: IndexError from the percentiles of no latency."""
    trace = tmp_path / "empty.jsonl"
    trace.write_text(HEADER + "\n")
    line = _one_line("report", str(trace), "-o", str(tmp_path / "r.html"))
    assert line == f"error: source: {trace} holds no stage spans (a header only); nothing to report"
    assert not (tmp_path / "r.html").exists()


def test_simulate_trace_on_a_full_disk_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: an OSError traceback (ENOSPC carries no file name)."""
    import bootstorm.simulator.trace_export as trace_export

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(trace_export.os, "fsync", full)
    out = tmp_path / "t.json"
    line = _one_line("simulate", "--sandboxes", "5", "--trace", str(out))
    assert line == f"error: trace: {out}: cannot write (No space left on device)"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.root
def test_simulate_trace_on_a_real_full_tmpfs(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        out = small / "t.json"
        line = _one_line("simulate", "--sandboxes", "50", "--trace", str(out))
        assert line == f"error: trace: {out}: cannot write (No space left on device)"
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_sweep_of_size_zero_names_sandboxes_only() -> None:
    """Was: two lines, the second naming ``tenants`` (an option nobody gave)."""
    assert _one_line("sweep", "--sandboxes", "0") == (
        "error: sandboxes: must be in 1..1,000,000,000 (got 0)"
    )


# -- every option checked before work starts -------------------------------------------


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loops that run storms, fits or searches fail the test if reached:
    each case below must be refused before any of them starts."""
    import bootstorm.workflows as workflows

    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("work started before the options were checked")

    for name in (
        "run_storm_here",
        "measure_operations_here",
        "validate_storm",
        "validate_candidates",
        "tune",
        "calibrate_plan",
        "fit_traces",
        "fit_paper",
        "run_sweep",
    ):
        monkeypatch.setattr(workflows, name, work, raising=False)


_MISSING = "/nonexistent-bootstorm-dir/out"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("dataplane", "--flows", "1000000000"), "flows: each count must be in 1..10,000"),
        (("sweep", "--scheduler", ""), "scheduler: expected a TCP address"),
        (("sweep", "--scheduler", "http://x:1"), "scheduler: expected a TCP address"),
        (("sweep", "--sandboxes", ""), "sandboxes: expected comma-separated integers"),
        (("testbed", "measure-ops", "--repeats", "1000000000"), "repeats: must be in 1..10,000"),
        (("testbed", "measure-ops", "--output", ""), "output: . is a directory"),
        (("testbed", "run", "--trace", f"{_MISSING}/t.jsonl"), "trace: no directory"),
        (("testbed", "run", "--chrome", f"{_MISSING}/t.json"), "chrome: no directory"),
        (("testbed", "run", "--agent", ""), "agent: expected a URL"),
        (("testbed", "run", "--cni-bin-dir", "/dev/null"), "cni_bin_dir: /dev/null: not a dir"),
        (("testbed", "chrome", "x.jsonl", "-o", f"{_MISSING}/c.json"), "output: no directory"),
        (("testbed", "run", "--vm-memory-mib", str(10**20)), "vm_memory_mib: must be in 16.."),
        (("testbed", "run", "--max-lock-spans", str(10**20)), "max_lock_spans: must be in 0.."),
        (("tune", "--trace-dir", "/dev/null"), "trace_dir: /dev/null: not a directory"),
        (("calibrate", "--plan", "--trace-dir", "/dev/null"), "trace_dir: /dev/null: not a dir"),
        (("validate", "--sandboxes", "0"), "sandboxes: must be in 1..9,999 (got 0)"),
        (("validate", "--repeats", "0"), "repeats: must be in 1..100"),
        (("validate", "--threshold", "nan"), "threshold: must be a number in 0..1e+06"),
        (("validate", "--min-spearman", "nan"), "min_spearman: must be a number in -1..1"),
        (("validate", "--agent", ""), "agent: expected a URL"),
        (("validate", "--token-file", "/dev/null"), "token_file: /dev/null: a character device"),
        (("validate", "--trace", f"{_MISSING}/t.jsonl"), "trace: no directory"),
        (("tune", "--trials", str(10**20)), "trials: must be in 1..100,000"),
        (("tune", "--plan-sandboxes", "0"), "plan_sandboxes: must be in 4..9,999"),
        (("tune", "--output", f"{_MISSING}/t.yaml"), "output: no directory"),
        (("tune", "--report", f"{_MISSING}/r.html"), "report: no directory"),
        (("tune", "--measured-ops", "/dev/null"), "measured_ops: /dev/null: a character device"),
        (("calibrate", "--plan", "--plan-runs", "1000000000"), "plan_runs: must be in 1..100"),
        (("calibrate", "--measured", "/dev/null"), "measured: /dev/null: a character device"),
        (("calibrate", "--predict-sandboxes", "-1"), "predict_sandboxes: must be in 1.."),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else None,
)
@pytest.mark.usefixtures("no_work")
def test_an_option_is_checked_before_work_starts(args: tuple[str, ...], says: str) -> None:
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):
        assert says in _one_line(*args)
