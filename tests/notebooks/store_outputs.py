"""Run every notebook and store it with its outputs, each figure with a PNG beside it.

GitHub and nbviewer run no plotly.js: a notebook stored with Plotly's
interactive output alone shows blank where its figures are. The notebooks
call :func:`bootstorm.report.show_static_images` first, so each figure is
stored twice, interactive and as a PNG (kaleido in a headless Chromium:
``pip install -e '.[notebooks]'`` and a Chromium, e.g. Debian's ``chromium``).

    python tests/notebooks/store_outputs.py [notebooks/NN-name.ipynb ...]

Run outside the checkout, as the tests run them (data comes through the
package). Not a test (no ``test_`` prefix): the tests check what it stored.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
#: The cell every notebook starts with (after its title), as stored.
SETUP_CELL = (
    "# Each figure also carries a PNG, for readers outside Jupyter (GitHub shows it).\n"
    "from bootstorm.report import show_static_images\n"
    "\n"
    "show_static_images();"
)


def store(path: Path) -> None:
    """Execute ``path`` top to bottom and write it back with its outputs."""
    import nbformat
    from nbclient import NotebookClient

    book = nbformat.read(path, as_version=4)
    sources = [c.source for c in book.cells if c.cell_type == "code"]
    if SETUP_CELL not in sources:
        at = next(k for k, c in enumerate(book.cells) if c.cell_type == "code")
        book.cells.insert(at, nbformat.v4.new_code_cell(SETUP_CELL))
    with tempfile.TemporaryDirectory() as where:
        client = NotebookClient(
            book,
            timeout=600,
            kernel_name="python3",
            record_timing=False,  # no timestamps: a rerun changes only what changed
            resources={"metadata": {"path": where}},
        )
        client.execute()
    errors = [
        o
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    if errors:
        raise SystemExit(f"{path.name}: {errors[0].ename}: {errors[0].evalue}")
    nbformat.write(book, path)


def main(argv: list[str]) -> None:
    paths = [Path(p) for p in argv] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        store(path)
        sys.stderr.write(f"stored {path.name}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
