"""The registry of known misses: one entry per strict xfail of the paper
checks, and the what-ifs each one concerns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bootstorm.calibration import KNOWN_MISSES, KnownMiss, caveats, known_miss
from bootstorm.models import Scenario, Traffic

TESTS = Path(__file__).resolve().parents[1]
# known_miss("KEY"), or a KEY as the value of a dict of expected misses
# (``"S1-4/p99:label": "S1-4/p99",``) that the test passes to known_miss.
_USE = re.compile(r'known_miss\("([^"]+)"\)|^\s+"[^"]+":\s*"(S\d-[^"]+)",$', re.M)


def _test_sources() -> dict[Path, str]:
    return {p: p.read_text() for p in TESTS.rglob("test_*.py") if p.name != Path(__file__).name}


def test_every_registered_miss_marks_a_test_and_every_mark_is_registered() -> None:
    used = {a or b for text in _test_sources().values() for a, b in _USE.findall(text) if a or b}
    assert used == set(KNOWN_MISSES), (
        f"registered but marking no test: {sorted(set(KNOWN_MISSES) - used)}; "
        f"marking a test but not registered: {sorted(used - set(KNOWN_MISSES))}"
    )


def test_every_strict_xfail_of_a_paper_check_takes_its_reason_from_the_registry() -> None:
    """A miss noted only in a test's reason would reach no planner."""
    for path, text in _test_sources().items():
        if "paper" not in path.name:
            continue
        for match in re.finditer(r"xfail\(", text):
            mark = text[match.start() : text.index(")", text.index("reason=", match.start()))]
            # ``reason=reason``: the parametrised row checks, whose reason is
            # known_miss(_EXPECTED_MISS[key]).reason a line above.
            assert "known_miss(" in mark or "reason=reason" in mark, (
                f"{path.name}: an xfail without known_miss: {mark!r}"
            )


def test_every_strict_xfail_of_a_paper_check_expects_an_assertion_error() -> None:
    """A strict xfail without ``raises=AssertionError`` takes a crash (a
    refactor's TypeError) for the expected miss; with it, only the check's
    own assertion counts. (tests/calibration only: the lead owns
    tests/optimizers/test_search_paper_000.py, whose four xfails need the same.)"""
    for path, text in _test_sources().items():
        if "paper" not in path.name or path.parent.name != "calibration":
            continue
        for match in re.finditer(r"xfail\(", text):
            depth, end = 0, match.end() - 1
            for end in range(match.end() - 1, len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            mark = text[match.start() : end + 1]
            assert "raises=AssertionError" in mark, f"{path.name}: {mark!r}"


def test_reason_names_row_and_mechanism() -> None:
    miss = known_miss("S0-11/veth")
    assert miss.reason.startswith("known miss (S0-11, predict): ")
    assert miss.says in miss.reason and miss.why in miss.reason


def test_an_unknown_key_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="no known miss 'S9-9/x'; known: S0-1/edge, S0-3/no-network"):
        known_miss("S9-9/x")


def test_a_key_must_start_with_its_row() -> None:
    with pytest.raises(
        ValueError, match=r"^key: must start with row='S0-13' \+ '/' \(got 'S0-8/x'\)$"
    ):
        KnownMiss(key="S0-8/x", row="S0-13", profile="paper-000", says="s", why="w")


