"""The executors' names, in a module that imports nothing heavy: the CLI's
options are annotated with them, and ``bootstorm --help`` must not load NumPy."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["EXECUTOR_NAMES", "ExecutorName"]

ExecutorName = Literal["compiled", "simpy", "python"]
EXECUTOR_NAMES: tuple[str, ...] = get_args(ExecutorName)
