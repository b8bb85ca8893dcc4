"""``bootstorm dataplane`` and ``simulate --background-flows``: tables, JSON, errors."""

from __future__ import annotations

import json

import pytest

from bootstorm.cli import main


def test_dataplane_table(capsys: pytest.CaptureFixture[str]) -> None:
    main(["dataplane", "--profile", "paper-004", "--path", "docker-overlay", "--flows", "1,6"])
    out = capsys.readouterr().out
    assert "docker-overlay tcp on paper-004" in out
    # Headers fold to fit 80 columns ("softirq" over "/s"); numbers never wrap.
    assert "softirq" in out and "6.40" in out


def test_dataplane_json_one_object_per_flow_count(capsys: pytest.CaptureFixture[str]) -> None:
    main(["dataplane", "--path", "native", "--flows", "1,2", "--proto", "udp", "--json"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["traffic"]["flows"] == 1 and first["traffic"]["proto"] == "udp"
    assert first["per_flow_ceiling_gbps"] == pytest.approx(9.3, rel=0.05)
    assert {"cpu_softirq_cores", "cpu_system_cores", "irq_per_s", "softirq_per_s"} <= set(first)
    assert first["caveats"] == []  # one flow: no known miss concerns it
    assert [c["key"] for c in json.loads(lines[1])["caveats"]] == ["S2-2/spread"]


def test_dataplane_placement_warns_of_the_missed_pinning_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(
        [
            "dataplane",
            "--profile",
            "paper-002",
            "--path",
            "bridge-intra",
            "--flows",
            "48",
            "--placement",
            "pinned-together",
        ]
    )
    text = " ".join(capsys.readouterr().out.split())
    assert "caution: the papers measured otherwise" in text
    assert "S2-3 pinning each pair to one core" in text


def test_dataplane_flow_completion_and_its_caution_at_80_columns() -> None:
    """Issue 36: completion times are an output (``--flow-bytes``) and say
    that seed 002 measured them longer; macvlan's cost is fitted now (it was
    veth's, which put macvlan above OVS), so the order needs no caution."""
    from test_tables_80 import piped

    args = ["dataplane", "--profile", "paper-002", "--path", "macvlan-intra"]
    stdout = piped([*args, "--flows", "10,50", "--flow-bytes", str(5 * 2**20)])
    assert "flow completion, 5,242,880 bytes per flow" in stdout
    assert "p99 ms" in stdout
    text = " ".join(stdout.split())
    assert "S2-Fig5 p99 completion" in text and "S2-Fig2" not in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--flows", "1,x"], "flows: expected integers"),
        (["--path", "nope"], "traffic: path:"),
        (["--profile", "paper-001"], "no `dataplane` section"),
        # The kernel refuses such a send (EMSGSIZE); it was modelled.
        (
            ["--proto", "udp", "--message-bytes", "100000"],
            "message_bytes: Value error, a UDP datagram holds at most 65,507 bytes",
        ),
    ],
)
def test_dataplane_bad_input_is_one_line_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["dataplane", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_simulate_with_background_flows(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--sandboxes", "40", "--cores", "8", "--json"]
    main(base)
    quiet = json.loads(capsys.readouterr().out)
    main([*base, "--background-flows", "30", "--flow-gbps", "1"])
    busy = json.loads(capsys.readouterr().out)
    assert busy["scenario"]["background_flows"] == 30
    assert busy["makespan_s"] > quiet["makespan_s"]
    assert "background" not in quiet
    taken = busy["background"]
    assert taken["path"] == "kata-tap"  # ipvtap's sandboxes receive through a tap
    assert taken["delivered_gbps"] == pytest.approx(30.0)
    assert taken["cores_taken"] > taken["softirq_cores"] > 0.0
