"""The rollout's pure parts: the quantile math, windows, the gate, the plan, the state."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from bootstorm.models import ConfigError, TunedConfig
from bootstorm.validation.agent import rollout as ro
from bootstorm.validation.agent._leases import LeaseTable
from bootstorm.validation.agent._metrics import STAGE_BUCKETS_S, AgentMetrics
from bootstorm.validation.agent.client import AgentError, ConfigInForce

# -- histogram_quantile: answers Prometheus gives for the same buckets ----------------


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        # Linear interpolation in the bucket the rank falls in.
        (0.5, {"0.1": 10, "0.2": 20, "+Inf": 20}, 0.1),
        (0.75, {"0.1": 10, "0.2": 20, "+Inf": 20}, 0.15),
        (0.25, {"0.1": 10, "0.2": 20, "+Inf": 20}, 0.05),  # the first bucket starts at 0
        # A rank in +Inf: the highest finite bound.
        (0.99, {"1": 50, "2": 98, "+Inf": 100}, 2.0),
        # Prometheus docs' example shape: 100 obs, p99 in (0.5, 1].
        (0.99, {"0.1": 50, "0.5": 90, "1": 100, "+Inf": 100}, 0.5 + 0.5 * (99 - 90) / 10),
        # Empty buckets before the rank are skipped.
        (0.5, [(1.0, 0), (2.0, 0), (4.0, 10), (math.inf, 10)], 3.0),
        (0.0, {"1": 5, "+Inf": 5}, 0.0),
        (1.0, {"1": 5, "2": 10, "+Inf": 10}, 2.0),
    ],
)
def test_histogram_quantile_known_answers(
    q: float, buckets: dict[str, float] | list[tuple[float, float]], expected: float
) -> None:
    assert ro.histogram_quantile(q, buckets) == pytest.approx(expected)


def test_histogram_quantile_of_nothing_is_nan_and_q_is_bounded() -> None:
    assert math.isnan(ro.histogram_quantile(0.99, {"1": 0, "+Inf": 0}))
    assert math.isnan(ro.histogram_quantile(0.99, {"1": 3}))  # no +Inf bucket
    with pytest.raises(ValueError, match=r"q: must be within 0\.\.1"):
        ro.histogram_quantile(1.5, {"+Inf": 1})


def test_histogram_quantile_matches_the_raw_quantile_within_a_bucket() -> None:
    """On the agent's own buckets, p99 of 1000 known values is within the
    bucket of the true p99 (the resolution the gate relies on)."""
    values = [0.01 + 0.0001 * i for i in range(1000)]  # 10 ms .. 110 ms
    buckets = {repr(b): float(sum(v <= b for v in values)) for b in STAGE_BUCKETS_S}
    buckets["+Inf"] = 1000.0
    p99 = ro.histogram_quantile(0.99, buckets)
    true = sorted(values)[989]
    # Both in the agent's bucket (100 ms, 150 ms]: interpolation is exact to a bucket.
    assert 0.1 < true <= 0.15 and 0.1 < p99 <= 0.15


# -- the agent's stage_seconds, and windows of it ------------------------------------


def test_stage_seconds_runs_from_the_acquire_to_the_release_and_skips_expired() -> None:
    metrics = AgentMetrics()

    async def scenario() -> None:
        table = LeaseTable(limits={"StartVM": 1}, lease_ttl_s=0.15, metrics=metrics)
        first = await table.acquire("StartVM", "a", 1.0)
        waiter = asyncio.create_task(table.acquire("StartVM", "b", 1.0))
        await asyncio.sleep(0.05)
        table.release(first.lease_id)  # held 50 ms
        second = await waiter  # waited ~50 ms
        await asyncio.sleep(0.05)
        table.release(second.lease_id)  # ~100 ms from its arrival
        await table.acquire("StartVM", "c", 1.0)  # never released: expires
        await asyncio.sleep(0.3)
        table.close()

    asyncio.run(scenario())
    window = ro.parse_window(metrics.exposition().decode())
    buckets = window.stages["StartVM"]
    assert buckets["+Inf"] == 2  # the expired lease is not observed
    assert buckets["0.03"] == 0 and buckets["0.07"] == 1 and buckets["0.15"] == 2
    assert window.lost == 1  # ... it is counted as lost


def test_a_window_is_the_difference_and_a_reset_reads_as_prometheus_does() -> None:
    a = ro.Window(stages={"S": {"0.1": 5, "+Inf": 6}}, empty=2, lost=1)
    b = ro.Window(stages={"S": {"0.1": 9, "+Inf": 16}, "T": {"1.0": 1, "+Inf": 1}}, empty=5, lost=1)
    w = ro.window_between(a, b)
    assert w.stages == {"S": {"0.1": 4, "+Inf": 10}, "T": {"1.0": 1, "+Inf": 1}}
    assert (w.empty, w.lost, w.starts) == (3, 0, 10)
    restarted = ro.Window(stages={"S": {"0.1": 1, "+Inf": 2}}, empty=0)
    r = ro.window_between(b, restarted)
    assert r.stages["S"] == {"0.1": 1, "+Inf": 2} and r.empty == 0
    merged = ro.merge_windows([w, w])
    assert merged.stages["S"] == {"0.1": 8, "+Inf": 20} and merged.empty == 6


# -- the gate ----------------------------------------------------------------------------


def _window(values: list[float], *, empty: float = 0, lost: float = 0) -> ro.Window:
    buckets = {repr(b): float(sum(v <= b for v in values)) for b in STAGE_BUCKETS_S}
    buckets["+Inf"] = float(len(values))
    return ro.Window(stages={"StartVM": buckets}, empty=empty, lost=lost)


def test_the_gate_passes_the_same_latency_and_fails_a_worse_p99() -> None:
    rule = ro.GateRule()
    base = _window([0.02] * 95 + [0.03] * 5)
    same = ro.evaluate_gate(before=base, after=_window([0.02] * 96 + [0.03] * 4), rule=rule)
    assert same.ok and "within bound" in same.reason
    worse = ro.evaluate_gate(before=base, after=_window([0.02] * 90 + [0.3] * 10), rule=rule)
    assert not worse.ok
    assert worse.reason.startswith("StartVM p99 ") and "× 1.2" in worse.reason
    stage = worse.stages[0]
    assert stage.p99_after_s is not None and stage.p99_before_s is not None
    assert stage.p99_after_s > 5 * stage.p99_before_s


def test_the_gate_fails_a_rise_of_empty_pool_takes_and_of_lost_starts() -> None:
    rule = ro.GateRule(max_empty_increase=0.05)
    before = _window([0.02] * 100, empty=1)
    empty = ro.evaluate_gate(before=before, after=_window([0.02] * 100, empty=20), rule=rule)
    assert not empty.ok and "empty-pool takes per start 0.200 > 0.010 + 0.05" in empty.reason
    lost = ro.evaluate_gate(before=before, after=_window([0.02] * 100, lost=30), rule=rule)
    assert not lost.ok and "lost starts" in lost.reason
    within = ro.evaluate_gate(before=before, after=_window([0.02] * 100, empty=5), rule=rule)
    assert within.ok


def test_too_few_starts_fail_closed_unless_told_to_pass() -> None:
    few = _window([0.02] * 5)
    closed = ro.evaluate_gate(before=few, after=few, rule=ro.GateRule(min_starts=20))
    assert not closed.ok and "too few starts to judge (before 5, after 5" in closed.reason
    opened = ro.evaluate_gate(
        before=few, after=few, rule=ro.GateRule(min_starts=20, few_starts="pass")
    )
    assert opened.ok and "--few-starts pass" in opened.reason
    # A config that stops the stage (nothing completes after) cannot pass by default.
    stopped = ro.evaluate_gate(before=_window([0.02] * 100), after=ro.Window(), rule=ro.GateRule())
    assert not stopped.ok


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("max-p99-increase", {"max_p99_increase": -0.1}),
        ("max-p99-increase", {"max_p99_increase": math.nan}),
        ("p99-slack-s", {"p99_slack_s": math.inf}),
        ("min-starts", {"min_starts": 0}),
        ("few-starts", {"few_starts": "maybe"}),
        ("max-empty-increase", {"max_empty_increase": 2.0}),
    ],
)
def test_gate_rules_are_bounded_and_name_their_option(
    field: str, kwargs: dict[str, object]
) -> None:
    with pytest.raises(ConfigError, match=f"^{field}: must be"):
        ro.GateRule(**kwargs)  # type: ignore[arg-type]


# -- the plan --------------------------------------------------------------------------


def _nodes(n: int, classes: tuple[str, ...] = ("default",)) -> list[tuple[str, str]]:
    return [(f"n{i:02d}", classes[i % len(classes)]) for i in range(n)]


def test_waves_start_with_a_canary_then_double() -> None:
    waves = ro.plan_waves(_nodes(50), waves=3, canary=1)
    assert [len(w) for w in waves] == [1, 16, 33]
    assert sorted(n for w in waves for n in w) == [f"n{i:02d}" for i in range(50)]
    assert [len(w) for w in ro.plan_waves(_nodes(50), waves=4, canary=3)] == [3, 6, 13, 28]
    assert [len(w) for w in ro.plan_waves(_nodes(3), waves=5, canary=1)] == [1, 1, 1]
    assert ro.plan_waves(_nodes(4), waves=1, canary=1) == (("n00", "n01", "n02", "n03"),)
    assert [len(w) for w in ro.plan_waves(_nodes(2), waves=3, canary=5)] == [2]


def test_the_canary_holds_a_node_of_every_class() -> None:
    nodes = [("a0", "gpu"), ("a1", "gpu"), ("a2", "gpu"), ("b0", "cpu"), ("c0", "edge")]
    waves = ro.plan_waves(nodes, waves=2, canary=1)
    assert set(waves[0]) == {"a0", "b0", "c0"}
    assert waves[1] == ("a1", "a2")


def test_canary_counts_and_shares() -> None:
    assert ro.parse_canary("3", nodes=50) == 3
    assert ro.parse_canary("5%", nodes=50) == 3  # 2.5 rounded up
    assert ro.parse_canary("100%", nodes=7) == 7
    for bad in ("0", "-2", "0%", "101%", "nan%", "x", "", "1e3"):
        with pytest.raises(ConfigError, match=r"^canary: expected a node count"):
            ro.parse_canary(bad, nodes=10)


def test_configs_per_class_from_labels() -> None:
    gpu = TunedConfig(limits={"StartVM": 4})
    cpu = TunedConfig(limits={"StartVM": 40})
    classes = [ro.ClassConfig(key="role", value="gpu", config=gpu)]
    nodes = [("a", {"role": "gpu"}), ("b", {"role": "cpu"}), ("c", {})]
    got = ro.assign_configs(nodes, default=cpu, per_class=classes)
    assert [(a.node, a.node_class, a.config) for a in got] == [
        ("a", "role=gpu", gpu),
        ("b", "default", cpu),
        ("c", "default", cpu),
    ]
    with pytest.raises(ConfigError) as missing:
        ro.assign_configs(nodes, default=None, per_class=classes)
    assert str(missing.value) == (
        "nodes.1.labels: node 'b' (labels: role=cpu) has no config for its class; "
        "give --config-for KEY=VALUE:FILE for it, or a default CONFIG"
    )
    two = [*classes, ro.ClassConfig(key="zone", value="eu", config=cpu)]
    with pytest.raises(ConfigError, match=r"^nodes.0.labels: node 'a' is in 2 classes"):
        ro.assign_configs([("a", {"role": "gpu", "zone": "eu"})], default=None, per_class=two)
    with pytest.raises(ConfigError, match=r"^config-for: class role=gpu given twice"):
        ro.assign_configs(nodes, default=cpu, per_class=[*classes, *classes])


def test_config_for_syntax() -> None:
    assert ro.parse_config_for("role=gpu:conf/gpu.yaml") == ("role", "gpu", "conf/gpu.yaml")
    assert ro.parse_config_for("role=gpu:C:/x.yaml") == ("role", "gpu", "C:/x.yaml")
    for bad in ("role", "role=gpu", "role=gpu:", "=gpu:f", "role=:f", "ro le=gpu:f", "r=g pu:f"):
        with pytest.raises(ConfigError, match=r"^config-for: "):
            ro.parse_config_for(bad)


def test_the_digest_is_of_the_content_not_the_layout() -> None:
    a = TunedConfig(limits={"StartVM": 4, "Cgroup": 2})
    b = TunedConfig(limits={"Cgroup": 2, "StartVM": 4})
    assert ro.config_digest(a) == ro.config_digest(b) == ro.config_digest(a.model_dump(mode="json"))
    assert ro.config_digest(a) != ro.config_digest(TunedConfig(limits={"StartVM": 5, "Cgroup": 2}))


# -- the state file --------------------------------------------------------------------


def _state() -> ro.RolloutState:
    config = TunedConfig()
    assignments = ro.assign_configs([("a", {}), ("b", {})], default=config)
    return ro.new_state(assignments, {"a": "http://a:1", "b": "http://b:1"}, [("a",), ("b",)])


def test_the_state_file_round_trips_and_bad_ones_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "rollout.json"
    assert ro.load_state(path) is None
    state = _state()
    ro.save_state(path, state)
    assert ro.load_state(path) == state
    assert [p.name for p in tmp_path.iterdir()] == ["rollout.json"]  # no temp left

    path.write_text("{not json")
    with pytest.raises(ConfigError, match=r"^state: .*rollout.json: not JSON"):
        ro.load_state(path)
    path.write_text(json.dumps({"kind": "bootstorm/tuned-config"}))
    with pytest.raises(ConfigError, match="not a rollout state"):
        ro.load_state(path)
    data = json.loads(state.model_dump_json())
    data["nodes"]["a"]["status"] = "exploded"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as bad:
        ro.load_state(path)
    assert "nodes.a.status" in str(bad.value) and "exploded" in str(bad.value)


def test_stage_seconds_over_http_is_what_the_gate_reads() -> None:
    from conftest import thread_agent

    with thread_agent(TunedConfig(limits={"AddCNI": 2})) as agent:
        for i in range(3):
            with agent.stage("AddCNI", holder=f"sb-{i}"):
                pass
        text = agent.metrics()
        in_force = agent.config_in_force()
    assert "bootstorm_agent_stage_seconds_bucket" in text
    window = ro.parse_window(text)
    assert window.stages["AddCNI"]["+Inf"] == 3 and window.starts == 3
    assert in_force.config.limits == {"AddCNI": 2} and in_force.generation == 1
    assert in_force.source == "file"


# -- the state machine over a fake fleet ------------------------------------------------


class FakeFleet:
    """Nodes as dicts; ``refuse``: PUTs answered 422; ``lose``: PUTs applied
    but answered with no response (a timeout); no metrics (ungated runs)."""

    def __init__(self, names: list[str], config: TunedConfig) -> None:
        self.configs = dict.fromkeys(names, config)
        self.generations = dict.fromkeys(names, 1)
        self.refuse: set[str] = set()
        self.lose: set[str] = set()
        self.puts: list[str] = []

    def read(self, node: str) -> ConfigInForce:
        return ConfigInForce(config=self.configs[node], generation=self.generations[node])

    def push(self, node: str, config: TunedConfig) -> int:
        self.puts.append(node)
        if node in self.refuse:
            raise AgentError(422, "config: no")
        self.configs[node] = config
        self.generations[node] += 1
        if node in self.lose:
            raise AgentError(None, "timed out")
        return self.generations[node]

    def scrape(self, node: str) -> str:
        raise AgentError(None, "no metrics here")


OLD = TunedConfig(limits={"StartVM": 8})
NEW = TunedConfig(limits={"StartVM": 16})


def _fake_rollout(n: int) -> tuple[FakeFleet, ro.RolloutState]:
    names = [f"n{i}" for i in range(n)]
    assignments = ro.assign_configs([(x, {}) for x in names], default=NEW)
    waves = ro.plan_waves([(x, "default") for x in names], waves=3, canary=1)
    return FakeFleet(names, OLD), ro.new_state(assignments, {x: "http://x" for x in names}, waves)


def test_a_lost_answer_that_applied_counts_as_applied_and_failures_roll_back() -> None:
    fleet, state = _fake_rollout(6)
    fleet.lose.add("n0")
    fleet.refuse.add("n4")
    options = ro.RolloutOptions(soak_s=0.0, max_failures=0)
    final = ro.run_rollout(state, configs={"default": NEW}, fleet=fleet, options=options)
    assert final.nodes["n0"].status == "rolled_back"  # found applied, then put back
    assert "read back" not in final.nodes["n0"].message
    assert final.status == "rolled_back" and final.consistent
    assert "n4" in final.reason and all(c == OLD for c in fleet.configs.values())


def test_a_rollback_that_failed_is_retried_on_resume_and_never_overwrites_others() -> None:
    fleet, state = _fake_rollout(6)
    fleet.refuse.add("n5")  # the last wave fails: waves 1-2 go back
    saved: list[ro.RolloutState] = []
    pushed_back: list[str] = []

    def hook(event: str, s: ro.RolloutState) -> None:
        if event.startswith("rolling back"):
            fleet.refuse.add("n1")  # its rollback will be refused
            fleet.configs["n2"] = TunedConfig(limits={"StartVM": 3})  # someone else's
            pushed_back.append(event)

    options = ro.RolloutOptions(soak_s=0.0, max_failures=0)
    final = ro.run_rollout(
        state,
        configs={"default": NEW},
        fleet=fleet,
        options=options,
        save=saved.append,
        on_step=hook,
    )
    assert final.status == "rollback_incomplete" and final.consistent is False
    assert final.nodes["n1"].status == "rollback_failed"
    assert final.nodes["n2"].status == "rollback_failed"
    assert "changed since the push" in final.nodes["n2"].message
    fleet.refuse.discard("n1")
    again = ro.run_rollout(final, configs={"default": NEW}, fleet=fleet, options=options)
    assert again.nodes["n1"].status == "rolled_back" and fleet.configs["n1"] == OLD
    assert fleet.configs["n2"] == TunedConfig(limits={"StartVM": 3})  # left as it was
    assert again.status == "rollback_incomplete"  # n2 still needs a person


def test_a_push_with_every_node_at_target_sends_nothing() -> None:
    fleet, state = _fake_rollout(5)
    fleet.configs = dict.fromkeys(fleet.configs, NEW)
    options = ro.RolloutOptions(soak_s=30.0)  # gated, but nothing to judge: no soak
    final = ro.run_rollout(
        state, configs={"default": NEW}, fleet=fleet, options=options, sleep=_no_sleep
    )
    assert final.ok and fleet.puts == []
    assert {n.status for n in final.nodes.values()} == {"unchanged"}


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"slept {seconds} s with nothing to measure")
