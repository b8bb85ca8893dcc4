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
- **Storms**: ``--rounds`` rounds of three ``testbed run --runtime cni``
  storms of ``--sandboxes`` sandboxes, through one agent process, the order
  rotated each round: plain; every sandbox through ``--cni-wrapper
  bootstorm-cni`` (the testbed installs the compiled front end into the
  run's own directory); and one sandbox in two through it
  (``--cni-wrapper-every 2``), the others exec'ing the bridge themselves.
  From each trace: the median CNI ADD of the plain bridge, of
  ``bootstorm-cni`` (the whole ADD as the runtime sees it) and of its
  delegate; the makespan.

Goal (issue 34): the wrapped ADD's median within +10% of the plain bridge
ADD's median. Two readings, both printed: within one storm (the half
storm: the same host, the same moment, the same queue; the issue's "in one
run, interleaved with and without it") and across the round's two other
storms (which adds the host's storm-to-storm swing, as large as the goal
here, and what the wrapped storm's load does to every ADD). Printed beside
the figures, never asserted.
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
from bootstorm.validation.testbed import wrapper_split

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


#: The storms of a round: plain, every sandbox wrapped, one in two wrapped.
KINDS = ("plain", "wrapped", "half")


def _storm(
    folder: Path, tag: str, *, url: str, token_file: Path, sandboxes: int, vm: bool, kind: str
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
    if kind != "plain":
        argv += ["--cni-wrapper", "bootstorm-cni"]
    if kind == "half":
        argv += ["--cni-wrapper-every", "2"]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    summary = json.loads(done.stdout)
    execs = read_trace(trace).execs
    adds = [e.end_s - e.start_s for e in execs if e.stage == "AddCNI" and e.command == "ADD"]
    split = wrapper_split(execs)
    if kind == "plain":
        bridge_add_s, plugin_add_s = statistics.median(adds), float("nan")
    else:
        assert split is not None, f"{tag}: no ADD went through bootstorm-cni"
        # Wholly wrapped: its delegates; half: the sandboxes that exec'd the bridge.
        plain_add_s = split.plain_add_s if split.plain_add_s is not None else float("nan")
        bridge_add_s = split.delegate_s if kind == "wrapped" else plain_add_s
        plugin_add_s = split.wrapped_add_s
    return {
        "bridge_add_s": bridge_add_s,
        "plugin_add_s": plugin_add_s,
        "makespan_s": float(summary["makespan_s"]),
    }


def storms(*, sandboxes: int, rounds: int, vm: bool) -> list[dict[str, dict[str, float]]]:
    """``rounds`` rounds of the three storms of :data:`KINDS`, the order
    rotated each round so that none always runs on a warmer host."""
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
            got = {}
            for kind in KINDS[k % 3 :] + KINDS[: k % 3]:
                got[kind] = _storm(
                    folder,
                    f"r{k}-{kind}",
                    url=agent.url,
                    token_file=token_file,
                    sandboxes=sandboxes,
                    vm=vm,
                    kind=kind,
                )
                print(f"round {k} {kind}: {json.dumps(got[kind])}", file=sys.stderr)
            out.append(got)
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
        against = Figure(
            tuple(p / b for p, b in zip(bare[name].samples, bare["bridge"].samples, strict=True))
        )
        print(row(what, bare[name].show(), "bridge VERSION", bare["bridge"].show(), against, "-"))
    rounds = storms(sandboxes=args.sandboxes, rounds=args.rounds, vm=args.vm)

    def figure(kind: str, key: str, scale: float = 1.0) -> Figure:
        return Figure(tuple(r[kind][key] * scale for r in rounds))

    def ratio(num: tuple[str, str], den: tuple[str, str]) -> Figure:
        return Figure(tuple(r[num[0]][num[1]] / r[den[0]][den[1]] for r in rounds))

    plain_add = figure("plain", "bridge_add_s")
    print(
        row(
            f"median CNI ADD, {args.sandboxes}-sandbox storm, one in two through bootstorm-cni",
            figure("half", "plugin_add_s").show() + " through it",
            "bridge alone, the same storm",
            figure("half", "bridge_add_s").show(),
            ratio(("half", "plugin_add_s"), ("half", "bridge_add_s")),
            "<= 1.10",
        )
    )
    print(
        row(
            f"median CNI ADD, {args.sandboxes}-sandbox storm, all through bootstorm-cni",
            figure("wrapped", "plugin_add_s").show() + " through it",
            "bridge alone, a storm of its own",
            plain_add.show(),
            ratio(("wrapped", "plugin_add_s"), ("plain", "bridge_add_s")),
            "<= 1.10",
        )
    )
    print(
        row(
            "  of which its delegate bridge",
            figure("wrapped", "bridge_add_s").show(),
            "bridge alone, a storm of its own",
            plain_add.show(),
            ratio(("wrapped", "bridge_add_s"), ("plain", "bridge_add_s")),
            "-",
        )
    )
    print(
        row(
            "makespan, all through bootstorm-cni",
            figure("wrapped", "makespan_s").show(scale=1, unit="s"),
            "plain",
            figure("plain", "makespan_s").show(scale=1, unit="s"),
            ratio(("wrapped", "makespan_s"), ("plain", "makespan_s")),
            "-",
        )
    )


if __name__ == "__main__":
    main()
