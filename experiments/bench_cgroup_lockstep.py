"""Do a storm's cgroup mkdirs and attaches run in lockstep on a real kernel?

Every sandbox takes cgroup_mutex twice in the model's Cgroup stage: the mkdir
of its cgroup (net_prio onlines under it) and the attach of its tasks
(``models.cni.cgroup_steps``). With the model's FIFO mutexes and a storm that
arrives at once, every attach queues behind every mkdir: all N mkdirs, then
all N attaches. docs/fidelity.md's "why S0-5, S0-8 and S0-13 miss" blames that
lockstep. This measures it.

In a mount namespace of its own, a small C program mounts a cgroup v1
hierarchy with net_prio alone (as ``bench_netprio.py``) and forks N
children that wait at a barrier, then each makes its cgroup (``bstls-i``) and
moves itself into it (a write to its ``cgroup.procs``): both take
cgroup_mutex. Each stamps the end of both (``CLOCK_MONOTONIC``); the parent
reaps them, removes the cgroups and unmounts. Figures:

- **interleaved**: the share of attaches that end before the last mkdir
  does. FIFO lockstep gives 0; a mutex that lets the releaser take it again
  gives about its steal chance or more;
- **gap**: the median, over children, of the operations by others that end
  between a child's mkdir and its attach, per child (FIFO: about 1, all the
  others' mkdirs then the attaches before its own);
- **attach** and **hand-over**: the median attach in the storm, and how long
  the lock lies idle after an attach until the next child's mkdir is done,
  less a lone mkdir (the wake-up of a sleeping waiter: what the model's
  ``wake_s`` stands for);

beside the same storm in the model's kernel (FIFO, on this host's cores,
the lone child's mkdir and the storm's attach as holds, 10 us between them).

Run (root, cgroup v1 net_prio free, a C compiler):
``python experiments/bench_cgroup_lockstep.py [--children 16 64 256] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _cc import build_c
from bench_netprio import netprio_hierarchy, release_hierarchy

_C_SOURCE = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
/* lockstep MOUNTPOINT N: prints one line per child: start mkdir_end attach_end */
int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: lockstep MOUNTPOINT N\n"); return 2; }
    const char *root = argv[1];
    int n = atoi(argv[2]), rc = 0;
    if (unshare(CLONE_NEWNS) || mount(0, "/", 0, MS_REC | MS_PRIVATE, 0)) {
        perror("mount namespace"); return 1;
    }
    if (mount("bstls", root, "cgroup", 0, "net_prio")) { perror("mount net_prio"); return 1; }
    double *t = mmap(0, sizeof(double) * 3 * n, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int gate[2];
    if (t == MAP_FAILED || pipe(gate)) { perror("setup"); return 1; }
    char path[512], procs[600], pid[32];
    int forked = 0;
    for (; forked < n; forked++) {
        pid_t child = fork();
        if (child < 0) { perror("fork"); rc = 1; break; }
        if (child == 0) {
            char c;
            close(gate[1]);
            if (read(gate[0], &c, 1) < 0) _exit(1);  /* EOF: the parent opened the gate */
            int i = forked;
            snprintf(path, sizeof path, "%s/bstls-%d", root, i);
            snprintf(procs, sizeof procs, "%s/cgroup.procs", path);
            int len = snprintf(pid, sizeof pid, "%d", (int)getpid());
            t[3 * i] = now();
            if (mkdir(path, 0755)) _exit(1);
            t[3 * i + 1] = now();
            int fd = open(procs, O_WRONLY);
            if (fd < 0 || write(fd, pid, len) != len) _exit(1);
            t[3 * i + 2] = now();
            _exit(0);
        }
    }
    close(gate[0]);
    usleep(200000);  /* let every child reach the gate */
    close(gate[1]);
    for (int i = 0; i < forked; i++) {
        int status;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) rc = 1;
    }
    for (int i = 0; i < forked; i++) {
        snprintf(path, sizeof path, "%s/bstls-%d", root, i);
        rmdir(path);
    }
    if (!rc) for (int i = 0; i < n; i++) printf("%.9f %.9f %.9f\n", t[3*i], t[3*i+1], t[3*i+2]);
    for (int tries = 0; umount(root) && tries < 100; tries++) usleep(10000);
    if (rc) fprintf(stderr, "a child failed (mkdir or attach)\n");
    return rc;
}
"""


def figures(stamps: np.ndarray) -> tuple[float, float]:
    """(interleaved, gap) of one storm; ``stamps[i]`` = start, mkdir end, attach end."""
    n = len(stamps)
    mkdir_end, attach_end = stamps[:, 1], stamps[:, 2]
    interleaved = float((attach_end < mkdir_end.max()).mean())
    ends = np.sort(np.concatenate([mkdir_end, attach_end]))
    between = np.searchsorted(ends, attach_end) - np.searchsorted(ends, mkdir_end) - 1
    return interleaved, float(np.median(between)) / n


