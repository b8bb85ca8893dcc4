"""bootstorm.calibration — fit profiles to published targets (and, later, to traces)."""

from .paper000 import FREE_PARAMETERS, FitReport, FreeParameter, fit_paper_000, solve_single
from .targets import (
    FIT_TOLERANCE,
    PAPER_000_FIT,
    PREDICT_TOLERANCE,
    Metric,
    PaperTarget,
    TargetCheck,
    check_targets,
    makespan,
    rtnl_acquisitions,
    rtnl_contended_wall,
    rtnl_share_in,
)

__all__ = [
    "FIT_TOLERANCE",
    "FREE_PARAMETERS",
    "PAPER_000_FIT",
    "PREDICT_TOLERANCE",
    "FitReport",
    "FreeParameter",
    "Metric",
    "PaperTarget",
    "TargetCheck",
    "check_targets",
    "fit_paper_000",
    "makespan",
    "rtnl_acquisitions",
    "rtnl_contended_wall",
    "rtnl_share_in",
    "solve_single",
]
