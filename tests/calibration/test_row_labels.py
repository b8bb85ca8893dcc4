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

from bootstorm.calibration import CHECK_SEEDS, KNOWN_MISSES, PAPER_ROWS, TARGET_SETS, paper_row
from bootstorm.calibration.check import CHECK_ROWS, CheckRow, RowCheck, check_profile, rows_for
from bootstorm.calibration.rows import Derivation, PaperRow, checks_rows
from bootstorm.models import load_profile

HERE = Path(__file__).resolve().parent
PAPER_TESTS = ("test_paper_000.py", "test_paper_001.py", "test_paper_003.py")
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


# -- issue 36 item 3: labels earned, checked mechanically ------------------------------


@pytest.fixture(scope="module")
def identity_checks() -> dict[str, list[RowCheck]]:
    """Every target set's rows on three unseen seeds, with each declared
    derivation on the paper's and the model's values."""
    return {name: check_profile(name, seeds=CHECK_SEEDS[:3]) for name in sorted(CHECK_ROWS)}


def test_every_label_agrees_with_the_identity_check(
    identity_checks: dict[str, list[RowCheck]],
) -> None:
    """A row its declared relation determines (the relation on the fitted rows'
    paper values lands within the row's tolerance of the model) is no
    prediction; an identity that it does not determine is no identity."""
    for name, checks in identity_checks.items():
        for c in checks:
            assert c.label_holds, (name, c.row.key, c.row.label, c.row.kind, c.derived_error)


def test_the_rows_the_review_named_are_identities_by_the_check(
    identity_checks: dict[str, list[RowCheck]],
) -> None:
    """S0-6's cut is 1 − S0-1/S0-2; S1-6 is vanilla less its fitted zeroing;
    no-skip is FastIOV plus vanilla's dma-image time; S1-4's p99 cut is the
    quotient of two rows checked on their own."""
    by_ref = {c.row.ref: c for checks in identity_checks.values() for c in checks}
    for ref in (
        "S0-6/cut:full pooling cuts ipvtap",
        "S1-6:FastIOV vs Pre100, average",
        "S1-5/no-skip:fastiov-no-skip vs vanilla, average",
        "S1-4/p99-vs-vanilla:FastIOV vs vanilla, p99",
    ):
        c = by_ref[ref]
        assert c.determined and c.row.kind == "identity", ref
    # The relation is declared for the rows it does not determine as well:
    # they stay predictions, and the check shows how far the arithmetic is.
    for ref in (
        "S1-5/ablations:fastiov-no-lock vs vanilla, average",
        "S4-4:CPU per Gbps at 80 flows, overlay / native",
    ):
        c = by_ref[ref]
        assert c.determined is False and c.row.kind == "predict", ref
    assert by_ref["S0-6/cut:full pooling cuts ipvtap"].derived == pytest.approx(1 - 10 / 20.7)


def test_a_predict_row_its_relation_determines_is_mislabelled() -> None:
    rule = Derivation(uses=("S0-1", "S0-2"), formula="1 - S0-1 / S0-2", relation=lambda a, b: a)
    row = CheckRow(
        key="S0-6/near-none",  # a predict row
        label="x",
        value=0.49,
        read=lambda _r: 0.0,
        tolerance_rel=0.15,
        derived_from=rule,
    )
    assert not RowCheck(row=row, per_seed=(0.48,), derived=0.5, derived_model=0.48).label_holds
    assert RowCheck(row=row, per_seed=(0.48,), derived=0.9, derived_model=0.48).label_holds


def test_costs_chosen_against_a_row_make_it_a_fit() -> None:
    """S4-5's receive pass was chosen among measured costs after scanning them
    against the row; S0-5 chose costs.mutex_wake_s (0 = FIFO: a 50 us wake-up
    made ipvtap the slowest CNI, 0df074a); the profile's source says so."""
    for key in ("S4-5/rate", "S0-5/order", "S0-5/gap"):
        assert paper_row(key).kind == "fit" and paper_row(key).why, key
    source = load_profile("paper-000").sources["costs.mutex_wake_s"]
    assert "S0-5" in source and "no paper row" not in source
    carried = load_profile("paper-001").sources["costs.mutex_wake_s"]
    assert carried.endswith(source)
