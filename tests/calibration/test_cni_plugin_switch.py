"""The CNI plugin switch on recorded storms (issue 38 item 4; docs/testbed.md,
"Another plugin, predicted").

*Predict*: the profile (``traces/data/cni/plan/local.yaml``) was fitted to
bridge storms only, a day before; ``traces/data/cni/plugins/`` holds 50-sandbox
storms of the bridge, ptp and macvlan plugins recorded in interleaved rounds
on 2026-11-28, in no fit. The ptp and macvlan variants price their ADDs from
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


@cache
def _rows(plugin: str) -> dict[str, Comparison]:
    runs = [read_trace(f) for f in sorted(glob.glob(str(DATA / "plugins" / f"{plugin}-50-run*")))]
    assert len(runs) >= 5
    profile = Profile.from_yaml(DATA / "plan" / "local.yaml")
    return {c.metric: c for c in predicted_vs_measured(runs, profile)}


def _switch(plugin: str, metric: str) -> tuple[float, float]:
    new, old = _rows(plugin)[metric], _rows("bridge")[metric]
    return new.measured / old.measured - 1, new.predicted / old.predicted - 1


@pytest.mark.slow
@pytest.mark.parametrize("plugin", PLUGINS)
def test_each_plugins_storm_is_predicted_within_its_tolerance(plugin: str) -> None:
    for metric in ("makespan_s", "startup mean_s"):
        row = _rows(plugin)[metric]
        assert abs(row.rel_error) <= LEVEL_TOLERANCE, (plugin, metric, row)


@pytest.mark.slow
@pytest.mark.parametrize("plugin", ["ptp", "macvlan"])
def test_the_switch_from_the_bridge_is_predicted_within_its_tolerance(plugin: str) -> None:
    for metric in ("makespan_s", "startup mean_s"):
        measured, predicted = _switch(plugin, metric)
        assert abs(predicted - measured) <= SWITCH_TOLERANCE, (plugin, metric, measured, predicted)


@pytest.mark.slow
def test_macvlan_is_measured_and_predicted_faster_than_the_bridge() -> None:
    for metric in ("makespan_s", "startup mean_s"):
        measured, predicted = _switch("macvlan", metric)
        assert measured < 0 and predicted < 0, (metric, measured, predicted)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="known miss (CNI plugin switch, predict): the model shortens AddCNI by the "
    "switch far more than the host does: ptp -15% predicted against +1% measured, "
    "macvlan -24% against -12%. ptp sends its 9 RTNL requests after host-local's lease "
    "(the bridge 6 of its 8 before): in the model part of the RTNL queue moves from "
    "AddCNI to NetNS (+25% predicted, +29% measured), in the host AddCNI keeps it. The "
    "makespan and mean startup switches hold; the stage blamed does not "
    "(docs/testbed.md, 'Another plugin, predicted')",
)
@pytest.mark.parametrize("plugin", ["ptp", "macvlan"])
def test_the_add_stages_switch_is_predicted(plugin: str) -> None:
    measured, predicted = _switch(plugin, "AddCNI mean_s")
    assert abs(predicted - measured) <= ADD_SWITCH_TOLERANCE, (measured, predicted)
