"""The package's dependencies as a packager reads them (issue 37).

pyproject.toml holds the metadata (PEP 621); CI installs under
``.ci/constraints.txt`` (pins of the versions the suite passes with), which
must meet every requirement pyproject states, or CI would test versions a
user's install never gets (or fail to resolve). A library whose private
modules the code imports has an upper bound. The CLI's table of the ``node``
extra's packages (its one-line "needs ...; pip install 'bootstorm[node]'")
is pyproject's list.
"""

from __future__ import annotations

import ast
import re
import shlex
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from bootstorm.cli import _EXTRA_OF

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"
#: The extras CI installs: README's second command installs ``.[test]``
#: (which pulls ``node`` in); ``lint`` is the other one a developer's venv has.
CI_EXTRAS = ("test", "lint")


def pins() -> dict[str, Version]:
    """``.ci/constraints.txt``: canonical name -> pinned version."""
    out: dict[str, Version] = {}
    for raw in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and name and version, f"not an exact pin: {raw!r}"
        key = canonicalize_name(name)
        assert key not in out, f"pinned twice: {name}"
        out[key] = Version(version)
    return out


def requirements(extra: str | None) -> list[Requirement]:
    """The core requirements (``extra`` None) or an extra's, with the extras it
    names of bootstorm itself (``bootstorm[node]`` in ``test``) expanded."""
    raw = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    out: list[Requirement] = []
    for text in raw:
        req = Requirement(text)
        if canonicalize_name(req.name) == "bootstorm":
            for inner in sorted(req.extras):
                out += requirements(inner)
        else:
            out.append(req)
    return out


def test_the_constraints_are_exact_pins_of_third_party_packages() -> None:
    pinned = pins()
    assert len(pinned) > 50  # the whole transitive set, not a few names
    for own in ("bootstorm", "pip", "setuptools", "wheel"):
        assert own not in pinned, f"{own} must not be pinned (the build's and pip's own)"


def test_the_constraints_meet_every_requirement_ci_installs() -> None:
    pinned = pins()
    problems = []
    for extra in (None, *CI_EXTRAS):
        for req in requirements(extra):
            version = pinned.get(canonicalize_name(req.name))
            where = extra or "dependencies"
            if version is None:
                problems.append(f"{where}: {req} has no pin")
            elif not req.specifier.contains(version, prereleases=True):
                problems.append(f"{where}: {req} is not met by the pin {version}")
    assert not problems, "\n".join(problems)


def test_a_pinned_package_of_another_extra_meets_its_requirement() -> None:
    """The extras CI does not install (gp, notebooks...) may be unpinned; a pin
    of one of their packages (another package's dependency) still meets them."""
    pinned = pins()
    for extra in PROJECT["optional-dependencies"]:
        for req in requirements(extra):
            version = pinned.get(canonicalize_name(req.name))
            if version is not None:
                assert req.specifier.contains(version, prereleases=True), (extra, str(req))


def test_ci_runs_readmes_command_verbatim_under_the_constraints() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(
        line for line in readme.splitlines() if "pip install -e '.[test]'" in line
    ).strip()
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command in run, "README's second command is not in .ci/run verbatim"
    exports = [i for i, line in enumerate(run) if line.startswith("export PIP_CONSTRAINT=")]
    assert len(exports) == 1 and exports[0] < run.index(command)
    value = shlex.split(run[exports[0]].partition("=")[2])[0]
    assert value.replace("$PWD/", "") == ".ci/constraints.txt"


def test_the_node_extra_is_the_clis_table() -> None:
    """The CLI names the extra of a missing package from its own table (import
    names); pyproject's ``node`` list is the same packages."""
    node = {canonicalize_name(r.name) for r in requirements("node")}
    table = {canonicalize_name(name) for name, extra in _EXTRA_OF.items() if extra == "node"}
    assert table == node
    core = {canonicalize_name(r.name) for r in requirements(None)}
    assert not node & core, "a package of the node extra is a core dependency too"


def test_the_test_extra_installs_the_node_extra() -> None:
    """README's second command (``.[test]``) installs all the tests need."""
    named = [Requirement(t) for t in PROJECT["optional-dependencies"]["test"]]
    assert any(canonicalize_name(r.name) == "bootstorm" and "node" in r.extras for r in named)


def _private_imports() -> dict[str, set[str]]:
    """Third-party packages whose private modules (a ``_name`` in the dotted
    path) the package's sources import -> the files that do."""
    folders = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    found: dict[str, set[str]] = {}
    for folder in sorted(folders):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                else:
                    continue
                for module in modules:
                    top, *rest = module.split(".")
                    if top != "bootstorm" and any(p.startswith("_") for p in rest):
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_a_library_whose_private_modules_are_imported_has_an_upper_bound() -> None:
    every = {
        canonicalize_name(r.name): r
        for extra in (None, *PROJECT["optional-dependencies"])
        for r in requirements(extra)
    }
    found = _private_imports()
    assert {"optuna", "typer"} <= set(found)  # the walk sees them
    for package, files in found.items():
        req = every.get(canonicalize_name(package))
        assert req is not None, f"{package} (imported by {sorted(files)}) is no dependency"
        assert any(s.operator in ("<", "<=", "~=", "==") for s in req.specifier), (
            f"{req}: {sorted(files)} import its private modules; bound it"
        )


def test_pyproject_names_the_file_beside_each_upper_bound() -> None:
    """Each upper bound says why: the comment above it names a file of ours."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(text):
        if re.match(r'\s*"[^"]*<[0-9]', line):
            comment = []
            for above in reversed(text[:i]):
                if not above.strip().startswith("#"):
                    break
                comment.append(above)
            assert re.search(r"\w+/\w+\.py", " ".join(comment)), f"no file named for {line}"
