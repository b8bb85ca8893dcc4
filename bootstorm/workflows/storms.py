"""Real storms on this host (root), run so that a command or a notebook can
stop them: Ctrl-C or SIGTERM unwinds through the testbed's cleanup and ends
as :class:`StormInterruptedError`; a testbed that cannot run here, or a sandbox
that failed, is one :class:`~bootstorm.models.ConfigError` line."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..models import ConfigError, TunedConfig
from ..models._errors import format_validation_error
from ..traces.files import read_token_file
from ..validation._names import AGENT_TOKEN_ENV
from ._errors import StormInterruptedError
from ._progress import Progress, SilentProgress

if TYPE_CHECKING:
    from ..traces import Trace
    from ..traces.operations import OperationTimes
    from ..validation.candidates import Candidate, StormRunner
    from ..validation.testbed import StormOptions, StormResult

__all__ = [
    "StormInterruptedError",
    "agent_admission",
    "candidate_runner",
    "check_measure_options",
    "checked_storm_options",
    "interruptible",
    "measure_operations_here",
    "run_storm_here",
    "storm_trace",
]


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    # SIGTERM unwinds like Ctrl-C, through every finally that removes what was made.
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def interruptible(what: str = "run") -> Iterator[None]:
    """Ctrl-C and SIGTERM unwind the block (its cleanup runs) and end as
    :class:`StormInterruptedError`. Installed even where SIGINT was ignored (a
    shell's background job): a kill -INT must always unwind the cleanup."""
    previous = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        raise StormInterruptedError(what) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_storm_here(
    options: StormOptions, *, admission: Any = None, progress: Progress | None = None
) -> StormResult:
    """One real storm of ``options`` on this host, interruptible (see the
    module); a testbed failure is a :class:`ConfigError` line."""
    from ..validation.testbed import TestbedError, run_storm

    progress = progress or SilentProgress()
    try:
        with interruptible("run"), progress.status(f"storm of {options.sandboxes} sandboxes …"):
            return run_storm(options, admission=admission)
    except (TestbedError, OSError) as exc:
        raise ConfigError(f"testbed: {exc}") from None


def storm_trace(
    sandboxes: int,
    config: TunedConfig | None,
    *,
    vm: bool,
    admission: Any = None,
    what: str = "",
    peer: str = "in-netns",
    runtime: str = "threads",
    progress: Progress | None = None,
    arrival_s: tuple[float, ...] | None = None,
    lifetime_s: float | None = None,
    cni_wrapper: str = "none",
    cni_plugin: str = "bridge",
) -> Trace:
    """The trace of one real storm of ``sandboxes`` under ``config``; a
    failed sandbox is a :class:`ConfigError` line (``what`` names the storm).
    ``arrival_s``: start each sandbox at its time (a workload's schedule)
    instead of all at once; ``lifetime_s``: stop each VM that long after it
    came up; ``cni_wrapper``: exec the CNI plugin through ``bootstorm-cni``
    (its permits from the node agent behind ``admission``); ``cni_plugin``:
    the CNI runtime's main plugin."""
    options = checked_storm_options(
        sandboxes=sandboxes,
        vm=vm,
        config=config,
        peer=peer,
        runtime=runtime,
        arrival_s=arrival_s,
        lifetime_s=lifetime_s,
        cni_wrapper=cni_wrapper,
        cni_plugin=cni_plugin,
    )
    result = run_storm_here(options, admission=admission, progress=progress)
    if result.failures:
        raise ConfigError(
            f"testbed: {what}{len(result.failures)} sandboxes failed: {result.failures[0]}"
        )
    return result.trace


def checked_storm_options(**options: Any) -> StormOptions:
    """The testbed's options of a storm, or a :class:`ConfigError` line
    (``testbed: <field>: ...``) where it cannot run them."""
    from pydantic import ValidationError

    from ..validation.testbed import StormOptions

    try:
        return StormOptions(**options)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix="testbed: ")) from None


def candidate_runner(*, runtime: str = "threads", progress: Progress | None = None) -> StormRunner:
    """A :class:`~bootstorm.validation.candidates.StormRunner`: each
    candidate's storm run here by :func:`storm_trace`."""

    def run(candidate: Candidate, *, sandboxes: int, vm: bool) -> Trace:
        return storm_trace(
            sandboxes,
            candidate.config,
            vm=vm,
            what=f"candidate {candidate.name!r}: ",
            runtime=runtime,
            progress=progress,
        )

    return run


