"""In what order does a real kernel hand RTNL to tasks that queue for it?

The model's kernel mutexes hand over in FIFO order by default
(``costs.mutex_wake_s: 0``); Linux mutexes do not: a release wakes the first
sleeper, and until it runs any task already running (an optimistic spinner,
or the releaser coming back for its next operation) may take the lock. The
docs/fidelity.md's "Why S0-5, S0-8 and S0-13 miss" turns on that difference. This
measures it on this host's kernel.

``N`` processes, each in a network namespace of its own (made by
``unshare``, gone when the process exits), wait at a barrier and then create
``M`` veth pairs each, one ``RTM_NEWLINK`` at a time: every creation takes
RTNL once. Each process stamps every acknowledgement (``CLOCK_MONOTONIC``).
Two figures read the hand-over order off the stamps:

- **runs**: of the creations that completed while at least two processes
  still had work, the share that followed one by the same process. Strict
  FIFO hand-off among processes that queue again at once gives about 0; a
  lock that lets the releaser take it again gives up to 1;
- **spread**: how far apart the processes finish, as a share of the storm
  (first finisher to last over start to last). FIFO round-robin makes them
  finish together (about ``1/M``); an unfair lock spreads them out.

- **lag**: the fewest creations any process had completed at half the
  storm's time, as a share of its ``M`` (FIFO round-robin: about 0.5).

Each is set beside the same storm in the model's kernel, FIFO and with the
Linux-style wake-up (``wake_s`` 50 us, docs/fidelity.md's experiment), the single
process's time per creation taken as the RTNL hold and 10 us as the gap
between creations (the return to user space and the next send; below the
wake-up time the figures hardly depend on it). Last, an order-only toy
(:func:`steal_then_handoff`): FIFO, except that the releaser keeps the lock
with the chance ``q`` that gives the measured runs.

Run (root; C compiler): ``python experiments/bench_rtnl_fairness.py [NxM ...] [runs]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _cc import build_c

_C_SOURCE = r"""
#define _GNU_SOURCE
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}

struct req { struct nlmsghdr n; struct ifinfomsg i; char buf[512]; };

static struct rtattr *add(struct nlmsghdr *n, int type, const void *data, int len) {
    struct rtattr *a = (struct rtattr *)((char *)n + NLMSG_ALIGN(n->nlmsg_len));
    a->rta_type = type; a->rta_len = RTA_LENGTH(len);
    if (len) memcpy(RTA_DATA(a), data, len);
    n->nlmsg_len = NLMSG_ALIGN(n->nlmsg_len) + RTA_ALIGN(a->rta_len);
    return a;
}
static void end(struct nlmsghdr *n, struct rtattr *a) {
    a->rta_len = (char *)n + NLMSG_ALIGN(n->nlmsg_len) - (char *)a;
}

/* Create veth pair bstv<k>/bstp<k> in this process's namespace; 0 on success. */
static int veth(int fd, int k, unsigned seq) {
    struct req r; memset(&r, 0, sizeof r);
    char name[16], peer[16];
    snprintf(name, sizeof name, "bstv%d", k); snprintf(peer, sizeof peer, "bstp%d", k);
    r.n.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
    r.n.nlmsg_type = RTM_NEWLINK;
    r.n.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
    r.n.nlmsg_seq = seq;
    r.i.ifi_family = AF_UNSPEC;
    add(&r.n, IFLA_IFNAME, name, strlen(name) + 1);
    struct rtattr *info = add(&r.n, IFLA_LINKINFO, 0, 0);
    add(&r.n, IFLA_INFO_KIND, "veth", 5);
    struct rtattr *data = add(&r.n, IFLA_INFO_DATA, 0, 0);
    struct rtattr *p = add(&r.n, VETH_INFO_PEER, 0, 0);
    r.n.nlmsg_len += sizeof(struct ifinfomsg);  /* the peer's (empty) ifinfomsg */
    add(&r.n, IFLA_IFNAME, peer, strlen(peer) + 1);
    end(&r.n, p); end(&r.n, data); end(&r.n, info);
    if (send(fd, &r, r.n.nlmsg_len, 0) < 0) return -1;
    char ack[1024];
    int len = recv(fd, ack, sizeof ack, 0);
    if (len < 0) return -1;
    struct nlmsghdr *h = (struct nlmsghdr *)ack;
    if (h->nlmsg_type != NLMSG_ERROR) return -1;
    return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
}

