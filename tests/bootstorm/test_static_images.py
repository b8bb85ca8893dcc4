"""show_static_images: a headless Chromium that never answers is given up on,
not waited for at every figure (kaleido's server has no timeout of its own)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import kaleido
import plotly.io as pio
import pytest
from choreographer.browsers.chromium import Chromium

from bootstorm.report import show_static_images


@pytest.fixture
def fake_kaleido(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """kaleido's server and plotly's PNG call replaced: ``answers`` lists,
    per server start, whether its browser draws (False: it never returns)."""
    state: dict[str, Any] = {"starts": 0, "answers": [], "never": threading.Event()}
    default = pio.renderers.default

    def start(**_: Any) -> None:
        state["starts"] += 1

    def to_image(*_: Any, **__: Any) -> bytes:
        if state["answers"][state["starts"] - 1]:
            return b"png"
        state["never"].wait()  # a browser that never comes up
        return b""

    monkeypatch.setattr(Chromium, "find_browser", staticmethod(lambda **_: "/bin/true"))
    monkeypatch.setattr(kaleido, "start_sync_server", start)
    monkeypatch.setattr(pio, "to_image", to_image)
    yield state
    state["never"].set()  # let the abandoned probes end
    pio.renderers.default = default


def test_a_browser_that_never_answers_is_given_up_on(fake_kaleido: dict[str, Any]) -> None:
    """Two starts, each probed for probe_s, then False with a warning, and
    figures left as they were (the old code returned True and every figure
    then waited on the browser forever)."""
    fake_kaleido["answers"] = [False, False]
    before = pio.renderers.default
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match=r"drew no PNG within 0.05 s, twice"):
        assert show_static_images(probe_s=0.05) is False
    assert time.monotonic() - t0 < 5.0
    assert fake_kaleido["starts"] == 2
    assert pio.renderers.default == before


def test_a_second_browser_that_answers_is_used(fake_kaleido: dict[str, Any]) -> None:
    fake_kaleido["answers"] = [False, True]
    assert show_static_images(probe_s=0.05, width_px=640) is True
    assert fake_kaleido["starts"] == 2
    assert pio.renderers.default == "plotly_mimetype+png"
    assert pio.renderers["png"].width == 640


def test_the_probe_time_must_be_positive() -> None:
    with pytest.raises(ValueError, match="probe_s: must be > 0, but got 0"):
        show_static_images(probe_s=0)
