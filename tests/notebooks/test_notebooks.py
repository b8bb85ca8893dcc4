"""Every notebook runs top to bottom against the installed package (nbclient)."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: Path, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    book = nbformat.read(path, as_version=4)
    # No logic in notebooks: cells call the package, they define nothing.
    for cell in book.cells:
        if cell.cell_type == "code":
            assert "def " not in cell.source and "class " not in cell.source, cell.source
    # Run outside the checkout: data comes through the package, as from an
    # install (notebook 04 once read ../traces/data).
    client = NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert outputs  # the figures and tables are there
    # Clean output: no log lines or warnings (notebook 03 printed ~80 of
    # Optuna's trial lines and a TqdmWarning).
    noise = [o.get("text", "")[:200] for o in outputs if o.get("name") == "stderr"]
    assert not noise, noise
