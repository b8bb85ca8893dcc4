"""The CNI plugin switch on recorded storms (issue 38 item 4; docs/testbed.md,
"Another plugin, predicted").

*Predict*: the profile (``traces/data/cni/plan/local.yaml``) was fitted to
bridge storms only, a day before; ``traces/data/cni/plugins/`` holds storms
of the bridge, ptp and macvlan plugins recorded in interleaved rounds on
2026-11-28 (50 sandboxes, 10 rounds; 150, 3x the plan's largest, 3 rounds),
in no fit. The ptp and macvlan variants price their ADDs from
the requests strace counted (models/testbed.py) with the bridge's fitted costs.
"""

from __future__ import annotations

import glob
from functools import cache
from pathlib import Path

import pytest

from bootstorm.calibration.trace_fit import Comparison, predicted_vs_measured
from bootstorm.models import Profile
from bootstorm.traces import read_trace

DATA = Path(__file__).resolve().parents[2] / "traces" / "data" / "cni"
PLUGINS = ("bridge", "ptp", "macvlan")
#: Each plugin's makespan and mean startup, predicted against the median of
#: its runs (the mean pooling every sandbox): the held-out CNI storms' own
#: bound (docs/testbed.md: none beyond 20%).
LEVEL_TOLERANCE = 0.20
#: The switch (a plugin's makespan or mean startup over the bridge's in the
#: same rounds, less 1), predicted against measured, in points: set after 5
#: rounds, before 5 more were recorded; the runs' own paired switches spread
#: about ±10 points (interquartile) round to round.
SWITCH_TOLERANCE = 0.06
#: AddCNI's switch, predicted against measured, in points: missed.
ADD_SWITCH_TOLERANCE = 0.10
#: The 150-sandbox storms (3x the plan's largest, 3 rounds): their tolerances
#: were written here before they were recorded; fewer rounds, a wider switch.
SIZES = {50: (LEVEL_TOLERANCE, SWITCH_TOLERANCE), 150: (LEVEL_TOLERANCE, 0.08)}


@cache
def _rows(plugin: str, size: int = 50) -> dict[str, Comparison]:
    files = sorted(glob.glob(str(DATA / "plugins" / f"{plugin}-{size}-run*")))
    runs = [read_trace(f) for f in files]
    assert len(runs) >= 3
    profile = Profile.from_yaml(DATA / "plan" / "local.yaml")
    return {c.metric: c for c in predicted_vs_measured(runs, profile)}


def _switch(plugin: str, metric: str, size: int = 50) -> tuple[float, float]:
    new, old = _rows(plugin, size)[metric], _rows("bridge", size)[metric]
    return new.measured / old.measured - 1, new.predicted / old.predicted - 1


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("plugin", PLUGINS)
def test_each_plugins_storm_is_predicted_within_its_tolerance(plugin: str, size: int) -> None:
    for metric in ("makespan_s", "startup mean_s"):
        row = _rows(plugin, size)[metric]
        assert abs(row.rel_error) <= SIZES[size][0], (plugin, metric, row)


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("plugin", ["ptp", "macvlan"])
def test_the_switch_from_the_bridge_is_predicted_within_its_tolerance(
    plugin: str, size: int
) -> None:
    for metric in ("makespan_s", "startup mean_s"):
        measured, predicted = _switch(plugin, metric, size)
        assert abs(predicted - measured) <= SIZES[size][1], (plugin, metric, measured, predicted)


@pytest.mark.slow
def test_macvlan_is_measured_and_predicted_faster_than_the_bridge() -> None:
    for metric in ("makespan_s", "startup mean_s"):
        measured, predicted = _switch("macvlan", metric)
        assert measured < 0 and predicted < 0, (metric, measured, predicted)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="known miss (CNI plugin switch, predict): the model shortens AddCNI by the "
    "switch far more than the host does: at 50 sandboxes ptp -15% predicted against +1% "
    "measured, macvlan -24% against -12%; at 150 ptp -25% against -9%, macvlan -20% "
    "against -8%. ptp sends its 9 RTNL requests after host-local's lease (the bridge 6 "
    "of its 8 before): in the model part of the RTNL queue moves from AddCNI to NetNS "
    "(at 50: +25% predicted, +29% measured; at 150: +30% against -12%). The makespan and "
    "mean startup switches hold; the stage blamed does not (docs/testbed.md, 'Another "
    "plugin, predicted')",
)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("plugin", ["ptp", "macvlan"])
def test_the_add_stages_switch_is_predicted(plugin: str, size: int) -> None:
    measured, predicted = _switch(plugin, "AddCNI mean_s", size)
    assert abs(predicted - measured) <= ADD_SWITCH_TOLERANCE, (measured, predicted)
