"""An agent on its own thread and event loop: for tests and in-process testbeds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ...models import TunedConfig
from ._pools import DeviceOps
from ._server import AgentSettings, serve
from ._state import StartupConfig

__all__ = ["agent_in_thread"]


@contextmanager
def agent_in_thread(
    settings: AgentSettings,
    config: TunedConfig | StartupConfig | None = None,
    *,
    start_timeout_s: float = 10.0,
    device_ops: DeviceOps | None = None,
) -> Iterator[str]:
    """Run an agent until the block ends; yields its base URL (``port=0``: a free port;
    ``https://`` when ``settings`` name a TLS certificate).

    Leaving the block shuts the agent down as SIGTERM would, pooled devices included.
    ``device_ops`` replaces the real devices (a test's fake: no root, no netlink).
    """
    ready = threading.Event()
    url: list[str] = []
    failure: list[BaseException] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def on_ready(base_url: str) -> None:
        url.append(base_url)
        ready.set()

    def run() -> None:
        try:
            loop.run_until_complete(
                serve(settings, config, on_ready=on_ready, stop=stop, device_ops=device_ops)
            )
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)
        finally:
            ready.set()
            loop.close()

    thread = threading.Thread(target=run, name="bootstorm-agent", daemon=True)
    thread.start()
    ready.wait(start_timeout_s)
    if failure:
        thread.join()
        raise failure[0]
    if not url:
        loop.call_soon_threadsafe(stop.set)
        thread.join(start_timeout_s)
        raise TimeoutError(f"agent did not start within {start_timeout_s:g}s")
    try:
        yield url[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
        if failure:
            raise failure[0]
