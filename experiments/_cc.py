"""Compile an experiment's small C program (the root experiments that need exact timing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def build_c(source: str, workdir: Path, name: str) -> Path:
    """Write ``source`` to ``workdir/name.c``, compile it with ``cc -O2``, return the binary."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("needs a C compiler (cc)")
    src = workdir / f"{name}.c"
    src.write_text(source)
    binary = workdir / name
    subprocess.run([cc, "-O2", "-o", str(binary), str(src)], check=True)
    return binary
