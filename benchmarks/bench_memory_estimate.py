"""How much memory a storm's command takes beyond the estimate that refuses too large ones.

``models/compile.py`` refuses a storm whose estimated memory times
``MEMORY_MARGIN`` exceeds what the machine has; this prints, per CNI and size,
the peak RSS growth of ``simulate --json`` against the estimate, so the margin
can be checked (a peak RSS is noisy under load: a benchmark, not a test).

    python benchmarks/bench_memory_estimate.py [--sandboxes 10000 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bootstorm.models.compile import MEMORY_MARGIN

_MEASURE = """
import contextlib, io, json, resource, sys
from bootstorm.cli import main
from bootstorm.models import Scenario, estimate_memory

def run(n):
    with contextlib.redirect_stdout(io.StringIO()):
        main(["simulate", "--cni", sys.argv[1], "--sandboxes", str(n), "--executor",
              "compiled", "--json"])

run(10)  # imports, the kernel's JIT and the what-if machinery in place
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
n = int(sys.argv[2])
run(n)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps({"grew": grew, "estimate": estimate_memory(Scenario(cni=sys.argv[1],
      sandboxes=n)).total_bytes}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args()
    print(
        f"{'cni':8} {'sandboxes':>10} {'B/sandbox':>10} {'x estimate':>10}  margin {MEMORY_MARGIN}"
    )
    for cni in ("ipvtap", "veth"):
        for n in args.sandboxes:
            out = subprocess.run(
                [sys.executable, "-c", _MEASURE, cni, str(n)],
                capture_output=True,
                text=True,
                timeout=900,
                check=True,
            )
            sizes = json.loads(out.stdout.strip().splitlines()[-1])
            ratio = sizes["grew"] / sizes["estimate"]
            print(f"{cni:8} {n:>10} {sizes['grew'] / n:>10.0f} {ratio:>10.2f}")


if __name__ == "__main__":
    main()
