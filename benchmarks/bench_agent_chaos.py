"""Load and chaos against a real node agent (``bootstorm agent serve``), on loopback.

Three parts, each against an agent in a child process:

1. **Load.** ``clients`` threads share one :class:`AgentClient` (the testbed's
   way) and each runs ``cycles`` ``stage()`` blocks on a stage limited to
   ``limit``, holding it 0–``hold_ms`` ms; ``long_holds`` of the blocks hold
   it 1.5 × the lease TTL, which only the client's background renewal makes
   safe. Counted: leases lost (a block told its lease was gone), leases
   duplicated (one lease id handed to two blocks), the most holders at once
   seen by the clients and by the agent (its high-water mark) against the
   limit, and the acquire latency (call to grant, FIFO wait included).
2. **A SIGKILLed holder.** A child process holds a limit-1 stage through
   ``stage()`` (renewed past its TTL), and is killed with SIGKILL; the time
   until another client gets the slot is the agent's lease expiry at work:
   between 2/3 and 1 TTL (the holder's last renewal was up to TTL/3 before).
3. **Pool devices across restarts** (root; skipped with a line otherwise).
   An agent fills its pools (``netns``, ``veth``, ``netns-veth``) and hands
   half of them out; a second agent with the same ``--pool-id`` is started
   (it must refuse: its start-up sweep would delete the live agent's
   devices); then the agent is SIGKILLed and restarted, then stopped with
   SIGTERM and restarted again. Counted: devices of the live agent lost to
   the second one, handed-out devices lost across each restart, and the
   killed agent's pooled devices swept.

Run: ``python benchmarks/bench_agent_chaos.py`` (about 30 s on 2 cores; as
root for part 3), ``--clients 400 --cycles 200`` for a bigger storm.
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bootstorm.models import TunedConfig
from bootstorm.validation.agent import AgentClient, AgentError

TOKEN = "bench-agent-chaos-0123456789abcdef"
_CLI = "from bootstorm.cli import main; main()"


@dataclass
class Agent:
    proc: subprocess.Popen[str]
    url: str
    lines: list[str] = field(default_factory=list)


@contextmanager
def agent_process(
    workdir: Path, *args: str, config: TunedConfig | None = None, start_timeout_s: float = 30.0
) -> Iterator[Agent]:
    """``bootstorm agent serve`` on a free loopback port; killed at the end if still up."""
    n = len(list(workdir.iterdir()))
    token = workdir / f"token-{n}"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    argv = ["agent", "serve", "--host", "127.0.0.1", "--port", "0", "--token-file", str(token)]
    # Its own state directory: a pushed config is saved there (as root the
    # default is /var/lib/bootstorm-agent, which a benchmark must not touch).
    argv += ["--state-dir", str(workdir / f"state-{n}")]
    if config is not None:
        config_file = workdir / f"config-{n}.yaml"
        config_file.write_text(config.to_yaml())
        argv += ["--config", str(config_file)]
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLI, *argv, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:  # the agent's log must never fill the pipe and stall it
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + start_timeout_s
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"agent did not start: {''.join(seen)[-500:]}") from None
            if line is None:
                proc.wait()
                raise RuntimeError(f"agent exited {proc.returncode}: {''.join(seen)[-500:]}")
            seen.append(line)
            if "listening on" in line:
                break
        yield Agent(proc, line.rsplit(" ", 1)[-1].strip(), seen)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def metric(text: str, name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if line.startswith(name) and all(w in line for w in want):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- 1. load ---------------------------------------------------------------------------


@dataclass
class LoadResult:
    clients: int
    cycles: int
    done: int
    lost: int
    duplicated: int
    errors: list[str]
    most_seen: int
    high_water: float
    limit: int
    acquire_s: list[float]
    renewals: int
    long_holds: int
    expired_on_agent: float
    wall_s: float


def load(url: str, args: argparse.Namespace) -> LoadResult:
    lock = threading.Lock()
    holding = most = lost = done = renewals = 0
    lease_ids: list[str] = []
    acquire_s: list[float] = []
    errors: list[str] = []
    long_s = 1.5 * args.ttl_s
    rng = random.Random(args.seed)
    total = args.clients * args.cycles
    long_at = set(rng.sample(range(total), min(args.long_holds, total)))
    deadline = time.monotonic() + args.budget_s
    with AgentClient(url, token=TOKEN, timeout_s=30) as client:

        def run_client(i: int) -> None:
            nonlocal holding, most, lost, done, renewals
            r = random.Random(args.seed * 100_003 + i)
            for c in range(args.cycles):
                if time.monotonic() > deadline:
                    return
                hold_s = (
                    long_s if i * args.cycles + c in long_at else r.uniform(0, args.hold_ms / 1e3)
                )
                started = time.perf_counter()
                try:
                    with client.stage("Load", f"c{i}/{c}", wait_s=120) as lease:
                        granted = time.perf_counter()
                        with lock:
                            holding += 1
                            most = max(most, holding)
                            lease_ids.append(lease.lease_id)
                            acquire_s.append(granted - started)
                        time.sleep(hold_s)
                        with lock:
                            holding -= 1
                    with lock:
                        done += 1
                        renewals += getattr(
                            lease, "renewals", 0
                        )  # none: a client that never renews
                except AgentError as exc:
                    with lock:
                        if exc.reason in ("expired", "lost", "released", "unknown"):
                            lost += 1
                        else:
                            errors.append(str(exc))

        started = time.perf_counter()
        threads = [threading.Thread(target=run_client, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall_s = time.perf_counter() - started
        text = client.metrics()
    return LoadResult(
        clients=args.clients,
        cycles=args.cycles,
        done=done,
        lost=lost,
        duplicated=len(lease_ids) - len(set(lease_ids)),
        errors=errors,
        most_seen=most,
        high_water=metric(text, "bootstorm_agent_stage_permits_high_water", stage="Load"),
        limit=args.limit,
        acquire_s=acquire_s,
        renewals=renewals,
        long_holds=len(long_at),
        expired_on_agent=metric(text, "bootstorm_agent_leases_expired_total", stage="Load"),
        wall_s=wall_s,
    )


# -- 2. a SIGKILLed holder ---------------------------------------------------------------

_HOLDER = """
import sys, time
from bootstorm.validation.agent import AgentClient
with AgentClient(sys.argv[1], token=sys.argv[2]) as client:
    with client.stage("Kill", "victim", wait_s=60) as lease:
        print("held", lease.lease_id, flush=True)
        time.sleep(600)
