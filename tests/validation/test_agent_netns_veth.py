"""The agent's ``netns-veth`` pool without root: names, the pool manager and the
HTTP API over a fake :class:`DeviceOps`, the sweep's grouping, and the
testbed's client path (:class:`AgentAdmission`)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from bootstorm.models import TunedConfig
from bootstorm.validation._names import owned_link, owned_netns
from bootstorm.validation.agent import (
    POOL_KINDS,
    AgentAdmission,
    AgentClient,
    AgentSettings,
    CniPoolSettings,
    create_app,
)
from bootstorm.validation.agent._pools import CniPlumbing, Device, NetlinkDevices, pool_names
from bootstorm.validation.testbed.admission import CniPooledNetns

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class FakeDevices:
    """A :class:`DeviceOps` that only remembers what exists."""

    def __init__(self, leftovers: list[Device] | None = None) -> None:
        self.alive: dict[str, Device] = {d.name: d for d in leftovers or ()}
        self.created: list[Device] = []
        self.removed: list[Device] = []
        self.lock = threading.Lock()

    def create(self, device: Device) -> Device:
        with self.lock:
            self.created.append(device)
            self.alive[device.name] = device
        return device

    def remove(self, device: Device) -> None:
        with self.lock:
            self.removed.append(device)
            self.alive.pop(device.name, None)

    def leftovers(self) -> list[Device]:
        with self.lock:
            return list(self.alive.values())

    def close(self) -> None:
        pass


def test_the_kind_and_its_names() -> None:
    assert "netns-veth" in POOL_KINDS
    device = pool_names(9999, "netns-veth", 999_999)
    assert device.kind == "netns-veth"
    assert device.name == "bstpool-netns-veth-9999-999999" and owned_netns(device.name)
    assert device.peer == "bsp9999n999999" and owned_link(device.peer)
    assert len(device.peer.encode()) <= 15
    # Not a plain netns of the same agent (the sweep tells them apart).
    assert pool_names(3, "netns", 1).name == "bstpool-netns-3-1" != pool_names(3, "netns-veth", 1)


def _levels(text: str, family: str = "bootstorm_agent_pool_level") -> dict[str, float]:
    for f in text_string_to_metric_families(text):
        if f.name == family:
            wanted = (family, f"{family}_total")  # a gauge's samples, or a counter's
            return {s.labels["kind"]: s.value for s in f.samples if s.name in wanted}
    raise AssertionError(f"no {family} in the metrics")


async def _wait_level(client: TestClient[Any, Any], kind: str, want: int) -> None:
    for _ in range(400):
        text = await (await client.get("/metrics")).text()
        if _levels(text)[kind] == want:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{kind} level {_levels(text)[kind]}, wanted {want}")


def test_the_agent_pools_hands_out_and_sweeps_netns_veth() -> None:
    leftover = pool_names(7, "netns-veth", 3)  # of a killed agent with the same pool id
    fake = FakeDevices([leftover])

    async def scenario() -> None:
        settings = AgentSettings(token=SecretStr(TOKEN), port=0, pool_id=7)
        app = create_app(settings, TunedConfig(pools={"netns-veth": 2}), device_ops=fake)
        server = TestServer(app)
        client: TestClient[Any, Any] = TestClient(server)
        async with server, client:
            await _wait_level(client, "netns-veth", 2)
            assert fake.removed == [leftover]  # swept at start
            r = await client.post(
                "/v1/pools/netns-veth/take", json={"holder": "sb-1"}, headers=AUTH
            )
            assert r.status == 200
            got = await r.json()
            first = pool_names(7, "netns-veth", 0)
            assert got == {
                "kind": "netns-veth",
                "name": first.name,
                "peer": first.peer,
                "holder": "sb-1",
                "ready": 1,  # left after the take, of the target 2
                "target": 2,
            }
            await _wait_level(client, "netns-veth", 2)  # refilled
            text = await (await client.get("/metrics")).text()
            assert _levels(text, "bootstorm_agent_pool_target")["netns-veth"] == 2
            assert _levels(text, "bootstorm_agent_pool_taken") == {"netns-veth": 1}
            # PUT /config takes the kind; shrinking removes the surplus.
            r = await client.put(
                "/config", data=TunedConfig(pools={"netns-veth": 1}).to_yaml(), headers=AUTH
            )
            assert r.status == 200 and (await r.json())["config"]["pools"] == {"netns-veth": 1}
            await _wait_level(client, "netns-veth", 1)
        # Shut down: what is still pooled goes; the taken one is the client's.
        assert set(fake.alive) == {first.name}

    asyncio.run(scenario())
    assert all(d.kind == "netns-veth" for d in fake.created)


def test_the_sweep_groups_a_netns_veths_namespace_and_host_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever is left of one (its namespace, its host end, or both) is one device."""
    from bootstorm.validation.agent import _pools

    names = ["bstpool-netns-veth-5-0", "bstpool-netns-veth-5-2", "bstpool-netns-5-4"]
    names += ["bstpool-netns-veth-6-0", "bst-abcd-v0"]  # another agent's, a testbed run's
    monkeypatch.setattr(_pools, "list_netns", lambda: list(names))

    class Links:
        def get_links(self) -> list[dict[str, str]]:
            return [{"ifname": n} for n in ("bsp5n0", "bsp5n1", "bsp5v3", "bsp6n0", "eth0")]

    devices = NetlinkDevices(5)
    devices._ipr = Links()
    found = devices.leftovers()
    assert sorted(found, key=lambda d: (d.kind, d.name)) == [
        Device("netns", "bstpool-netns-5-4"),
        pool_names(5, "netns-veth", 0),
        pool_names(5, "netns-veth", 1),
        pool_names(5, "netns-veth", 2),
        Device("veth", "bsp5v3", peer="bsp5v3p"),
    ]


