"""The packages depend one way (docs: DESIGN.md, "Layout"), and say so in one style.

Layers, bottom up: traces (0), simulator (1), models (2), calibration and
optimizers (3), validation (4), the ``bootstorm`` facade and CLI (5). A module
may import its own layer and those below, never one above: at module level or
inside a function, relatively or absolutely. ``bootstorm._lazy`` and
``bootstorm._params`` are leaves any layer may use, so they import nothing of
ours. Within the project, imports are relative.

The walk is over the source with :mod:`ast`, so an import hidden in a function
body (which a runtime import graph would not see until it ran) counts too.

Within the validation layer, the node agent and the testbed meet through
public interfaces only (:data:`PUBLIC_ONLY`): neither imports a private
(``_``-prefixed) module of the other, nor a name the imported module does not
list in its ``__all__``.
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


#: Packages that import each other through public names only.
PUBLIC_ONLY = ("validation.agent", "validation.testbed")
#: (importer, imported) pairs that must not be: the agent implements the
#: testbed's public protocols (its admission), the testbed never imports the agent.
FORBIDDEN = (("validation.testbed", "validation.agent"),)


@dataclass(frozen=True)
class Import:
    source: Path
    line: int
    module: str  # dotted under bootstorm
    names: tuple[str, ...]  # ``from module import names``; () for ``import module``


def _imports(path: Path) -> list[Import]:
    """Every import of a module of ours in ``path``, with the names it takes."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_parts(path)
    package = here if path.name == "__init__.py" else here[:-1]
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("bootstorm."):
                    out.append(Import(path, node.lineno, alias.name.partition(".")[2], ()))
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            if node.level == 0:
                mod = node.module or ""
                if mod.startswith("bootstorm."):
                    out.append(Import(path, node.lineno, mod.partition(".")[2], names))
                continue
            up = node.level - 1
            base = package[: len(package) - up] + (node.module.split(".") if node.module else [])
            out.append(Import(path, node.lineno, ".".join(base), names))
    return out


def _module_file(module: str) -> Path | None:
    """The source of ``module`` (dotted under bootstorm), or None if it is no module of ours."""
    head, *rest = module.split(".")
    folder = next((f for f, (pkg, _) in PACKAGES.items() if pkg and pkg == head), None)
    if folder is None:
        return None
    base = ROOT / folder / Path(*rest) if rest else ROOT / folder
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _exports(module: str) -> frozenset[str] | None:
    """``module``'s ``__all__`` (a literal list or tuple), or None if it has none."""
    path = _module_file(module)
    if path is None:
        return None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id == "__all__" and value is not None:
            return frozenset(ast.literal_eval(value))
    return None


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def private_crossings(files: list[Path]) -> list[str]:
    """Each import by one :data:`PUBLIC_ONLY` package of the other's private
    module, or of a name outside the imported module's ``__all__``."""
    problems: list[str] = []
    for path in files:
        here = ".".join(_module_parts(path))
        own = next((p for p in PUBLIC_ONLY if _within(here, p)), None)
        if own is None:
            continue
        for imp in _imports(path):
            other = next((p for p in PUBLIC_ONLY if p != own and _within(imp.module, p)), None)
            if other is None:
                continue
            where = f"{path.relative_to(ROOT)}:{imp.line}"
            inner = imp.module[len(other) :].split(".")
            if any(part.startswith("_") for part in inner):
                problems.append(f"{where}: private module bootstorm.{imp.module}")
                continue
            exported = _exports(imp.module)
            for name in imp.names:
                if _module_file(f"{imp.module}.{name}") is not None:
                    if name.startswith("_"):
                        problems.append(f"{where}: private module bootstorm.{imp.module}.{name}")
                elif exported is None or name not in exported:
                    problems.append(f"{where}: {name} is not in bootstorm.{imp.module}.__all__")
    return problems


def forbidden_imports(files: list[Path]) -> list[str]:
    """Each import that a :data:`FORBIDDEN` pair rules out."""
    problems: list[str] = []
    for path in files:
        here = ".".join(_module_parts(path))
        for importer, imported in FORBIDDEN:
            if not _within(here, importer):
                continue
            problems += [
                f"{path.relative_to(ROOT)}:{imp.line}: {importer} imports bootstorm.{imp.module}"
                for imp in _imports(path)
                if _within(imp.module, imported)
            ]
    return problems


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