"""


def killed_holder(url: str, ttl_s: float) -> tuple[float, bool]:
    """(seconds from the SIGKILL until another client got the slot, whether the
    lease outlived its TTL before the kill, i.e. was renewed)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url, TOKEN], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.startswith("held"):
            raise RuntimeError(f"the holder did not get the stage: {line!r}")
        time.sleep(1.5 * ttl_s)  # past its TTL: only renewals keep it
        with AgentClient(url, token=TOKEN) as probe:
            try:
                probe.release(probe.acquire("Kill", "probe", wait_s=0))
                renewed = False
            except AgentError as exc:
                renewed = exc.status == 408
            child.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            child.wait(10)
            lease = probe.acquire("Kill", "next", wait_s=3 * ttl_s + 10)
            free_s = time.perf_counter() - killed
            probe.release(lease)
        return free_s, renewed
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# -- 3. pool devices across restarts ---------------------------------------------------


def on_host(pool_id: int) -> set[str]:
    """This pool id's devices on the host, as iproute2 sees them."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = {m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", links, re.M)}
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names |= {line.split()[0] for line in netns.splitlines() if line.strip()}
    own = re.compile(rf"^(bsp{pool_id}[vtn]\d+p?|bstpool-netns(-veth)?-{pool_id}-\d+)$")
    return {n for n in names if own.match(n)}


@dataclass
class PoolResult:
    pooled: int
    handed_out: int
    pooled_names: int
    handed_out_names: int
    second_agent: str
    lost_to_second: int
    lost_after_kill: int
    swept_after_kill: int
    left_after_kill: int
    lost_after_sigterm: int
    restart_s: float


def pools(workdir: Path, per_kind: int) -> PoolResult:
    from bootstorm.validation.agent._pools import default_run_dir

    pool_id = 9000 + os.getpid() % 1000  # the tests use 1000..8999
    if on_host(pool_id):
        raise RuntimeError(f"pool id {pool_id} has devices on this host already")
    kinds = ("netns", "veth", "netns-veth")
    config = TunedConfig(pools=dict.fromkeys(kinds, per_kind))
    args = ("--pool-id", str(pool_id))
    taken: set[str] = set()
    try:
        with agent_process(workdir, *args, config=config) as live:
            with AgentClient(live.url, token=TOKEN) as client:
                deadline = time.monotonic() + 60
                while any(
                    metric(client.metrics(), "bootstorm_agent_pool_level", kind=k) < per_kind
                    for k in kinds
                ):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the pools did not fill within 60 s")
                    time.sleep(0.1)
                for kind in kinds:
                    for i in range(per_kind // 2):
                        device = client.take(kind, f"sb-{kind}-{i}")
                        assert device is not None
                        taken |= {device.name} | ({device.peer} if device.peer else set())
                while any(
                    metric(client.metrics(), "bootstorm_agent_pool_level", kind=k) < per_kind
                    for k in kinds
                ):  # refilled
                    time.sleep(0.1)
            before = on_host(pool_id)
            pooled = len(before - taken)
            # A second agent with the live one's pool id.
            token = workdir / "token-second"
            token.write_text(TOKEN)
            token.chmod(0o600)
            second = subprocess.Popen(
                [sys.executable, "-c", _CLI, "agent", "serve", "--port", "0"]
                + ["--token-file", str(token), "--state-dir", str(workdir / "state-second")]
                + list(args),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                said, _ = second.communicate(timeout=10)
                last = (said.strip().splitlines() or [""])[-1]
                second_agent = f"exit {second.returncode}: {last}"
            except subprocess.TimeoutExpired:  # it started: stop it (its sweep is done)
                second.send_signal(signal.SIGTERM)
                second.communicate(timeout=15)
                second_agent = "STARTED (not refused)"
            lost_to_second = len(before - on_host(pool_id))
            live.proc.send_signal(signal.SIGKILL)
            live.proc.wait(10)
        left = on_host(pool_id)
        started = time.perf_counter()
        with agent_process(workdir, *args) as restarted:
            restart_s = time.perf_counter() - started
            after_kill = on_host(pool_id)
            restarted.proc.send_signal(signal.SIGTERM)
            restarted.proc.wait(15)
        with agent_process(workdir, *args) as again:
            after_sigterm = on_host(pool_id)
            again.proc.send_signal(signal.SIGTERM)
            again.proc.wait(15)
        return PoolResult(
            pooled=len(kinds) * per_kind,
            handed_out=len(kinds) * (per_kind // 2),
            pooled_names=pooled,
            handed_out_names=len(taken),
            second_agent=second_agent,
            lost_to_second=lost_to_second,
            lost_after_kill=len(taken - after_kill),
            swept_after_kill=len((left - taken) - after_kill),
            left_after_kill=len(left - taken),
            lost_after_sigterm=len(taken - after_sigterm),
            restart_s=restart_s,
        )
    finally:
        # The "sandboxes" are done: their devices go, then the pool id's files.
        for name in on_host(pool_id):
            what = ["netns", "del"] if name.startswith("bstpool-") else ["link", "del"]
            subprocess.run(["ip", *what, name], capture_output=True)
        for suffix in ("handed-out", "lock"):
            (default_run_dir() / f"pool-{pool_id}.{suffix}").unlink(missing_ok=True)


# -- main --------------------------------------------------------------------------------


def _ms(x_s: float) -> str:
    return f"{x_s * 1e3:.2f} ms"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=100, help="stage blocks per client")
    parser.add_argument("--limit", type=int, default=8, help="the load stage's limit")
    parser.add_argument("--ttl-s", type=float, default=1.0, help="the agent's lease TTL")
    parser.add_argument("--hold-ms", type=float, default=2.0, help="longest short hold")
    parser.add_argument("--long-holds", type=int, default=8, help="blocks held 1.5 x TTL")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLed holders")
    parser.add_argument("--pool-size", type=int, default=10, help="devices per pool kind")
    parser.add_argument("--budget-s", type=float, default=45.0, help="the load part's bound")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for name in ("clients", "cycles", "limit", "kills", "pool_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1")
    if not args.ttl_s > 0:
        parser.error("--ttl-s: must be > 0")

    rows: list[tuple[str, str]] = []
    config = TunedConfig(limits={"Load": args.limit, "Kill": 1}, lease_ttl_s=args.ttl_s)
    with tempfile.TemporaryDirectory(prefix="bench-agent-chaos-") as tmp:
        workdir = Path(tmp)
        # Far from the tests' pool ids; no pools: the load parts make no devices.
        pool_id = str(9000 + (os.getpid() + 500) % 1000)
        with agent_process(workdir, "--pool-id", pool_id, config=config) as agent:
            print(f"agent {agent.url}: load, {args.clients} clients x {args.cycles} cycles ...")
            r = load(agent.url, args)
            acq = np.array(r.acquire_s) if r.acquire_s else np.zeros(1)
            rows += [
                ("clients x cycles", f"{r.clients} x {r.cycles} = {r.clients * r.cycles}"),
                ("cycles done", f"{r.done} in {r.wall_s:.1f} s ({r.done / r.wall_s:,.0f}/s)"),
                ("leases lost", str(r.lost)),
                ("leases duplicated", str(r.duplicated)),
                ("other errors", f"{len(r.errors)}" + (f" ({r.errors[0]})" if r.errors else "")),
                (
                    "max holders vs limit",
                    f"{r.most_seen} seen by clients, {r.high_water:g} by the agent; "
                    f"limit {r.limit}",
                ),
                (
                    "acquire latency p50 / p99",
                    f"{_ms(float(np.percentile(acq, 50)))} / {_ms(float(np.percentile(acq, 99)))}",
                ),
                (
                    "long holds (1.5 x TTL)",
                    f"{r.long_holds}, {r.renewals} renewals in all, "
                    f"{r.expired_on_agent:g} leases expired on the agent",
                ),
            ]
            print(f"SIGKILLed holders ({args.kills}) ...")
            frees = []
            renewed_all = True
            for _ in range(args.kills):
                free_s, renewed = killed_holder(agent.url, args.ttl_s)
                frees.append(free_s)
                renewed_all &= renewed
            rows += [
                (
                    "slot free after SIGKILL",
                    f"{min(frees):.2f} .. {max(frees):.2f} s over {len(frees)} kills "
                    f"(TTL {args.ttl_s:g} s; lease held past its TTL before the kill: "
                    f"{'yes' if renewed_all else 'NO'})",
                )
            ]
        if os.geteuid() != 0:
            print("pool part skipped: needs root (creates real namespaces and links)")
            rows.append(("pool devices lost across restarts", "skipped (not root)"))
        else:
            print(f"pools: {args.pool_size} per kind, half handed out, restarts ...")
            p = pools(workdir, args.pool_size)
            rows += [
                (
                    "pool devices",
                    f"{p.pooled} pooled + {p.handed_out} handed out "
                    f"({p.pooled_names} + {p.handed_out_names} names: links, peers, netns)",
                ),
                ("second agent, same pool id", p.second_agent),
                ("names lost to the second agent", f"{p.lost_to_second}"),
                (
                    "handed-out names lost, SIGKILL+restart",
                    f"{p.lost_after_kill} of {p.handed_out_names}",
                ),
                (
                    "killed agent's pooled names swept",
                    f"{p.swept_after_kill} of {p.left_after_kill}",
                ),
                (
                    "handed-out names lost, SIGTERM+restart",
                    f"{p.lost_after_sigterm} of {p.handed_out_names}",
                ),
                ("restart to listening", f"{p.restart_s:.2f} s"),
            ]
    width = max(len(k) for k, _ in rows)
    print()
    print(f"{'metric':<{width}}  value")
    print(f"{'-' * width}  {'-' * 40}")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
