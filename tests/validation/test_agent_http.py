"""The agent's HTTP surface: tokens, PUT /config, metrics, request checks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import httpx
import pytest
from conftest import TOKEN, NoDevices, free_pool_id
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from bootstorm.models import FollowRate, PoolRefill, TunedConfig
from bootstorm.validation.agent import AgentClient, AgentError, AgentSettings, agent_in_thread
from bootstorm.validation.agent._pools import Device, DeviceOps
from bootstorm.validation.agent.client import PoolLevel

AgentFactory = Callable[..., AbstractContextManager[AgentClient]]

MUTATING = [
    ("POST", "/v1/stages/StartVM/acquire", {"holder": "sb-1"}),
    ("POST", "/v1/leases/abc/release", {}),
    ("POST", "/v1/leases/abc/renew", {}),
    ("POST", "/v1/pools/veth/take", {"holder": "sb-1"}),
    ("PUT", "/config", {"limits": {"StartVM": 1}}),
]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}],
    ids=["missing", "wrong", "not-bearer"],
)
def test_every_mutating_call_needs_the_token(agent: AgentFactory, headers: dict[str, str]) -> None:
    with agent(TunedConfig(limits={"StartVM": 2})) as client:
        for method, path, body in MUTATING:
            r = httpx.request(method, client.base_url + path, json=body, headers=headers)
            assert r.status_code == 401, (method, path, r.text)
            assert "bearer token" in r.json()["error"]
            assert r.headers["Content-Type"].startswith("application/json")
        # Nothing changed: no lease held, the config is the one the agent started with.
        assert client.get_config().limits == {"StartVM": 2}
        assert "bootstorm_agent_leases_granted_total{" not in client.metrics()
        with AgentClient(client.base_url, token="wrong") as intruder:
            with pytest.raises(AgentError) as err:
                intruder.acquire("StartVM", "sb-1")
            assert err.value.status == 401


def test_reads_need_no_token(agent: AgentFactory) -> None:
    with agent() as client:
        for path in ("/config", "/metrics", "/healthz", "/v1/pools"):
            assert httpx.get(client.base_url + path).status_code == 200


def test_a_bad_config_changes_nothing_and_says_why(agent: AgentFactory) -> None:
    good = TunedConfig(limits={"StartVM": 4}, pools={}, lease_ttl_s=12.0)
    with agent(good) as client:
        before = client.get_config()
        generation = client.healthz()["generation"]
        bad = "limits: {StartVM: 0, Cgroup: 3}\nlease_ttl_s: -1\ncolour: blue\n"
        r = httpx.put(
            client.base_url + "/config",
            content=bad,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"},
        )
        assert r.status_code == 422
        problems = r.json()["problems"]
        assert "config: limits.StartVM: Input should be greater than or equal to 1 (got 0)" in (
            problems
        )
        assert any(p.startswith("config: lease_ttl_s:") and "(got -1)" in p for p in problems)
        assert "config: colour: unknown field (got 'blue')" in problems
        assert r.json()["error"] == "; ".join(problems)  # one line
        # A nested policy's own error keeps its path, said once.
        r = httpx.put(
            client.base_url + "/config",
            content="pool_refill: {follow_rate: {window_s: 0}}\n",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.json()["problems"] == [
            "config: pool_refill.follow_rate.window_s: Input should be greater than or equal "
            "to 1 (got 0)"
        ]
        for body in ("limits: [", "- just\n- a list\n", ""):
            r = httpx.put(
                client.base_url + "/config",
                content=body,
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert r.status_code == 422, body
            assert r.json()["error"].startswith("config:")
        assert client.get_config() == before  # the good config is still in force
        assert client.healthz()["generation"] == generation
        # ... and still enforced: a limit of 0 would have refused everyone.
        client.release(client.acquire("StartVM", "sb-1", wait_s=0))


def test_put_config_takes_yaml_or_json_and_counts_generations(agent: AgentFactory) -> None:
    with agent() as client:
        assert client.healthz()["generation"] == 1
        new = TunedConfig(limits={"Cgroup": 40}, pools={"ipvtap": 5}, lease_ttl_s=5.0)
        assert client.put_config(new) == 2
        assert client.get_config() == new
        r = httpx.put(
            client.base_url + "/config",
            content=new.to_yaml(),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 200 and r.json()["generation"] == 3
        # A kind it does not make is kept and said, not silently taken.
        assert r.json()["ignored_pools"] == ["ipvtap"]
        r = httpx.get(client.base_url + "/config")
        assert r.headers["X-Bootstorm-Config-Generation"] == "3"


def test_metrics_parse_and_name_what_the_agent_does(agent: AgentFactory) -> None:
    with agent(TunedConfig(limits={"StartVM": 2, "Cgroup": 1})) as client:
        held = client.acquire("StartVM", "sb-1")
        client.take("tap", "sb-1")  # empty pool: counted
        text = client.metrics()
        client.release(held)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "bootstorm_agent_stage_permits_in_use",
        "bootstorm_agent_stage_queue_length",
        "bootstorm_agent_stage_limit",
        "bootstorm_agent_lease_wait_seconds",
        "bootstorm_agent_leases_granted",
        "bootstorm_agent_leases_expired",
        "bootstorm_agent_pool_level",
        "bootstorm_agent_pool_target",
        "bootstorm_agent_pool_refill_seconds",
        "bootstorm_agent_pool_empty",
        "bootstorm_agent_config_generation",
    ):
        assert name in families, name
    assert families["bootstorm_agent_lease_wait_seconds"].type == "histogram"
    in_use = {
        s.labels["stage"]: s.value for s in families["bootstorm_agent_stage_permits_in_use"].samples
    }
    assert in_use == {"StartVM": 1, "Cgroup": 0}
    levels = {s.labels["kind"]: s.value for s in families["bootstorm_agent_pool_level"].samples}
    assert levels == {"netns": 0, "veth": 0, "tap": 0, "netns-veth": 0}
    assert families["bootstorm_agent_config_generation"].samples[0].value == 1


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("/v1/stages/StartVM/acquire", {}, 422, "body.holder: Field required"),
        ("/v1/stages/StartVM/acquire", {"holder": "a", "wait_s": -1}, 422, "body.wait_s"),
        ("/v1/stages/StartVM/acquire", {"holder": "a", "colour": 1}, 422, "unknown field"),
        ("/v1/stages/Start%20VM/acquire", {"holder": "a"}, 422, "stage:"),
        ("/v1/pools/ipvtap/take", {"holder": "a"}, 422, "unknown pool kind 'ipvtap'"),
        ("/v1/nothing", {}, 404, "Not Found"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(
    agent: AgentFactory, path: str, body: dict[str, object], status: int, says: str
) -> None:
    with agent() as client:
        r = httpx.post(
            client.base_url + path, json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == status, r.text
        assert says in r.json()["error"]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{holder", "body: malformed JSON"),
        # json.loads kept the last: the lease went to "b" with nothing said.
        (
            b'{"holder": "a", "holder": "b"}',
            "body: malformed JSON ('holder' is given twice in an object)",
        ),
    ],
)
def test_malformed_json_is_a_400(agent: AgentFactory, content: bytes, says: str) -> None:
    with agent() as client:
        r = httpx.post(
            client.base_url + "/v1/stages/S/acquire",
            content=content,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"].startswith(says)


@pytest.mark.parametrize(
    ("content", "status", "says"),
    [
        (b"garbage", 400, "body: malformed JSON"),
        (b'{"ttl_s": 60}', 422, "body.ttl_s"),
        (b"[]", 400, "body: expected a JSON object"),
    ],
)
@pytest.mark.parametrize("call", ["renew", "release"])
def test_renew_and_release_refuse_a_body_and_keep_the_lease(
    agent: AgentFactory, call: str, content: bytes, status: int, says: str
) -> None:
    # Both ignored any body: a client's field (a new TTL) was dropped unsaid.
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with agent() as client:
        lease = httpx.post(
            client.base_url + "/v1/stages/S/acquire", json={"holder": "a"}, headers=auth
        ).json()
        url = f"{client.base_url}/v1/leases/{lease['lease_id']}/{call}"
        r = httpx.post(url, content=content, headers=auth)
        assert (r.status_code, says in r.json()["error"]) == (status, True), r.text
        # Refused whole: the lease is still held, and an empty body or {} works.
        assert httpx.post(url, content=b"", headers=auth).status_code == 200
        if call == "renew":
            assert httpx.post(url, json={}, headers=auth).status_code == 200


def test_an_unreachable_agent_is_an_agent_error_without_status() -> None:
    with (
        AgentClient("http://127.0.0.1:9", token=TOKEN, timeout_s=2) as client,
        pytest.raises(AgentError) as err,
    ):
        client.healthz()
    assert err.value.status is None


def test_a_closed_client_says_so(agent: AgentFactory) -> None:
    with agent() as client:
        other = AgentClient(client.base_url, token=TOKEN)
        assert other.healthz()["status"] == "ok"
        other.close()
        with pytest.raises(AgentError, match="client is closed"):
            other.healthz()


# -- pool levels: the take answers, GET /v1/pools, the pool metrics ------------------------


@contextmanager
def fake_agent(config: TunedConfig, ops: DeviceOps) -> Iterator[AgentClient]:
    settings = AgentSettings(token=SecretStr(TOKEN), port=0, pool_id=free_pool_id())
    with (
        agent_in_thread(settings, config, device_ops=ops) as url,
        AgentClient(url, token=TOKEN) as client,
    ):
        yield client


def pools_of(client: AgentClient) -> dict[str, Any]:
    r = httpx.get(client.base_url + "/v1/pools")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def wait_ready(client: AgentClient, kind: str, want: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        got = {p["kind"]: p["ready"] for p in pools_of(client)["pools"]}[kind]
        if got == want:
            return
        assert time.monotonic() < deadline, f"{kind}: {got} ready, wanted {want}"
        time.sleep(0.01)


def test_take_answers_carry_the_pools_ready_devices_and_target() -> None:
    with fake_agent(TunedConfig(pools={"tap": 2}), NoDevices()) as client:
        wait_ready(client, "tap", 2)
        device = client.take("tap", "sb-1")
        assert device is not None and (device.ready, device.target) == (1, 2)
        assert client.last_pool_level == PoolLevel(kind="tap", ready=1, target=2)
        assert client.take("veth", "sb-1") is None  # not pooled
        assert client.last_pool_level == PoolLevel(kind="veth", ready=0, target=0)
        r = httpx.post(
            client.base_url + "/v1/pools/veth/take",
            json={"holder": "sb-1"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 404
        assert r.json() == {"error": "pool empty", "kind": "veth", "ready": 0, "target": 0}
        # Rate-following: each take of the first pooled kind (veth) is a start,
        # and the answer carries the target that start set, empty or not.
        rule = FollowRate(window_s=60.0, cover_s=60.0, max_devices=100)  # target = starts
        refill = PoolRefill(follow_rate=rule)
        client.put_config(TunedConfig(pools={"veth": 1, "tap": 1}, pool_refill=refill))
        wait_ready(client, "veth", 1)  # the floor, made at once (fake devices)
        taken = client.take("veth", "sb-2")
        assert taken is not None and (taken.ready, taken.target) == (0, 1)  # one start: 1
        assert client.last_pool_level == PoolLevel(kind="veth", ready=0, target=1)
        client.take("veth", "sb-3")
        level = client.last_pool_level
        assert level is not None and level.target == 2
        client.take("tap", "sb-3")  # the same sandbox's second kind: no start
        level = client.last_pool_level
        assert level is not None and level.target == 2
        # A failed take leaves no level behind.
        with pytest.raises(AgentError):
            client.take("ipvtap", "sb-4")
        assert client.last_pool_level is None


def test_last_pool_level_is_per_thread_and_none_from_an_older_agent() -> None:
    def old_agent(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/veth/take"):
            return httpx.Response(404, json={"error": "pool empty", "kind": "veth"})
        return httpx.Response(200, json={"kind": "tap", "name": "t0", "holder": "sb-1"})

    transport = httpx.MockTransport(old_agent)
    with AgentClient("http://agent", token=TOKEN, transport=transport) as client:
        device = client.take("tap", "sb-1")
        assert device is not None and device.ready is None and device.target is None
        assert client.last_pool_level is None
        assert client.take("veth", "sb-1") is None
        assert client.last_pool_level is None

    def new_agent(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": "pool empty", "ready": 0, "target": 5})

    seen: list[PoolLevel | None] = []
    transport = httpx.MockTransport(new_agent)
    with AgentClient("http://agent", token=TOKEN, transport=transport) as client:
        client.take("netns", "sb-1")
        other = threading.Thread(target=lambda: seen.append(client.last_pool_level))
        other.start()
        other.join()
        assert seen == [None]  # that thread took nothing
        assert client.last_pool_level == PoolLevel(kind="netns", ready=0, target=5)


class GatedDevices(NoDevices):
    """Creates nothing until ``go`` is set: devices being made, seen from outside."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def create(self, device: Device) -> Device:
        assert self.go.wait(10), "a create held for 10 s"
        return device


