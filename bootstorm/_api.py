"""The public entry points notebooks and the CLI share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._params import short_repr
from .models import compile_scenario
from .models.compile import resolve_inputs, with_interval
from .simulator import run_with

if TYPE_CHECKING:
    from .models import Profile, Scenario, SeedLike
    from .simulator import Result

__all__ = ["compare", "dataplane_sweep", "recorded_trace", "simulate"]


def recorded_trace(name: str) -> Any:
    """A storm recorded on this project's testbed and installed with the
    package (``traces/data/``): ``name`` is its path there without
    ``.jsonl.gz`` ("testbed-veth-qemu-50", "heldout/baseline-run1"). Notebooks
    read their data through this, so that they run from an install, not only
    from a checkout. Returns the parsed :class:`~bootstorm.traces.Trace`."""
    from importlib.resources import files

    from .models import ConfigError
    from .traces import read_trace

    if not isinstance(name, str):
        raise ConfigError(
            f"name: expected a recorded trace's name (str), but got {type(name).__name__}"
        )
    data = files("bootstorm.traces").joinpath("data")
    path = data.joinpath(*f"{name}.jsonl.gz".split("/"))
    if ".." in name.split("/") or not path.is_file():
        raise ConfigError(f"name: no recorded trace {name!r} installed with bootstorm")
    return read_trace(Path(str(path)))


def simulate(
    scenario: Scenario,
    *,
    seed: SeedLike = None,
    record: bool = False,
    profile: Profile | None = None,
    executor: str | None = None,
) -> Result:
    """Simulate one boot storm.

    Parameters
    ----------
    scenario:
        The what-if (see :class:`~bootstorm.models.Scenario`).
    seed:
        Seed of the service-time stream; defaults to ``scenario.seed``. Same
        scenario and seed give the same result, bit for bit.
    record:
        Keep every stage and lock span (for ``Result.spans()`` and traces).
    profile:
        Use this profile object instead of the one the scenario names.
    executor:
        ``compiled`` (numba; the default, as the CLI's), ``simpy`` (the
        reference: the same numbers, ~30x slower per event, and the only one
        that records: the default with ``record=True``) or ``python``.
    """
    scenario, prof, seed = resolve_inputs(scenario, profile, seed)  # one line, not a traceback
    if executor is None:  # the CLI's, unless the run records (only simpy does)
        executor = "simpy" if record else "compiled"
    if executor != "compiled":
        # The plain-Python executors hold far more per op than the program:
        # size the storm first, so that one too large for them is refused
        # before it is compiled, not after.
        from .models import estimate_memory
        from .simulator._memory import check_run_fits

        sized = estimate_memory(scenario, seed=seed, profile=prof)
        check_run_fits(sandboxes=sized.sandboxes, ops=sized.ops, executor=executor)
    program = compile_scenario(scenario, seed=seed, profile=prof)
    # A profile fitted to a node's storms says how sure the answer is.
    return with_interval(run_with(program, executor, record=record), prof)


def compare(
    scenarios: Mapping[str, Scenario], *, seed: SeedLike = None, executor: str = "compiled"
) -> tuple[Any, dict[str, Result]]:
    """Simulate each what-if; return a table of their headline numbers (a pandas
    DataFrame, one row per label; ``caveats``: the rows of the known misses
    each rests on, see :func:`bootstorm.calibration.caveats`; ``unidentified``:
    the costs the profile never identified that move it beyond the profile's
    error, see :func:`bootstorm.calibration.identify.whatif_cautions`) and the
    results by label."""
    import pandas as pd

    from .calibration import caveat_rows
    from .models import ConfigError
    from .workflows import identification

    # A notebook's slips, each one line (they were a KeyError from pandas or
    # an AttributeError deep in a run): no what-if, a list, a label not a str.
    if not isinstance(scenarios, Mapping) or not scenarios:
        raise ConfigError(
            "scenarios: expected a mapping of labels to Scenarios, at least one, but got "
            + (repr(scenarios) if isinstance(scenarios, Mapping) else type(scenarios).__name__)
        )
    results = {}
    for label, s in scenarios.items():
        if not isinstance(label, str):
            raise ConfigError(f"scenarios: a label must be a str, but got {label!r}")
        with _named(f"scenarios[{label!r}]"):
            results[label] = simulate(s, seed=seed, executor=executor)
    rows = []
    for label, r in results.items():
        rtnl = r.locks.get("rtnl")
        rows.append(
            {
                "what-if": label,
                "makespan_s": r.makespan_s,
                "mean_s": r.startup.mean,
                "p99_s": r.startup.p99,
                "rtnl_contended_wall_s": rtnl.contended_wall_s if rtnl else 0.0,
                "spin_core_s": r.cpu.spin_core_s,
                "busy_core_s": r.cpu.busy_core_s,
                "pool_memory_mib": r.pool_memory_mib,
                "caveats": caveat_rows(scenarios[label]),
                "unidentified": "; ".join(
                    c.costs for c in identification(scenarios[label], result=r, seed=seed).cautions
                ),
            }
        )
    return pd.DataFrame(rows).set_index("what-if"), results


@contextmanager
def _named(field: str) -> Iterator[None]:
    """A what-if's own error, its label first: ``scenarios['ipvtap']: scenario: ...``."""
    from .models import ConfigError

    try:
        yield
    except ConfigError as exc:
        raise ConfigError(f"{field}: {exc}") from None


def dataplane_sweep(
    profile: str | Profile, path: str, flows: Sequence[int], *, proto: str = "tcp", **traffic: Any
) -> Any:
    """The data plane of ``profile`` for each flow count: a pandas DataFrame
    of per-flow and aggregate throughput, CPU by kind, IRQ/softirq rates and
    the rows of the known misses each load rests on (``caveats``)."""
    import pandas as pd

    from .calibration import caveat_rows
    from .models import ConfigError, Profile, Traffic, load_profile
    from .models.softirq import solve_on_profile

    if isinstance(profile, str):
        prof = load_profile(profile)
    elif isinstance(profile, Profile):
        prof = profile
    else:
        raise ConfigError(
            f"profile: expected a Profile or a profile's name, but got {type(profile).__name__}"
        )
    iterable = isinstance(flows, Iterable) and not isinstance(flows, str | bytes | Mapping)
    given = list(flows) if iterable else []
    counts = [int(n) for n in given if isinstance(n, int | np.integer) and not isinstance(n, bool)]
    if not counts or len(counts) != len(given):
        raise ConfigError(
            "flows: expected flow counts (ints), at least one, but got "
            + (short_repr(given) if given else repr(flows)[:60])
        )
    rows = []
    for n in counts:
        load = Traffic(path=path, proto=proto, flows=n, **traffic)
        r = solve_on_profile(prof, load)
        rows.append(
            {
                "flows": n,
                "per_flow_gbps": r.per_flow_gbps,
                "aggregate_gbps": r.aggregate_gbps,
                "ceiling_gbps": r.per_flow_ceiling_gbps,
                "irq_cores": r.cpu_irq_cores,
                "softirq_cores": r.cpu_softirq_cores,
                "system_cores": r.cpu_system_cores,
                "user_cores": r.cpu_user_cores,
                "irq_per_s": r.irq_per_s,
                "softirq_per_s": r.softirq_per_s,
                "caveats": caveat_rows(load),
            }
        )
    return pd.DataFrame(rows).set_index("flows")
