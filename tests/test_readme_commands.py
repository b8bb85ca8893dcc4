"""The README's what-if commands (its workflow 1) run as written.

Extracted from the Markdown, not copied: a command changed in the README is
the command tested. Each runs through the installed entry point in a scratch
directory, and must exit 0 and write what it says it writes. ``pip install``
lines are the install the suite already has (``.[test]`` holds ``[sweep]``'s
packages)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bootstorm.models import Scenario, available_scenarios, load_scenario
from bootstorm.models._errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def workflow_one_commands() -> list[str]:
    """The ``bootstorm`` lines of the README's workflow-1 bash blocks, comments cut."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### 1.", 1)[1].split("\n### 2.", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command.startswith("bootstorm "):
                commands.append(command)
    return commands


def test_the_readme_shows_the_what_if_commands() -> None:
    commands = workflow_one_commands()
    assert len(commands) >= 7, commands
    assert any("storm-400-ipvtap-tuned" in c for c in commands)


@pytest.mark.slow
@pytest.mark.parametrize("command", workflow_one_commands())
def test_a_readme_command_runs_as_written(command: str, tmp_path: Path) -> None:
    argv = shlex.split(command)[1:]
    out = subprocess.run(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, f"{command}\n{out.stderr[-2000:]}"
    for flag in ("-o", "--output", "--trace"):
        if flag in argv:
            written = tmp_path / argv[argv.index(flag) + 1]
            assert written.is_file() and written.stat().st_size > 0, command


def test_every_installed_example_is_a_valid_scenario_found_by_name() -> None:
    names = available_scenarios()
    assert {"storm-400-ipvtap", "storm-400-ipvtap-tuned", "veth-200-tenants"} <= set(names)
    for name in names:
        assert isinstance(load_scenario(name), Scenario)
    # The default storm's example is the default storm, field for field.
    assert load_scenario("storm-400-ipvtap") == Scenario()


def test_a_name_that_is_no_example_says_which_are(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"scenario: no file and no installed example named 'x'"):
        load_scenario("x")
    mine = tmp_path / "x.yaml"
    mine.write_text("sandboxes: 7\n")
    assert load_scenario(mine).sandboxes == 7  # a path wins
