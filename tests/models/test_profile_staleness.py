"""A fitted profile knows when and on what it was fitted, and says so when a
what-if runs on it later or elsewhere (issue 38: a day-old profile predicted
the same storms 11-30% too fast, silently)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bootstorm.calibration.trace_fit import fitted_on
from bootstorm.models import FittedOn, Profile, load_profile
from bootstorm.models.profile import STALE_AFTER_S
from bootstorm.traces import read_trace
from bootstorm.traces.host import current_host, summarise_kernel_config

ROOT = Path(__file__).resolve().parents[2]
RUNS = [ROOT / f"traces/data/validation/storm-50-run{k}.jsonl.gz" for k in (1, 2, 3)]
FITTED_AT = datetime(2026, 11, 22, 5, 55, tzinfo=UTC)


def fitted(**facts: object) -> Profile:
    on = FittedOn(
        recorded_at=FITTED_AT,
        kernel="6.1.0-a",
        kernel_config="PREEMPT_NONE HZ=250",
        cores=2,
        cpu_model="Xeon",
    ).model_copy(update=facts)
    return load_profile("paper-000").model_copy(update={"name": "local", "fitted_on": on})


def test_a_published_profile_is_never_stale() -> None:
    paper = load_profile("paper-000")
    assert paper.fitted_on is None
    assert paper.staleness(now=FITTED_AT + timedelta(days=400), kernel="other") == ()


def test_older_than_a_day_says_how_old() -> None:
    same = {"kernel": "6.1.0-a", "kernel_config": "PREEMPT_NONE HZ=250", "cores": 2}
    young = fitted().staleness(now=FITTED_AT + timedelta(seconds=STALE_AFTER_S - 1), **same)
    assert young == ()
    (line,) = fitted().staleness(now=FITTED_AT + timedelta(days=3, hours=12), **same)
    assert "3.5 days ago (2026-11-22 05:55 UTC)" in line and "calibrate --plan" in line


@pytest.mark.parametrize(
    ("here", "named"),
    [
        ({"kernel": "6.1.0-b"}, "kernel 6.1.0-a, this machine has 6.1.0-b"),
        ({"kernel_config": "PREEMPT HZ=1000"}, "kernel build PREEMPT_NONE HZ=250"),
        ({"cores": 64}, "CPUs 2, this machine has 64"),
        ({"cpu_model": "EPYC"}, "CPU model Xeon, this machine has EPYC"),
    ],
)
def test_another_machine_is_named(here: dict[str, object], named: str) -> None:
    same: dict[str, object] = {"kernel": "6.1.0-a", "cores": 2, "cpu_model": "Xeon"}
    (line,) = fitted().staleness(now=FITTED_AT, **{**same, **here})  # type: ignore[arg-type]
    assert named in line


def test_a_fact_either_side_lacks_is_compared_with_nothing() -> None:
    profile = fitted(cpu_model=None, kernel_config=None, recorded_at=None)
    later = FITTED_AT + timedelta(days=30)
    assert profile.staleness(now=later, cpu_model="EPYC", kernel_config="x") == ()


def test_the_kernel_build_is_summarised_from_its_config() -> None:
    config = "CONFIG_PREEMPT_NONE=y\n# CONFIG_PREEMPT is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n"
    assert summarise_kernel_config(config) == "PREEMPT_NONE HZ=250"
    assert summarise_kernel_config("CONFIG_PREEMPT=y\nCONFIG_HZ=1000\n") == "PREEMPT HZ=1000"
    assert summarise_kernel_config("CONFIG_NET=y\n") is None
    here = current_host()
    assert here.cores >= 1 and here.kernel


def test_a_fit_records_the_newest_storms_machine_and_time_and_keeps_it_in_yaml() -> None:
    traces = [read_trace(p) for p in RUNS]
    on = fitted_on(traces)
    assert on is not None
    newest = max(t.header.created_at for t in traces if t.header.created_at is not None)
    assert on.recorded_at == newest
    assert on.kernel == traces[0].header.host.kernel  # type: ignore[union-attr]
    assert on.storms == ("threads: veth-peer-in-netns",)
    profile = fitted().model_copy(update={"fitted_on": on})
    assert Profile.model_validate(json.loads(profile.model_dump_json())).fitted_on == on
    text = profile.to_yaml()
    assert "fitted_on:" in text


@pytest.mark.slow
def test_simulate_on_a_stale_profile_says_so_in_its_output_and_json(tmp_path: Path) -> None:
    two_days = datetime.now(UTC) - timedelta(days=2)
    here = current_host()
    profile = fitted(
        recorded_at=two_days,
        kernel="0.0-elsewhere",
        cores=here.cores,
        cpu_model=None,
        kernel_config=None,
    )
    path = tmp_path / "local.yaml"
    path.write_text(profile.to_yaml())
    argv = ["simulate", "--profile", str(path), "--sandboxes", "20"]
    run = [sys.executable, "-c", "from bootstorm.cli import main; main()", *argv]
    out = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "caution: profile 'local' was fitted to storms recorded 2.0 days ago" in text
    assert "fitted on kernel 0.0-elsewhere" in text
    js = subprocess.run([*run, "--json"], capture_output=True, text=True, timeout=300)
    stale = json.loads(js.stdout)["profile_stale"]
    assert len(stale) == 2 and "0.0-elsewhere" in stale[1]
