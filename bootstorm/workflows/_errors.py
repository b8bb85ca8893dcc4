"""The workflows' own exception, importable without loading any of them
(the CLI's entry point catches it around every command)."""

from __future__ import annotations

__all__ = ["StormInterruptedError"]


class StormInterruptedError(Exception):
    """A real storm (or a measurement) was interrupted by Ctrl-C or SIGTERM;
    everything it made was removed before this was raised."""

    def __init__(self, what: str = "run") -> None:
        super().__init__(f"interrupted: everything the {what} made was removed")
        self.what = what