def _agent_client(answer: httpx.Response) -> AgentClient:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/pools/netns-veth/take"
        return answer

    return AgentClient("http://agent", token=TOKEN, transport=httpx.MockTransport(handler))


def test_the_testbeds_agent_path_gets_the_namespace_and_the_host_end() -> None:
    handed = {"kind": "netns-veth", "name": "bstpool-netns-veth-1-0", "peer": "bsp1n0"}
    with _agent_client(httpx.Response(200, json={**handed, "holder": "r/0"})) as client:
        assert AgentAdmission(client).take_netns_veth("r/0") == ("bstpool-netns-veth-1-0", "bsp1n0")
    with _agent_client(httpx.Response(404, json={"error": "pool empty"})) as client:
        assert AgentAdmission(client).take_netns_veth("r/0") is None
    # An agent older than the kind: not pooled there, the sandbox makes its own.
    unknown = {"error": "kind: unknown pool kind 'netns-veth'; known: netns, veth, tap"}
    with _agent_client(httpx.Response(422, json=unknown)) as client:
        assert AgentAdmission(client).take_netns_veth("r/0") is None
    no_host_end = httpx.Response(200, json={**handed, "peer": None, "holder": "r/0"})
    with (
        _agent_client(no_host_end) as client,
        pytest.raises(ValueError, match="without a host end"),
    ):
        AgentAdmission(client).take_netns_veth("r/0")


# -- plumbed by CNI (agent serve --cni) ----------------------------------------


class CniFakeDevices(FakeDevices):
    """Makes each netns-veth as a CNI ADD would report it (no plugins run)."""

    def create(self, device: Device) -> Device:
        super().create(device)
        return Device(
            device.kind,
            device.name,
            peer="veth1234abcd",
            cni=CniPlumbing(
                container_id=device.name,
                conflist={"cniVersion": "1.0.0", "name": "bootstorm-agent-8", "plugins": []},
                result='{"cniVersion": "1.0.0"}',
            ),
        )


def test_a_cni_plumbed_netns_veth_carries_its_network_to_its_taker() -> None:
    """The take answer carries the container id, the conflist and the ADD's
    result (the taker DELs through them); /healthz names the network, so a
    cni-runtime client knows before its storm whether to take any."""
    fake = CniFakeDevices()

    async def scenario() -> None:
        cni = CniPoolSettings(plugin="bridge", bin_dir=Path("/usr/lib/cni"))
        settings = AgentSettings(token=SecretStr(TOKEN), port=0, pool_id=8, cni=cni)
        app = create_app(settings, TunedConfig(pools={"netns-veth": 1}), device_ops=fake)
        server = TestServer(app)
        client: TestClient[Any, Any] = TestClient(server)
        async with server, client:
            await _wait_level(client, "netns-veth", 1)
            health = await (await client.get("/healthz")).json()
            assert health["cni_network"] == "bootstorm-agent-8"
            r = await client.post("/v1/pools/netns-veth/take", json={"holder": "r/0"}, headers=AUTH)
            got = await r.json()
            assert got["peer"] == "veth1234abcd"
            assert got["cni"] == {
                "container_id": "bstpool-netns-veth-8-0",
                "conflist": {"cniVersion": "1.0.0", "name": "bootstorm-agent-8", "plugins": []},
                "result": '{"cniVersion": "1.0.0"}',
            }

    asyncio.run(scenario())
    with pytest.raises(ValueError, match=r"^plugin: must be one of bridge, ptp \(got 'macvlan'\)$"):
        CniPoolSettings(plugin="macvlan", bin_dir=Path("/usr/lib/cni"))


def _routed_client(routes: dict[str, httpx.Response]) -> AgentClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return routes[request.url.path]

    return AgentClient("http://agent", token=TOKEN, transport=httpx.MockTransport(handler))


def test_the_cni_runtimes_agent_path_takes_only_plumbed_namespaces() -> None:
    plumbed = {
        "kind": "netns-veth",
        "name": "bstpool-netns-veth-8-0",
        "peer": "veth1234abcd",
        "holder": "r/0",
        "cni": {"container_id": "bstpool-netns-veth-8-0", "conflist": {"name": "n"}},
    }
    health = httpx.Response(200, json={"status": "ok", "generation": 1, "cni_network": "n"})
    routes = {"/healthz": health, "/v1/pools/netns-veth/take": httpx.Response(200, json=plumbed)}
    with _routed_client(routes) as client:
        adm = AgentAdmission(client)
        assert adm.offers_cni_netns()
        got = adm.take_cni_netns("r/0")
        assert got == CniPooledNetns(netns="bstpool-netns-veth-8-0", container_id=plumbed["name"])
        assert got is not None and got.conflist == {"name": "n"} and got.result is None
    # An agent without --cni: its pairs are on no CNI network, none is taken.
    bare = httpx.Response(200, json={"status": "ok", "generation": 1, "cni_network": None})
    with _routed_client({"/healthz": bare}) as client:
        adm = AgentAdmission(client)
        assert not adm.offers_cni_netns() and adm.take_cni_netns("r/0") is None
    # A plumbed kind that comes without its network is refused, naming it.
    unplumbed = {k: v for k, v in plumbed.items() if k != "cni"}
    routes["/v1/pools/netns-veth/take"] = httpx.Response(200, json=unplumbed)
    with _routed_client(routes) as client, pytest.raises(ValueError, match="without its CNI"):
        AgentAdmission(client).take_cni_netns("r/0")
