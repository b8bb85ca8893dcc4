"""The simulator's errors, in a module that imports only the leaf
:mod:`bootstorm._params`: the command line
catches them around every command, ``bootstorm --help`` included, and the
compiled executor raises them without loading SimPy."""

from __future__ import annotations

from .._params import ConfigError

__all__ = ["DeadlockError", "ProgramError"]


class ProgramError(ConfigError):  # type: ignore[misc]  # the leaf is Any to mypy (package_dir)
    """A program violates a structural rule; the message names the sandbox and op.

    A :class:`ConfigError` (so a :class:`ValueError`): bad input, which the
    command line reports in one line with exit 2 and the node agent with
    HTTP 400."""


class DeadlockError(RuntimeError):
    """The run ended with sandboxes still waiting: the program deadlocks."""
