"""What net_prio costs a cgroup mkdir, and how it grows with init_net's netdevs.

The model's Cgroup stage (``models.cni.cgroup_steps``) holds RTNL inside
cgroup_mutex while net_prio onlines the new cgroup: ``cgrp_css_online``
walks every netdev of ``init_net`` under ``rtnl_lock``. paper-000 fits that
walk's cost per netdev (``costs.netprio_per_netdev_s``) to seed 000's fit
rows, so veth-based CNIs, which leave one host-side netdev per pod in
``init_net``, make every later mkdir longer. This measures the walk on this
host's kernel.

In a mount namespace of its own, a small C program mounts a cgroup v1
hierarchy with net_prio alone, makes ``K`` cgroups one after another (as a
storm's sandboxes do), writes each one's ``net_prio.ifpriomap`` (the
ifpriomap write takes RTNL too), removes them and unmounts. It stamps every
mkdir and write. The Python driver repeats that with ``N`` netdevs in
``init_net``: veth pairs named ``bstnp*``, down, with no address, deleted
at the end. The slope of the median mkdir over ``N`` is the walk's cost per
netdev; its intercept is a mkdir with net_prio on an empty host.

The hierarchy must be free when the bench starts (net_prio in no mounted v1
hierarchy: ``/proc/cgroups`` shows hierarchy 0). A v1 hierarchy outlives its
unmount while a removed child is still being freed, so the bench waits for
that and mounts and unmounts once more if needed, leaving net_prio unbound as
it found it.

Run (root, cgroup v1 net_prio, a C compiler):
``python experiments/bench_netprio.py [--netdevs 0 500 1000 2000] [--cgroups 400] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _cc import build_c

PREFIX = "bstnp"

_C_SOURCE = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
/* netprio MOUNTPOINT K: prints one line per cgroup: mkdir_s write_s */
int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: netprio MOUNTPOINT K\n"); return 2; }
    const char *root = argv[1];
    int k = atoi(argv[2]);
    if (unshare(CLONE_NEWNS) || mount(0, "/", 0, MS_REC | MS_PRIVATE, 0)) {
        perror("mount namespace"); return 1;
    }
    if (mount("bstnp", root, "cgroup", 0, "net_prio")) { perror("mount net_prio"); return 1; }
    char path[512], file[600];
    double *mk = calloc(k, sizeof *mk), *wr = calloc(k, sizeof *wr);
    int made = 0, rc = 0;
    for (; made < k; made++) {
        snprintf(path, sizeof path, "%s/bstnp-%d", root, made);
        double t = now();
        if (mkdir(path, 0755)) { perror("mkdir"); rc = 1; break; }
        mk[made] = now() - t;
        snprintf(file, sizeof file, "%s/net_prio.ifpriomap", path);
        int fd = open(file, O_WRONLY);
        t = now();
        if (fd < 0 || write(fd, "lo 0", 4) != 4) { perror("ifpriomap"); rc = 1; }
        wr[made] = now() - t;
        if (fd >= 0) close(fd);
        if (rc) { made++; break; }
    }
    for (int i = made - 1; i >= 0; i--) {
        snprintf(path, sizeof path, "%s/bstnp-%d", root, i);
        if (rmdir(path)) { perror("rmdir"); rc = 1; }
    }
    for (int i = 0; i < made && !rc; i++) printf("%.9f %.9f\n", mk[i], wr[i]);
    for (int tries = 0; umount(root) && tries < 100; tries++) usleep(10000);
    return rc;
}
"""


def netprio_hierarchy() -> tuple[int, int]:
    """(hierarchy id, cgroups) of net_prio in ``/proc/cgroups``."""
    for line in Path("/proc/cgroups").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "net_prio":
            return int(fields[1]), int(fields[2])
    raise SystemExit("this kernel has no net_prio controller (CONFIG_CGROUP_NET_PRIO)")


