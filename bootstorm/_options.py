"""Command-line options several commands share."""

from __future__ import annotations

import typer

__all__ = ["EXECUTOR_OPTION"]

#: ``--executor``: what runs the simulated storms (see bootstorm.simulator.executors);
#: annotate it as ``ExecutorName`` so that typer offers (and checks) the names.
EXECUTOR_OPTION = typer.Option(
    help="What runs the simulations: compiled (numba), simpy (the reference; "
    "records spans) or python. All three give the same numbers."
)
