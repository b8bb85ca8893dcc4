"""The docs/ pages build as a site (``mkdocs build --strict``: a broken link
or a page left out of the nav fails), and every page the README links to exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_build_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for page in pages:
        built = tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), page


def test_the_readme_links_only_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert linked
    missing = [p for p in linked if not (ROOT / p).is_file()]
    assert missing == []