def handover(stamps: np.ndarray, mkdir_s: float) -> tuple[float, float]:
    """(median attach in the storm, median hand-over delay) of one storm.

    The attach: over children whose attach directly follows their mkdir.
    The hand-over: the time from an attach's end to the end of the next
    operation, when that is another child's mkdir, less a lone mkdir: how
    long the lock lies idle while the next waiter wakes up.
    """
    ends = np.concatenate([stamps[:, 1], stamps[:, 2]])
    kind = np.concatenate([np.zeros(len(stamps)), np.ones(len(stamps))])  # 0 mkdir, 1 attach
    order = np.argsort(ends)
    ends, kind = ends[order], kind[order]
    after_attach = (kind[:-1] == 1) & (kind[1:] == 0)
    idle = ends[1:][after_attach] - ends[:-1][after_attach] - mkdir_s
    attach = stamps[:, 2] - stamps[:, 1]
    return float(np.median(attach)), float(np.median(idle)) if idle.size else float("nan")


def measure(binary: Path, mountpoint: Path, children: int) -> np.ndarray:
    out = subprocess.run(
        [str(binary), str(mountpoint), str(children)], capture_output=True, text=True, check=False
    )
    release_hierarchy(mountpoint)
    if out.returncode != 0:
        raise RuntimeError(f"storm of {children} failed: {out.stderr.strip()}")
    return np.array([[float(x) for x in line.split()] for line in out.stdout.splitlines()])


def modelled(children: int, mkdir_s: float, attach_s: float, gap_s: float = 10e-6) -> np.ndarray:
    """The same storm in the model's kernel: FIFO cgroup_mutex on this host's cores."""
    from bootstorm.simulator import (
        Cpu,
        Hold,
        LockSpec,
        MachineSpec,
        Stage,
        compile_program,
        run_program,
    )

    ops = (
        Hold("cgroup_mutex", (Cpu(mkdir_s),)),
        Cpu(gap_s),
        Hold("cgroup_mutex", (Cpu(attach_s),)),
    )
    program = compile_program(
        [(Stage("Cgroup", ops),)] * children,
        machine=MachineSpec(cores=os.cpu_count() or 1),
        locks=[LockSpec(name="cgroup_mutex")],
        service_cv=0.1,
        rng=np.random.default_rng(0),
    )
    frame = run_program(program, record=True).recording.lock_frame()
    holds = frame[(frame.lock == "cgroup_mutex") & (frame.what == "hold")]
    out = np.zeros((children, 3))
    for sandbox, group in holds.groupby("sandbox"):
        ends = np.sort(group.end_s.to_numpy())
        out[int(sandbox)] = (0.0, ends[0], ends[1])
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root (mount, cgroups)")
    if netprio_hierarchy()[0] != 0:
        raise SystemExit("net_prio is mounted in a v1 hierarchy already: not touching it")
    with tempfile.TemporaryDirectory(prefix="bst-lockstep-") as tmp:
        binary = build_c(_C_SOURCE, Path(tmp), "lockstep")
        mountpoint = Path(tmp) / "hierarchy"
        mountpoint.mkdir()
        try:
            alone = np.concatenate([measure(binary, mountpoint, 1) for _ in range(20)])
            mkdir_s = float(np.median(alone[:, 1] - alone[:, 0]))
            attach_s = float(np.median(alone[:, 2] - alone[:, 1]))
            print(f"one child alone: mkdir {mkdir_s * 1e6:.1f} us, attach {attach_s * 1e6:.1f} us")
            head = f"{'storm':>18} {'interleaved':>11} {'gap':>6}"
            print(f"{head} {'attach us':>9} {'hand-over us':>12}")
            for n in args.children:
                attaches = []
                for r in range(args.runs):
                    stamps = measure(binary, mountpoint, n)
                    inter, gap = figures(stamps)
                    attach, idle = handover(stamps, mkdir_s)
                    attaches.append(attach)
                    print(
                        f"{f'{n} children, run {r}':>18} {inter:11.2f} {gap:6.2f} "
                        f"{attach * 1e6:9.0f} {idle * 1e6:12.0f}"
                    )
                # The lone attach waits an RCU grace period (the first writer of
                # cgroup_threadgroup_rwsem); in a storm they do not: the storm's.
                inter, gap = figures(modelled(n, mkdir_s, float(np.median(attaches))))
                print(f"{'model FIFO':>18} {inter:11.2f} {gap:6.2f}")
        finally:
            release_hierarchy(mountpoint)
    print(
        "\ninterleaved: attaches that end before the last mkdir; gap: median operations by "
        "others between a child's mkdir and its attach, per child (FIFO lockstep: 0 and 1)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