def agent_admission(url: str, token_file: Path | None, tuned: TunedConfig | None) -> Any:
    """An admission through the node agent at ``url`` (token from
    ``token_file`` or ``$BOOTSTORM_AGENT_TOKEN``); the tuned config, if given,
    is pushed to it first so that both ends run the same limits and pools,
    and, where it has pools, its pools are waited for until each holds its
    target (the agent fills them in the background): the storm then starts
    with its pools full, as the model's does. Only the stages the config in
    force limits (pushed, or the agent's own) are leased: the others have no
    permit to wait for, and a lease costs two HTTP calls (a config pushed
    during the storm is not seen)."""
    from ..validation.agent import AgentAdmission
    from ..validation.agent.client import AgentClient, AgentError, wait_pools_ready

    if token_file is not None:
        # Bounded, a regular file only (a FIFO hung), never echoed: a secret.
        token = read_token_file(token_file, field="token_file")
    else:
        token = os.environ.get(AGENT_TOKEN_ENV, "")
    if not token:
        raise ConfigError("token: give --token-file or set BOOTSTORM_AGENT_TOKEN for --agent")
    client = AgentClient(url, token=token)
    try:
        if tuned is not None:
            client.put_config(tuned)
        else:
            tuned = client.get_config()  # the one in force: its limits are leased
        if any(n > 0 for n in tuned.pools.values()):
            wait_pools_ready(client)
        client.healthz()
    except AgentError as exc:
        client.close()
        raise ConfigError(f"agent: {url}: {exc}") from None
    return AgentAdmission(client, limited=tuple(tuned.limits))


def check_measure_options(*, repeats: int, warmup: int) -> None:
    """The timing bench's options, checked before anything is made."""
    if not 1 <= repeats <= MAX_MEASURE_REPEATS:
        raise ConfigError(f"repeats: must be in 1..{MAX_MEASURE_REPEATS:,}, but got {repeats}")
    if not 0 <= warmup <= MAX_MEASURE_REPEATS:
        raise ConfigError(f"warmup: must be in 0..{MAX_MEASURE_REPEATS:,}, but got {warmup}")


#: Most repetitions of each timed operation: 30 is the default and a QEMU
#: start is ~0.1-1 s, so 10 000 is hours already; 10**9 never ended.
MAX_MEASURE_REPEATS = 10_000


def measure_operations_here(
    *,
    repeats: int,
    warmup: int,
    vm: bool,
    settle_s: float | None = None,
    pool_devices: int | None = None,
    pool_rounds: int | None = None,
    flood_links: int | None = None,
    stretch_rounds: int | None = None,
    progress: Progress | None = None,
) -> OperationTimes:
    """Each testbed operation timed alone on this host (root), interruptible;
    a failure is a :class:`ConfigError` line. ``settle_s``: the longest wait
    for a quiet host before each block; ``pool_devices``/``pool_rounds``: the
    pooled devices' memory batches, ``flood_links`` the bridge flood's new
    links a round, ``stretch_rounds`` the rounds of RTNL's hold stretch
    (None: the testbed's defaults; 0 devices, links or rounds: not
    measured)."""
    from ..validation.testbed import TestbedError
    from ..validation.testbed._vm import VmError
    from ..validation.testbed.ops import measure_operations

    check_measure_options(repeats=repeats, warmup=warmup)
    progress = progress or SilentProgress()
    try:
        with interruptible("measurement"), progress.status("timing each operation alone …"):
            times = measure_operations(
                repeats=repeats,
                warmup=warmup,
                vm=vm,
                **{
                    name: value
                    for name, value in (
                        ("settle_max_s", settle_s),
                        ("pool_devices", pool_devices),
                        ("pool_rounds", pool_rounds),
                        ("flood_links", flood_links),
                        ("stretch_rounds", stretch_rounds),
                    )
                    if value is not None
                },
            )
    except (TestbedError, VmError, OSError, ValueError) as exc:
        raise ConfigError(f"testbed: {exc}") from None
    return _with_agent_calls(times, progress)


def _with_agent_calls(times: OperationTimes, progress: Progress) -> OperationTimes:
    """``times`` with what a call to a node agent costs here, and what its
    refill worker's plumbed namespaces cost it (an agent of its own on
    loopback; the testbed never imports the agent, so they are measured
    here), or with a note saying why one was not."""
    import dataclasses

    from ..validation.agent import (
        AgentError,
        AgentProcessError,
        measure_agent_calls,
        measure_agent_devices,
    )

    notes = list(times.notes)
    try:
        with interruptible("measurement"), progress.status("timing calls to a node agent …"):
            calls = measure_agent_calls()
    except (AgentProcessError, AgentError, OSError) as exc:
        calls = None
        notes.append(f"a node agent's calls were not timed: {exc}")
    try:
        with interruptible("measurement"), progress.status("timing a node agent's devices …"):
            devices = measure_agent_devices()
    except (AgentProcessError, AgentError, OSError, ValueError) as exc:
        devices = None
        notes.append(f"a node agent's refill of plumbed namespaces was not timed: {exc}")
    return dataclasses.replace(times, agent_calls=calls, agent_devices=devices, notes=tuple(notes))