def _keys(*whats: Scenario | Traffic) -> list[str]:
    return [m.key for m in caveats(*whats)]


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        # the default storm and the demo's baseline: nothing to warn of
        (Scenario(), []),
        (Scenario(cni="ipvtap", pools={"netns": 400, "vport": 1, "ipvtap": 400}), []),
        (Scenario(cni="ipvtap", qos_rules=2), []),  # one tenant: S0-11 holds there
        (Scenario(cni="veth"), ["S0-5/order"]),
        (Scenario(cni="veth", qos_rules=2), ["S0-5/order", "S0-11/veth"]),
        (Scenario(cni="ipvtap", qos_rules=2, tenants=50), ["S0-13/qos-tenants"]),
        # one vPort for all: no S0-13, but tc-routing is predicted too fast
        (Scenario(cni="tc-routing", qos_rules=2, tenants=50), ["S0-5/order"]),
        (Scenario(cni="ipvtap", limits={"Cgroup": 40}), ["S0-8/cut", "S0-8/cpu"]),
        (  # some devices still made: S0-8's case
            Scenario(cni="ipvtap", limits={"Cgroup": 40}, pools={"netns": 400, "vport": 1}),
            ["S0-8/cut", "S0-8/cpu"],
        ),
        (  # every device pooled: S0-9's case
            Scenario(
                cni="ipvtap", limits={"Cgroup": 40}, pools={"netns": 400, "vport": 1, "ipvtap": 400}
            ),
            ["S0-9/total", "S0-9/on-top"],
        ),
        (Scenario(cni="ipvlan"), ["S0-5/order", "S0-Fig6/ipvlan-cgroup"]),
        (Scenario(cni="no-network"), ["S0-1/edge", "S0-3/no-network"]),
        (
            Scenario(cni="no-network", sandboxes=200, profile="paper-001"),
            ["S0-1/edge", "S0-3/no-network", "S1-4/p99"],
        ),
        (
            Scenario(cni="fastiov", sandboxes=200, profile="paper-001"),
            ["S1-4/p99", "S1-4/vf-time"],
        ),
        (
            Scenario(cni="sriov-vanilla", sandboxes=10, memory_mib=2048, profile="paper-001"),
            ["S1-2/shares", "S1-4/p99", "S1-4/vf-time", "S1-7/at-10", "S1-8/memory"],
        ),
        (Traffic(path="docker-overlay", flows=1), []),
        (Traffic(path="bridge-intra", flows=48), ["S2-2/spread", "S2-2/extremes"]),
        (
            Traffic(path="bridge-intra", flows=48, placement="pinned-together"),
            ["S2-2/spread", "S2-2/extremes", "S2-3/bridge-together"],
        ),
        # issue 36: the Linux overlay and macvlan missed silently
        (Traffic(path="linux-overlay"), ["S4-1/linux-overlay"]),
        (Traffic(path="linux-overlay", proto="udp"), ["S4-2/linux-overlay"]),
        (Traffic(path="macvlan-intra"), []),  # its cost is fitted now (S2-Fig5/macvlan)
        (
            Traffic(path="ovs-intra", flows=10, flow_bytes=5 * 2**20),
            ["S2-2/spread", "S2-2/extremes", "S2-Fig5/p99", "S2-Fig5/growth"],
        ),
        (Traffic(path="ovs-intra", flow_bytes=5 * 2**20), ["S2-Fig5/p99"]),
        (
            Traffic(path="docker-overlay", proto="udp", message_bytes=64),
            ["S4-Fig11/irq", "S4-5/rate"],
        ),
        (
            Traffic(path="docker-overlay", message_bytes=256),
            ["S4-Fig8/lower-cpu"],
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_caveats_match_the_what_ifs_their_rows_test(
    what: Scenario | Traffic, expected: list[str]
) -> None:
    assert _keys(what) == expected


def test_caveats_of_several_what_ifs_come_once_each_in_registry_order() -> None:
    one = Traffic(path="ovs-intra", flows=48, placement="pinned-apart")
    keys = _keys(one, one.model_copy(update={"flows": 10}), Scenario(cni="veth", qos_rules=2))
    assert keys == ["S0-5/order", "S0-11/veth", "S2-2/spread", "S2-2/extremes", "S2-3/ovs-apart"]


def test_comparison_rows_concern_no_single_what_if() -> None:
    for key in ("S0-5/gap", "S1-10/makespan", "S0-Fig6/ipvtap-cgroup"):
        miss = known_miss(key)
        assert miss.storm is None and miss.traffic is None
