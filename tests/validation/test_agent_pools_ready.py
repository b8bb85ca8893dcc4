"""An agent's pools as they are now (``GET /v1/pools`` through the client),
a storm waiting until they are full, and the admission's levels the driver
samples (no root: fake devices)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import TOKEN, NoDevices, free_pool_id
from pydantic import SecretStr

from bootstorm.models import ConfigError, TunedConfig
from bootstorm.validation.agent import (
    AgentAdmission,
    AgentClient,
    AgentError,
    AgentSettings,
    PoolsNotReadyError,
    PoolState,
    agent_in_thread,
    wait_pools_ready,
)
from bootstorm.validation.agent import client as client_module
from bootstorm.validation.agent._pools import Device, DeviceOps
from bootstorm.validation.testbed.admission import LocalAdmission, PoolLevelNow, PoolSampling


class SlowDevices(NoDevices):
    """Makes each device in ``delay_s``: an agent's pool fills over time."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def create(self, device: Device) -> Device:
        time.sleep(self.delay_s)
        return device


class FailingDevices(NoDevices):
    """Makes no device at all: an agent's pool never fills."""

    def create(self, device: Device) -> Device:
        raise OSError(1, "Operation not permitted")


@contextmanager
def fake_agent(config: TunedConfig | None, ops: DeviceOps) -> Iterator[tuple[str, AgentClient]]:
    settings = AgentSettings(token=SecretStr(TOKEN), port=0, pool_id=free_pool_id())
    with (
        agent_in_thread(settings, config, device_ops=ops) as url,
        AgentClient(url, token=TOKEN) as client,
    ):
        yield url, client


def test_pools_says_every_pools_ready_target_and_making() -> None:
    with fake_agent(TunedConfig(pools={"tap": 3}), NoDevices()) as (_, client):
        wait_pools_ready(client, timeout_s=5.0, poll_s=0.01)
        pools = {p.kind: p for p in client.pools()}
        assert pools["tap"] == PoolState(kind="tap", ready=3, target=3, making=0)
        assert pools["netns"].ready == 0 and pools["netns"].target == 0


def test_wait_pools_ready_returns_once_every_pool_holds_its_target() -> None:
    config = TunedConfig(pools={"tap": 4, "netns": 2})
    with fake_agent(config, SlowDevices(0.05)) as (_, client):
        started = time.monotonic()
        wait_pools_ready(client, timeout_s=10.0, poll_s=0.01)
        # Six devices at 0.05 s each, one worker: not there at once, there now.
        assert time.monotonic() - started >= 0.1
        pools = {p.kind: (p.ready, p.target) for p in client.pools()}
        assert pools["tap"] == (4, 4) and pools["netns"] == (2, 2)


def test_wait_pools_ready_without_pools_returns_at_once() -> None:
    with fake_agent(None, FailingDevices()) as (_, client):
        started = time.monotonic()
        wait_pools_ready(client, timeout_s=5.0)
        assert time.monotonic() - started < 2.0


def test_wait_pools_ready_times_out_naming_the_pool_short_of_its_target() -> None:
    with fake_agent(TunedConfig(pools={"tap": 3}), FailingDevices()) as (_, client):
        started = time.monotonic()
        with pytest.raises(PoolsNotReadyError) as err:
            wait_pools_ready(client, timeout_s=0.5, poll_s=0.05)
        waited = time.monotonic() - started
    assert 0.5 <= waited < 2.5  # bounded: the timeout and one ask's answer
    assert str(err.value) == "pools.tap: 0 of 3 ready after 0.5 s"
    assert isinstance(err.value, AgentError) and err.value.reason == "timeout"
    assert (err.value.kind, err.value.ready, err.value.target) == ("tap", 0, 3)


def test_wait_pools_ready_refuses_an_unbounded_wait() -> None:
    with AgentClient("http://127.0.0.1:9", token=TOKEN) as client:
        with pytest.raises(ValueError, match="timeout_s"):
            wait_pools_ready(client, timeout_s=float("inf"))
        with pytest.raises(ValueError, match="poll_s"):
            wait_pools_ready(client, poll_s=0.0)


def test_wait_pools_ready_raises_at_once_when_the_agent_is_unreachable() -> None:
    with AgentClient("http://127.0.0.1:9", token=TOKEN, timeout_s=2) as client:
        started = time.monotonic()
        with pytest.raises(AgentError) as err:
            wait_pools_ready(client, timeout_s=30.0)
    assert err.value.status is None and time.monotonic() - started < 5.0


def test_agent_admission_starts_a_storm_with_its_pools_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``testbed run --agent`` with a config of pools: the pushed pools are
    full before the storm starts, as the model's are."""
    from bootstorm.workflows import agent_admission

    monkeypatch.setenv("BOOTSTORM_AGENT_TOKEN", TOKEN)
    with fake_agent(None, SlowDevices(0.05)) as (url, client):
        admission = agent_admission(url, None, TunedConfig(pools={"tap": 5}))
        try:
            pools = {p.kind: (p.ready, p.target) for p in client.pools()}
            assert pools["tap"] == (5, 5)
        finally:
            admission.client.close()


def test_agent_admission_whose_pools_never_fill_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bootstorm.workflows import agent_admission

    monkeypatch.setenv("BOOTSTORM_AGENT_TOKEN", TOKEN)
    quick = functools.partial(wait_pools_ready, timeout_s=0.3, poll_s=0.05)
    monkeypatch.setattr(client_module, "wait_pools_ready", quick)
    with fake_agent(None, FailingDevices()) as (url, _), pytest.raises(ConfigError) as err:
        agent_admission(url, None, TunedConfig(pools={"netns": 2}))
    assert str(err.value) == f"agent: {url}: pools.netns: 0 of 2 ready after 0.3 s"


def test_an_agents_admission_offers_its_pool_levels_for_sampling() -> None:
    assert not isinstance(LocalAdmission(), PoolSampling)
    with fake_agent(TunedConfig(pools={"veth": 2}), NoDevices()) as (_, client):
        wait_pools_ready(client, timeout_s=5.0, poll_s=0.01)
        admission = AgentAdmission(client)
        assert isinstance(admission, PoolSampling)
        levels = {p.kind: p for p in admission.pool_levels()}
        assert levels["veth"] == PoolLevelNow(kind="veth", ready=2, making=0, target=2)
        # Asked from another thread (the driver's sampler): its own connection.
        other: list[PoolLevelNow] = []
        t = threading.Thread(target=lambda: other.extend(admission.pool_levels()))
        t.start()
        t.join(timeout=10)
        assert {p.kind: p for p in other}["veth"].ready == 2
