"""Targets read off the data-plane model (:mod:`bootstorm.models.softirq`)."""

from __future__ import annotations

from collections.abc import Callable

from ..models import Profile, load_profile
from ..models.dataplane import Traffic
from ..models.softirq import DataplaneResult, solve_on_profile

__all__ = ["dataplane_evaluator"]


def dataplane_evaluator(
    profile_name: str, traffic: Traffic, read: Callable[[DataplaneResult], float]
) -> Callable[[Profile | None], float]:
    """``read`` of ``traffic``'s steady state on a profile (``None``: the built-in one)."""

    def evaluate(profile: Profile | None) -> float:
        prof = profile if profile is not None else load_profile(profile_name)
        return read(solve_on_profile(prof, traffic))

    return evaluate
