"""Names a package exports, imported on first use (PEP 562).

``import bootstorm`` (and ``--help``) must not pay for SciPy, Optuna or
numba: each package lists where its public names live, and this module's
:func:`lazy_exports` gives it the module ``__getattr__`` and ``__dir__``
that import one on first access and keep it as a plain global after.
"""

from __future__ import annotations

import importlib

# Names for annotations only: ``typing`` costs every console script's start
# (``bootstorm-cni`` runs once per sandbox's ADD) 5-10 ms on this host.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping, Sequence
    from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    namespace: MutableMapping[str, Any],
    sources: Mapping[str, str],
    *,
    subpackages: Sequence[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose globals are
    ``namespace``: ``sources`` maps each name to the relative module defining
    it; ``subpackages`` are imported whole when named."""

    def getattr_(name: str) -> Any:
        if name in subpackages:
            return importlib.import_module(f".{name}", package)
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source, package), name)
        namespace[name] = value  # the next lookup is a plain global
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *sources, *subpackages})

    return getattr_, dir_
