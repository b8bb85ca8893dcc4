"""The agent's HTTP surface: tokens, PUT /config, metrics, request checks."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
import pytest
from conftest import TOKEN
from prometheus_client.parser import text_string_to_metric_families

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentClient, AgentError

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
        for path in ("/config", "/metrics", "/healthz"):
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


def test_malformed_json_is_a_400(agent: AgentFactory) -> None:
    with agent() as client:
        r = httpx.post(
            client.base_url + "/v1/stages/S/acquire",
            content=b"{holder",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 400
        assert r.json()["error"].startswith("body: malformed JSON")


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
