"""The testbed's ``netns-veth`` pool without root: names, the sweep, admission, options."""

from __future__ import annotations

from bootstorm.models import TunedConfig
from bootstorm.validation._names import owned_link, owned_netns
from bootstorm.validation.testbed import LocalAdmission, StormOptions
from bootstorm.validation.testbed._leftovers import RunNames, _run_of_link, _run_of_netns


def test_pool_names_carry_the_run_and_are_swept() -> None:
    names = RunNames("ab12")
    netns, host_end = names.pool_netns_veth(9999)
    assert (netns, host_end) == ("bst-ab12-v9999", "bstab12n9999")
    assert owned_netns(netns) and owned_link(host_end) and len(host_end.encode()) <= 15
    assert _run_of_netns(netns) == "ab12" and _run_of_link(host_end) == "ab12"
    # Distinct from every other name of the run.
    others = {names.netns(0), names.pool_netns(0), names.host_link(0), *names.pool_veth(0)}
    assert not {netns, host_end} & others
    assert _run_of_link("bstab12nx") is None


def test_local_admission_hands_out_each_netns_veth_once() -> None:
    adm = LocalAdmission(
        pools={"netns": ["n0"]},
        pairs={"veth": [("a0", "b0")], "netns-veth": [("ns0", "h0"), ("ns1", "h1")]},
    )
    assert adm.take_netns_veth("x") == ("ns0", "h0")
    assert adm.take_netns_veth("y") == ("ns1", "h1")
    assert adm.take_netns_veth("z") is None
    # The other pools are untouched: they serve the sandboxes that found it empty.
    assert adm.take("netns", "z") == "n0" and adm.take_pair("veth", "z") == ("a0", "b0")
    assert LocalAdmission().take_netns_veth("x") is None


def test_options_take_a_netns_veth_pool_alone_or_with_the_others() -> None:
    for pools in ({"netns-veth": 6}, {"netns-veth": 2, "netns": 6, "veth": 6}):
        options = StormOptions(sandboxes=6, config=TunedConfig(pools=pools))
        assert options.config is not None and options.config.pools == pools
