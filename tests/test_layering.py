"""The packages depend one way (docs: DESIGN.md, "Layout"), and say so in one style.

Layers, bottom up: traces (0), simulator (1), models (2), calibration and
optimizers (3), validation (4), the ``bootstorm`` facade and CLI (5). A module
may import its own layer and those below, never one above: at module level or
inside a function, relatively or absolutely. ``bootstorm._lazy`` and
``bootstorm._params`` are leaves any layer may use, so they import nothing of
ours. Within the project, imports are relative.

The walk is over the source with :mod:`ast`, so an import hidden in a function
body (which a runtime import graph would not see until it ran) counts too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Folder on disk -> (the package it installs as, its layer).
PACKAGES: dict[str, tuple[str, int]] = {
    "traces": ("traces", 0),
    "simulator": ("simulator", 1),
    "models": ("models", 2),
    "calibration": ("calibration", 3),
    "optimizers": ("optimizers", 3),
    "validation": ("validation", 4),
    "bootstorm": ("", 5),
}
#: Modules of the root package that every layer may import: they import
#: nothing of ours (checked below).
LEAVES = frozenset({"_lazy", "_params"})


@dataclass(frozen=True)
class Edge:
    source: Path
    line: int
    target: str  # the imported module, dotted, under bootstorm ("" = the root package)
    absolute: bool  # written as ``bootstorm.x`` rather than relatively


def _module_parts(path: Path) -> list[str]:
    """``bootstorm.<pkg>.<sub>...`` of ``path`` (a file under a package folder),
    without the leading ``bootstorm``; a package's ``__init__`` is the package."""
    rel = path.relative_to(ROOT).with_suffix("")
    folder, *rest = rel.parts
    package = PACKAGES[folder][0]
    parts = ([package] if package else []) + list(rest)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return parts


def _edges(path: Path) -> list[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_parts(path)
    is_package = path.name == "__init__.py"
    out: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                if name == "bootstorm" or name.startswith("bootstorm."):
                    out.append(Edge(path, node.lineno, name.partition(".")[2], True))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                mod = node.module or ""
                if mod == "bootstorm" or mod.startswith("bootstorm."):
                    base = mod.partition(".")[2]
                    out.extend(_from_targets(path, node, base, absolute=True))
                continue
            # A relative import: resolve it against this module's package.
            package = here if is_package else here[:-1]
            up = node.level - 1
            if up > len(package):
                raise AssertionError(f"{path}:{node.lineno}: relative import above bootstorm")
            base_parts = package[: len(package) - up] + (
                node.module.split(".") if node.module else []
            )
            out.extend(_from_targets(path, node, ".".join(base_parts), absolute=False))
    return out


def _from_targets(path: Path, node: ast.ImportFrom, base: str, *, absolute: bool) -> list[Edge]:
    """``from base import a, b``: the module ``base``, or ``base.a`` where
    ``base`` is the root package (``from .. import _params`` names a module)."""
    if base:
        return [Edge(path, node.lineno, base, absolute)]
    return [Edge(path, node.lineno, alias.name, absolute) for alias in node.names]


def _layer_of(target: str) -> int | None:
    """The layer of a module under bootstorm; ``None`` for a leaf."""
    head = target.split(".")[0]
    for package, layer in PACKAGES.values():
        if package and head == package:
            return layer
    if head in LEAVES:
        return None
    return PACKAGES["bootstorm"][1]  # the facade, the CLI, the root package itself


def _sources() -> list[Path]:
    files: list[Path] = []
    for folder in PACKAGES:
        files.extend(sorted((ROOT / folder).rglob("*.py")))
    return [f for f in files if "__pycache__" not in f.parts]


def wrong_way_edges(files: list[Path]) -> list[str]:
    """Each import from a lower layer to a higher one, or from a leaf to
    anything of ours, as ``file:line: layer -> layer (module)``."""
    problems: list[str] = []
    for path in files:
        parts = _module_parts(path)
        head = parts[0] if parts else ""
        folder = path.relative_to(ROOT).parts[0]
        leaf = folder == "bootstorm" and path.stem in LEAVES
        own = PACKAGES[folder][1]
        for edge in _edges(path):
            rel = path.relative_to(ROOT)
            if leaf:
                problems.append(
                    f"{rel}:{edge.line}: leaf {path.stem} imports bootstorm.{edge.target}"
                )
                continue
            layer = _layer_of(edge.target)
            if layer is not None and layer > own:
                problems.append(
                    f"{rel}:{edge.line}: {head or 'bootstorm'} (layer {own}) imports "
                    f"bootstorm.{edge.target} (layer {layer})"
                )
    return problems


def absolute_imports(files: list[Path]) -> list[str]:
    return [
        f"{edge.source.relative_to(ROOT)}:{edge.line}: bootstorm.{edge.target}"
        for path in files
        for edge in _edges(path)
        if edge.absolute
    ]


def test_no_import_goes_up_a_layer() -> None:
    problems = wrong_way_edges(_sources())
    assert not problems, "imports against the layering:\n" + "\n".join(problems)


def test_leaves_import_nothing_of_ours() -> None:
    for leaf in LEAVES:
        path = ROOT / "bootstorm" / f"{leaf}.py"
        if path.exists():
            assert not _edges(path), f"bootstorm/{leaf}.py must stay a leaf"


def test_one_import_style() -> None:
    found = absolute_imports(_sources())
    assert not found, "absolute imports of bootstorm (use relative ones):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("folder", "source", "wrong"),
    [
        ("traces", "from ..models.tuned import TunedConfig\n", True),
        ("traces", "def f():\n    from bootstorm.validation import _names\n", True),
        ("simulator", "from ..traces import Trace\n", False),
        ("models", "from .. import _params\n", False),
        ("models", "from .._lazy import lazy_exports\n", False),
        ("optimizers", "from ..calibration import rows\n", False),
        ("models", "from ..optimizers import _space\n", True),
        ("validation", "from ..bootstorm_cli import x\n", True),
    ],
)
def test_the_check_sees_a_wrong_way_edge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str, source: str, wrong: bool
) -> None:
    """The walk itself: a planted import is flagged exactly when it goes up."""
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    path = tmp_path / folder / "planted.py"
    path.parent.mkdir(parents=True)
    path.write_text(source, encoding="utf-8")
    assert bool(wrong_way_edges([path])) is wrong