def _wait_for(done: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def release_hierarchy(mountpoint: Path) -> None:
    """Leave net_prio unbound: wait until the children are freed, then mount
    and unmount the hierarchy once more if it outlived its unmount (the
    kernel frees an unmounted hierarchy asynchronously)."""
    _wait_for(lambda: netprio_hierarchy()[0] == 0 or netprio_hierarchy()[1] == 1)
    if _wait_for(lambda: netprio_hierarchy()[0] == 0, timeout_s=1.0):
        return
    script = f"mount -t cgroup -o net_prio bstnp {mountpoint} && umount {mountpoint}"
    subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], check=True)
    if not _wait_for(lambda: netprio_hierarchy()[0] == 0):
        print("warning: net_prio is still bound to a v1 hierarchy", file=sys.stderr)


def set_netdevs(target: int, made: list[str]) -> None:
    """Add veth pairs (two netdevs each) until ``init_net`` has ``target`` of ours."""
    lines = []
    while 2 * len(made) < target:
        name = f"{PREFIX}{len(made)}"
        lines.append(f"link add {name}a type veth peer name {name}b")
        made.append(name)
    if lines:
        subprocess.run(["ip", "-batch", "-"], input="\n".join(lines) + "\n", text=True, check=True)


def delete_netdevs(made: list[str]) -> None:
    lines = [f"link del {name}a" for name in made]
    if lines:
        subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n", text=True)
    made.clear()


def count_netdevs() -> int:
    return len(os.listdir("/sys/class/net"))


def measure(binary: Path, mountpoint: Path, cgroups: int) -> np.ndarray:
    """(mkdir_s, write_s) per cgroup, in order."""
    out = subprocess.run(
        [str(binary), str(mountpoint), str(cgroups)], capture_output=True, text=True, check=False
    )
    release_hierarchy(mountpoint)
    if out.returncode != 0:
        raise RuntimeError(f"net_prio run failed: {out.stderr.strip()}")
    return np.array([[float(x) for x in line.split()] for line in out.stdout.splitlines()])


def build(workdir: Path) -> Path:
    return build_c(_C_SOURCE, workdir, "netprio")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--netdevs", type=int, nargs="+", default=[0, 500, 1000, 2000])
    parser.add_argument("--cgroups", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root (mount, mkdir in a cgroup hierarchy, netdevs)")
    if netprio_hierarchy()[0] != 0:
        raise SystemExit("net_prio is mounted in a v1 hierarchy already: not touching it")
    made: list[str] = []
    base = count_netdevs()
    rows: list[tuple[int, float, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bst-netprio-") as tmp:
        binary = build(Path(tmp))
        mountpoint = Path(tmp) / "hierarchy"
        mountpoint.mkdir()
        try:
            for target in sorted(args.netdevs):
                set_netdevs(target, made)
                netdevs = count_netdevs()
                runs = [measure(binary, mountpoint, args.cgroups) for _ in range(args.runs)]
                times = np.concatenate(runs)
                first, last = (
                    np.concatenate([r[:50, 0] for r in runs]),
                    np.concatenate([r[-50:, 0] for r in runs]),
                )
                rows.append(
                    (
                        netdevs,
                        float(np.median(times[:, 0])),
                        float(np.median(first)),
                        float(np.median(last)),
                        float(np.median(times[:, 1])),
                    )
                )
        finally:
            delete_netdevs(made)
            release_hierarchy(mountpoint)
    print(f"{base} netdevs in init_net before; {args.cgroups} cgroups x {args.runs} runs per row")
    print(f"{'netdevs':>8} {'mkdir us':>9} {'first 50':>9} {'last 50':>8} {'ifpriomap us':>12}")
    for netdevs, mkdir_s, first_s, last_s, write_s in rows:
        print(
            f"{netdevs:>8} {mkdir_s * 1e6:9.1f} {first_s * 1e6:9.1f} {last_s * 1e6:8.1f} "
            f"{write_s * 1e6:12.2f}"
        )
    if len(rows) > 1:
        x = np.array([r[0] for r in rows], dtype=float)
        y = np.array([r[1] for r in rows])
        slope, intercept = np.polyfit(x, y, 1)
        print(
            f"\nmedian mkdir = {intercept * 1e6:.1f} us + {slope * 1e9:.1f} ns per netdev "
            "in init_net (least squares over the rows)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
