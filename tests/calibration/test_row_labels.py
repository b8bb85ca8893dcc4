"""Every paper check says what it is: fit, predict, identity or mechanism.

A fitted number shown as a prediction was the defect (FastIOV's −65.7% against
vanilla is 1 − 1.391·4.0/16.2 once the fitted rows hold). These tests hold the
labels of ``bootstorm.calibration.rows`` against the tests that check the
rows, the fit targets, the ``calibrate --check`` rows and the known misses.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from bootstorm.calibration import KNOWN_MISSES, PAPER_ROWS, TARGET_SETS, paper_row
from bootstorm.calibration.check import CHECK_ROWS, rows_for
from bootstorm.calibration.rows import PaperRow, checks_rows

HERE = Path(__file__).resolve().parent
PAPER_TESTS = ("test_paper_000.py", "test_paper_001.py")
# Tests of a fit's reproducibility, not of a paper's figure.
_NOT_ROWS = {
    "test_the_built_in_profile_is_the_fit_byte_for_byte",
    "test_expected_misses_are_checks",
}
_ROW_ID = re.compile(r'"(S\d-[0-9A-Za-z]+(?:/[\w-]+)?)"')


def _test_functions(path: Path) -> list[ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


@pytest.mark.parametrize("name", PAPER_TESTS)
def test_every_paper_test_names_the_labelled_rows_it_checks(name: str) -> None:
    """Each test carries ``@checks_rows(...)``: an unlabelled key fails at import."""
    for fn in _test_functions(HERE / name):
        if fn.name in _NOT_ROWS:
            continue
        decorators = [ast.unparse(d) for d in fn.decorator_list]
        assert any(d.startswith("checks_rows(") for d in decorators), (name, fn.name)


@pytest.mark.parametrize("name", PAPER_TESTS)
def test_every_row_id_in_the_paper_tests_has_a_label(name: str) -> None:
    """Every quoted row id (``"S1-4/p99"``) in a paper test is a labelled row."""
    for key in _ROW_ID.findall((HERE / name).read_text()):
        assert key in PAPER_ROWS, f"{name}: row {key!r} has no label in PAPER_ROWS"


@pytest.mark.parametrize("name", PAPER_TESTS)
def test_the_marked_functions_carry_their_rows(name: str) -> None:
    spec = importlib.util.spec_from_file_location(f"_labels_{name[:-3]}", HERE / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for fn in _test_functions(HERE / name):
        if fn.name in _NOT_ROWS:
            continue
        rows = getattr(getattr(module, fn.name), "paper_rows", ())
        assert rows and all(isinstance(r, PaperRow) for r in rows), fn.name


def test_checks_rows_refuses_an_unlabelled_row() -> None:
    with pytest.raises(KeyError, match="no paper row 'S9-9'"):
        checks_rows("S9-9")


def test_fit_targets_are_labelled_with_their_role() -> None:
    """A target's role is its row's kind: a fit target labelled *predict* (or
    the other way round) would present a fitted number as a prediction."""
    for name, target_set in TARGET_SETS.items():
        for t in target_set.rows:
            assert t.role == paper_row(t.key).kind, (name, t.key, t.label, t.role)


@pytest.mark.parametrize("name", sorted(CHECK_ROWS))
def test_check_rows_are_labelled(name: str) -> None:
    for row in rows_for(name):
        assert row.kind in ("fit", "predict", "identity", "mechanism"), row.key


def test_fastiov_against_vanilla_is_an_identity_not_a_prediction() -> None:
    """Item 3 of issue 21: the fit sets vanilla's average (S1-1) and FastIOV's
    (S1-4's fitted part), so their ratio is arithmetic, and so is S1-1's own +305%."""
    assert paper_row("S1-4/fastiov-vs-none").kind == "fit"
    for key in ("S1-4/avg-vs-vanilla", "S1-4/vanilla-vs-none", "S1-7/at-200"):
        row = paper_row(key)
        assert row.kind == "identity" and row.why, key
    assert abs((1 - 1.391 * 4.0 / 16.2) - 0.657) < 0.001


def test_every_known_miss_is_labelled() -> None:
    for key, miss in KNOWN_MISSES.items():
        assert miss.kind == paper_row(key).kind
        assert f", {miss.kind}): " in miss.reason


def test_identity_and_mechanism_rows_say_why() -> None:
    with pytest.raises(
        ValueError,
        match=r"^why: must say why for an identity or mechanism row \(row 'S9-1'\) \(got ''\)$",
    ):
        PaperRow(key="S9-1", kind="identity", figure="x")
