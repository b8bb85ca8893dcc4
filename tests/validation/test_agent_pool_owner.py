"""One agent per pool id, and a restart that keeps what was handed out.

A second agent with a live agent's ``pool_id`` refuses to start (its start-up
sweep would delete the live agent's devices); a restarted agent sweeps what
its killed predecessor pooled, but not what it handed out (the record of
takes in the run directory)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import TOKEN, free_pool_id, needs_root, process_agent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from test_agent_netns_veth import FakeDevices

from bootstorm.models import ConfigError, TunedConfig
from bootstorm.validation.agent import AgentClient, AgentSettings, _pools, agent_in_thread
from bootstorm.validation.agent._metrics import AgentMetrics
from bootstorm.validation.agent._pools import (
    Device,
    HandedOutRecord,
    PoolManager,
    claim_pool_id,
    default_run_dir,
)

POOL_ID = 42


def manager(fake: FakeDevices, run_dir: Path, pool_id: int = POOL_ID) -> PoolManager:
    return PoolManager(fake, AgentMetrics(), pool_id=pool_id, run_dir=run_dir)


async def fill(pools: PoolManager, want: dict[str, int]) -> None:
    pools.set_targets(want)
    for _ in range(500):
        if {s.kind: s.level for s in pools.snapshot() if s.kind in want} == want:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"pools {pools.snapshot()}, wanted {want}")


async def kill(pools: PoolManager) -> None:
    """What a SIGKILL leaves: devices as they are, the lock freed by the kernel."""
    assert pools._task is not None
    pools._task.cancel()
    await asyncio.gather(pools._task, return_exceptions=True)
    pools._executor.shutdown(wait=True)
    pools.release_claim()


def test_a_second_manager_with_a_live_pool_id_refuses_and_sweeps_nothing(
    tmp_path: Path,
) -> None:
    fake = FakeDevices()

    async def scenario() -> None:
        first = manager(fake, tmp_path)
        await first.start()
        await fill(first, {"veth": 3, "netns": 2})
        second = manager(fake, tmp_path)
        with pytest.raises(ConfigError) as refused:
            await second.start()
        message = str(refused.value)
        assert message.startswith(f"pool-id: {POOL_ID} is in use by another agent")
        assert f"pid {os.getpid()}" in message and "\n" not in message
        assert fake.removed == []  # the live agent's devices are untouched
        taken = first.take("veth")
        assert taken is not None
        fake.remove(taken)  # its client is done with it
        await first.close()
        # Its lock went with it: the pool id is free again.
        third = manager(fake, tmp_path)
        await third.start()
        await third.close()
        # Nothing handed out is left: a clean stop leaves no file behind.
        assert fake.removed and not list(tmp_path.iterdir())

    asyncio.run(scenario())


def test_an_agent_on_a_thread_refuses_a_pool_id_in_use() -> None:
    settings = AgentSettings(token=SecretStr(TOKEN), port=0, pool_id=free_pool_id())
    with (
        agent_in_thread(settings),
        pytest.raises(ConfigError, match="is in use by another agent"),
        agent_in_thread(settings),
    ):
        raise AssertionError("a second agent with the same pool id started")


_HOLDER = """
import sys, time
from pathlib import Path
from bootstorm.validation.agent._pools import claim_pool_id
claim_pool_id(int(sys.argv[1]), run_dir=Path(sys.argv[2]))
print("held", flush=True)
time.sleep(60)
"""


def test_the_lock_of_a_killed_agent_is_freed_by_the_kernel(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(POOL_ID), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"\(pid {holder.pid}, lock "):
            claim_pool_id(POOL_ID, run_dir=tmp_path)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        claim_pool_id(POOL_ID, run_dir=tmp_path).release()  # no waiting, no clean-up needed
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_restart_sweeps_what_was_pooled_but_keeps_what_was_handed_out(
    tmp_path: Path,
) -> None:
    fake = FakeDevices()
    record = tmp_path / f"pool-{POOL_ID}.handed-out"

    async def scenario() -> None:
        first = manager(fake, tmp_path)
        await first.start()
        await fill(first, {"netns-veth": 3, "veth": 2, "netns": 1})
        taken = [first.take("netns-veth"), first.take("veth"), first.take("netns-veth")]
        assert all(d is not None for d in taken)
        names = {d.name for d in taken if d is not None}
        # Recorded before take() returned, one line each.
        assert {
            line.split('"name": "')[1].split('"')[0] for line in record.read_text().splitlines()
        } == names
        await fill(first, {"netns-veth": 3, "veth": 2, "netns": 1})
        pooled = set(fake.alive) - names
        await kill(first)

        second = manager(fake, tmp_path)
        await second.start()
        assert {d.name for d in fake.removed} == pooled  # the killed agent's pool only
        assert names <= set(fake.alive)
        assert {d.name for d in second.handed_out()} == names
        # The refill makes new names, never one a client holds.
        await fill(second, {"netns-veth": 3, "veth": 2, "netns": 1})
        made = [d.name for d in fake.created[-6:]]
        assert not names & set(made)
        await second.close()
        assert set(fake.alive) == names  # a clean stop removes only what is pooled
        assert {d.name for d in HandedOutRecord(record).read()} == names  # and keeps the record

        # The client removed one: the next start forgets it (and may reuse its name).
        gone = taken[0]
        assert gone is not None
        fake.remove(gone)
        third = manager(fake, tmp_path)
        await third.start()
        assert {d.name for d in third.handed_out()} == names - {gone.name}
        assert {d.name for d in HandedOutRecord(record).read()} == names - {gone.name}
        await third.close()

    asyncio.run(scenario())


def test_a_take_that_cannot_be_recorded_is_not_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeDevices()

    def full(self: HandedOutRecord, device: Device) -> None:
        raise OSError(28, "No space left on device")

    async def scenario() -> None:
        pools = manager(fake, tmp_path)
        await pools.start()
        await fill(pools, {"tap": 1})
        monkeypatch.setattr(HandedOutRecord, "append", full)
        assert pools.take("tap") is None  # the client makes its own
        assert {s.kind: s.level for s in pools.snapshot()}["tap"] == 1  # still pooled
        assert pools.handed_out() == []
        await pools.close()
        assert fake.alive == {}  # removed as pooled, as nobody has it

    asyncio.run(scenario())


def test_the_record_is_compacted_as_clients_remove_their_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pools, "_COMPACT_MIN", 8)
    fake = FakeDevices()
    record = tmp_path / f"pool-{POOL_ID}.handed-out"

    async def scenario() -> None:
        pools = manager(fake, tmp_path)
        await pools.start()
        for _ in range(20):
            await fill(pools, {"tap": 1})
            device = pools.take("tap")
            assert device is not None
            fake.remove(device)  # its client is done with it
        await fill(pools, {"tap": 1})
        assert len(record.read_text().splitlines()) < 8 + 2
        await pools.close()

    asyncio.run(scenario())


_NAMES = st.from_regex(r"bsp[0-9]{1,4}[vtn][0-9]{1,6}", fullmatch=True)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    devices=st.lists(
        st.builds(
            Device,
            kind=st.sampled_from(["netns", "veth", "tap", "netns-veth"]),
            name=_NAMES,
            peer=st.none() | _NAMES,
        ),
        max_size=20,
        unique_by=lambda d: d.name,
    ),
    torn=st.binary(max_size=40).filter(lambda b: b"\n" not in b),
)
def test_the_record_reads_back_what_was_written_and_skips_a_torn_line(
    tmp_path: Path, devices: list[Device], torn: bytes
) -> None:
    path = tmp_path / "record"
    record = HandedOutRecord(path)
    record.rewrite(devices[: len(devices) // 2])
    for device in devices[len(devices) // 2 :]:
        record.append(device)
    record.close()
    with path.open("ab") as f:
        f.write(torn)  # what a crash in the middle of a write could leave
    assert HandedOutRecord(path).read() == devices


# -- real agents -----------------------------------------------------------------


@contextmanager
def cli_agent(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """conftest's agent process, as the process and its URL."""
    with process_agent(tmp_path, *args) as agent:
        yield agent.proc, agent.url


