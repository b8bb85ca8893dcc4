"""A fleet rollout a careful operator can trust: waves, gates, rollback, resume.

``bootstorm config push`` in waves (``docs/agent.md``, *Rolling a config out
to a fleet*). The pieces, each usable alone:

- **Configs per node class** (:func:`assign_configs`): a node's labels pick
  its config (``--config-for role=gpu:gpu.yaml``), else the default one; a
  node without one, or matched by two classes, is a one-line ConfigError
  before anything is sent.
- **The plan** (:func:`plan_waves`): a canary wave that holds at least one
  node of every class, then the other nodes in waves that double in size.
- **The gate** (:func:`evaluate_gate`): what the agents themselves measure,
  ``bootstorm_agent_stage_seconds`` (a start's time in each stage the agent
  governs) and ``pool_empty``, ``leases_expired``, ``lease_wait_timeouts``,
  in a window of ``soak_s`` seconds after the push against a window of the
  same length on the same nodes just before it. p99 is computed from the
  histogram's bucket deltas as Prometheus' ``histogram_quantile`` does
  (:func:`histogram_quantile`).
- **The state** (:class:`RolloutState`): the plan, each node's config
  before the push (body, digest, generation) and where each node and wave
  stands, saved atomically (:func:`save_state`) after every step, so an
  interrupted rollout resumes where it stopped and a rollback knows what
  to put back.
- **The run** (:func:`run_rollout`): drives the state through a
  :class:`Fleet` (the HTTP one is :class:`~.inventory.AgentFleet`); a
  failed gate or too many failed nodes puts every changed node back to its
  previous config, and the end checks every node it touched with a
  ``GET /config``.

Configs are compared by :func:`config_digest` (the canonical JSON of the
whole config), never by generation: a node already running the target is
not pushed again, so a second push of the same config changes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...models import ConfigError, TunedConfig
from ...models._errors import format_validation_error
from ...models._yaml import read_text_bounded, shown_path
from .client import AgentError, ConfigInForce

__all__ = [
    "DEFAULT_CLASS",
    "STATE_KIND",
    "ClassConfig",
    "Fleet",
    "GateRecord",
    "GateRule",
    "NodeState",
    "RolloutOptions",
    "RolloutState",
    "StageRecord",
    "WaveState",
    "Window",
    "assign_configs",
    "check_state_path",
    "config_digest",
    "evaluate_gate",
    "histogram_quantile",
    "load_state",
    "merge_windows",
    "new_state",
    "parse_canary",
    "parse_config_for",
    "parse_window",
    "plan_waves",
    "rollout_key",
    "run_rollout",
    "save_state",
    "window_between",
]

log = logging.getLogger(__name__)

#: The class of nodes that take the default config (no ``--config-for`` matched).
DEFAULT_CLASS = "default"
#: ``kind`` of a rollout state file.
STATE_KIND: Literal["bootstorm/rollout-state"] = "bootstorm/rollout-state"
#: Largest state file read back (50 nodes take about 200 KiB).
MAX_STATE_BYTES = 64 * 1024 * 1024

STAGE_SECONDS = "bootstorm_agent_stage_seconds"
#: Counters read per window (prometheus_client's parser drops ``_total`` from
#: a counter family's name).
_EMPTY = "bootstorm_agent_pool_empty"
_EXPIRED = "bootstorm_agent_leases_expired"
_TIMEOUTS = "bootstorm_agent_lease_wait_timeouts"


# -- digests ------------------------------------------------------------------------


def config_digest(config: TunedConfig | Mapping[str, Any]) -> str:
    """``sha256:`` and 16 hex digits of the config's canonical JSON (keys
    sorted, every field, defaults included): equal for equal content
    whatever the generation or the file's layout."""
    data = config.model_dump(mode="json") if isinstance(config, TunedConfig) else dict(config)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


# -- configs per node class -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassConfig:
    """``--config-for KEY=VALUE:FILE``: nodes labelled ``KEY: VALUE`` take ``config``."""

    key: str
    value: str
    config: TunedConfig
    #: Where the config came from (shown in the plan).
    source: str = ""

    @property
    def name(self) -> str:
        return f"{self.key}={self.value}"


def parse_config_for(text: str) -> tuple[str, str, str]:
    """``KEY=VALUE:FILE`` → (key, value, file); ConfigError naming ``config-for``."""
    import re

    from .inventory import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN

    key, eq, rest = text.partition("=")
    value, colon, path = rest.partition(":")
    shown = json.dumps(text[:200])
    if not eq or not colon or not path:
        raise ConfigError(
            f"config-for: expected KEY=VALUE:FILE, like role=gpu:gpu.yaml (got {shown})"
        )
    if not re.match(LABEL_KEY_PATTERN, key):
        raise ConfigError(
            f"config-for: label key {json.dumps(key[:80])} is not a name (in {shown})"
        )
    if not re.match(LABEL_VALUE_PATTERN, value):
        raise ConfigError(
            f"config-for: label value {json.dumps(value[:80])} is not a name (in {shown})"
        )
    return key, value, path


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """The config one node is to run, and the class that chose it."""

    node: str
    node_class: str
    config: TunedConfig
    digest: str