int main(int argc, char **argv) {
    int n = atoi(argv[1]), m = atoi(argv[2]);
    int go[2], out[2];
    if (pipe(go) || pipe(out)) return 1;
    for (int w = 0; w < n; w++) {
        if (fork() == 0) {
            close(go[1]);
            if (unshare(CLONE_NEWNET)) { perror("unshare"); _exit(2); }
            int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
            if (fd < 0) _exit(3);
            double *stamp = malloc(sizeof(double) * (m + 1));
            char c;
            if (read(go[0], &c, 1) != 1) _exit(4);  /* the barrier */
            stamp[0] = now();
            for (int k = 0; k < m; k++) {
                int err = veth(fd, k, k + 1);
                if (err) { fprintf(stderr, "veth %d: %d\n", k, err); _exit(5); }
                stamp[k + 1] = now();
            }
            /* One line per process, written at once (under PIPE_BUF it is atomic). */
            char line[65536]; int at = snprintf(line, sizeof line, "%d", w);
            for (int k = 0; k <= m; k++)
                at += snprintf(line + at, sizeof line - at, " %.9f", stamp[k]);
            line[at++] = '\n';
            if (write(out[1], line, at) != at) _exit(6);
            _exit(0);
        }
    }
    close(go[0]); close(out[1]);
    usleep(200000);  /* every child has unshared and waits at the barrier */
    for (int w = 0; w < n; w++) if (write(go[1], "g", 1) != 1) return 1;
    char buf[1 << 16]; int len;
    while ((len = read(out[0], buf, sizeof buf)) > 0) fwrite(buf, 1, len, stdout);
    int status, bad = 0;
    while (wait(&status) > 0) if (!WIFEXITED(status) || WEXITSTATUS(status)) bad = 1;
    return bad;
}
"""


TOY_DRAWS = 20
"""The order-only toy's figures are means over this many draws."""


@dataclass(frozen=True, slots=True)
class Storm:
    """One measured storm: ``stamps[w]`` = start, then each completion, of process w."""

    stamps: list[np.ndarray]

    @property
    def per_op_s(self) -> float:
        return float(np.mean([np.diff(s).mean() for s in self.stamps]))


def runs_share(stamps: list[np.ndarray]) -> float:
    """Of the completions while two or more processes still had work, the share
    that followed a completion by the same process."""
    done = sorted((t, w) for w, s in enumerate(stamps) for t in s[1:])
    finish = sorted(s[-1] for s in stamps)
    second_last = finish[-2] if len(finish) > 1 else finish[-1]
    same = total = 0
    for (t, w), (_, prev) in zip(done[1:], done[:-1], strict=True):
        if t >= second_last:
            break
        total += 1
        same += w == prev
    return same / total if total else float("nan")


def spread(stamps: list[np.ndarray]) -> float:
    start = min(float(s[0]) for s in stamps)
    ends = [float(s[-1]) for s in stamps]
    return (max(ends) - min(ends)) / (max(ends) - start)


def lag(stamps: list[np.ndarray]) -> float:
    """The fewest creations done by half the storm's time, per creation asked."""
    start = min(s[0] for s in stamps)
    half = start + (max(s[-1] for s in stamps) - start) / 2.0
    return min(int((s[1:] <= half).sum()) for s in stamps) / (len(stamps[0]) - 1)


def figures(stamps: list[np.ndarray]) -> tuple[float, float, float]:
    return runs_share(stamps), spread(stamps), lag(stamps)


def modelled(n: int, m: int, hold_s: float, *, wake_s: float, gap_s: float = 10e-6) -> Storm:
    """The same storm in the model's kernel on this host's 2 cores (RTNL spins
    50 us before it sleeps, as paper-000 has it; service times vary by 10%)."""
    from bootstorm.simulator import (
        Cpu,
        Hold,
        LockSpec,
        MachineSpec,
        Stage,
        compile_program,
        run_program,
    )

    ops = tuple(x for _ in range(m) for x in (Hold("rtnl", (Cpu(hold_s),)), Cpu(gap_s)))
    program = compile_program(
        [(Stage("creations", ops),)] * n,
        machine=MachineSpec(cores=2),
        locks=[LockSpec(name="rtnl", spin_s=50e-6, wake_s=wake_s)],
        service_cv=0.1,
        rng=np.random.default_rng(0),
    )
    frame = run_program(program, record=True).recording.lock_frame()
    holds = frame[(frame.lock == "rtnl") & (frame.what == "hold")]
    return Storm(
        [
            np.concatenate([[0.0], np.sort(holds[holds.sandbox == w].end_s.to_numpy())])
            for w in range(n)
        ]
    )


