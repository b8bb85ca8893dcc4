"""What importing the package and starting the CLI load (not how long: that is
``benchmarks/bench_planner.py``'s): each heavy library only where it is used.

``bootstorm --help`` and ``import bootstorm`` took 0.6 s, 173 ms of it SciPy's
optimiser, pulled in through the renderer; the names now load on first use.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "pydantic", "yaml", "scipy", "optuna", "simpy", "numba", "pandas", "sqlalchemy")


def _loaded_after(code: str) -> set[str]:
    """The heavy libraries in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    probe = f"""
import json, sys
{code}
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_bootstorm_loads_nothing_heavy() -> None:
    assert _loaded_after("import bootstorm") == set()


def test_help_loads_neither_numpy_nor_the_models() -> None:
    code = """
from bootstorm.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
"""
    assert _loaded_after(code) == set()


def test_help_loads_neither_rich_nor_the_commands_modules() -> None:
    """``bootstorm --help`` took 0.5 s: typer's rich help (rich.markdown,
    rich.traceback) and every command's module (the agent's aiohttp, the
    testbed, the search) loaded to list their names."""
    probe = """
import json, sys
from bootstorm.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("rich", "bootstorm._cli_")))))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert "optimize" in out.stdout and "testbed" in out.stdout  # still listed
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize(
    "command", ["optimize", "sweep", "dataplane", "testbed", "agent", "config"]
)
def test_each_lazy_command_still_answers_its_help(command: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert f"Usage: bootstorm {command}" in out.stdout


def test_a_compiled_simulation_loads_neither_simpy_nor_the_search() -> None:
    """(numba itself loads SciPy's base package when it is installed, not its optimiser.)"""
    code = """
from bootstorm import Scenario, simulate
simulate(Scenario(sandboxes=20), executor="compiled")
import sys
assert "scipy.optimize" not in sys.modules
"""
    loaded = _loaded_after(code)
    assert {"numpy", "numba"} <= loaded
    assert not loaded & {"optuna", "simpy", "pandas", "sqlalchemy"}


def test_the_scenario_model_loads_neither_scipy_nor_the_executors() -> None:
    loaded = _loaded_after("from bootstorm import Scenario; Scenario(sandboxes=3)")
    assert not loaded & {"scipy", "optuna", "simpy", "numba", "pandas"}


@pytest.mark.parametrize(
    "package",
    ["bootstorm", "bootstorm.models", "bootstorm.simulator", "bootstorm.traces"],
)
def test_every_exported_name_resolves(package: str) -> None:
    """The lazy packages (PEP 562) still give every name of ``__all__``."""
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018
