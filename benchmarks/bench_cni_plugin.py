"""``bootstorm-cni`` against the bridge plugin it wraps (issue 34).

Run ``sudo python benchmarks/bench_cni_plugin.py [--sandboxes 100] [--rounds 2]
[--repeats 30] [--no-vm]`` (root: the storms make namespaces and links; run
it under ``flock /tmp/testbed.lock`` on a shared host).

- **Bare exec**: one VERSION call of each, interleaved (``--repeats``): the
  bridge plugin (Go), the installed front end (``bootstorm agent
  install-cni``: VERSION goes to its ``python -I -S`` fallback), the ``-I -S``
  Python launcher alone, and the pip console script; and one ADD with no
  agent (a refused port, ``failure_policy: closed``: code 11, no delegate) of
  the three bootstorm-cni variants: the front end's compiled path's own cost.
- **Storms**: ``--rounds`` pairs of ``testbed run --runtime cni`` storms of
  ``--sandboxes`` sandboxes, through one agent process, one plain and one
  with ``--cni-wrapper bootstorm-cni`` (the testbed installs the compiled
  front end into the run's own directory), in turn. From each trace: the
  median CNI ADD of the main plugin (the ``bridge`` exec spans of AddCNI),
  and for the wrapped storm the ``bootstorm-cni`` exec spans (the whole ADD
  as the runtime sees it) and their delegate's; the makespan.

Goal (issue 34): the wrapped ADD's median within +10% of the plain bridge
ADD's median in the same round. Printed beside the figures, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import Figure, interleaved, row, table_header

from bootstorm.traces import read_trace
from bootstorm.validation.agent import agent_process
from bootstorm.validation.cni_plugin.install import install

BRIDGE = Path("/usr/lib/cni/bridge")
#: The pool id of the benchmark's agent: apart from a user's (0) and the tests'.
POOL_ID = 93


def _console_script() -> str:
    return str(Path(sys.executable).parent / "bootstorm-cni")


def _version_run(argv: list[str]) -> float:
    stdin = b'{"cniVersion":"1.0.0"}'
    env = {"CNI_COMMAND": "VERSION", "PATH": "/usr/bin:/bin"}
    t0 = time.perf_counter()
    subprocess.run(argv, input=stdin, env=env, capture_output=True, check=True)
    return time.perf_counter() - t0


def _no_agent_add(argv: list[str], folder: Path) -> float:
    """An ADD whose agent refuses the connection (closed: code 11, no delegate)."""
    token = folder / "token"
    conf = {
        "cniVersion": "1.0.0",
        "name": "bench",
        "type": "bootstorm-cni",
        "agent": {"url": "http://127.0.0.1:9", "token_file": str(token), "timeout_s": 2.0},
        "failure_policy": "closed",
        "delegate": {"type": "bridge", "bridge": "bstbench0"},
    }
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "bench",
        "CNI_NETNS": "/run/netns/bench",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(BRIDGE.parent),
        "PATH": "/usr/bin:/bin",
    }
    t0 = time.perf_counter()
    done = subprocess.run(argv, input=json.dumps(conf).encode(), env=env, capture_output=True)
    took = time.perf_counter() - t0
    assert done.returncode == 1 and json.loads(done.stdout)["code"] == 11, done
    return took


def bare_exec(repeats: int, folder: Path) -> dict[str, Figure]:
    (folder / "fast").mkdir()
    (folder / "launcher").mkdir()
    (folder / "token").write_text("bench-token\n")
    fast = str(install(folder / "fast").path)
    launcher = str(install(folder / "launcher", launcher=True).path)
    script = _console_script()
    return interleaved(
        {
            "bridge": lambda: _version_run([str(BRIDGE)]),
            "frontend VERSION": lambda: _version_run([fast]),
            "launcher VERSION": lambda: _version_run([launcher]),
            "console VERSION": lambda: _version_run([script]),
            "frontend ADD": lambda: _no_agent_add([fast], folder),
            "launcher ADD": lambda: _no_agent_add([launcher], folder),
            "console ADD": lambda: _no_agent_add([script], folder),
        },
        repeats=repeats,
        warmup=3,
    )


def _storm(
    folder: Path, tag: str, *, url: str, token_file: Path, sandboxes: int, vm: bool, wrapped: bool
) -> dict[str, float]:
    trace = folder / f"{tag}.jsonl.gz"
    argv = [
        sys.executable,
        "-c",
        "from bootstorm.cli import main; main()",
        "testbed",
        "run",
        "--runtime",
        "cni",
        "--sandboxes",
        str(sandboxes),
        "--agent",
        url,
        "--token-file",
        str(token_file),
        "--no-kernel-trace",
        "--trace",
        str(trace),
        "--json",
    ]
    if not vm:
        argv.append("--no-vm")
    if wrapped:
        argv += ["--cni-wrapper", "bootstorm-cni"]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    summary = json.loads(done.stdout)
    t = read_trace(trace)
    execs = [e for e in t.execs if e.stage == "AddCNI" and e.command == "ADD"]

    def median_ms(program: str) -> float:
        xs = [e.end_s - e.start_s for e in execs if e.program == program]
        return statistics.median(xs) if xs else float("nan")

    return {
        "bridge_add_s": median_ms("bridge"),
        "plugin_add_s": median_ms("bootstorm-cni"),
        "makespan_s": float(summary["makespan_s"]),
    }


def storms(
    *, sandboxes: int, rounds: int, vm: bool
) -> list[tuple[dict[str, float], dict[str, float]]]:
    token = secrets.token_urlsafe(32)
    out = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-cni-plugin-") as tmp,
        agent_process(token=token, pool_id=POOL_ID) as agent,
    ):
        folder = Path(tmp)
        token_file = folder / "token"
        token_file.write_text(token)
        os.chmod(token_file, 0o600)
        for k in range(rounds):
            # In turn, the order flipped each round: neither always runs on a warmer host.
            order = (False, True) if k % 2 == 0 else (True, False)
            got = {}
            for wrapped in order:
                got[wrapped] = _storm(
                    folder,
                    f"r{k}-{'wrapped' if wrapped else 'plain'}",
                    url=agent.url,
                    token_file=token_file,
                    sandboxes=sandboxes,
                    vm=vm,
                    wrapped=wrapped,
                )
                print(
                    f"round {k} {'wrapped' if wrapped else 'plain'}: {json.dumps(got[wrapped])}",
                    file=sys.stderr,
                )
            out.append((got[False], got[True]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-vm", dest="vm", action="store_false")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-cni-exec-") as tmp:
        bare = bare_exec(args.repeats, Path(tmp))
    print(table_header())
    for name, what in (
        ("frontend VERSION", "VERSION exec: front end (→ python -I -S)"),
        ("launcher VERSION", "VERSION exec: -I -S launcher"),
        ("console VERSION", "VERSION exec: pip console script"),
        ("frontend ADD", "no-agent ADD: compiled front end"),
        ("launcher ADD", "no-agent ADD: -I -S launcher"),
        ("console ADD", "no-agent ADD: pip console script"),
    ):
        ratio = Figure(
            tuple(p / b for p, b in zip(bare[name].samples, bare["bridge"].samples, strict=True))
        )
        print(row(what, bare[name].show(), "bridge VERSION", bare["bridge"].show(), ratio, "-"))
    pairs = storms(sandboxes=args.sandboxes, rounds=args.rounds, vm=args.vm)
    plain_add = Figure(tuple(p["bridge_add_s"] for p, _ in pairs))
    wrapped_add = Figure(tuple(w["plugin_add_s"] for _, w in pairs))
    delegate_add = Figure(tuple(w["bridge_add_s"] for _, w in pairs))
    add_ratio = Figure(tuple(w["plugin_add_s"] / p["bridge_add_s"] for p, w in pairs))
    print(
        row(
            f"median CNI ADD, {args.sandboxes}-sandbox storm",
            wrapped_add.show() + " through bootstorm-cni",
            "bridge alone",
            plain_add.show(),
            add_ratio,
            "<= 1.10",
        )
    )
    print(
        row(
            "  of which its delegate bridge",
            delegate_add.show(),
            "bridge alone",
            plain_add.show(),
            Figure(tuple(w["bridge_add_s"] / p["bridge_add_s"] for p, w in pairs)),
            "-",
        )
    )
    mk_plain = Figure(tuple(p["makespan_s"] for p, _ in pairs))
    mk_wrapped = Figure(tuple(w["makespan_s"] for _, w in pairs))
    print(
        row(
            "makespan",
            mk_wrapped.show(scale=1, unit="s") + " wrapped",
            "plain",
            mk_plain.show(scale=1, unit="s"),
            Figure(tuple(w["makespan_s"] / p["makespan_s"] for p, w in pairs)),
            "-",
        )
    )


if __name__ == "__main__":
    main()
