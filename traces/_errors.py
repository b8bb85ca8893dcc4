"""The traces' error, in a module that imports nothing: the command line
catches it around every command, ``bootstorm --help`` included."""

from __future__ import annotations

__all__ = ["TraceFormatError"]


class TraceFormatError(ValueError):
    """A trace file is malformed; the message names file, line and field."""
