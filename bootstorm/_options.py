"""Command-line options several commands share."""

from __future__ import annotations

from typing import Literal

import typer

__all__ = ["EXECUTOR_OPTION", "RUNTIME_OPTION", "RuntimeName"]

#: The testbed's runtimes: ``threads`` (the harness's thread per sandbox does
#: the kernel operations) and ``cni`` (real CNI plugins and a shim process per
#: sandbox, as containerd and Kata start one).
RuntimeName = Literal["threads", "cni"]
RUNTIME_OPTION = typer.Option(
    help="How the testbed starts a sandbox: cni (real CNI plugin binaries and a shim "
    "process per sandbox, as containerd + Kata; needs containernetworking-plugins) or "
    "threads (one Python thread per sandbox doing the kernel operations)."
)

#: ``--executor``: what runs the simulated storms (see bootstorm.simulator.executors);
#: annotate it as ``ExecutorName`` so that typer offers (and checks) the names.
EXECUTOR_OPTION = typer.Option(
    help="What runs the simulations: compiled (numba), simpy (the reference; "
    "records spans) or python. All three give the same numbers."
)
