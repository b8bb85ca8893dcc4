"""The candidates' tables (``validate --candidates``, ``tune``) at 80 columns,
piped: every figure whole. Twelve columns in one table were cut to "ma…",
"13…" and "-16…" (issue 37)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from rich.console import Console
from test_tables_80 import CUT, piped

from bootstorm._render_node import candidates_table
from bootstorm.workflows import validate_candidates

RANKING = Path(__file__).resolve().parents[2] / "traces" / "data" / "cni" / "ranking"
CANDIDATES = [
    "pool-netns-veth150.yaml",
    "pool-netns-veth75.yaml",
    "limit-startvm2.yaml",
    "limit-startvm1.yaml",
]


def _readable(text: str) -> None:
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80, max(len(x) for x in lines)
    assert not CUT.search(text), CUT.findall(text)


def test_validate_candidates_prints_whole_figures_when_piped() -> None:
    argv = ["validate", "--profile", "../plan/local.yaml", "--measured-dir", "."]
    argv += ["--sandboxes", "150", "--threshold", "1"]
    for c in CANDIDATES:
        argv += ["--candidates", c]
    out = piped(argv, cwd=RANKING)
    assert "pool-netns-veth150" in out and "13.42" in out


def test_tunes_candidates_table_prints_whole_figures_at_80_columns() -> None:
    cwd = os.getcwd()
    os.chdir(RANKING)
    try:
        outcome = validate_candidates(
            candidates=CANDIDATES,
            baseline=True,
            sandboxes=150,
            repeat=5,
            profile=Path("../plan/local.yaml"),
            calibrate_from=None,
            measured_dir=Path("."),
            trace_out=None,
            threshold=1.0,
            min_spearman=0.9,
            vm=True,
            runtime="cni",
        )
    finally:
        os.chdir(cwd)
    buffer = io.StringIO()
    Console(file=buffer, width=80, force_terminal=False).print(
        candidates_table("150 × testbed-cni-bridge: tune's candidates", outcome.comparison)
    )
    _readable(buffer.getvalue())
    assert "StartVM=1" in buffer.getvalue()
