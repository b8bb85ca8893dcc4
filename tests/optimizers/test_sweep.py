"""What-if grids on Dask: every point once, in grid order, the same numbers as a direct run."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

from bootstorm.cli import main
from bootstorm.models import ConfigError, Scenario
from bootstorm.optimizers import SweepGrid, pools_for, run_scenario, sweep

GRID = SweepGrid(
    base=Scenario(sandboxes=20),
    sandboxes=(20, 40),
    cnis=("ipvtap", "veth"),
    pools=("none", "full"),
)


def test_full_pools_follow_each_cnis_sharing_mode() -> None:
    assert pools_for("full", cni="ipvtap", sandboxes=40, tenants=2) == {
        "netns": 40,
        "vport": 2,  # one per tenant
        "ipvtap": 40,
    }
    assert pools_for("full", cni="veth", sandboxes=40, tenants=2)["vport"] == 40  # one per pod
    assert pools_for("none", cni="veth", sandboxes=40, tenants=1) == {}
    assert pools_for("netns=5", cni="veth", sandboxes=40, tenants=1) == {"netns": 5}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ipvtap=40", "pool: 'ipvtap' is not a device kind of cni='veth'"),
        ("netns", "pool: expected none, full or KIND=N,..., but got 'netns'"),
        ("netns=-1", "pool: expected none, full or KIND=N"),
    ],
)
def test_bad_pool_specs_name_the_value(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SweepGrid(cnis=("veth",), pools=(spec,))


def test_unknown_cni_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^cnis\[0\]: must be one of .* \(got 'vxlan'\)$"):
        SweepGrid(cnis=("vxlan",))


def test_grid_is_the_cross_product_in_order() -> None:
    points = GRID.points()
    assert len(points) == 8
    assert [(s.sandboxes, s.cni, p) for s, p in points[:3]] == [
        (20, "ipvtap", "none"),
        (20, "ipvtap", "full"),
        (20, "veth", "none"),
    ]


@pytest.mark.slow
def test_sweep_on_a_local_cluster_matches_direct_runs() -> None:
    seen: list[int] = []
    frame = sweep(GRID, workers=2, on_done=lambda done, total: seen.append(done))
    assert seen == list(range(1, 9))
    assert len(frame) == 8
    assert list(frame["sandboxes"]) == [20, 20, 20, 20, 40, 40, 40, 40]
    for (scenario, _), row in zip(GRID.points(), frame.itertuples(), strict=True):
        assert row.makespan_s == run_scenario(scenario).makespan_s  # same bits on a worker
    # Pools shorten every storm here, and cost memory.
    by = frame.set_index(["sandboxes", "cni", "pools"])
    for n in (20, 40):
        for cni in ("ipvtap", "veth"):
            assert by.loc[(n, cni, "full"), "makespan_s"] < by.loc[(n, cni, "none"), "makespan_s"]
            assert by.loc[(n, cni, "full"), "pool_memory_mib"] > 0


@pytest.mark.slow
def test_sweep_on_a_running_scheduler() -> None:
    from dask.distributed import LocalCluster

    small = SweepGrid(base=Scenario(sandboxes=10), cnis=("ipvtap", "macvtap"))
    with LocalCluster(
        n_workers=1, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.WARNING
    ) as cluster:
        frame = sweep(small, scheduler=cluster.scheduler_address)
    assert list(frame["cni"]) == ["ipvtap", "macvtap"]


@pytest.mark.slow
def test_sweep_cli_writes_csv_and_parquet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sweep", "--sandboxes", "10,20", "--cni", "ipvtap,ipvlan", "--pool", "none"]
    main([*args, "--workers", "1", "--output", str(tmp_path / "s.csv")])
    out = " ".join(capsys.readouterr().out.split())
    assert "sweep: 4 storms" in out
    csv = pd.read_csv(tmp_path / "s.csv", keep_default_na=False)
    assert list(csv["sandboxes"]) == [10, 10, 20, 20]
    # Each point names the known misses it rests on; the table lists them once.
    assert list(csv["caveats"]) == ["", "S0-5,S0-Fig6"] * 2
    assert "caution: the papers measured otherwise S0-5 ipvtap is the slowest" in out
    assert "…" not in out  # 13 columns at 80 had every cell cut to "15…"
    args += ["--workers", "1"]
    main([*args, "--output", str(tmp_path / "s.parquet")])
    parquet = pd.read_parquet(tmp_path / "s.parquet")
    assert parquet["makespan_s"].tolist() == pytest.approx(csv["makespan_s"].tolist())


def test_sweep_cli_refuses_other_formats(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--output", "s.xlsx"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: output: expected a .csv or .parquet file, but got 's.xlsx'"
    )


@pytest.mark.slow
def test_sweep_prints_no_dask_info_lines(tmp_path: Path) -> None:
    """Run as a user does (its own process, logging as the CLI sets it up):
    Dask's scheduler and nannies logged ~30 INFO lines before the table."""
    import subprocess
    import sys

    argv = ["sweep", "--sandboxes", "10", "--cni", "ipvtap,veth", "--workers", "1"]
    out = subprocess.run(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "INFO" not in out.stderr + out.stdout, out.stderr[:1000]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--sandboxes", "100000000"], "error: sandboxes: 100000000 sandboxes would need about"),
        (["--profile", "BAD"], "service_cv: Input should be greater than or equal to 0"),
    ],
)
def test_a_point_no_worker_could_run_is_refused_before_the_cluster_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """Refused inside a worker, a point printed Dask's traceback ahead of
    its one line; checked before any worker starts, it is that line alone."""
    bad = tmp_path / "profile.yaml"
    text = Path(__file__).resolve().parents[2] / "models" / "profiles" / "paper-000.yaml"
    bad.write_text(text.read_text().replace("service_cv: ", "service_cv: -1 #", 1))
    argv = [str(bad) if a == "BAD" else a for a in argv]
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--workers", "1", "--sandboxes", "5", *argv])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err


def test_an_unreachable_scheduler_is_one_line() -> None:
    """It was three chained tracebacks, exit 1."""
    grid = SweepGrid(base=Scenario(sandboxes=5))
    with pytest.raises(ConfigError, match=r"scheduler: no Dask scheduler answered at 'tcp://"):
        sweep(grid, scheduler="tcp://127.0.0.1:9")
