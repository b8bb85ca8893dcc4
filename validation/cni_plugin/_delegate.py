"""Running the real plugin (the delegate) the spec's way, as ``pkg/invoke`` does.

Its executable is looked up in ``CNI_PATH``; it gets the runtime's own
environment (same ``CNI_COMMAND``, ``CNI_CONTAINERID``, ``CNI_NETNS``,
``CNI_IFNAME``, ``CNI_PATH``) and its own config on stdin: the ``delegate``
object with the network's ``name`` and ``cniVersion``, and what the runtime
gave this plugin for it (``prevResult``, ``args``, ``runtimeConfig`` entries
of the capabilities the delegate declares).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from ._errors import CODE_INVALID_CONFIG, Frozen, PluginError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

__all__ = ["DelegateRun", "delegate_config", "find_plugin", "run_plugin"]


class DelegateRun(Frozen):
    """One exec of a plugin: its exit status, output, pid and times (CLOCK_MONOTONIC s)."""

    __slots__ = ("end_s", "pid", "program", "rc", "start_s", "stderr", "stdout")
    program: str
    rc: int
    stdout: bytes
    stderr: bytes
    pid: int
    start_s: float
    end_s: float

    def __init__(
        self,
        *,
        program: str,
        rc: int,
        stdout: bytes,
        stderr: bytes,
        pid: int,
        start_s: float,
        end_s: float,
    ) -> None:
        self._set(
            program=program,
            rc=rc,
            stdout=stdout,
            stderr=stderr,
            pid=pid,
            start_s=start_s,
            end_s=end_s,
        )

    def record(self) -> dict[str, Any]:
        """What the plugin's log keeps of it (the testbed's trace reads it)."""
        return {
            "program": self.program,
            "pid": self.pid,
            "rc": self.rc,
            "start_s": self.start_s,
            "end_s": self.end_s,
        }


def find_plugin(name: str, path: Sequence[str]) -> str:
    """The executable ``name`` in the first directory of ``path`` that has it (code 7 if none)."""
    for directory in path:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise PluginError(
        CODE_INVALID_CONFIG,
        f"delegate.type: no plugin {name!r} in CNI_PATH ({os.pathsep.join(path)})",
    )


def delegate_config(
    delegate: Mapping[str, Any], outer: Mapping[str, Any], *, cni_version: str
) -> dict[str, Any]:
    """The delegate's stdin as a JSON object (module doc)."""
    conf = dict(delegate)
    conf["cniVersion"] = cni_version
    conf["name"] = outer["name"]
    for key in outer:
        if (key in ("prevResult", "args") or key.startswith("cni.dev/")) and key not in conf:
            conf[key] = outer[key]
    runtime = outer.get("runtimeConfig")
    caps = conf.get("capabilities")
    if isinstance(runtime, dict) and isinstance(caps, dict):
        wanted = {k: v for k, v in runtime.items() if caps.get(k) is True}
        if wanted:
            conf["runtimeConfig"] = wanted
    return conf


def run_plugin(
    executable: str,
    *,
    stdin: bytes,
    environ: Mapping[str, str],
    tick_s: float | None = None,
    on_tick: Callable[[], None] | None = None,
) -> DelegateRun:
    """Exec ``executable`` with ``stdin`` and ``environ``; while it runs,
    ``on_tick`` every ``tick_s`` seconds (the lease's renewal)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [executable],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(environ),
        close_fds=True,
    )
    sent: bytes | None = stdin
    try:
        while True:
            try:
                out, err = proc.communicate(sent, timeout=tick_s)
                break
            except subprocess.TimeoutExpired:
                sent = None  # the stdin already went: a retry must not send it again
                if on_tick is not None:
                    on_tick()
    except BaseException:
        # Interrupted (SIGTERM from the runtime): the delegate does not outlive us.
        proc.kill()
        proc.wait()
        raise
    return DelegateRun(
        program=os.path.basename(executable),
        rc=proc.returncode,
        stdout=out,
        stderr=err,
        pid=proc.pid,
        start_s=start,
        end_s=time.monotonic(),
    )


def encode(conf: Mapping[str, Any]) -> bytes:
    return json.dumps(conf).encode()