def assign_configs(
    nodes: Sequence[tuple[str, Mapping[str, str]]],
    *,
    default: TunedConfig | None,
    per_class: Sequence[ClassConfig] = (),
) -> list[Assignment]:
    """Each node's config: the one ``per_class`` gives its labels, else ``default``.

    ``nodes`` are (name, labels) in inventory order. ConfigError, one line,
    for a class given twice, a node two classes match, or a node with none
    and no default.
    """
    seen: dict[str, ClassConfig] = {}
    for c in per_class:
        if c.name in seen:
            raise ConfigError(f"config-for: class {c.name} given twice")
        seen[c.name] = c
    out = []
    for i, (name, labels) in enumerate(nodes):
        matched = [c for c in per_class if labels.get(c.key) == c.value]
        if len(matched) > 1:
            raise ConfigError(
                f"nodes.{i}.labels: node {name!r} is in {len(matched)} classes "
                f"({', '.join(c.name for c in matched)}); give each node one class"
            )
        if matched:
            c = matched[0]
            out.append(
                Assignment(
                    node=name, node_class=c.name, config=c.config, digest=config_digest(c.config)
                )
            )
        elif default is not None:
            out.append(
                Assignment(
                    node=name,
                    node_class=DEFAULT_CLASS,
                    config=default,
                    digest=config_digest(default),
                )
            )
        else:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
            raise ConfigError(
                f"nodes.{i}.labels: node {name!r} (labels: {shown}) has no config for its "
                "class; give --config-for KEY=VALUE:FILE for it, or a default CONFIG"
            )
    return out


# -- the plan ----------------------------------------------------------------------------


def parse_canary(text: str, *, nodes: int) -> int:
    """``--canary``: a count (``2``) or a share of the nodes (``5%``, rounded up)."""
    raw = text.strip()
    problem = (
        f"canary: expected a node count of 1 or more, or a percentage in (0, 100] "
        f"like 5% (got {json.dumps(text[:80])})"
    )
    try:
        if raw.endswith("%"):
            share = float(raw[:-1])
            if not 0.0 < share <= 100.0:  # NaN fails too
                raise ConfigError(problem)
            return max(1, math.ceil(nodes * share / 100.0 - 1e-9))
        count = int(raw)
    except ValueError:
        raise ConfigError(problem) from None
    if not 1 <= count <= 1_000_000:
        raise ConfigError(problem)
    return count


