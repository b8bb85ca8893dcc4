"""Helpers the CLI tests share."""

from __future__ import annotations

import pytest

from bootstorm.cli import main


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``bootstorm ARGV`` in this process: its exit code, stdout and stderr."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
