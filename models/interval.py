"""A what-if's interval: where the node's median should fall, from how far
the profile missed the storms it was fitted to.

A profile fitted to a node's storms records, per headline metric, the root
mean square ``s`` of ``log(measured median / predicted)`` over its ``k``
storms (:class:`~bootstorm.models.PredictionError`). A new storm's
``log(measured / predicted)`` is taken as one more draw of that error, so
its ``level`` interval is the classical prediction interval of a new
observation from ``k`` residuals::

    predicted × exp(± t_{(1 + level) / 2, k - 1} · s · sqrt(1 + 1/k))

with Student's t for the few storms a plan has (8: t = 1.89 at 90%, against
1.64 for a normal). The residuals are taken about zero, not about their
mean: a fit that misses all its storms the same way widens the interval
instead of moving the answer. What it does not cover: a node that has
drifted since the fit (the profile's staleness caution says when), a
mechanism the plan never exercised (the identification cautions), and a
storm far outside the plan's sizes.
"""

from __future__ import annotations

import math

from scipy.special import stdtrit

from ..simulator import HeadlineInterval
from .profile import PredictionError

__all__ = ["DEFAULT_LEVEL", "headline_interval"]

#: The probability a what-if's interval is stated at.
DEFAULT_LEVEL = 0.9


def headline_interval(
    *,
    makespan_s: float,
    mean_s: float,
    p99_s: float,
    error: PredictionError,
    level: float = DEFAULT_LEVEL,
) -> HeadlineInterval:
    """The ``level`` interval of each headline number predicted, from ``error``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: must be between 0 and 1 (exclusive), but got {level}")
    k = error.storms
    factor = float(stdtrit(k - 1, 0.5 + level / 2.0)) * math.sqrt(1.0 + 1.0 / k)

    def band(value: float, log_rms: float) -> tuple[float, float]:
        half = factor * log_rms
        return (value * math.exp(-half), value * math.exp(half))

    return HeadlineInterval(
        level=level,
        makespan_s=band(makespan_s, error.makespan_log_rms),
        mean_s=band(mean_s, error.mean_log_rms),
        p99_s=band(p99_s, error.p99_log_rms),
        storms=k,
    )
