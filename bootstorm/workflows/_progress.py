"""How a workflow tells its caller what it is doing, without printing.

A workflow runs for minutes (real storms, fits, searches). The CLI shows
each step as it happens; a notebook or a test wants the outcome and maybe a
log. So a workflow takes a :class:`Progress` and calls four methods on it;
what they look like is the caller's business (the CLI renders them with
rich, :class:`SilentProgress` drops them, :class:`RecordingProgress` keeps
them for a test or a notebook cell).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = ["Progress", "RecordingProgress", "SilentProgress", "Tone"]

#: How a line reads: ``plain``; ``dim`` (a detail: one run of many); ``strong``
#: (a file written); ``good``
#: (the outcome a user hoped for); ``warn`` (read the answer with care); ``bad``
#: (a check failed).
Tone = Literal["plain", "dim", "strong", "good", "warn", "bad"]


class Progress(Protocol):
    """What a workflow reports while it runs.

    Contract: every method returns quickly and never raises for what it is
    shown; a workflow's result never depends on what its progress does.
    """

    def step(self, title: str) -> None:
        """A numbered step of a long workflow begins ("2. search ...")."""

    def status(self, text: str) -> AbstractContextManager[Callable[[str], None]]:
        """A wait of unknown length (a fit, a storm): entered for its
        duration; the callable it yields replaces the text (an evaluation count)."""

    def note(self, text: str, *, tone: Tone = "plain") -> None:
        """One finished fact, as a sentence ("candidate-1: predicted 2.31 s")."""

    def show(self, outcome: object) -> None:
        """An intermediate outcome worth a table (a plan, a fit, a comparison):
        one of the records of :mod:`bootstorm.workflows`."""


class SilentProgress:
    """Progress that shows nothing: the default of every workflow."""

    def step(self, title: str) -> None:
        pass

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[Callable[[str], None]]:
        yield lambda _text: None

    def note(self, text: str, *, tone: Tone = "plain") -> None:
        pass

    def show(self, outcome: object) -> None:
        pass


@dataclass
class RecordingProgress:
    """Progress that keeps what it was told, in order: ``events`` holds
    ``(kind, payload)`` with kind ``step``, ``status``, ``note`` or ``show``."""

    events: list[tuple[str, object]] = field(default_factory=list)

    def step(self, title: str) -> None:
        self.events.append(("step", title))

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[Callable[[str], None]]:
        self.events.append(("status", text))
        yield lambda _text: None

    def note(self, text: str, *, tone: Tone = "plain") -> None:
        self.events.append(("note", text))

    def show(self, outcome: object) -> None:
        self.events.append(("show", outcome))

    def notes(self) -> list[str]:
        """The notes' texts, in order."""
        return [str(payload) for kind, payload in self.events if kind == "note"]
