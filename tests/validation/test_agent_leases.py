"""Stage permits with leases, against a real agent: load, expiry, FIFO, limits."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

import aiohttp
import httpx
import pytest
from conftest import TOKEN, process_agent
from prometheus_client.parser import text_string_to_metric_families

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentClient, AgentError

AgentFactory = Callable[..., AbstractContextManager[AgentClient]]


@pytest.fixture
def private_files() -> Iterator[None]:
    """Files made in the test are its owner's alone: ``agent serve`` refuses a token
    file open to group or others (conftest's process_agent writes one)."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a metrics page by (name, sorted labels), through the real parser."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.mark.usefixtures("private_files")
def test_400_concurrent_clients_never_exceed_the_limit(tmp_path: Path) -> None:
    """400 clients at once on a stage limited to 8: each is served exactly once, FIFO
    waiters included, and no more than 8 ever hold the stage — seen by the clients
    (counted between grant and release) and by the agent (its high-water mark)."""
    clients, limit, hold_s = 400, 8, 0.005
    config = TunedConfig(limits={"StartVM": limit}, lease_ttl_s=60.0)

    async def storm(url: str) -> tuple[list[str], int, float]:
        holding = 0
        most = 0
        lease_ids: list[str] = []
        # aiohttp's client: httpx's async pool slows down badly with 400 connections.
        connector = aiohttp.TCPConnector(limit=0)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(url, headers=headers, connector=connector) as http:

            async def sandbox(i: int) -> None:
                nonlocal holding, most
                body = {"holder": f"sb-{i}", "wait_s": 50}
                async with http.post("/v1/stages/StartVM/acquire", json=body) as r:
                    assert r.status == 200, await r.text()
                    lease = await r.json()
                assert lease["holder"] == f"sb-{i}"
                holding += 1
                most = max(most, holding)
                lease_ids.append(lease["lease_id"])
                await asyncio.sleep(hold_s)
                holding -= 1
                async with http.post(f"/v1/leases/{lease['lease_id']}/release") as r:
                    assert r.status == 200, await r.text()

            started = time.perf_counter()
            await asyncio.gather(*(sandbox(i) for i in range(clients)))
            return lease_ids, most, time.perf_counter() - started

    with process_agent(tmp_path, config=config) as agent:
        lease_ids, most, wall_s = asyncio.run(storm(agent.url))
        with AgentClient(agent.url, token=TOKEN) as client:
            m = samples(client.metrics())
    stage = (("stage", "StartVM"),)
    print(f"400 clients, limit {limit}: {wall_s:.2f}s wall, at most {most} holders seen")
    assert len(lease_ids) == clients  # every client served
    assert len(set(lease_ids)) == clients  # no lease handed out twice
    assert 1 <= most <= limit
    assert m[("bootstorm_agent_stage_permits_high_water", stage)] == limit
    assert m[("bootstorm_agent_leases_granted_total", stage)] == clients
    assert m[("bootstorm_agent_leases_released_total", stage)] == clients
    assert m.get(("bootstorm_agent_leases_expired_total", stage), 0) == 0
    assert m[("bootstorm_agent_stage_permits_in_use", stage)] == 0
    assert m[("bootstorm_agent_stage_queue_length", stage)] == 0
    assert m[("bootstorm_agent_lease_wait_seconds_count", stage)] == clients


def test_an_expired_lease_frees_the_permit_for_the_next_waiter(agent: AgentFactory) -> None:
    with agent(TunedConfig(limits={"Cgroup": 1}, lease_ttl_s=0.3)) as client:
        crashed = client.acquire("Cgroup", "crashed-sandbox")
        started = time.monotonic()
        nxt = client.acquire("Cgroup", "next", wait_s=5)  # waits for the expiry
        waited = time.monotonic() - started
        assert 0.1 < waited < 10.0  # the TTL, not the 5 s wait (generous: shared machines)
        with pytest.raises(AgentError) as err:
            client.release(crashed)
        assert err.value.status == 404 and err.value.reason == "expired"
        assert "expired" in err.value.message
        client.release(nxt)
        m = samples(client.metrics())
        assert m[("bootstorm_agent_leases_expired_total", (("stage", "Cgroup"),))] == 1


def test_renew_keeps_a_lease_past_its_ttl(agent: AgentFactory) -> None:
    with agent(TunedConfig(limits={"Cgroup": 1}, lease_ttl_s=1.5)) as client:
        lease = client.acquire("Cgroup", "slow")
        for _ in range(4):
            time.sleep(0.5)  # 1 s of slack per renewal for a loaded machine
            renewed = client.renew(lease)
            assert renewed.expires_at_s > lease.expires_at_s
        client.release(lease)  # still valid after 2 s > ttl


def test_release_twice_and_unknown_leases_are_404(agent: AgentFactory) -> None:
    with agent(TunedConfig(limits={"AddCNI": 2})) as client:
        lease = client.acquire("AddCNI", "a")
        client.release(lease)
        with pytest.raises(AgentError) as err:
            client.release(lease)
        assert (err.value.status, err.value.reason) == (404, "released")
        with pytest.raises(AgentError) as err:
            client.renew("0123456789abcdef")
        assert (err.value.status, err.value.reason) == (404, "unknown")
        # The double release freed nothing: two permits, two grants, no more.
        a, b = client.acquire("AddCNI", "a"), client.acquire("AddCNI", "b")
        with pytest.raises(AgentError) as err:
            client.acquire("AddCNI", "c", wait_s=0.05)
        assert (err.value.status, err.value.reason) == (408, "timeout")
        client.release(a)
        client.release(b)


def test_a_stage_without_limit_admits_at_once(agent: AgentFactory) -> None:
    with agent(TunedConfig(limits={"StartVM": 1})) as client:
        leases = [client.acquire("NetNS", f"sb-{i}", wait_s=0) for i in range(50)]
        assert len({lease.lease_id for lease in leases}) == 50
        for lease in leases:
            client.release(lease)


async def queued(http: aiohttp.ClientSession, n: int, stage: str = "S") -> None:
    """Wait until ``n`` clients wait on ``stage``, as the agent's metrics say."""
    for _ in range(500):
        async with http.get("/metrics") as r:
            m = samples(await r.text())
        if m.get(("bootstorm_agent_stage_queue_length", (("stage", stage),))) == n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {n} waiting on {stage}")


@pytest.mark.usefixtures("private_files")
def test_waiters_are_served_first_come_first_served(tmp_path: Path) -> None:
    async def run(url: str) -> list[str]:
        order: list[str] = []
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(url, headers=headers) as http:
            async with http.post("/v1/stages/S/acquire", json={"holder": "first"}) as r:
                first = await r.json()

            async def wait(name: str) -> None:
                body = {"holder": name, "wait_s": 20}
                async with http.post("/v1/stages/S/acquire", json=body) as r:
                    lease = await r.json()
                order.append(name)
                async with http.post(f"/v1/leases/{lease['lease_id']}/release"):
                    pass

            tasks = []
            for i in range(5):
                tasks.append(asyncio.create_task(wait(f"w{i}")))
                await queued(http, i + 1)  # in the agent's queue before the next one starts
            async with http.post(f"/v1/leases/{first['lease_id']}/release"):
                pass
            await asyncio.gather(*tasks)
        return order

    with process_agent(tmp_path, config=TunedConfig(limits={"S": 1})) as agent:
        assert asyncio.run(run(agent.url)) == [f"w{i}" for i in range(5)]


def test_new_limits_apply_to_new_grants_and_held_leases_stay(agent: AgentFactory) -> None:
    with agent(TunedConfig(limits={"StartVM": 3})) as client:
        held = [client.acquire("StartVM", f"sb-{i}") for i in range(3)]
        client.put_config(TunedConfig(limits={"StartVM": 1}))
        with pytest.raises(AgentError):  # 3 held > 1: no new grant
            client.acquire("StartVM", "late", wait_s=0.05)
        client.release(held[0])
        client.release(held[1])
        with pytest.raises(AgentError):  # still 1 held = the new limit
            client.acquire("StartVM", "late", wait_s=0.05)
        client.release(held[2])  # held leases stayed valid throughout
        client.release(client.acquire("StartVM", "late", wait_s=1))
        # Raising the limit admits a waiter at once.
        one = client.acquire("StartVM", "one")
        client.put_config(TunedConfig(limits={"StartVM": 2}))
        client.release(client.acquire("StartVM", "two", wait_s=0))
        client.release(one)


def test_stage_context_manager_acquires_and_releases(agent: AgentFactory) -> None:
    with agent(TunedConfig(limits={"AttachIf": 1})) as client:
        with client.stage("AttachIf", "sb-1") as lease:
            assert lease.stage == "AttachIf"
            with pytest.raises(AgentError):
                client.acquire("AttachIf", "sb-2", wait_s=0.05)
        with client.stage("AttachIf", "sb-2", wait_s=0):
            pass
        with pytest.raises(RuntimeError), client.stage("AttachIf", "sb-3"):
            raise RuntimeError("boot failed")
        client.release(client.acquire("AttachIf", "sb-4", wait_s=0))  # released on error too


def test_one_sync_client_shared_by_400_threads(agent: AgentFactory) -> None:
    """The testbed's way: one AgentClient, a thread per sandbox. Long-polling acquires
    must not starve the releases of connections (the client has no connection cap)."""
    limit = 8
    lock = threading.Lock()
    holding = most = 0
    with agent(TunedConfig(limits={"StartVM": limit})) as client:

        def sandbox(i: int) -> str:
            nonlocal holding, most
            with client.stage("StartVM", f"sb-{i}", wait_s=50) as lease:
                with lock:
                    holding += 1
                    most = max(most, holding)
                time.sleep(0.002)
                with lock:
                    holding -= 1
            return lease.lease_id

        with ThreadPoolExecutor(max_workers=400) as pool:
            lease_ids = list(pool.map(sandbox, range(400)))
        m = samples(client.metrics())
    assert len(set(lease_ids)) == 400
    assert 1 <= most <= limit
    assert m[("bootstorm_agent_stage_permits_high_water", (("stage", "StartVM"),))] <= limit
    assert m[("bootstorm_agent_leases_released_total", (("stage", "StartVM"),))] == 400


def test_a_waiter_that_hangs_up_leaves_the_queue(agent: AgentFactory) -> None:
    with agent(TunedConfig(limits={"StartVM": 1})) as client:
        held = client.acquire("StartVM", "holder")
        # A client that gives up (its own timeout) long before its wait_s runs out.
        with pytest.raises(httpx.TimeoutException):
            httpx.post(
                client.base_url + "/v1/stages/StartVM/acquire",
                json={"holder": "impatient", "wait_s": 30},
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=0.3,
            )
        deadline = time.monotonic() + 5
        while samples(client.metrics())[
            ("bootstorm_agent_stage_queue_length", (("stage", "StartVM"),))
        ]:
            assert time.monotonic() < deadline, "the departed waiter is still queued"
            time.sleep(0.02)
        client.release(held)
        # The permit is free: the departed waiter was not granted it.
        client.release(client.acquire("StartVM", "next", wait_s=0))


def test_shutdown_turns_waiters_away_at_once(agent: AgentFactory) -> None:
    errors: list[AgentError] = []
    with agent(TunedConfig(limits={"StartVM": 1})) as client:
        client.acquire("StartVM", "holder")

        def wait() -> None:
            # A client of its own: the fixture closes `client` before the agent stops.
            with AgentClient(client.base_url, token=TOKEN) as own:
                try:
                    own.acquire("StartVM", "waiter", wait_s=30)
                except AgentError as exc:
                    errors.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        queue = ("bootstorm_agent_stage_queue_length", (("stage", "StartVM"),))
        deadline = time.monotonic() + 10
        while samples(client.metrics())[queue] != 1:  # the waiter is in the queue
            assert time.monotonic() < deadline
            time.sleep(0.02)
        stopping = time.monotonic()
    waiter.join(5)
    assert time.monotonic() - stopping < 15  # not the 30 s of the long-poll
    assert [(e.status, e.reason) for e in errors] == [(503, "shutting_down")]
