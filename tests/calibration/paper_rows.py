"""The paper tests' shared part: a profile's one-number rows, judged on the
mean of the ten unseen check seeds (``bootstorm calibrate --check``'s rows).

Each ``test_paper_*.py`` names its expected misses (``key:label`` → the
``KNOWN_MISSES`` entry that says why) and parametrises one test over
:meth:`PaperRows.params`; the test body is :meth:`PaperRows.judge`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

import pytest

from bootstorm.calibration import CHECK_SEEDS, known_miss
from bootstorm.calibration.check import RowCheck, check_profile, rows_for


class PaperRows:
    """The check rows of ``profile`` at ``sandboxes``, with the misses expected."""

    def __init__(self, profile: str, *, sandboxes: int, expected_miss: Mapping[str, str]) -> None:
        self.profile = profile
        self.sandboxes = sandboxes
        self.expected_miss = dict(expected_miss)
        #: Every check's ``key:label``, in ``check_profile`` order (no simulation at collection).
        self.keys = tuple(f"{r.key}:{r.label}" for r in rows_for(profile))
        unknown = set(self.expected_miss) - set(self.keys)
        assert not unknown, f"expected misses that are no check of {profile}: {unknown}"

    @cached_property
    def checks(self) -> dict[str, RowCheck]:
        """Every row checked on the check seeds (simulated once, on first use)."""
        return {
            f"{c.row.key}:{c.row.label}": c for c in check_profile(self.profile, seeds=CHECK_SEEDS)
        }

    def params(self) -> list[object]:
        """One ``pytest.param`` per row; an expected miss is a strict xfail
        (``raises=AssertionError``: a crash is never taken for the miss)."""
        out: list[object] = []
        for key in self.keys:
            marks = ()
            if key in self.expected_miss:
                reason = known_miss(self.expected_miss[key]).reason
                marks = (pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason),)
            out.append(pytest.param(key, marks=marks, id=key))
        return out

    def judge(self, key: str) -> RowCheck:
        """Skip a row whose standard error exceeds its tolerance; else assert it holds."""
        check = self.checks[key]
        if not check.testable:
            pytest.skip(
                f"untestable at {self.sandboxes} sandboxes and {len(check.per_seed)} seeds: "
                f"the mean's standard error ({check.se_rel:.1%}) exceeds the tolerance "
                f"(±{check.row.tolerance_rel:.0%})"
            )
        assert check.within, (
            f"{key}: paper {check.row.value}, mean {check.mean:.4g} "
            f"(seeds {check.spread[0]:.4g}…{check.spread[1]:.4g}), error {check.rel_error:+.1%}"
        )
        return check
