"""The memory a pooled device holds: the measurement's arithmetic, with fakes.

No root: a fake maker "makes" devices by moving a fake ``/proc/meminfo``,
so each answer is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from bootstorm.traces.operations import POOL_DEVICE_KINDS
from bootstorm.validation.testbed.ops import (
    measure_operations,
    pool_memory_rounds,
    read_memory_kib,
)

#: KiB one device of each kind takes from MemAvailable plus the per-CPU lists.
HELD_KIB = {"netns": 180, "veth": 76, "tap": 40, "netns-veth": 260}


class FakeHost:
    """/proc/meminfo of a host whose devices each hold ``HELD_KIB`` (Slab its
    whole, SUnreclaim 90% of it); a share ``from_pcp`` of each device's pages
    comes off the per-CPU free lists, leaving MemAvailable as it was."""

    def __init__(self, *, from_pcp: float = 0.0, noise_kib: tuple[int, ...] = ()) -> None:
        self.mem_available = 20_000_000
        self.pcp = 100_000
        self.slab = 300_000
        self.sunreclaim = 200_000
        self.live: set[tuple[str, int]] = set()
        self.calls: list[str] = []
        self.from_pcp = from_pcp
        #: Other work: what it takes from MemAvailable at each read after a
        #: batch, in turn (it gives it back before the next batch).
        self.noise_kib = list(noise_kib)
        self.reads = 0

    def make(self, kind: str, index: int) -> None:
        assert (kind, index) not in self.live
        self.live.add((kind, index))
        self.calls.append(f"make {kind} {index}")
        held = HELD_KIB[kind]
        from_lists = round(held * self.from_pcp)
        self.pcp -= from_lists
        self.mem_available -= held - from_lists
        self.slab += held
        self.sunreclaim += held * 9 // 10

    def remove(self, kind: str, index: int) -> None:
        self.calls.append(f"remove {kind} {index}")
        if (kind, index) not in self.live:
            return  # never made: nothing to do
        self.live.remove((kind, index))
        held = HELD_KIB[kind]
        self.mem_available += held  # freed pages go back to the buddy lists here
        self.slab -= held
        self.sunreclaim -= held * 9 // 10

    def read(self) -> Mapping[str, int]:
        self.reads += 1
        after_a_batch = self.reads % 2 == 0
        noise = self.noise_kib.pop(0) if after_a_batch and self.noise_kib else 0
        return {
            "MemAvailable": self.mem_available - noise,
            "PcpFree": self.pcp,
            "Slab": self.slab,
            "SUnreclaim": self.sunreclaim,
            "Percpu": 9_000,
        }


def test_a_batch_per_kind_and_round_gives_the_known_memory_per_device() -> None:
    host = FakeHost()
    got = pool_memory_rounds(host, devices=10, rounds=3, warmup=1, read_memory=host.read)
    assert [m.kind for m in got] == list(POOL_DEVICE_KINDS)
    for m in got:
        held = HELD_KIB[m.kind]
        assert (m.devices, m.rounds, m.warmup) == (10, 3, 1)
        assert m.mem_available_drop_kib == (10 * held,) * 3
        assert m.held_kib == (10 * held,) * 3
        assert m.slab_growth_kib == (10 * held,) * 3
        assert m.sunreclaim_growth_kib == (10 * (held * 9 // 10),) * 3
        assert m.percpu_growth_kib == (0,) * 3
        assert m.median_mib == pytest.approx(held / 1024)
        assert m.q25_mib == m.q75_mib == pytest.approx(held / 1024)
    assert not host.live  # every batch removed


def test_pages_off_the_per_cpu_lists_count_as_held() -> None:
    """MemAvailable counts the per-CPU free lists as in use: a batch served
    from them moves it by only part of what the batch holds."""
    host = FakeHost(from_pcp=0.75)
    (m,) = pool_memory_rounds(host, devices=20, rounds=2, kinds=("netns",), read_memory=host.read)
    assert m.mem_available_drop_kib == (20 * 45,) * 2  # a quarter of 180 KiB
    assert m.pcp_growth_kib == (-20 * 135,) * 2
    assert m.held_kib == (20 * 180,) * 2
    assert m.median_mib == pytest.approx(180 / 1024)
    assert m.per_device_mib(figure="mem_available_drop_kib") == pytest.approx(45 / 1024)


def test_the_median_over_rounds_is_the_value_and_the_quartiles_its_spread() -> None:
    # Other work takes memory too while a batch is held (one round frees some).
    host = FakeHost(noise_kib=(0, 400, -200, 1000))
    (m,) = pool_memory_rounds(host, devices=10, rounds=4, kinds=("tap",), read_memory=host.read)
    # 10 taps × 40 KiB and the noise: 40, 80, 20, 140 KiB per device.
    assert m.mem_available_drop_kib == (400, 800, 200, 1400)
    assert m.median_mib == pytest.approx(60 / 1024)  # (40 + 80) / 2
    # numpy's linear quartiles of 20, 40, 80, 140: 20 + 0.75 × 20, 80 + 0.25 × 60.
    assert (m.q25_mib, m.q75_mib) == pytest.approx((35 / 1024, 95 / 1024))


def test_rounds_interleave_the_kinds_each_starting_one_further() -> None:
    host = FakeHost()
    pool_memory_rounds(
        host, devices=1, rounds=3, kinds=("netns", "veth", "tap"), read_memory=host.read
    )
    made = [c.split()[1] for c in host.calls if c.startswith("make")]
    assert made == ["netns", "veth", "tap", "veth", "tap", "netns", "tap", "netns", "veth"]


def test_warmup_rounds_are_made_and_discarded() -> None:
    host = FakeHost()
    (m,) = pool_memory_rounds(
        host, devices=2, rounds=2, warmup=3, kinds=("veth",), read_memory=host.read
    )
    assert m.rounds == 2 and m.warmup == 3
    assert sum(c.startswith("make") for c in host.calls) == 2 * 5


def test_a_failed_batch_removes_what_it_made_and_says_why() -> None:
    host = FakeHost()
    real_make = host.make

    def make(kind: str, index: int) -> None:
        if index == 3:
            raise OSError("EEXIST")
        real_make(kind, index)

    host.make = make  # type: ignore[method-assign]
    with pytest.raises(OSError, match="EEXIST"):
        pool_memory_rounds(host, devices=5, rounds=1, kinds=("tap",), read_memory=host.read)
    assert not host.live
    # The device that failed half-made is removed too (removing nothing is fine).
    assert [c for c in host.calls if c.startswith("remove")] == [
        f"remove tap {i}" for i in range(4)
    ]


def test_a_missing_figure_is_named() -> None:
    host = FakeHost()

    def old_kernel() -> Mapping[str, int]:
        return {k: v for k, v in host.read().items() if k != "MemAvailable"}

    with pytest.raises(ValueError, match=r"^read_memory: no MemAvailable figure"):
        pool_memory_rounds(host, devices=1, rounds=1, read_memory=old_kernel)
    assert host.calls == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"devices": 0}, "pool_devices"),
        ({"devices": 100_001}, "pool_devices"),
        ({"rounds": 0}, "pool_rounds"),
        ({"warmup": -1}, "pool_warmup"),
        ({"kinds": ()}, "pool_kinds"),
        ({"kinds": ("macvtap",)}, "pool_kinds"),
        ({"kinds": ("tap", "tap")}, "pool_kinds"),
    ],
)
def test_bad_arguments_name_themselves(kwargs: dict[str, object], field: str) -> None:
    host = FakeHost()
    args: dict[str, object] = {"devices": 1, "rounds": 1} | kwargs
    with pytest.raises(ValueError, match=rf"^{field}: "):
        pool_memory_rounds(host, read_memory=host.read, **args)  # type: ignore[arg-type]
    assert host.calls == []


def test_measure_operations_checks_its_pool_arguments_before_anything() -> None:
    with pytest.raises(ValueError, match=r"^pool_devices: "):
        measure_operations(pool_devices=-1)
    with pytest.raises(ValueError, match=r"^pool_rounds: "):
        measure_operations(pool_devices=10, pool_rounds=0)


def test_read_memory_kib_reads_meminfo_and_the_per_cpu_lists(tmp_path: Path) -> None:
    import os

    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       24683520 kB\n"
        "MemAvailable:   23858980 kB\n"
        "Slab:             301012 kB\n"
        "SUnreclaim:       120004 kB\n"
        "HugePages_Total:       0\n"
        "Percpu:             9120 kB\n"
    )
    zoneinfo = tmp_path / "zoneinfo"
    zoneinfo.write_text(
        "Node 0, zone   Normal\n"
        "  pages free     4117692\n"
        "  pagesets\n"
        "    cpu: 0\n"
        "              count:    100\n"
        "              high:     15678\n"
        "    cpu: 1\n"
        "              count:    28\n"
        "              high:     18439\n"
    )
    got = read_memory_kib(meminfo, zoneinfo)
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    assert got["MemAvailable"] == 23858980 and got["Slab"] == 301012
    assert got["SUnreclaim"] == 120004 and got["Percpu"] == 9120
    assert got["HugePages_Total"] == 0
    assert got["PcpFree"] == 128 * page_kib


def test_this_hosts_proc_files_have_every_figure() -> None:
    if not Path("/proc/zoneinfo").exists():
        pytest.skip("no /proc/zoneinfo")
    got = read_memory_kib()
    for figure in ("MemAvailable", "PcpFree", "Slab", "SUnreclaim", "Percpu"):
        assert got[figure] >= 0, figure
