"""Targets read off the data-plane model (:mod:`bootstorm.models.softirq`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..models import Profile, load_profile
from ..models.dataplane import Traffic
from ..models.softirq import DataplaneResult, solve_on_profile

__all__ = ["DataplaneEvaluator", "dataplane_evaluator"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DataplaneEvaluator:
    """``read`` of ``traffic``'s steady state on a profile (``None``: the
    built-in ``profile_name``). The traffic and the reading are kept apart so
    that ``calibrate --check`` can draw the same load at other seeds."""

    profile_name: str
    traffic: Traffic
    read: Callable[[DataplaneResult], float]

    def __call__(self, profile: Profile | None) -> float:
        prof = profile if profile is not None else load_profile(self.profile_name)
        return self.read(solve_on_profile(prof, self.traffic))


def dataplane_evaluator(
    profile_name: str, traffic: Traffic, read: Callable[[DataplaneResult], float]
) -> DataplaneEvaluator:
    """``read`` of ``traffic``'s steady state on a profile (``None``: the built-in one)."""
    return DataplaneEvaluator(profile_name=profile_name, traffic=traffic, read=read)
