"""The simulator's errors, in a module that imports nothing: the command line
catches them around every command, ``bootstorm --help`` included, and the
compiled executor raises them without loading SimPy."""

from __future__ import annotations

__all__ = ["DeadlockError", "ProgramError"]


class ProgramError(ValueError):
    """A program violates a structural rule; the message names the sandbox and op."""


class DeadlockError(RuntimeError):
    """The run ended with sandboxes still waiting: the program deadlocks."""