def test_pool_metrics_and_get_pools_show_ready_target_and_making() -> None:
    ops = GatedDevices()
    # Asks for 4 workers; a fake without a factory is refilled by one.
    config = TunedConfig(pools={"netns": 2}, pool_refill=PoolRefill(concurrency=4))
    try:
        with fake_agent(config, ops) as client:
            deadline = time.monotonic() + 5
            while (got := pools_of(client))["pools"][0]["making"] != 1:
                assert time.monotonic() < deadline, got
                time.sleep(0.01)
            assert got["concurrency"] == 1 and got["workers"] == 1
            assert got["pools"][0] == {"kind": "netns", "ready": 0, "target": 2, "making": 1}
            families = {f.name: f for f in text_string_to_metric_families(client.metrics())}
            making = {
                s.labels["kind"]: s.value for s in families["bootstorm_agent_pool_making"].samples
            }
            assert making == {"netns": 1, "veth": 0, "tap": 0, "netns-veth": 0}
            assert families["bootstorm_agent_pool_making"].type == "gauge"
            ops.go.set()
            wait_ready(client, "netns", 2)
            assert client.take("tap", "sb-1") is None
            assert client.take("tap", "sb-1") is None
            families = {f.name: f for f in text_string_to_metric_families(client.metrics())}

            def by_kind(family: str, sample: str) -> dict[str, float]:
                return {
                    s.labels["kind"]: s.value for s in families[family].samples if s.name == sample
                }

            assert by_kind("bootstorm_agent_pool_making", "bootstorm_agent_pool_making") == {
                "netns": 0,
                "veth": 0,
                "tap": 0,
                "netns-veth": 0,
            }
            assert by_kind("bootstorm_agent_pool_level", "bootstorm_agent_pool_level")["netns"] == 2
            assert by_kind("bootstorm_agent_pool_target", "bootstorm_agent_pool_target") == {
                "netns": 2,
                "veth": 0,
                "tap": 0,
                "netns-veth": 0,
            }
            assert by_kind("bootstorm_agent_pool_empty", "bootstorm_agent_pool_empty_total") == {
                "tap": 2
            }
            refill_counts = by_kind(
                "bootstorm_agent_pool_refill_seconds", "bootstorm_agent_pool_refill_seconds_count"
            )
            assert refill_counts == {"netns": 2}
    finally:
        ops.go.set()  # a held create would hold the agent's shutdown
