"""MkDocs hook: the docstrings' Sphinx roles as code and links, not raw text.

The code's docstrings cross-reference as Sphinx does (``:class:`~.steps.Refill```),
which mkdocstrings leaves as they are: the API page showed
":class:~bootstorm.models.Scenario" forty times. Each role becomes its
object's name in code (the last part where the reference starts with ``~``
or ``.``), linked to the object's entry where the page documents it.
"""

from __future__ import annotations

import re
from typing import Any

#: A role as Markdown renders it: the role's name, then the target in code.
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|obj|exc|const):<code>([^<]+)</code>")
_ANCHOR = re.compile(r'id="([A-Za-z_][\w.]*)"')


def resolve(html: str) -> str:
    """``html`` with every role replaced by code, linked where the page has
    the object's anchor (a full path, or a name only one anchor ends in)."""
    anchors = set(_ANCHOR.findall(html))
    by_name: dict[str, list[str]] = {}
    for anchor in anchors:
        by_name.setdefault(anchor.rsplit(".", 1)[-1], []).append(anchor)

    def replace(match: re.Match[str]) -> str:
        target = match.group(1).strip()
        short = target.startswith(("~", "."))
        path = target.lstrip("~").lstrip(".")
        shown = path.rsplit(".", 1)[-1] if short else path
        shown += "()" if match.group(0).startswith((":func:", ":meth:", ":py:func:")) else ""
        if path in anchors:
            href = path
        else:
            found = by_name.get(path.rsplit(".", 1)[-1], [])
            href = found[0] if len(found) == 1 else None
        code = f"<code>{shown}</code>"
        return f'<a href="#{href}">{code}</a>' if href else code

    return ROLE.sub(replace, html)


def on_page_content(html: str, **_: Any) -> str:
    return resolve(html)
