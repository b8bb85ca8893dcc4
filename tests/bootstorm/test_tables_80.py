"""Each command's tables piped at 80 columns: no line wider, no cell cut.

Rich cuts a squeezed cell with "…" ("S2-3/bridge-toge…", "ma…"); the glyph
between two values ("55.9…55.9", "+0%…+37%") is a range and stays. The
commands whose tables other tests hold (simulate, calibrate --measured,
sweep, workload, simulate/tune --workload, validate --candidates) are not
repeated here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"

#: A cut cell: a character, the ellipsis, then a space, a border or the end.
CUT = re.compile(r"\S…(\s|│|┃|$)", re.MULTILINE)


def piped(argv: list[str], *, cwd: Path | None = None) -> str:
    """``bootstorm ARGV``'s stdout, piped, checked: no line past 80 columns,
    no cell cut (exit 1 is a check that found a known miss)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    out = subprocess.run(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=cwd,
    )
    assert out.returncode in (0, 1), out.stderr
    wide = [line for line in out.stdout.splitlines() if len(line.rstrip()) > 80]
    assert not wide, wide
    assert not CUT.search(out.stdout), CUT.findall(out.stdout)
    return out.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["calibrate", "--check", "--targets", "paper-002", "--seeds", "1001"],
        ["optimize", "--trials", "10", "--sandboxes", "100"],
        ["dataplane"],
        [
            "validate",
            "--profile",
            str(DATA / "plan" / "local.yaml"),
            "--measured",
            str(DATA / "heldout" / "baseline-run1.jsonl.gz"),
        ],
    ],
    ids=["calibrate-check", "optimize", "dataplane", "validate-measured"],
)
def test_a_commands_tables_read_whole_when_piped(argv: list[str]) -> None:
    piped(argv)


def test_validate_says_how_many_runs_a_tight_threshold_needs() -> None:
    """Three recorded runs: at ±20% nothing to add; at ±2% the headline
    figures are measured less precisely than half the threshold, and the
    command says how many runs would measure each (piped: whole lines)."""
    runs = sorted((DATA / "cni" / "heldout").glob("size100-run*.jsonl.gz"))[:3]
    argv = ["validate", "--no-vm", "--profile", str(DATA / "cni" / "plan" / "local.yaml")]
    for run in runs:
        argv += ["--measured", str(run)]
    assert "runs to resolve" not in piped([*argv, "--threshold", "0.2"])
    tight = " ".join(piped([*argv, "--threshold", "0.02"]).split())
    assert "runs to resolve ±2%: the 3 runs spread wider than half of it" in tight
    assert re.search(r"makespan_s \d+, startup mean_s \d+", tight), tight
