"""bootstorm.calibration — fit profiles to published targets (and, later, to traces)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._fit import FitReport, FreeParameter, ParameterSpread, parameter_spread, unseen_directions
from .intra_host_dataplane import FREE_PARAMETERS_002, PAPER_002_FIT, fit_paper_002
from .known_misses import (
    KNOWN_MISSES,
    KnownMiss,
    caveat_rows,
    caveats,
    caveats_frame,
    known_miss,
)
from .overlay_dataplane import FREE_PARAMETERS_004, PAPER_004_FIT, fit_paper_004
from .rows import PAPER_ROWS, PaperRow, RowKind, checks_rows, paper_row
from .software_cni_startup import FREE_PARAMETERS, fit_paper_000, solve_single
from .sriov_startup import FREE_PARAMETERS_001, PAPER_001_FIT, TABLE_1, fit_paper_001
from .targets import (
    CHECK_SEEDS,
    FIT_SEEDS,
    FIT_TOLERANCE,
    PAPER_000_FIT,
    PREDICT_TOLERANCE,
    Metric,
    PaperTarget,
    TargetCheck,
    check_targets,
    check_targets_over,
    makespan,
    rtnl_acquisitions,
    rtnl_contended_wall,
    rtnl_share_in,
)
from .tsor_dataplane import FREE_PARAMETERS_003, PAPER_003_FIT, fit_paper_003

__all__ = [
    "CHECK_SEEDS",
    "FIT_SEEDS",
    "FIT_TOLERANCE",
    "FREE_PARAMETERS",
    "FREE_PARAMETERS_001",
    "FREE_PARAMETERS_002",
    "FREE_PARAMETERS_003",
    "FREE_PARAMETERS_004",
    "KNOWN_MISSES",
    "PAPER_000_FIT",
    "PAPER_001_FIT",
    "PAPER_002_FIT",
    "PAPER_003_FIT",
    "PAPER_004_FIT",
    "PAPER_ROWS",
    "PREDICT_TOLERANCE",
    "TABLE_1",
    "TARGET_SETS",
    "FitReport",
    "FreeParameter",
    "KnownMiss",
    "Metric",
    "PaperRow",
    "PaperTarget",
    "ParameterSpread",
    "RowKind",
    "TargetCheck",
    "TargetSet",
    "caveat_rows",
    "caveats",
    "caveats_frame",
    "check_targets",
    "check_targets_over",
    "checks_rows",
    "fit_paper_000",
    "fit_paper_001",
    "fit_paper_002",
    "fit_paper_003",
    "fit_paper_004",
    "known_miss",
    "makespan",
    "paper_row",
    "parameter_spread",
    "rtnl_acquisitions",
    "rtnl_contended_wall",
    "rtnl_share_in",
    "solve_single",
    "unseen_directions",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class TargetSet:
    """A paper's fit rows and the fit that produces its built-in profile."""

    rows: Sequence[PaperTarget]
    fit: Callable[..., FitReport]


#: ``bootstorm calibrate --targets NAME``: each fits the built-in profile NAME.
TARGET_SETS: dict[str, TargetSet] = {
    "paper-000": TargetSet(rows=PAPER_000_FIT, fit=fit_paper_000),
    "paper-001": TargetSet(rows=PAPER_001_FIT, fit=fit_paper_001),
    "paper-002": TargetSet(rows=PAPER_002_FIT, fit=fit_paper_002),
    "paper-003": TargetSet(rows=PAPER_003_FIT, fit=fit_paper_003),
    "paper-004": TargetSet(rows=PAPER_004_FIT, fit=fit_paper_004),
}