def plan_waves(
    nodes: Sequence[tuple[str, str]], *, waves: int, canary: int
) -> tuple[tuple[str, ...], ...]:
    """The waves, each a tuple of node names.

    ``nodes`` are (name, class) in inventory order. One wave: every node.
    More: a canary of ``canary`` nodes that holds at least one node of every
    class (so it may be larger: classes taken in turn, in order of first
    appearance), then the other nodes in inventory order in ``waves - 1``
    waves whose sizes double (1 : 2 : 4 ...; fewer waves if there are fewer
    nodes than waves). Every node is in exactly one wave.
    """
    if waves < 1:
        raise ConfigError(f"waves: must be 1 or more (got {waves})")
    names = [n for n, _ in nodes]
    if not names:
        return ()
    if waves == 1:
        return (tuple(names),)
    by_class: dict[str, list[str]] = {}
    for name, klass in nodes:
        by_class.setdefault(klass, []).append(name)
    size = min(len(names), max(canary, len(by_class)))
    picked: list[str] = []
    depth = 0
    while len(picked) < size:
        for members in by_class.values():
            if depth < len(members) and len(picked) < size:
                picked.append(members[depth])
        depth += 1
    chosen = set(picked)
    first = tuple(n for n in names if n in chosen)
    rest = [n for n in names if n not in chosen]
    if not rest:
        return (first,)
    k = min(waves - 1, len(rest))
    weights = [2**i for i in range(k)]
    sizes = [max(1, len(rest) * w // sum(weights)) for w in weights]
    sizes[-1] += max(0, len(rest) - sum(sizes))  # the rounding's remainder: the last wave
    while sum(sizes) > len(rest):
        j = max(range(k), key=lambda x: sizes[x])
        sizes[j] -= 1
    out = [first]
    at = 0
    for s in sizes:
        out.append(tuple(rest[at : at + s]))
        at += s
    return tuple(out)


# -- windows of agent metrics ---------------------------------------------------------


class Window(BaseModel):
    """What a node's agent counted between two scrapes (or a sum over nodes).

    ``stages``: per stage, the cumulative count of ``stage_seconds`` in each
    bucket, by its ``le`` as Prometheus writes it (``"0.5"``, ``"+Inf"``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stages: dict[str, dict[str, float]] = Field(default_factory=dict)
    #: Takes answered ``pool empty`` (every kind).
    empty: float = 0.0
    #: Leases that expired, and acquires that timed out: starts that failed.
    lost: float = 0.0

    @property
    def starts(self) -> float:
        """Starts counted: the busiest stage's observations (each start passes
        every governed stage once)."""
        return max((_total(b) for b in self.stages.values()), default=0.0)


def _total(buckets: Mapping[str, float]) -> float:
    return float(buckets.get("+Inf", 0.0))


def _le(text: str) -> float:
    return math.inf if text in ("+Inf", "inf", "Inf") else float(text)


@dataclass(frozen=True, slots=True)
class _Sample:
    stages: dict[str, dict[str, float]]
    empty: float
    lost: float


def parse_window(text: str) -> Window:
    """A scrape (Prometheus text) as cumulative counts since the agent started.

    ValueError if the text is not the exposition format.
    """
    stages: dict[str, dict[str, float]] = {}
    empty = lost = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == STAGE_SECONDS:
            for s in family.samples:
                if s.name.endswith("_bucket") and "stage" in s.labels and "le" in s.labels:
                    le = s.labels["le"]
                    key = "+Inf" if math.isinf(_le(le)) else repr(_le(le))
                    stages.setdefault(s.labels["stage"], {})[key] = float(s.value)
        elif family.name == _EMPTY:
            empty += sum(s.value for s in family.samples if s.name.endswith("_total"))
        elif family.name in (_EXPIRED, _TIMEOUTS):
            lost += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return Window(stages=stages, empty=empty, lost=lost)


def window_between(before: Window, after: Window) -> Window:
    """What was counted from the scrape ``before`` to the scrape ``after`` of one
    node. A count that went down (the agent restarted, or an idle stage's
    series was dropped) is read as Prometheus reads a counter reset: the
    later value is the window's."""
    stages: dict[str, dict[str, float]] = {}
    for stage, now in after.stages.items():
        then = before.stages.get(stage)
        if then is None or _total(now) < _total(then) or now.keys() != then.keys():
            stages[stage] = dict(now)
        else:
            stages[stage] = {le: max(0.0, now[le] - then.get(le, 0.0)) for le in now}
    empty = after.empty - before.empty if after.empty >= before.empty else after.empty
    lost = after.lost - before.lost if after.lost >= before.lost else after.lost
    return Window(stages=stages, empty=empty, lost=lost)


def merge_windows(windows: Iterable[Window]) -> Window:
    """The sum of windows of several nodes (``sum by (le)`` in PromQL): per
    stage, the buckets all of them have."""
    stages: dict[str, dict[str, float]] = {}
    empty = lost = 0.0
    for w in windows:
        empty += w.empty
        lost += w.lost
        for stage, buckets in w.stages.items():
            into = stages.get(stage)
            if into is None:
                stages[stage] = dict(buckets)
            else:
                stages[stage] = {le: into[le] + buckets[le] for le in into if le in buckets}
    return Window(stages=stages, empty=empty, lost=lost)


def histogram_quantile(
    q: float, buckets: Mapping[str, float] | Sequence[tuple[float, float]]
) -> float:
    """The ``q`` quantile of a histogram as Prometheus' ``histogram_quantile``
    computes it: linear interpolation within the bucket the rank falls in,
    the first bucket starting at 0, a rank in the ``+Inf`` bucket answered
    with the highest finite bound. NaN for an empty histogram.

    ``buckets``: cumulative counts by upper bound (``{"0.5": 3, "+Inf": 4}``
    or ``[(0.5, 3), (inf, 4)]``).
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q: must be within 0..1 (got {q!r})")
    pairs = sorted(
        ((_le(k), float(v)) for k, v in buckets.items())
        if isinstance(buckets, Mapping)
        else ((float(b), float(c)) for b, c in buckets)
    )
    if len(pairs) < 2 or not math.isinf(pairs[-1][0]):
        return math.nan
    # Cumulative counts must not decrease (Prometheus' monotonicity fix).
    fixed: list[tuple[float, float]] = []
    top = 0.0
    for bound, count in pairs:
        top = max(top, count)
        fixed.append((bound, top))
    total = fixed[-1][1]
    if total <= 0.0:
        return math.nan
    rank = q * total
    b = next((i for i, (_, c) in enumerate(fixed[:-1]) if c >= rank), len(fixed) - 1)
    if b == len(fixed) - 1:
        return fixed[-2][0]
    if b == 0 and fixed[0][0] <= 0.0:
        return fixed[0][0]
    start, below = (0.0, 0.0) if b == 0 else fixed[b - 1]
    end, count = fixed[b]
    in_bucket = count - below
    if in_bucket <= 0.0:
        return end
    return start + (end - start) * ((rank - below) / in_bucket)


# -- the gate ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GateRule:
    """When a wave passes (``docs/agent.md``, *Gates*).

    A wave fails if, for any stage with at least ``min_starts`` observations
    in both windows, ``p99 after > p99 before × (1 + max_p99_increase) +
    p99_slack_s``; or if empty-pool takes per start rise by more than
    ``max_empty_increase`` (absolute: 0.05 = five more per hundred starts);
    or if lost starts (leases expired, acquires timed out) per start rise
    by more than ``max_lost_increase``. With no stage reaching
    ``min_starts`` the wave cannot be judged: ``few_starts`` ``fail``
    (default: roll back) or ``pass``.
    """

    quantile: float = 0.99
    max_p99_increase: float = 0.2
    p99_slack_s: float = 0.005
    max_empty_increase: float = 0.05
    max_lost_increase: float = 0.05
    min_starts: int = 20
    few_starts: Literal["fail", "pass"] = "fail"

    def __post_init__(self) -> None:
        checks: tuple[tuple[str, float, float, float], ...] = (
            ("quantile", self.quantile, 0.5, 1.0),
            ("max-p99-increase", self.max_p99_increase, 0.0, 100.0),
            ("p99-slack-s", self.p99_slack_s, 0.0, 3600.0),
            ("max-empty-increase", self.max_empty_increase, 0.0, 1.0),
            ("max-lost-increase", self.max_lost_increase, 0.0, 1.0),
        )
        for name, value, lo, hi in checks:
            if isinstance(value, bool) or not lo <= value <= hi:  # NaN fails too
                raise ConfigError(f"{name}: must be within {lo:g}..{hi:g} (got {value!r})")
        if isinstance(self.min_starts, bool) or not 1 <= self.min_starts <= 10_000_000:
            raise ConfigError(f"min-starts: must be within 1..10000000 (got {self.min_starts!r})")
        if self.few_starts not in ("fail", "pass"):
            raise ConfigError(f"few-starts: must be fail or pass (got {self.few_starts!r})")


class StageRecord(BaseModel):
    """One stage's p99 before and after (seconds; None: too few starts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str
    starts_before: float
    starts_after: float
    p99_before_s: float | None
    p99_after_s: float | None
    ok: bool


class GateRecord(BaseModel):
    """A wave's gate for one node class."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_class: str
    ok: bool
    #: One line: why it failed, or what it saw.
    reason: str
    nodes: int
    stages: list[StageRecord] = Field(default_factory=list)
    starts_before: float = 0.0
    starts_after: float = 0.0
    empty_per_start_before: float = 0.0
    empty_per_start_after: float = 0.0
    lost_per_start_before: float = 0.0
    lost_per_start_after: float = 0.0


def _fmt_s(value: float) -> str:
    return f"{value * 1000:.1f} ms" if value < 1.0 else f"{value:.3g} s"


def evaluate_gate(
    *,
    before: Window,
    after: Window,
    rule: GateRule,
    node_class: str = DEFAULT_CLASS,
    nodes: int = 1,
) -> GateRecord:
    """Judge one class of a wave: ``before`` and ``after`` summed over its nodes."""
    stages = []
    problems = []
    judged = 0
    for stage in sorted(set(before.stages) | set(after.stages)):
        b = before.stages.get(stage, {})
        a = after.stages.get(stage, {})
        nb, na = _total(b), _total(a)
        enough = nb >= rule.min_starts and na >= rule.min_starts
        pb = histogram_quantile(rule.quantile, b) if nb > 0 else math.nan
        pa = histogram_quantile(rule.quantile, a) if na > 0 else math.nan
        ok = True
        if enough:
            judged += 1
            limit = pb * (1.0 + rule.max_p99_increase) + rule.p99_slack_s
            if pa > limit:
                ok = False
                problems.append(
                    f"{stage} p{rule.quantile * 100:g} {_fmt_s(pa)} > {_fmt_s(pb)} × "
                    f"{1 + rule.max_p99_increase:g} + {_fmt_s(rule.p99_slack_s)}"
                )
        stages.append(
            StageRecord(
                stage=stage,
                starts_before=nb,
                starts_after=na,
                p99_before_s=None if math.isnan(pb) else pb,
                p99_after_s=None if math.isnan(pa) else pa,
                ok=ok,
            )
        )
    sb, sa = before.starts, after.starts
    eb = before.empty / sb if sb else 0.0
    ea = after.empty / sa if sa else 0.0
    lb = before.lost / sb if sb else 0.0
    la = after.lost / sa if sa else 0.0
    if judged and ea > eb + rule.max_empty_increase:
        problems.append(
            f"empty-pool takes per start {ea:.3f} > {eb:.3f} + {rule.max_empty_increase:g}"
        )
    if judged and la > lb + rule.max_lost_increase:
        problems.append(f"lost starts per start {la:.3f} > {lb:.3f} + {rule.max_lost_increase:g}")
    if not judged:
        few = (
            f"too few starts to judge (before {sb:g}, after {sa:g}; --min-starts {rule.min_starts})"
        )
        ok = rule.few_starts == "pass"
        reason = few + ("; passed (--few-starts pass)" if ok else "")
    elif problems:
        ok, reason = False, "; ".join(problems)
    else:
        worst = max(
            (s for s in stages if s.p99_after_s is not None and s.starts_after >= rule.min_starts),
            key=lambda s: s.p99_after_s or 0.0,
        )
        ok = True
        reason = (
            f"p{rule.quantile * 100:g} within bound ({worst.stage} "
            f"{_fmt_s(worst.p99_before_s or 0.0)} → {_fmt_s(worst.p99_after_s or 0.0)})"
        )
    return GateRecord(
        node_class=node_class,
        ok=ok,
        reason=reason,
        nodes=nodes,
        stages=stages,
        starts_before=sb,
        starts_after=sa,
        empty_per_start_before=eb,
        empty_per_start_after=ea,
        lost_per_start_before=lb,
        lost_per_start_after=la,
    )


# -- the state ------------------------------------------------------------------------

NodeStatus = Literal[
    "pending", "unchanged", "pushed", "failed", "unknown", "rolled_back", "rollback_failed"
]
WaveStatus = Literal["pending", "pushed", "passed", "failed"]
RolloutStatus = Literal["running", "completed", "rolled_back", "rollback_incomplete"]
Final = Literal["target", "previous", "other", "unreachable"]


class NodeState(BaseModel):
    """Where one node stands."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    url: str
    node_class: str
    wave: int
    #: Digest of the config it is to run.
    target: str
    status: NodeStatus = "pending"
    #: Its config before the rollout changed it (``GET /config``'s body), kept
    #: for a rollback; with its digest and generation.
    previous: dict[str, Any] | None = None
    previous_digest: str | None = None
    previous_generation: int | None = None
    #: The generation the push (or the rollback) got.
    generation: int | None = None
    #: HTTP status of the last refusal (None: unreachable or no refusal).
    http_status: int | None = None
    message: str = ""
    #: Its window before the push (gate baseline), kept until the wave is judged.
    before: Window | None = None
    #: Its baseline was measured (or tried: a node whose metrics cannot be
    #: read is not measured again, and is left out of its wave's gate).
    measured: bool = False
    #: What ``GET /config`` found at the end.
    final: Final | None = None


class WaveState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    nodes: list[str]
    status: WaveStatus = "pending"
    gates: list[GateRecord] = Field(default_factory=list)


class RolloutState(BaseModel):
    """A rollout, as saved in ``--state FILE`` after every step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["bootstorm/rollout-state"] = STATE_KIND
    schema_version: Literal[1] = 1
    #: :func:`rollout_key` of the plan: a state of another rollout is refused.
    key: str
    status: RolloutStatus = "running"
    reason: str = ""
    #: Classes and the digests of their configs.
    configs: dict[str, str]
    waves: list[WaveState]
    nodes: dict[str, NodeState]
    #: Every node touched is at its target (completed) or its previous config.
    consistent: bool | None = None
    updated_at_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Every node runs its target config, checked."""
        return self.status == "completed" and all(
            n.status in ("pushed", "unchanged") and n.final == "target" for n in self.nodes.values()
        )


def rollout_key(
    assignments: Sequence[Assignment],
    urls: Mapping[str, str],
    waves: Sequence[Sequence[str]],
) -> str:
    """What makes two rollouts the same one: the nodes, their URLs and
    target configs, and the waves."""
    data = {
        "nodes": [[a.node, urls[a.node], a.node_class, a.digest] for a in assignments],
        "waves": [list(w) for w in waves],
    }
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def new_state(
    assignments: Sequence[Assignment],
    urls: Mapping[str, str],
    waves: Sequence[Sequence[str]],
) -> RolloutState:
    """The state of a rollout not started yet."""
    wave_of = {name: i for i, wave in enumerate(waves) for name in wave}
    return RolloutState(
        key=rollout_key(assignments, urls, waves),
        configs={a.node_class: a.digest for a in assignments},
        waves=[WaveState(index=i, nodes=list(w)) for i, w in enumerate(waves)],
        nodes={
            a.node: NodeState(
                name=a.node,
                url=urls[a.node],
                node_class=a.node_class,
                wave=wave_of[a.node],
                target=a.digest,
            )
            for a in assignments
        },
        updated_at_s=time.time(),
    )


def load_state(path: Path) -> RolloutState | None:
    """The state saved in ``path``; None if there is no such file. ConfigError,
    naming the file and the field, for one that is not a rollout state."""
    if not os.path.lexists(path):
        return None
    text = read_text_bounded(path, max_bytes=MAX_STATE_BYTES)
    where = f"state: {shown_path(path)}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("kind") != STATE_KIND:
        raise ConfigError(f"{where}: not a rollout state (kind is not {STATE_KIND!r})")
    try:
        return RolloutState.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"{where}: ")) from None


