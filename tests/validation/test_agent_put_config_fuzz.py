"""``PUT /config`` under Hypothesis: random YAML/JSON documents, valid and invalid
configs, alias bombs, deep nesting and huge numbers. Every answer is a 200 or a
4xx with a one-line error, and a refused PUT changes nothing: ``GET /config``,
the generation and the lease TTL in force are what they were.

Run with ``-s`` to see the summary line (cases, applied, refused by status).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from conftest import TOKEN, NoDevices, free_pool_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from bootstorm.models.tuned import (
    MAX_LEASE_TTL_S,
    MAX_LIMIT,
    MAX_POOL_SIZE,
    MAX_RTNL_PRIORITY,
    MIN_LEASE_TTL_S,
)
from bootstorm.validation.agent import AgentSettings, agent_in_thread

EXAMPLES = 300
PROBE_STAGE = "ZzFuzzTtlProbe"
STAGES = ["StartVM", "Cgroup", "AddCNI", "AttachIf", "NetNS", "dma-ram", "vf-driver"]
#: Pool kinds this agent does not make: any size is only a number to it.
IGNORED_KINDS = ["ipvtap", "vport", "macvtap"]
FIELDS = ["limits", "pools", "rtnl_priority", "lease_ttl_s", "origin", "schema_version", "kind"]


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    settings_ = AgentSettings(token=SecretStr(TOKEN), port=0, pool_id=free_pool_id())
    with (
        agent_in_thread(settings_, device_ops=NoDevices()) as url,
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        ) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def tally() -> Iterator[Counter[str]]:
    counts: Counter[str] = Counter()
    yield counts
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()) if k != "cases")
    print(f"\nPUT /config fuzz: {counts['cases']} cases ({statuses})")


stage_names = st.sampled_from(STAGES) | st.from_regex(
    r"[A-Za-z][A-Za-z0-9_.-]{0,12}", fullmatch=True
)
valid_configs = st.fixed_dictionaries(
    {},
    optional={
        "limits": st.dictionaries(stage_names, st.integers(1, MAX_LIMIT), max_size=5),
        "pools": st.dictionaries(
            st.sampled_from(IGNORED_KINDS), st.integers(0, MAX_POOL_SIZE), max_size=3
        )
        | st.dictionaries(st.sampled_from(["netns", "veth", "tap"]), st.integers(0, 2)),
        "rtnl_priority": st.dictionaries(
            stage_names, st.integers(-MAX_RTNL_PRIORITY, MAX_RTNL_PRIORITY), max_size=3
        ),
        "lease_ttl_s": st.floats(MIN_LEASE_TTL_S, MAX_LEASE_TTL_S),
        "origin": st.fixed_dictionaries(
            {"profile": st.text(max_size=8), "cni": st.text(max_size=8)},
            optional={"sandboxes": st.integers(1, MAX_LIMIT)},
        ),
    },
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=8) | stage_names, inner, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def mutated_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid config with one field, or one entry of a map, set to anything."""
    config: dict[str, Any] = draw(valid_configs)
    field = draw(st.sampled_from([*FIELDS, "colour"]))
    if field in ("limits", "pools", "rtnl_priority") and draw(st.booleans()):
        config[field] = {**config.get(field, {}), draw(stage_names | st.text()): draw(values)}
    else:
        config[field] = draw(values)
    return config


def render(doc: Any, as_json: bool) -> str:
    return json.dumps(doc) if as_json else yaml.safe_dump(doc)


documents = st.builds(render, valid_configs | mutated_configs() | values, st.booleans())


@st.composite
def alias_bombs(draw: st.DrawFn) -> str:
    levels, width = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    lines.append(f"{draw(st.sampled_from(FIELDS))}: *a{levels - 1}")
    return "\n".join(lines) + "\n"


@st.composite
def deep_nesting(draw: st.DrawFn) -> str:
    depth = draw(st.integers(25, 3000))
    field = draw(st.sampled_from(FIELDS))
    if draw(st.booleans()):
        return f"{field}: " + "[" * depth + "]" * depth
    return '{"' + field + '": ' + '{"a": ' * depth + "1" + "}" * (depth + 1)


@st.composite
def huge_numbers(draw: st.DrawFn) -> str:
    digits = "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=20, max_size=40)))
    number = digits * draw(st.integers(1, 200))  # up to 8 000 digits
    number = draw(st.sampled_from(["", "-", "0x", "1."])) + number
    template = draw(
        st.sampled_from(
            [
                "lease_ttl_s: {n}",
                '{{"limits": {{"StartVM": {n}}}}}',
                "pools: {{ipvtap: {n}}}",
                "rtnl_priority: {{Cgroup: {n}}}",
                'lease_ttl_s: "{n}"',
                "origin: {{profile: p, cni: c, sandboxes: {n}}}",
            ]
        )
    )
    return template.format(n=number)


bodies = st.one_of(
    st.builds(render, valid_configs, st.booleans()).map(str.encode),  # 200s, in force whole
    documents.map(str.encode),
    alias_bombs().map(str.encode),
    deep_nesting().map(str.encode),
    huge_numbers().map(str.encode),
    st.text(max_size=200).map(str.encode),
    st.binary(max_size=200),
)


def observed(http: httpx.Client) -> tuple[dict[str, Any], str, float]:
    """What a PUT could change: the config shown, its generation, the TTL granted now."""
    r = http.get("/config")
    assert r.status_code == 200
    lease = http.post(f"/v1/stages/{PROBE_STAGE}/acquire", json={"holder": "fuzz", "wait_s": 5})
    assert lease.status_code == 200, lease.text
    assert http.post(f"/v1/leases/{lease.json()['lease_id']}/release").status_code == 200
    return r.json(), r.headers["X-Bootstorm-Config-Generation"], lease.json()["ttl_s"]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=bodies)
def test_every_put_is_applied_whole_or_refused_without_a_trace(
    http: httpx.Client, tally: Counter[str], body: bytes
) -> None:
    config_before, generation_before, ttl_before = observed(http)
    r = http.put("/config", content=body)
    tally["cases"] += 1
    tally[str(r.status_code)] += 1
    assert r.status_code == 200 or 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/json")
    config_after, generation_after, ttl_after = observed(http)
    if r.status_code == 200:
        applied = r.json()["config"]
        assert config_after == applied
        assert int(generation_after) == int(generation_before) + 1
        assert ttl_after == applied["lease_ttl_s"]
    else:
        error = r.json()["error"]
        assert isinstance(error, str) and error and "\n" not in error, error
        assert config_after == config_before
        assert generation_after == generation_before
        assert ttl_after == ttl_before
