"""Issue 4's numbers on the recorded validation set: a model of this host
fitted to one storm size predicts twice the size, and the same storm with
pooled devices, within ±15% of the measured makespan (medians of 3 runs;
`traces/data/validation/`, recorded on this project's 2-core host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstorm.calibration.trace_fit import fit_trace, predicted_vs_measured
from bootstorm.models import Profile
from bootstorm.traces import read_trace

DATA = Path(__file__).resolve().parents[2] / "traces" / "data" / "validation"
TOLERANCE = 0.15  # the issue's ±15%


def _runs(name: str) -> list:  # type: ignore[type-arg]
    return [read_trace(DATA / f"{name}-run{k}.jsonl.gz") for k in (1, 2, 3)]


@pytest.fixture(scope="module")
def local() -> Profile:
    return fit_trace(_runs("storm-50")).profile


@pytest.mark.slow
@pytest.mark.parametrize("storm", ["storm-100", "storm-50-netns-pool"])
def test_makespan_predicted_within_15_percent(local: Profile, storm: str) -> None:
    rows = {c.metric: c for c in predicted_vs_measured(_runs(storm), local)}
    makespan = rows["makespan_s"]
    assert abs(makespan.rel_error) <= TOLERANCE, (storm, makespan)


@pytest.mark.slow
def test_mean_startup_predicted_within_15_percent(local: Profile) -> None:
    for storm in ("storm-100", "storm-50-netns-pool"):
        mean = {c.metric: c for c in predicted_vs_measured(_runs(storm), local)}["startup mean_s"]
        assert abs(mean.rel_error) <= TOLERANCE, (storm, mean)
