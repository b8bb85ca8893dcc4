"""MkDocs hook: the command-line reference is ``bootstorm --help`` of every
command, rendered at build time.

A page that holds the marker ``<!-- bootstorm-cli -->`` gets, in its place,
one section per command (and per subcommand of a group) with the command's
own help text, as ``bootstorm COMMAND --help`` prints it. The reference is
the code's: an option added, renamed or re-documented shows up in the next
build, and a command that cannot be loaded fails the build.
"""

from __future__ import annotations

import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

MARKER = "<!-- bootstorm-cli -->"
WIDTH = 100  # the CLI's own max_content_width


def _sections(command: Any, ctx: Any, path: str, level: int) -> list[str]:
    out = [
        f"{'#' * level} `{path}`",
        "",
        "```text",
        command.get_help(ctx).rstrip(),
        "```",
        "",
    ]
    # typer carries its own copy of click: a group is what lists commands,
    # and a context is made of the class typer made the root's of.
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = type(ctx)(
                sub, info_name=name, parent=ctx, terminal_width=WIDTH, max_content_width=WIDTH
            )
            out += _sections(sub, sub_ctx, f"{path} {name}", min(level + 1, 4))
    return out


def render() -> str:
    """Markdown: the help of ``bootstorm`` and of each of its commands."""
    import typer

    from bootstorm.cli import app

    root = typer.main.get_group(app)
    ctx = root.context_class(
        root, info_name="bootstorm", terminal_width=WIDTH, max_content_width=WIDTH
    )
    return "\n".join(_sections(root, ctx, "bootstorm", 2))


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())


_mirror: Path | None = None


def _package_dirs(root: Path) -> dict[str, str]:
    """pyproject's ``package-dir``: ``bootstorm.X`` -> folder ``X`` at the root."""
    with (root / "pyproject.toml").open("rb") as f:
        pyproject = tomllib.load(f)
    mapping: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]
    return dict(mapping)


@event_priority(100)  # before mkdocstrings reads its handler's options
def on_config(config: Any, **_: Any) -> Any:
    # The API reference reads the docstrings from the source (griffe), which
    # looks for `bootstorm.models` under bootstorm/; pyproject maps the
    # subpackages to top-level folders (package-dir). A throw-away tree of
    # links shaped as the installed package lets it find them.
    global _mirror
    root = Path(config["config_file_path"]).resolve().parent
    _mirror = Path(tempfile.mkdtemp(prefix="bootstorm-api-"))
    package = _mirror / "bootstorm"
    package.mkdir()
    for entry in (root / "bootstorm").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in _package_dirs(root).items():
        if name.startswith("bootstorm."):
            (package / name.split(".", 1)[1]).symlink_to(root / folder)
    python = config["plugins"]["mkdocstrings"].config["handlers"].setdefault("python", {})
    python["paths"] = [str(_mirror)]
    return config


def on_shutdown() -> None:
    # After the build, failed or not (and once per `mkdocs serve`).
    if _mirror is not None:
        shutil.rmtree(_mirror, ignore_errors=True)