@pytest.mark.slow
def test_serve_refuses_a_pool_id_in_use_in_one_line(tmp_path: Path) -> None:
    pool_id = free_pool_id()
    with cli_agent(tmp_path, "--pool-id", str(pool_id)) as (live, _url):
        token = tmp_path / "token-second"
        token.write_text(TOKEN)
        token.chmod(0o600)
        second = subprocess.run(
            [sys.executable, "-c", "from bootstorm.cli import main; main()", "agent", "serve"]
            + ["--port", "0", "--token-file", str(token), "--pool-id", str(pool_id)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert second.returncode == 2, second.stderr
    err = second.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith(f"error: pool-id: {pool_id} is in use by another agent")
    assert f"pid {live.pid}" in err


def _on_host(pool_id: int) -> set[str]:
    """This pool id's devices on the host, seen with iproute2."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = {m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", links, re.M)}
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names |= {line.split()[0] for line in netns.splitlines() if line.strip()}
    own = re.compile(rf"^(bsp{pool_id}[vtn]\d+p?|bstpool-netns(-veth)?-{pool_id}-\d+)$")
    return {n for n in names if own.match(n)}


def _level(client: AgentClient, kind: str) -> float:
    for line in client.metrics().splitlines():
        if line.startswith("bootstorm_agent_pool_level") and f'kind="{kind}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(kind)


@pytest.mark.root
@pytest.mark.slow
@needs_root
def test_a_killed_agents_handed_out_namespaces_survive_its_restart(tmp_path: Path) -> None:
    pool_id = free_pool_id()
    assert not _on_host(pool_id), "leftovers from an earlier run"
    config = TunedConfig(pools={"netns": 2, "veth": 1, "netns-veth": 2})
    config_file = tmp_path / "tuned.yaml"
    config_file.write_text(config.to_yaml())
    args = ("--pool-id", str(pool_id), "--config", str(config_file))
    taken: set[str] = set()
    try:
        with cli_agent(tmp_path, *args) as (proc, url), AgentClient(url, token=TOKEN) as client:
            deadline = time.monotonic() + 30
            while any(_level(client, k) < n for k, n in config.pools.items()):
                assert time.monotonic() < deadline, "the pools did not fill"
                time.sleep(0.1)
            for kind in ("netns", "veth", "netns-veth"):
                device = client.take(kind, "sb-1")
                assert device is not None
                taken |= {device.name} | ({device.peer} if device.peer else set())
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        assert taken < _on_host(pool_id)
        # A state directory of its own: the config saved by the first (its pools)
        # would be restored and refill them; this restart is about the sweep.
        fresh = ("--state-dir", str(tmp_path / "fresh-state"))
        with cli_agent(tmp_path, "--pool-id", str(pool_id), *fresh) as (proc, url):
            assert _on_host(pool_id) == taken  # the pooled ones swept, the taken kept
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
        assert _on_host(pool_id) == taken
    finally:
        for name in _on_host(pool_id):
            what = ["netns", "del"] if name.startswith("bstpool-") else ["link", "del"]
            subprocess.run(["ip", *what, name], capture_output=True)
        for suffix in ("handed-out", "lock"):
            (default_run_dir() / f"pool-{pool_id}.{suffix}").unlink(missing_ok=True)


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True).stdout


@pytest.mark.root
@pytest.mark.slow
@needs_root
@pytest.mark.skipif(
    not any(Path(d, "bridge").exists() for d in ("/usr/lib/cni", "/opt/cni/bin")),
    reason="needs the CNI plugins: apt-get install containernetworking-plugins",
)
@pytest.mark.usefixtures("one_cni_storm_at_a_time")
def test_a_cni_agents_handed_out_namespace_keeps_its_network_across_restarts(
    tmp_path: Path,
) -> None:
    """The bridge, the address and host-local's lease of a handed-out namespace
    stay through a SIGKILL, a restart (which adopts the network) and a SIGTERM."""
    from bootstorm.validation.agent._cni_pool import agent_bridge, agent_state_dir

    pool_id = free_pool_id()
    bridge, state = agent_bridge(pool_id), agent_state_dir(pool_id)
    config_file = tmp_path / "tuned.yaml"
    args = ("--pool-id", str(pool_id), "--cni", "bridge", "--config", str(config_file))

    def fill(client: AgentClient, want: int) -> None:
        deadline = time.monotonic() + 30
        while _level(client, "netns-veth") < want:
            assert time.monotonic() < deadline, "the netns-veth pool did not fill"
            time.sleep(0.1)

    def plumbed(netns: str, host_end: str) -> tuple[str, bool]:
        address = _ip("-n", netns, "-4", "-o", "addr", "show", "dev", "eth0").split()[3]
        return address, f"master {bridge} " in _ip("-o", "link", "show", "dev", host_end)

    def ipam_holders() -> set[str]:
        return {
            p.read_text().splitlines()[0].strip()
            for p in state.glob("ipam/*/*")
            if p.name != "lock" and not p.name.startswith("last_reserved_ip")
        }

    device = None
    try:
        config_file.write_text(TunedConfig(pools={"netns-veth": 2}).to_yaml())
        with cli_agent(tmp_path, *args) as (proc, url), AgentClient(url, token=TOKEN) as client:
            fill(client, 2)
            device = client.take("netns-veth", "sb-1")
            assert device is not None and device.peer is not None
            before = plumbed(device.name, device.peer)
            assert before[1]
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        config_file.write_text(TunedConfig(pools={"netns-veth": 1}).to_yaml())
        with cli_agent(tmp_path, *args) as (proc, url), AgentClient(url, token=TOKEN) as client:
            fill(client, 1)  # made on the adopted network
            assert plumbed(device.name, device.peer) == before
            assert device.name in ipam_holders()
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
        # Stopped: the pooled one went, the handed-out one and its network stay.
        assert plumbed(device.name, device.peer) == before
        assert ipam_holders() == {device.name}
    finally:
        if device is not None:
            subprocess.run(["ip", "netns", "del", device.name], capture_output=True)
        # The sandbox is gone: the next agent's stop removes the network.
        config_file.write_text(TunedConfig().to_yaml())
        with cli_agent(tmp_path, *args) as (proc, _url):
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
        for suffix in ("handed-out", "lock"):
            (default_run_dir() / f"pool-{pool_id}.{suffix}").unlink(missing_ok=True)
    assert bridge not in _ip("-o", "link", "show")
    assert not state.exists()
