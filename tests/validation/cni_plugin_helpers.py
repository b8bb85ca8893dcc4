"""Running ``bootstorm-cni`` as a runtime does, for the plugin's tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A delegate for logic tests: records its stdin, sleeps ``FAKE_SLEEP_S``,
#: then prints a result, or ``FAKE_FAIL``'s error JSON and exits 1.
FAKE_PLUGIN = r"""#!/bin/sh
cat > "$FAKE_DIR/stdin-$CNI_COMMAND"
echo "$$" > "$FAKE_DIR/pid-$CNI_COMMAND"
[ -n "$FAKE_SLEEP_S" ] && sleep "$FAKE_SLEEP_S"
if [ -n "$FAKE_FAIL" ]; then
  printf '{"cniVersion":"1.0.0","code":101,"msg":"%s","details":"from the fake"}' "$FAKE_FAIL"
  exit 1
fi
IFS_JSON='"interfaces":[{"name":"%s","sandbox":"%s"}]'
IPS_JSON='"ips":[{"interface":0,"address":"10.9.0.2/24"}]'
[ "$CNI_COMMAND" = ADD ] && printf "{\"cniVersion\":\"1.0.0\",$IFS_JSON,$IPS_JSON,\"dns\":{}}" \
  "$CNI_IFNAME" "$CNI_NETNS"
exit 0
"""


#: The executable the tests run instead of the console script (the compiled
#: front end: ``test_cni_plugin_fastpath.py`` sets it per test).
PLUGIN_OVERRIDE: list[str] | None = None


def plugin_argv() -> list[str]:
    """The installed console script (``pip install -e .``), else the same entry point."""
    if PLUGIN_OVERRIDE is not None:
        return list(PLUGIN_OVERRIDE)
    here = Path(sys.executable).parent / "bootstorm-cni"
    found = here if here.exists() else shutil.which("bootstorm-cni")
    if found:
        return [str(found)]
    return [
        sys.executable,
        "-c",
        "from bootstorm.validation.cni_plugin import main; raise SystemExit(main())",
    ]


@dataclass(frozen=True)
class Call:
    rc: int
    stdout: bytes
    stderr: str

    @property
    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stdout)
        return data


def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    plugin = bin_dir / "fakeplug"
    plugin.write_text(FAKE_PLUGIN)
    plugin.chmod(0o755)
    return bin_dir


def log_lines(path: Path, *, count: int = 1, within_s: float = 10.0) -> list[str]:
    """``path``'s lines once it has ``count`` of them: an ADD's line is written
    by the child that releases its permit, a moment after the plugin exits."""
    deadline = time.monotonic() + within_s
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)


def network(
    *,
    url: str,
    token_file: Path,
    delegate: dict[str, Any] | None = None,
    version: str = "1.0.0",
    **extra: Any,
) -> dict[str, Any]:
    agent = {"url": url, "token_file": str(token_file), "timeout_s": 2.0, "wait_s": 5.0}
    agent.update(extra.pop("agent", {}))
    return {
        "cniVersion": version,
        "name": "testnet",
        "type": "bootstorm-cni",
        "agent": agent,
        "stage": "AddCNI",
        "failure_policy": "closed",
        "delegate": delegate or {"type": "fakeplug", "custom": 7},
        **extra,
    }


def cni_environ(
    *,
    command: str,
    bin_dir: Path | str,
    container_id: str = "c1",
    netns: str = "/run/netns/fake",
    ifname: str = "eth0",
    path: str = "/usr/bin:/bin",
    env: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment a runtime gives a plugin (libcni's CNI_* variables)."""
    return {
        "PATH": path,
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_PATH": str(bin_dir),
        **(env or {}),
    }


def call(
    conf: dict[str, Any] | bytes,
    *,
    command: str,
    bin_dir: Path | str,
    container_id: str = "c1",
    netns: str = "/run/netns/fake",
    ifname: str = "eth0",
    env: dict[str, str] | None = None,
    timeout_s: float = 60.0,
) -> Call:
    stdin = conf if isinstance(conf, bytes) else json.dumps(conf).encode()
    environ = cni_environ(
        command=command,
        bin_dir=bin_dir,
        container_id=container_id,
        netns=netns,
        ifname=ifname,
        path=os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        env=env,
    )
    proc = subprocess.run(
        plugin_argv(), input=stdin, capture_output=True, env=environ, timeout=timeout_s, check=False
    )
    return Call(rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr.decode())
