"""The hold-stretch probe's netlink requests, decoded by pyroute2: a known
answer for each message it sends; its refusals (no root: nothing is sent)."""

from __future__ import annotations

import os

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from bootstorm.validation.testbed import _hold_probe as probe

NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400


def _decoded(data: bytes) -> ifinfmsg:
    msg = ifinfmsg(data)
    msg.decode()
    assert msg["header"]["length"] == len(data)
    return msg


def test_a_veth_pair_is_one_newlink_with_its_peer_inside() -> None:
    msg = _decoded(probe.veth_request("bstabcdsa7", "bstabcdsb7", seq=7))
    assert msg["header"]["type"] == 16  # RTM_NEWLINK
    assert msg["header"]["flags"] == NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    assert msg["header"]["sequence_number"] == 7
    assert msg.get_attr("IFLA_IFNAME") == "bstabcdsa7"
    info = msg.get_attr("IFLA_LINKINFO")
    assert info.get_attr("IFLA_INFO_KIND") == "veth"
    peer = info.get_attr("IFLA_INFO_DATA").get_attr("VETH_INFO_PEER")
    assert peer.get_attr("IFLA_IFNAME") == "bstabcdsb7"


def test_up_and_down_change_only_the_up_flag() -> None:
    up = _decoded(probe.updown_request("bstabcdsw0", True, seq=1))
    down = _decoded(probe.updown_request("bstabcdsw0", False, seq=2))
    for msg, flags in ((up, 1), (down, 0)):
        assert msg["header"]["type"] == 16 and msg["header"]["flags"] == NLM_F_REQUEST | NLM_F_ACK
        assert msg["flags"] == flags and msg["change"] == 1
        assert msg.get_attr("IFLA_IFNAME") == "bstabcdsw0"


def test_a_delete_names_its_link_or_its_group() -> None:
    msg = _decoded(probe.delete_request("bstabcdsa0", seq=3))
    assert msg["header"]["type"] == 17  # RTM_DELLINK
    assert msg.get_attr("IFLA_IFNAME") == "bstabcdsa0"
    group = _decoded(probe.delete_group_request(7, seq=4))
    assert group["header"]["type"] == 17 and group["index"] == 0
    assert group.get_attr("IFLA_GROUP") == 7 and group.get_attr("IFLA_IFNAME") is None


def test_the_holders_pairs_are_one_group() -> None:
    msg = _decoded(probe.veth_request("bstabcdsa1", "bstabcdsb1", seq=1, group=7))
    assert msg.get_attr("IFLA_GROUP") == 7
    assert _decoded(probe.veth_request("x", "y", seq=1)).get_attr("IFLA_GROUP") is None


def test_a_bad_role_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    before = os.sched_getaffinity(0)
    assert probe.main(["juggler", "/nonexistent", "0"]) == 1
    err = capsys.readouterr().err
    assert err == "hold probe: role: expected holder or witness, but got 'juggler'\n"
    assert os.sched_getaffinity(0) == before  # refused before pinning itself


def test_a_bad_count_is_refused_before_anything_is_made() -> None:
    from bootstorm.validation.testbed._leftovers import RunNames
    from bootstorm.validation.testbed.hold_stretch import measure_hold_stretch

    with pytest.raises(ValueError, match=r"requests: must be in 1\.\.10000, but got 0"):
        measure_hold_stretch(RunNames("zzzz"), requests=0)
    with pytest.raises(ValueError, match=r"rounds: must be at least 1, but got 0"):
        measure_hold_stretch(RunNames("zzzz"), rounds=0)
