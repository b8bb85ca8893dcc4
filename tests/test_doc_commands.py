"""Every ``bootstorm`` command the README and docs/workflows.md show parses as
written, with today's option names (issue 37).

A command in a ``bash`` or ``console`` block (continuations joined, a
``$``/``sudo`` prefix and a trailing ``&`` dropped) is resolved to its
command and its arguments parsed by that command, without running it: an
option renamed or removed, a value of the wrong type or outside its choices
fails here. A hidden old spelling fails too (the docs show the canonical
names). Those a fresh install runs at once — the README's workflow 1 — are
run by ``test_readme_commands.py``; the rest need root, a node, a study or a
file made by an earlier command.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer import _click as click

from bootstorm.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/workflows.md")


def documented_commands() -> list[tuple[str, str]]:
    """(file, command line) of each ``bootstorm`` command in a shell block."""
    out = []
    for name in DOCS:
        text = (ROOT / name).read_text()
        for block in re.findall(r"```(?:bash|console|sh)\n(.*?)```", text, flags=re.S):
            lines = block.splitlines()
            i = 0
            while i < len(lines):
                line = lines[i].split("  #", 1)[0].strip()
                while line.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line[:-1].rstrip() + " " + lines[i].split("  #", 1)[0].strip()
                i += 1
                line = line.removeprefix("$ ").removeprefix("sudo ").removesuffix("&").strip()
                if line.startswith("bootstorm ") and "..." not in line:
                    out.append((name, line))
    return out


def test_the_docs_show_commands() -> None:
    found = documented_commands()
    assert sum(1 for f, _ in found if f == "README.md") >= 15, found
    assert sum(1 for f, _ in found if f == "docs/workflows.md") >= 8, found


@pytest.mark.parametrize(("doc", "command"), documented_commands())
def test_a_documented_command_parses_as_written(doc: str, command: str) -> None:
    args = shlex.split(command)[1:]
    group = typer.main.get_group(app)
    ctx = click.Context(group, info_name="bootstorm")
    cmd: Any = group
    path: list[str] = []
    rest = list(args)
    while hasattr(cmd, "get_command"):  # a group (typer vendors click without Group)
        assert rest, f"{doc}: {command}: no command"
        path.append(rest[0])
        cmd = cmd.get_command(ctx, rest.pop(0))
        assert cmd is not None, f"{doc}: {command}: no command {' '.join(path)!r}"
    assert isinstance(cmd, click.Command)
    try:
        parsed = cmd.make_context(" ".join(path), list(rest))
    except click.ClickException as exc:
        pytest.fail(f"{doc}: {command}: {exc.format_message()}")
    hidden = {
        p.name
        for p in cmd.params
        if getattr(p, "hidden", False)
        and parsed.get_parameter_source(p.name or "") == click.core.ParameterSource.COMMANDLINE
    }
    assert not hidden, f"{doc}: {command}: an old spelling ({hidden})"