def test_agent_and_testbed_meet_through_public_names() -> None:
    problems = private_crossings(_sources()) + forbidden_imports(_sources())
    assert not problems, "the agent and the testbed reach into each other:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("folder", "source", "wrong"),
    [
        ("agent", "from ..testbed._priv import A\n", True),
        ("agent", "def f():\n    from ..testbed._priv import A\n", True),
        ("agent", "from ..testbed import _priv\n", True),
        ("agent", "from ..testbed.pub import B\n", True),
        ("agent", "from ..testbed.pub import A\n", False),
        ("agent", "from ..testbed import pub\n", False),
        ("agent", "from ..testbed import A\n", False),
        ("agent", "from .._names import X\n", False),
        ("agent", "from ._own import X\n", False),
        ("testbed", "from ..agent.client import AgentClient\n", True),
        ("testbed", "def f():\n    from ..agent import AgentClient\n", True),
        ("testbed", "from ._priv import A\n", False),
    ],
)
def test_the_check_sees_a_private_crossing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str, source: str, wrong: bool
) -> None:
    """A planted module: flagged exactly when it takes a private module of the
    other package, or a name the module does not export, or the testbed
    imports the agent at all."""
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    testbed = tmp_path / "validation" / "testbed"
    testbed.mkdir(parents=True)
    (testbed / "__init__.py").write_text('__all__ = ["A"]\nfrom .pub import A\n')
    (testbed / "pub.py").write_text('__all__ = ["A"]\nA = 1\nB = 2\n')
    (testbed / "_priv.py").write_text('__all__ = ["A"]\nA = 1\n')
    path = tmp_path / "validation" / folder / "planted.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    assert bool(private_crossings([path]) + forbidden_imports([path])) is wrong


#: Third-party packages that render or parse a command line: the CLI's, never
#: a workflow's (a notebook runs the workflows without them).
CLI_ONLY_PACKAGES = ("rich", "typer", "click")


def _third_party(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every import of a package not ours."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def _is_cli(module: str) -> bool:
    """A command's module (``_cli_*``), the registry (``cli``) or a rich renderer."""
    head = module.split(".")[0]
    return head == "cli" or head.startswith(("_cli_", "_render"))


def cli_crossings(files: list[Path]) -> list[str]:
    """The CLI's rules: ``bootstorm.workflows`` imports no command module, no
    renderer and none of :data:`CLI_ONLY_PACKAGES`; no ``_cli_*`` module
    imports another."""
    problems: list[str] = []
    for path in files:
        parts = _module_parts(path)
        here = ".".join(parts)
        where = f"{path.relative_to(ROOT)}"
        if _within(here, "workflows"):
            problems += [
                f"{where}:{imp.line}: workflows imports bootstorm.{imp.module}"
                for imp in _imports(path)
                if _is_cli(imp.module) or (imp.module == "" and any(_is_cli(n) for n in imp.names))
            ]
            problems += [
                f"{where}:{line}: workflows imports {package}"
                for line, package in _third_party(path)
                if package in CLI_ONLY_PACKAGES
            ]
        if parts and len(parts) == 1 and parts[0].startswith("_cli_"):
            for imp in _imports(path):
                targets = [imp.module] if imp.module else list(imp.names)
                problems += [
                    f"{where}:{imp.line}: {parts[0]} imports bootstorm.{t}"
                    for t in targets
                    if t.split(".")[0].startswith("_cli_") and t.split(".")[0] != parts[0]
                ]
    return problems


def test_workflows_stay_under_the_cli_and_commands_stay_apart() -> None:
    problems = cli_crossings(_sources())
    assert not problems, "the CLI's layering:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("name", "source", "wrong"),
    [
        ("workflows/planted.py", "from .._cli_tune import tune\n", True),
        ("workflows/planted.py", "def f():\n    from .. import _render\n", True),
        ("workflows/planted.py", "from ..cli import app\n", True),
        ("workflows/planted.py", "import rich.console\n", True),
        ("workflows/planted.py", "def f():\n    from typer import Exit\n", True),
        ("workflows/planted.py", "from .._io import write_atomically\n", False),
        ("workflows/planted.py", "from ..models import Scenario\n", False),
        ("_cli_planted.py", "from ._cli_validate import x\n", True),
        ("_cli_planted.py", "def f():\n    from . import _cli_testbed\n", True),
        ("_cli_planted.py", "from ._render import x\n", False),
        ("_cli_planted.py", "from .workflows import tune\n", False),
        ("_cli_planted.py", "from ._cli_planted import x\n", False),
    ],
)
def test_the_check_sees_a_cli_crossing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str, wrong: bool
) -> None:
    """A planted module: flagged exactly when a workflow reaches the CLI or
    rich/typer, or a command's module imports another's."""
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    path = tmp_path / "bootstorm" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    assert bool(cli_crossings([path])) is wrong


def test_the_workflows_load_neither_rich_nor_typer() -> None:
    """At run time too: importing every workflow module loads no CLI package."""
    import json
    import subprocess
    import sys

    probe = (
        "import json, sys, importlib\n"
        "for m in ('whatif', 'profile', 'storms', 'validate', 'tuning', 'search', 'workloads'):\n"
        "    importlib.import_module('bootstorm.workflows.' + m)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('rich', 'typer', 'click') or m.startswith('bootstorm._cli_'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
