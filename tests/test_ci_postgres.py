"""``.ci/postgres.sh`` starts a server that keeps none of the caller's descriptors.

The postmaster outlives the script; when it inherited a pipe of the caller (a
CI runner's log), that pipe never reached EOF and the step never ended. A
cluster of its own here (own directory and port), stopped afterwards."""

from __future__ import annotations

import glob
import os
import select
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "postgres.sh"


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="starts a PostgreSQL cluster as its user (root)")
@pytest.mark.skipif(
    not glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("runuser") is None,
    reason="PostgreSQL is not installed (CI installs it)",
)
def test_the_server_holds_no_pipe_of_the_caller() -> None:
    # Not under pytest's tmp_path (0700: the postgres user may not walk in).
    cluster = Path(tempfile.mkdtemp(prefix="bootstorm-pgtest-", dir="/var/tmp"))
    env = {**os.environ, "BOOTSTORM_PG_DIR": str(cluster), "BOOTSTORM_PG_PORT": "55491"}
    read_end, write_end = os.pipe()
    try:
        out = subprocess.run(
            ["bash", str(SCRIPT)],
            env=env,
            pass_fds=(write_end,),
            capture_output=True,
            text=True,
            timeout=180,
        )
        os.close(write_end)
        write_end = -1
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("postgresql+psycopg://bootstorm:")
        # Nobody else holds the write end: EOF at once, not a read that blocks.
        ready, _, _ = select.select([read_end], [], [], 10.0)
        assert ready and os.read(read_end, 1) == b"", "the server kept the caller's pipe"
    finally:
        if write_end >= 0:
            os.close(write_end)
        os.close(read_end)
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(cluster, ignore_errors=True)