def measure(binary: Path, n: int, m: int) -> Storm:
    out = subprocess.run([str(binary), str(n), str(m)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"storm of {n} x {m} failed: {out.stderr.strip()}")
    stamps: list[np.ndarray] = [np.zeros(0)] * n
    for line in out.stdout.splitlines():
        w, *ts = line.split()
        stamps[int(w)] = np.array([float(t) for t in ts])
    return Storm(stamps)


def build(workdir: Path) -> Path:
    return build_c(_C_SOURCE, workdir, "rtnl_fairness")


def steal_then_handoff(n: int, m: int, q: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Order only, no time: FIFO hand-over, except that the releaser takes the
    lock again with probability ``q`` unless it has just done so (Linux's
    hand-off flag: the woken waiter that lost once is handed the next
    release). Every hold takes one unit, ±10%. Its runs share is q / (1 + q)."""
    left = [m] * n
    stamps = [[0.0] for _ in range(n)]
    waiting = list(range(1, n))
    owner, stole, t = 0, False, 0.0
    while True:
        t += 1.0 + 0.1 * float(rng.standard_normal())
        left[owner] -= 1
        stamps[owner].append(t)
        if left[owner] and waiting and not stole and rng.random() < q:
            stole = True
            continue
        stole = False
        if left[owner]:
            waiting.append(owner)
        if not waiting:
            return [np.array(s) for s in stamps]
        owner = waiting.pop(0)


def _row(label: str, per_op: str, stamps: list[np.ndarray]) -> str:
    runs, apart, behind = figures(stamps)
    return f"{label:>24} {per_op:>9} {runs:6.2f} {apart:7.2f} {behind:6.2f}"


def main(argv: list[str]) -> None:
    if os.geteuid() != 0:
        raise SystemExit("needs root (unshare CLONE_NEWNET)")
    sizes = [(int(a), int(b)) for a, b in (x.split("x") for x in argv[:-1])] if argv else []
    repeats = int(argv[-1]) if argv else 3
    sizes = sizes or [(4, 100), (16, 40), (64, 20), (128, 10)]
    with tempfile.TemporaryDirectory(prefix="bst-rtnl-") as tmp:
        binary = build(Path(tmp))
        hold_s = measure(binary, 1, 100).per_op_s
        print(f"one process alone: {hold_s * 1e6:.0f} us per veth creation")
        print(f"{'storm':>24} {'per op us':>9} {'runs':>6} {'spread':>7} {'lag':>6}")
        rng = np.random.default_rng(0)
        for n, m in sizes:
            measured_runs = []
            for r in range(repeats):
                storm = measure(binary, n, m)
                start = min(s[0] for s in storm.stamps)
                wall = max(s[-1] for s in storm.stamps) - start
                measured_runs.append(runs_share(storm.stamps))
                print(_row(f"{n} x {m}, run {r}", f"{wall / (n * m) * 1e6:.0f}", storm.stamps))
            for label, wake_s in (("model FIFO", 0.0), ("model wake 50 us", 50e-6)):
                model = modelled(n, m, hold_s, wake_s=wake_s)
                wall = max(s[-1] for s in model.stamps)
                print(_row(label, f"{wall / (n * m) * 1e6:.0f}", model.stamps))
            runs = float(np.mean(measured_runs))
            q = runs / (1.0 - runs)  # the steal chance that gives the measured runs
            toys = [figures(steal_then_handoff(n, m, q, rng)) for _ in range(TOY_DRAWS)]
            runs, apart, behind = np.mean(toys, axis=0)
            label = f"order-only, q = {q:.2f}"
            print(f"{label:>24} {'-':>9} {runs:6.2f} {apart:7.2f} {behind:6.2f}")
        print(
            "\nruns: share of hand-overs back to the same process while others wait; "
            "spread: first to last finish / storm; lag: fewest creations done at half time / M"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
