"""``AgentClient.stage()`` keeps its lease: background renewals at a third of the
TTL, and a block that lost its lease hears of it (never a silent double holder)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
import pytest
from conftest import TOKEN

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentClient, AgentError

AgentFactory = Callable[..., AbstractContextManager[AgentClient]]

TTL_S = 0.5


def test_a_block_three_ttls_long_keeps_its_limit_1_stage(agent: AgentFactory) -> None:
    """The testbed's case (a VM boot longer than the TTL), on a real agent: nobody
    else enters the stage while the block runs, and the block ends without error."""
    config = TunedConfig(limits={"StartVM": 1}, lease_ttl_s=TTL_S)
    with agent(config) as client, AgentClient(client.base_url, token=TOKEN) as other:
        entered: list[str] = []
        refused = 0
        with client.stage("StartVM", "sb-long") as lease:
            deadline = time.monotonic() + 3 * TTL_S
            while time.monotonic() < deadline:
                try:
                    entered.append(other.acquire("StartVM", "sb-other", wait_s=0).lease_id)
                except AgentError as exc:
                    assert exc.status == 408, exc
                    refused += 1
                time.sleep(0.05)
            assert lease.lost is None
            lease.check()
        assert entered == [], "a second holder entered a limit-1 stage"
        assert refused >= 10
        assert lease.renewals >= 3  # at TTL/3: about 9 in 3 TTLs
        assert lease.expires_at_s > time.time() - TTL_S  # the latest renewal's expiry
        # Released on exit: the stage is free at once.
        other.release(other.acquire("StartVM", "sb-next", wait_s=0))


def test_many_blocks_on_one_client_are_all_renewed(agent: AgentFactory) -> None:
    """One renewer thread serves every block of a client (one connection)."""
    n = 20
    # A longer TTL than the other tests': one renewer serves twenty leases,
    # and on a loaded 2-core CI host (xdist beside it) a 0.5 s TTL left a
    # renewal round less slack than the scheduler sometimes takes.
    ttl_s = 4 * TTL_S
    config = TunedConfig(limits={"Cgroup": n}, lease_ttl_s=ttl_s)
    errors: list[BaseException] = []
    with agent(config) as client:

        def block(i: int) -> None:
            try:
                with client.stage("Cgroup", f"sb-{i}"):
                    time.sleep(2.5 * TTL_S)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=block, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        renewers = [t for t in threading.enumerate() if t.name == "bootstorm-agent-renew"]
        assert len(renewers) == 1
    assert errors == []
    assert not [t for t in threading.enumerate() if t.name == "bootstorm-agent-renew"]


# -- failures, against a fake agent ------------------------------------------------


class FakeAgent:
    """Grants every acquire (a new lease id each) and answers releases; each
    renewal gets what ``renew(n, lease_id)`` says (n counts renewals from 1)."""

    def __init__(self, renew: Callable[[int, str], httpx.Response]) -> None:
        self.renew = renew
        self.renewals = 0
        self.released: list[str] = []
        self.lock = threading.Lock()
        self.granted = 0

    @staticmethod
    def lease(lease_id: str = "L1") -> dict[str, object]:
        return {
            "lease_id": lease_id,
            "stage": "StartVM",
            "holder": "sb-1",
            "ttl_s": TTL_S,
            "expires_at_s": time.time() + TTL_S,
        }

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/acquire"):
            with self.lock:
                self.granted += 1
                lease_id = f"L{self.granted}"
            return httpx.Response(200, json=self.lease(lease_id))
        lease_id = path.split("/")[-2]
        if path.endswith("/renew"):
            with self.lock:
                self.renewals += 1
                n = self.renewals
            return self.renew(n, lease_id)
        if path.endswith("/release"):
            with self.lock:
                self.released.append(lease_id)
            return httpx.Response(200, json={"released": True, **self.lease(lease_id)})
        raise AssertionError(path)


def _renewed(_n: int, lease_id: str) -> httpx.Response:
    return httpx.Response(200, json=FakeAgent.lease(lease_id))


def _client(fake: FakeAgent) -> AgentClient:
    return AgentClient("http://agent", token=TOKEN, transport=httpx.MockTransport(fake))


def _expired(_n: int, lease_id: str) -> httpx.Response:
    body = {"error": f"lease {lease_id} expired; its permit was given back", "reason": "expired"}
    return httpx.Response(404, json=body)


def test_a_failed_renewal_is_recorded_at_once_and_raised_on_exit() -> None:
    fake = FakeAgent(_expired)
    with (
        _client(fake) as client,
        pytest.raises(AgentError) as raised,
        client.stage("StartVM", "sb-1") as lease,
    ):
        deadline = time.monotonic() + 5
        while lease.lost is None:  # known one renewal in (TTL/3), not at exit
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(AgentError):
            lease.check()
    exc = raised.value
    assert exc.status == 404 and exc.reason == "expired"
    assert "lost during the block" in exc.message and "another holder may have" in exc.message
    assert "\n" not in str(exc)
    assert fake.renewals == 1  # a final answer: no more tries


def test_the_blocks_own_error_wins_and_carries_a_note_of_the_loss() -> None:
    fake = FakeAgent(_expired)
    with (
        _client(fake) as client,
        pytest.raises(RuntimeError) as raised,
        client.stage("StartVM", "sb-1") as lease,
    ):
        while lease.lost is None:
            time.sleep(0.01)
        raise RuntimeError("boot failed")
    assert any("lost during the block" in note for note in raised.value.__notes__)


def test_a_renewal_without_answer_is_tried_again_while_the_lease_lives() -> None:
    """Two 503s then a renewal: the lease holds (the tries come at TTL/10)."""

    def flaky(n: int, lease_id: str) -> httpx.Response:
        if n <= 2:
            return httpx.Response(503, json={"error": "busy"})
        return _renewed(n, lease_id)

    fake = FakeAgent(flaky)
    with _client(fake) as client:
        with client.stage("StartVM", "sb-1") as lease:
            time.sleep(1.2 * TTL_S)
        assert lease.lost is None and lease.renewals >= 1
        assert fake.released == ["L1"]


def test_an_agent_that_never_answers_loses_the_lease_before_it_expires() -> None:
    def down(_n: int, _lease_id: str) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    fake = FakeAgent(down)
    with _client(fake) as client:
        started = time.monotonic()
        with (
            pytest.raises(AgentError, match="lost during the block"),
            client.stage("StartVM", "sb-1") as lease,
        ):
            while lease.lost is None:
                assert time.monotonic() - started < 5
                time.sleep(0.01)
            lost_after_s = time.monotonic() - started
    assert lost_after_s <= TTL_S + 0.2  # told by the time it may have expired
    assert fake.renewals >= 2  # tried again meanwhile


def test_a_renewal_racing_the_blocks_release_is_not_a_loss() -> None:
    """A renewal answered after the block's release (404 released) is no loss."""
    fake: FakeAgent

    def slow(_n: int, lease_id: str) -> httpx.Response:
        time.sleep(0.05)  # the block ends meanwhile and releases
        if lease_id in fake.released:
            body = {"error": f"lease {lease_id} was already released", "reason": "released"}
            return httpx.Response(404, json=body)
        return _renewed(_n, lease_id)

    fake = FakeAgent(slow)
    with _client(fake) as client:
        for i in range(3):
            with client.stage("StartVM", f"sb-{i}") as lease:
                time.sleep(TTL_S / 3 + 0.01)  # ends while its first renewal is in flight
            time.sleep(0.06)  # the renewal's answer comes
            assert lease.lost is None
    assert fake.renewals == 3 and len(fake.released) == 3


def test_the_lease_object_answers_like_a_lease() -> None:
    with _client(FakeAgent(_renewed)) as client, client.stage("StartVM", "sb-1") as lease:
        assert (lease.lease_id, lease.stage, lease.holder, lease.ttl_s) == (
            "L1",
            "StartVM",
            "sb-1",
            TTL_S,
        )
        assert "held" in repr(lease)
        assert json.loads(lease.lease.model_dump_json())["lease_id"] == "L1"
