"""What-if grids (size × CNI × memory × pools × seeds) run in parallel on Dask.

Each grid point is one storm; points are independent, so they go to Dask
workers as they are: a :class:`dask.distributed.LocalCluster` by default,
or a running scheduler by address. The results come back as one pandas
DataFrame, one row per point, in grid order. Dask is an optional extra
(``pip install 'bootstorm[sweep]'``); it is imported only here.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .._params import Each, InstanceOf, Interval, OneOf, Rules, short_repr, validate
from ..models import (
    CNI_NAMES,
    ConfigError,
    Profile,
    Scenario,
    full_pools,
    load_profile,
    scenario_pool_kinds,
)
from ..models.compile import check_memory
from ..simulator.executors import check_executor
from ._evaluate import run_scenario

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SweepGrid", "pools_for", "sweep"]

NONE, FULL = "none", "full"


def pools_for(spec: str, *, cni: str, sandboxes: int, tenants: int) -> dict[str, int]:
    """The pools one grid point gets from ``spec``: ``none``, ``full`` (every device
    kind of the CNI, one per sandbox; vPorts as the CNI shares them), or
    ``KIND=N,KIND=N``."""
    kinds = scenario_pool_kinds(cni)
    if spec == NONE:
        return {}
    if spec == FULL:
        full: dict[str, int] = full_pools(cni, sandboxes=sandboxes, tenants=tenants)
        return full
    out: dict[str, int] = {}
    for item in spec.split(","):
        kind, sep, count = item.partition("=")
        if not sep or not count.strip().isdigit():
            raise ConfigError(
                f"pool: expected none, full or KIND=N,..., but got {short_repr(spec)}"
            )
        if kind not in kinds:
            raise ConfigError(
                f"pool: {kind!r} is not a device kind of cni={cni!r} "
                f"({', '.join(kinds) or 'none'}); 'full' pools each CNI's own kinds"
            )
        out[kind] = int(count)
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepGrid:
    """The cross product of the given values over ``base``; an empty axis keeps
    the base scenario's value."""

    base: Scenario = field(default_factory=Scenario)
    sandboxes: tuple[int, ...] = ()
    cnis: tuple[str, ...] = ()
    memory_mib: tuple[int, ...] = ()
    pools: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()

    # Types first: SweepGrid(sandboxes=5) was a TypeError from the product.
    __rules__: ClassVar[Rules] = Rules(
        base=InstanceOf(Scenario, "a Scenario"),
        sandboxes=(InstanceOf((tuple, list), "a tuple of sandbox counts"), Each(Interval(int, 1))),
        cnis=(InstanceOf((tuple, list), "a tuple of CNI names"), Each(OneOf(CNI_NAMES))),
        memory_mib=(InstanceOf((tuple, list), "a tuple of MiB"), Each(Interval(int, 1))),
        pools=(InstanceOf((tuple, list), "a tuple of pool specs"), Each(InstanceOf(str, "a str"))),
        seeds=(InstanceOf((tuple, list), "a tuple of seeds"), Each(Interval(int, 0, 2**63 - 1))),
    )

    def __post_init__(self) -> None:
        validate(self)
        self.points()  # every point is validated before any is run

    def points(self) -> list[tuple[Scenario, str]]:
        """Every point as (scenario, pool spec), in grid order."""
        b = self.base
        out: list[tuple[Scenario, str]] = []
        for n, cni, mem, pool, seed in itertools.product(
            self.sandboxes or (b.sandboxes,),
            self.cnis or (b.cni,),
            self.memory_mib or (b.memory_mib,),
            self.pools or (NONE,),
            self.seeds or (b.seed,),
        ):
            tenants = min(b.tenants, n)
            pools = pools_for(pool, cni=cni, sandboxes=n, tenants=tenants)
            scenario = b.replace(
                sandboxes=n, cni=cni, memory_mib=mem, seed=seed, tenants=tenants, pools=pools
            )
            out.append((scenario, pool))
        return out


def run_point(
    index: int, scenario: Scenario, pool: str, executor: str = "compiled"
) -> dict[str, Any]:
    """One row of the sweep (runs on a Dask worker)."""
    r = run_scenario(scenario, executor=executor)
    return {
        "point": index,
        "sandboxes": scenario.sandboxes,
        "cni": scenario.cni,
        "memory_mib": scenario.memory_mib,
        "pools": pool,
        "seed": scenario.seed,
        "makespan_s": r.makespan_s,
        "mean_s": r.startup.mean,
        "p50_s": r.startup.p50,
        "p99_s": r.startup.p99,
        "busy_core_s": r.cpu.busy_core_s,
        "spin_core_s": r.cpu.spin_core_s,
        "pool_memory_mib": r.pool_memory_mib,
    }


def check_sweep(grid: SweepGrid) -> None:
    """Every point's profile and memory, checked before a worker starts:
    refused in a worker, a point printed Dask's traceback ahead of its one
    line. :class:`ConfigError` naming the first that fails."""
    profiles: dict[str, Profile] = {}
    for scenario, _pool in grid.points():
        if scenario.profile not in profiles:
            profiles[scenario.profile] = load_profile(scenario.profile)
        check_memory(scenario, profile=profiles[scenario.profile])


def sweep(
    grid: SweepGrid,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    on_done: Callable[[int, int], None] | None = None,
    executor: str = "compiled",
) -> pd.DataFrame:
    """Run every point of ``grid`` on Dask; one row per point, in grid order.

    ``scheduler``: the address of a running Dask scheduler (``tcp://host:8786``);
    ``None`` starts a LocalCluster of ``workers`` single-threaded processes
    (default: one per core; SimPy holds the GIL, so threads would not help).
    ``on_done(done, total)`` is called as points finish. ``executor`` runs
    each point: ``compiled`` (default) or ``simpy`` (the same numbers, slower).
    """
    try:
        # Typed as Any: distributed's own annotations are partial.
        distributed: Any = importlib.import_module("dask.distributed")
    except ImportError:
        raise ConfigError("sweep: needs Dask; pip install 'bootstorm[sweep]'") from None
    check_executor(executor)
    points = grid.points()
    if workers is not None and workers < 1:
        raise ConfigError(f"workers: must be at least 1, but got {workers}")
    check_sweep(grid)
    if scheduler is not None:
        try:
            client = distributed.Client(scheduler)
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            # Refused, unresolved, timed out; or an address Dask cannot dial
            # (another scheme, no port, TLS without its settings).
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(
                f"scheduler: no Dask scheduler answered at {short_repr(scheduler)} ({reason})"
            ) from None
        cluster = None
    else:
        cluster = distributed.LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # any free port: never clash with another cluster
            silence_logs=logging.WARNING,
        )
        client = distributed.Client(cluster)
    try:
        futures = [
            client.submit(run_point, i, scenario, pool, executor, pure=False)
            for i, (scenario, pool) in enumerate(points)
        ]
        rows = []
        for done, future in enumerate(distributed.as_completed(futures), start=1):
            rows.append(future.result())
            if on_done is not None:
                on_done(done, len(points))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    import pandas as pd  # ~0.8 s to import: only a sweep needs it

    return pd.DataFrame(rows).sort_values("point").drop(columns="point").reset_index(drop=True)