def check_state_path(path: Path) -> None:
    """ConfigError unless a state can be saved as ``path`` (checked before a
    rollout starts: its folder exists and takes files, its name fits, and a
    file already there is a regular one)."""
    shown = f"state: cannot write {shown_path(path)}"
    directory = path.parent if str(path.parent) else Path(".")
    if os.path.lexists(path) and not path.is_file():
        raise ConfigError(f"{shown} (not a regular file)")
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ConfigError(f"{shown} ({reason})") from None
    if len(os.fsencode(path.name)) + 16 > name_max:  # room for the temp file's prefix
        raise ConfigError(f"{shown} (file name too long)")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:32]}.", dir=directory)
    except OSError as exc:
        raise ConfigError(f"{shown} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(tmp)


def save_state(path: Path, state: RolloutState) -> None:
    """Write ``state`` to ``path`` whole or not at all (temp file, fsync, rename)."""
    text = state.model_dump_json(indent=1)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise ConfigError(f"state: cannot write {shown_path(path)} ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# -- the run ----------------------------------------------------------------------------


class Fleet(Protocol):
    """The nodes, by name (:class:`~.inventory.AgentFleet` over HTTP). Every
    method raises :class:`AgentError` when a node refuses or cannot be reached."""

    def read(self, node: str) -> ConfigInForce: ...

    def push(self, node: str, config: TunedConfig) -> int: ...

    def scrape(self, node: str) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutOptions:
    """How a rollout runs (the plan is in its state)."""

    #: Seconds of each window; 0: no gate (no windows, no waiting).
    soak_s: float = 60.0
    gate: GateRule = field(default_factory=GateRule)
    #: Nodes that may fail (refuse, be unreachable) before the rollout rolls
    #: back; None: any number (the one-shot push: a failed node is reported).
    max_failures: int | None = 0
    #: Nodes talked to at once.
    workers: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.soak_s, bool) or not 0.0 <= self.soak_s <= 86400.0:
            raise ConfigError(f"soak-s: must be within 0..86400 s (got {self.soak_s!r})")
        if self.max_failures is not None and not 0 <= self.max_failures <= 1_000_000:
            raise ConfigError(
                f"max-failures: must be within 0..1000000 (got {self.max_failures!r})"
            )
        if not 1 <= self.workers <= 256:
            raise ConfigError(f"workers: must be within 1..256 (got {self.workers!r})")


#: ``on_step(event, state)``: called after each step is saved; may raise to stop
#: the rollout there (a test's interruption; the state is saved and resumable).
StepHook = Callable[[str, RolloutState], None]


def _not_read(node: NodeState, exc: AgentError, *, status: NodeStatus) -> NodeState:
    """``node`` left as it was because its config in force could not be read
    (a node whose config is unknown is never pushed)."""
    return node.model_copy(
        update={
            "status": status,
            "http_status": exc.status,
            "message": _one_line(f"config not read, not pushed: {exc.message}"),
        }
    )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class _Run:
    """One run of :func:`run_rollout` (the state moves on through ``self.state``)."""

    def __init__(
        self,
        state: RolloutState,
        *,
        configs: Mapping[str, TunedConfig],
        fleet: Fleet,
        options: RolloutOptions,
        save: Callable[[RolloutState], None],
        sleep: Callable[[float], None],
        on_step: StepHook | None,
    ) -> None:
        self.state = state
        self.configs = dict(configs)
        self.fleet = fleet
        self.options = options
        self._save = save
        self._sleep = sleep
        self._on_step = on_step
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, min(options.workers, len(state.nodes))),
            thread_name_prefix="bootstorm-rollout",
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # -- state plumbing --------------------------------------------------------

    def step(self, event: str, **changes: Any) -> None:
        self.state = self.state.model_copy(update={**changes, "updated_at_s": time.time()})
        self._save(self.state)
        log.info("%s", event)
        if self._on_step is not None:
            self._on_step(event, self.state)

    def nodes_with(self, updates: Mapping[str, NodeState]) -> dict[str, NodeState]:
        return {name: updates.get(name, node) for name, node in self.state.nodes.items()}

    def wave_with(self, index: int, **changes: Any) -> list[WaveState]:
        waves = list(self.state.waves)
        waves[index] = waves[index].model_copy(update=changes)
        return waves

    def each(self, names: Sequence[str], fn: Callable[[str], Any]) -> list[Any]:
        return list(self._pool.map(fn, names))

    # -- measuring ----------------------------------------------------------

    def scrape(self, names: Sequence[str]) -> dict[str, Window | None]:
        def one(name: str) -> Window | None:
            try:
                return parse_window(self.fleet.scrape(name))
            except (AgentError, ValueError) as exc:
                log.warning("%s: metrics not read (%s)", name, _one_line(str(exc), 200))
                return None

        return dict(zip(names, self.each(names, one), strict=True))

    def windows(self, names: Sequence[str]) -> dict[str, Window | None]:
        """Each node's window of ``soak_s`` seconds from now."""
        first = self.scrape(names)
        self._sleep(self.options.soak_s)
        second = self.scrape(names)
        out: dict[str, Window | None] = {}
        for name in names:
            a, b = first[name], second[name]
            out[name] = None if a is None or b is None else window_between(a, b)
        return out

    def keep_before(self, measured: Mapping[str, Window | None]) -> dict[str, NodeState]:
        return {
            name: self.state.nodes[name].model_copy(update={"before": w, "measured": True})
            for name, w in measured.items()
        }

    # -- pushing ------------------------------------------------------------

    def read_node(self, name: str) -> NodeState:
        """Keep the config in force on ``name`` before anything changes it
        (saved before any PUT of its wave is sent)."""
        node = self.state.nodes[name]
        if node.status not in ("pending", "failed", "unknown") or node.previous is not None:
            return node
        try:
            now = self.fleet.read(name)
        except AgentError as exc:
            return _not_read(node, exc, status="failed")
        digest = config_digest(now.config)
        kept = {
            "previous": now.config.model_dump(mode="json"),
            "previous_digest": digest,
            "previous_generation": now.generation,
        }
        if digest == node.target:
            return node.model_copy(
                update={
                    **kept,
                    "status": "unchanged",
                    "generation": now.generation,
                    "http_status": None,
                    "message": "already at the target config",
                }
            )
        return node.model_copy(update={**kept, "status": "pending", "message": ""})

    def push_node(self, name: str) -> NodeState:
        """Push the target on ``name`` (its previous config is kept already)."""
        node = self.state.nodes[name]
        if node.status not in ("pending", "failed", "unknown") or node.previous is None:
            return node
        try:
            now = self.fleet.read(name)
        except AgentError as exc:
            kept = "failed" if node.status == "pending" else node.status
            return _not_read(node, exc, status=kept)
        digest = config_digest(now.config)
        if digest == node.target:  # an earlier, interrupted run's push landed
            return node.model_copy(
                update={
                    "status": "pushed",
                    "generation": now.generation,
                    "http_status": 200,
                    "message": "applied (found applied on resume)",
                }
            )
        if digest != node.previous_digest:
            return node.model_copy(
                update={
                    "status": "failed" if node.status == "pending" else node.status,
                    "http_status": None,
                    "message": _one_line(
                        f"config changed by someone else since the rollout read it "
                        f"({node.previous_digest} → {digest}); not pushed"
                    ),
                }
            )
        try:
            generation = self.fleet.push(name, self.configs[node.node_class])
        except AgentError as exc:
            return self._after_failed_push(node, exc)
        return node.model_copy(
            update={
                "status": "pushed",
                "generation": generation,
                "http_status": 200,
                "message": "applied",
            }
        )

    def _after_failed_push(self, node: NodeState, exc: AgentError) -> NodeState:
        """A PUT without a 200: what does the node run now? (A timeout may have applied it.)"""
        refusal = _one_line(exc.message)
        try:
            now = self.fleet.read(node.name)
        except AgentError as again:
            return node.model_copy(
                update={
                    "status": "unknown",
                    "http_status": exc.status,
                    "message": _one_line(f"{refusal}; config not read back: {again.message}"),
                }
            )
        digest = config_digest(now.config)
        if digest == node.target:
            return node.model_copy(
                update={
                    "status": "pushed",
                    "generation": now.generation,
                    "http_status": 200,
                    "message": f"applied (read back after: {refusal})",
                }
            )
        status: NodeStatus = "failed" if digest == node.previous_digest else "unknown"
        return node.model_copy(
            update={"status": status, "http_status": exc.status, "message": refusal}
        )

    # -- rolling back -------------------------------------------------------

    def rollback_node(self, name: str) -> NodeState:
        node = self.state.nodes[name]
        if node.status not in ("pushed", "unknown", "rollback_failed") or node.previous is None:
            return node
        try:
            now = self.fleet.read(name)
            digest = config_digest(now.config)
            if digest == node.previous_digest:
                return node.model_copy(
                    update={
                        "status": "rolled_back",
                        "generation": now.generation,
                        "message": "at its previous config",
                    }
                )
            if digest != node.target:  # neither: someone else's; never overwritten
                return node.model_copy(
                    update={
                        "status": "rollback_failed",
                        "message": _one_line(
                            f"not rolled back: its config changed since the push "
                            f"(now {digest}, pushed {node.target}); left as it is"
                        ),
                    }
                )
            try:
                generation = self.fleet.push(name, TunedConfig(**node.previous))
            except AgentError as refused:
                # No answer may still have applied it (a timeout): read back.
                check = self.fleet.read(name)
                if config_digest(check.config) != node.previous_digest:
                    raise refused from None
                generation = check.generation
            check = self.fleet.read(name)
        except (AgentError, ConfigError) as exc:
            message = exc.message if isinstance(exc, AgentError) else str(exc)
            return node.model_copy(
                update={
                    "status": "rollback_failed",
                    "http_status": exc.status if isinstance(exc, AgentError) else None,
                    "message": _one_line(f"not rolled back: {message}"),
                }
            )
        if config_digest(check.config) != node.previous_digest:
            return node.model_copy(
                update={
                    "status": "rollback_failed",
                    "message": "not rolled back: read back another config after the push",
                }
            )
        return node.model_copy(
            update={
                "status": "rolled_back",
                "generation": generation,
                "http_status": 200,
                "message": f"previous config put back (generation {generation})",
            }
        )

    def rollback(self, reason: str, **changes: Any) -> None:
        """Put every node changed so far back to its previous config.
        ``changes`` are saved with the first step (the wave that failed), so
        a run stopped here resumes the rollback, never the waves."""
        changed = [
            n.name
            for n in self.state.nodes.values()
            if n.status in ("pushed", "unknown", "rollback_failed")
        ]
        self.step(
            f"rolling back {len(changed)} nodes: {reason}",
            reason=reason,
            status="rollback_incomplete",
            **changes,
        )
        results = self.each(changed, self.rollback_node)
        nodes = self.nodes_with({n.name: n for n in results})
        incomplete = any(n.status == "rollback_failed" for n in nodes.values())
        status: RolloutStatus = "rollback_incomplete" if incomplete else "rolled_back"
        self.step(f"rolled back: {status}", nodes=nodes, status=status)

    # -- checking the end ----------------------------------------------------

    def verify(self) -> None:
        """``GET /config`` on every node the rollout touched: is it whole?"""
        completed = self.state.status == "completed"
        touched = [n.name for n in self.state.nodes.values() if n.status != "pending"]

        def one(name: str) -> NodeState:
            node = self.state.nodes[name]
            try:
                digest = config_digest(self.fleet.read(name).config)
            except (AgentError, ConfigError):
                return node.model_copy(update={"final": "unreachable"})
            final: Final = (
                "target"
                if digest == node.target
                else "previous"
                if digest == node.previous_digest
                else "other"
            )
            return node.model_copy(update={"final": final})

        results = {n.name: n for n in self.each(touched, one)}
        nodes = self.nodes_with(results)

        def whole(n: NodeState) -> bool:
            """At its target (completed) or its previous config, as it should be."""
            if n.status == "pending":
                return True  # never read, never changed
            if n.status == "unchanged":
                return n.final == "target"  # its previous config is the target
            if n.status == "pushed":
                return completed and n.final == "target"
            if n.status == "rolled_back":
                return n.final == "previous"
            if n.status == "failed":
                # A refusal changes nothing (the agent applies a config whole or
                # not at all), and the rollout read it back as it was.
                return n.final in ("previous", "unreachable") or (
                    n.previous is None and n.final != "other"
                )
            return False  # unknown, rollback_failed

        consistent = all(whole(n) for n in nodes.values())
        self.step(
            f"checked {len(touched)} nodes: {'whole' if consistent else 'NOT whole'}",
            nodes=nodes,
            consistent=consistent,
        )

    # -- the waves -----------------------------------------------------------

    def failures(self) -> int:
        return sum(1 for n in self.state.nodes.values() if n.status in ("failed", "unknown"))

    def run(self) -> RolloutState:
        stopped = self.state.status == "running" and any(
            w.status == "failed" for w in self.state.waves
        )
        if self.state.status == "rollback_incomplete" or stopped:
            # A rollback that did not finish (stopped, or a node that failed
            # it): finish it.
            self.rollback(self.state.reason or "resuming a rollback")
            self.verify()
            return self.state
        if self.state.status != "running":  # completed or rolled back: nothing to do
            if self.state.consistent is None:
                self.verify()
            return self.state
        gated = self.options.soak_s > 0.0
        count = len(self.state.waves)
        for k in range(count):
            wave = self.state.waves[k]
            if wave.status == "passed":
                continue
            names = wave.nodes
            read = {n.name: n for n in self.each(names, self.read_node)}
            self.step(
                f"wave {k + 1}/{count}: configs in force kept",
                nodes=self.nodes_with(read),
            )
            to_push = [
                n
                for n in names
                if self.state.nodes[n].status in ("pending", "failed", "unknown")
                and self.state.nodes[n].previous is not None
            ]
            if gated and wave.status == "pending":
                missing = [n for n in to_push if not self.state.nodes[n].measured]
                if missing:
                    self.step(
                        f"wave {k + 1}/{count}: measuring {len(missing)} nodes "
                        f"before the push ({self.options.soak_s:g} s)"
                    )
                    measured = self.windows(missing)
                    self.step(
                        f"wave {k + 1}/{count}: baseline of {len(missing)} nodes kept",
                        nodes=self.nodes_with(self.keep_before(measured)),
                    )
            pushed = {n.name: n for n in self.each(names, self.push_node)}
            done = sum(1 for n in pushed.values() if n.status == "pushed")
            self.step(
                f"wave {k + 1}/{count}: pushed {done} of {len(names)} nodes",
                nodes=self.nodes_with(pushed),
                waves=self.wave_with(k, status="pushed"),
            )
            limit = self.options.max_failures
            failed = [
                n.name for n in self.state.nodes.values() if n.status in ("failed", "unknown")
            ]
            if limit is not None and len(failed) > limit:
                self.rollback(
                    f"wave {k + 1}: {len(failed)} nodes failed (--max-failures {limit}): "
                    + ", ".join(failed[:5])
                    + (" ..." if len(failed) > 5 else ""),
                    waves=self.wave_with(k, status="failed"),
                )
                self.verify()
                return self.state
            changed = [n for n in names if self.state.nodes[n].status == "pushed"]
            if gated and changed:
                if not self.gate(k, changed):
                    self.verify()
                    return self.state
            else:
                self.step(
                    f"wave {k + 1}/{count}: passed" + ("" if changed else " (nothing to change)"),
                    waves=self.wave_with(k, status="passed"),
                )
        self.step("all waves passed", status="completed", reason="")
        self.verify()
        return self.state

    def gate(self, k: int, changed: Sequence[str]) -> bool:
        """Soak wave ``k`` (measuring the next wave's baseline meanwhile), judge it."""
        waves = self.state.waves
        following = (
            [n for n in waves[k + 1].nodes if not self.state.nodes[n].measured]
            if k + 1 < len(waves)
            else []
        )
        self.step(
            f"wave {k + 1}/{len(waves)}: soaking {self.options.soak_s:g} s"
            + (f" (and measuring wave {k + 2}'s baseline)" if following else "")
        )
        measured = self.windows([*changed, *following])
        records = []
        by_class: dict[str, list[str]] = {}
        for name in changed:
            by_class.setdefault(self.state.nodes[name].node_class, []).append(name)
        for klass, members in by_class.items():
            seen = [n for n in members if measured[n] is not None and self.state.nodes[n].before]
            before = merge_windows(self.state.nodes[n].before or Window() for n in seen)
            after = merge_windows(measured[n] or Window() for n in seen)
            record = evaluate_gate(
                before=before,
                after=after,
                rule=self.options.gate,
                node_class=klass,
                nodes=len(seen),
            )
            if len(seen) < len(members):
                record = record.model_copy(
                    update={
                        "reason": f"{record.reason} ({len(members) - len(seen)} of "
                        f"{len(members)} nodes not measured)"
                    }
                )
            records.append(record)
        ok = all(r.ok for r in records)
        # The wave's baselines are spent; the next wave's are kept.
        updates = {n: self.state.nodes[n].model_copy(update={"before": None}) for n in changed}
        updates.update(self.keep_before({n: measured[n] for n in following}))
        several = len(self.state.configs) > 1

        def said(r: GateRecord) -> str:
            return f"{r.node_class}: {r.reason}" if several else r.reason

        verdict = "; ".join(said(r) for r in records)
        if ok:
            self.step(
                f"wave {k + 1}/{len(waves)}: gate passed: {verdict}",
                nodes=self.nodes_with(updates),
                waves=self.wave_with(k, gates=records, status="passed"),
            )
            return True
        self.state = self.state.model_copy(update={"nodes": self.nodes_with(updates)})
        failed = [r for r in records if not r.ok]
        self.rollback(
            f"wave {k + 1} gate: {said(failed[0])}",
            waves=self.wave_with(k, gates=records, status="failed"),
        )
        return False


def run_rollout(
    state: RolloutState,
    *,
    configs: Mapping[str, TunedConfig],
    fleet: Fleet,
    options: RolloutOptions,
    save: Callable[[RolloutState], None] = lambda _state: None,
    sleep: Callable[[float], None] = time.sleep,
    on_step: StepHook | None = None,
) -> RolloutState:
    """Run (or resume) the rollout ``state`` describes; its final state.

    ``configs``: each class's config (their digests must be the state's).
    Every step is handed to ``save`` before the next one starts, so a run
    stopped anywhere (an exception from ``on_step``, a kill) resumes from the
    last saved state with nothing done twice: nodes already at their target
    are not pushed, a wave pushed but not judged is judged again with its
    kept baseline, a rollback not finished is finished.
    """
    for klass, digest in state.configs.items():
        config = configs.get(klass)
        if config is None or config_digest(config) != digest:
            raise ConfigError(f"configs: class {klass!r} has no config of digest {digest}")
    run = _Run(
        state,
        configs=configs,
        fleet=fleet,
        options=options,
        save=save,
        sleep=sleep,
        on_step=on_step,
    )
    try:
        return run.run()
    finally:
        run.close()
