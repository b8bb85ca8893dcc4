"""Without the ``node`` extra (issue 37): the what-ifs, searches, reports and
the demo run; a command that needs the testbed's or the agent's libraries
says so in one line naming the extra, and exits 2 (no traceback).

Each run is the real entry point in a child process whose ``sys.modules``
holds ``None`` for the extra's packages: importing one raises
ModuleNotFoundError, as it does where the package is not installed. Every
command below that would act on the host imports one of them before it does
anything (the testbed's modules import pyroute2 at their top).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bootstorm.cli import _command_path

#: The import names of the ``node`` extra's packages (pyproject.toml).
NODE = ("aiohttp", "httpx", "prometheus_client", "pyroute2")
ONE_LINE = re.compile(
    r"error: (?P<command>[a-z -]+): needs (?P<package>\w+); pip install 'bootstorm\[node\]'"
)


def run_without(
    blocked: tuple[str, ...], *args: str, cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``bootstorm ARGS`` in a child process where ``blocked`` cannot be imported."""
    code = (
        "import sys\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None\n"
        "from bootstorm.cli import main\n"
        "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_missing_package_of_the_extra_is_one_line_naming_it(tmp_path: Path) -> None:
    out = run_without(("aiohttp",), "agent", "serve", "--port", "0", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stderr == "error: agent serve: needs aiohttp; pip install 'bootstorm[node]'\n"
    assert out.stdout == ""


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (("agent", "serve", "--port", "0"), "agent serve"),
        (("config", "push", "tuned.yaml", "--nodes", "nodes.yaml"), "config push"),
        (("testbed", "sweep-leftovers"), "testbed sweep-leftovers"),
        (("validate",), "validate"),
    ],
)
def test_the_node_commands_say_which_extra_they_need(
    tmp_path: Path, args: tuple[str, ...], command: str
) -> None:
    (tmp_path / "tuned.yaml").write_text("limits: {}\n")
    (tmp_path / "nodes.yaml").write_text("- url: http://127.0.0.1:1\n")
    out = run_without(NODE, *args, cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    found = ONE_LINE.fullmatch(lines[0])
    assert found is not None, lines[0]
    assert found["command"] == command and found["package"] in NODE


def test_the_core_commands_run_without_the_extra(tmp_path: Path) -> None:
    """What-if, search, report, the installed CNI plugin's module, and
    ``calibrate``'s checks (StormOptions' bounds, read from the testbed's
    options module, which imports without pyroute2)."""
    (tmp_path / "small.yaml").write_text("sandboxes: 20\n")
    steps = [
        ("simulate", "--sandboxes", "20", "--json"),
        ("optimize", "--sandboxes", "20", "--trials", "3", "-o", "tuned.yaml"),
        ("report", "small.yaml", "-o", "report.html"),
    ]
    for args in steps:
        out = run_without(NODE, *args, cwd=tmp_path)
        assert out.returncode == 0, f"{args}: {out.stderr[-2000:]}"
    assert (tmp_path / "tuned.yaml").is_file() and (tmp_path / "report.html").is_file()
    out = run_without(NODE, "calibrate", "--predict-sandboxes", "0", cwd=tmp_path)
    assert (out.returncode, out.stderr) == (
        2,
        "error: predict_sandboxes: must be in 1..1,000,000,000 (got 0)\n",
    )
    probe = (
        f"import sys\nfor name in {NODE!r}:\n    sys.modules[name] = None\n"
        "import bootstorm, bootstorm.validation.cni_plugin\n"
        "from bootstorm.validation.testbed import StormOptions\n"
        "assert bootstorm.simulate(bootstorm.Scenario(sandboxes=5), seed=0).makespan_s > 0\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_demo_runs_without_the_extra(tmp_path: Path) -> None:
    """README's first command installs no extra: ``bootstorm demo`` after it."""
    out = run_without(NODE, "demo", "--output-dir", str(tmp_path), cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "tuned.yaml").is_file() and (tmp_path / "report.html").is_file()


@pytest.mark.parametrize(
    ("argv", "path"),
    [
        (["agent", "serve", "--port", "0"], "agent serve"),
        (["config", "push", "x.yaml"], "config push"),
        (["testbed", "--help"], "testbed"),
        (["validate", "--sandboxes", "4"], "validate"),
        (["simulate", "storm.yaml"], "simulate"),
        (["--version"], "bootstorm"),
        ([], "bootstorm"),
    ],
)
def test_the_message_names_the_command_asked_for(argv: list[str], path: str) -> None:
    assert _command_path(argv) == path
