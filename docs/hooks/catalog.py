"""MkDocs hook: the catalog of CNIs on the model page, read from the code.

A page holding ``<!-- bootstorm-catalog -->`` gets, in its place, one row
per CNI the model knows: its family (``bootstorm.models.cni_family``), the
stages a sandbox goes through and the device kinds a node may pool. A CNI
added to the registry shows up in the next build; one whose family cannot
say its stages fails the build.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- bootstorm-catalog -->"


def render() -> str:
    from bootstorm.models import CNI_NAMES, cni_family

    rows = [
        "| CNI | family | stages, in order | device kinds a node may pool |",
        "|---|---|---|---|",
    ]
    for cni in CNI_NAMES:
        family = cni_family(cni)
        stages = " → ".join(family.stages(cni))
        pools = ", ".join(family.pool_kinds(cni)) or "-"
        rows.append(f"| `{cni}` | {family.name} | {stages} | {pools} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
