"""A plumbed namespace's interface from the agent's ``netns-veth`` pool.

An agent started with ``--cni`` keeps namespaces whose CNI ADD is done on its
own network (``eth0`` inside, addressed by host-local, the host end on the
agent's bridge). A runtime gives the plugin its own ``CNI_NETNS``, so the
plugin cannot hand it the pooled namespace; it moves the plumbed interface
into ``CNI_NETNS`` under ``CNI_IFNAME`` (the kernel drops its addresses on the
move), puts the pooled ADD's addresses and routes back, removes the emptied
namespace, and returns the pooled ADD's result with the interface's new name
and sandbox: the sandbox skips the veth creation and the IPAM exec of an ADD.

What an ADD took is kept in ``state_dir`` (``<container>-<ifname>.json``,
written before the move), so DEL (idempotent: no file, nothing to give back)
and GC give it back even after a crash: a DEL through the agent's network
under the pooled container id (host-local frees the address, the host end
goes with its peer), the interface in the sandbox removed, the namespace if
it is still there. An empty pool, or an agent that cannot serve one, is no
error: the ADD goes to the delegate (logged).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess

from ._agent import AgentUnreachableError
from ._config import state_path
from ._delegate import find_plugin, run_plugin

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ._config import PluginConfig, Request
    from ._main import _Agent, _Log

__all__ = ["check_taken", "collect", "release_taken", "take_and_attach"]

#: The interface a pooled namespace holds (the agent's ``NETNS_VETH_PEER``).
POOL_IFNAME = "eth0"
NETNS_DIR = "/run/netns"
#: Result formats the pooled (1.0.0) result converts to unchanged.
_SAME_FORMAT = ("1.0.0", "1.1.0")
#: Bound on each ``ip``/``nsenter`` exec of the pool path, seconds.
EXEC_TIMEOUT_S = 10.0


def _tool(name: str) -> str:
    for directory in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        path = os.path.join(directory, name)
        if os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"{name}: not found in /usr/sbin, /sbin, /usr/bin, /bin")


def _exec(argv: list[str], *, stdin: bytes = b"") -> None:
    proc = subprocess.run(
        argv, input=stdin, capture_output=True, timeout=EXEC_TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        said = " ".join(proc.stderr.decode(errors="replace").split())[:200]
        raise OSError(f"{' '.join(argv[:4])}... failed (exit {proc.returncode}): {said}")


def take_and_attach(
    agent: _Agent, config: PluginConfig, request: Request, log: _Log
) -> bytes | None:
    """The pooled interface moved into the sandbox, and the result; None: delegate instead."""
    if config.cni_version not in _SAME_FORMAT:
        log.warn(f"pool: {config.pool} serves cniVersion 1.0.0 and 1.1.0 only; delegating")
        return None
    holder = f"cni:{request.container_id[:96]}:{request.ifname}"
    try:
        answer = agent.call("POST", f"/v1/pools/{config.pool}/take", {"holder": holder})
    except AgentUnreachableError as exc:
        log.warn(f"pool {config.pool}: agent unreachable ({exc}); delegating")
        return None
    if answer.status == 404 and answer.body.get("error") == "pool empty":
        log.fields["pool"] = "empty"
        return None
    if answer.status != 200:
        log.warn(f"pool {config.pool}: agent answered {answer.status}: {answer.error}; delegating")
        return None
    netns = str(answer.body.get("name", ""))
    cni = answer.body.get("cni")
    if not isinstance(cni, dict) or not isinstance(cni.get("result"), str):
        # A namespace no CNI ADD plumbed (an agent without --cni): ours now; removed.
        log.warn(
            f"pool {config.pool}: {netns} is not CNI-plumbed (start the agent with --cni); "
            "delegating"
        )
        _quiet(lambda: _exec([_tool("ip"), "netns", "del", netns]))
        return None
    state = {
        "netns": netns,
        "container_id": str(cni.get("container_id", netns)),
        "conflist": cni.get("conflist"),
        "result": cni["result"],
        "sandbox_container_id": request.container_id,
        "ifname": request.ifname,
        "sandbox_netns": request.netns,
    }
    path = state_path(config, request.container_id, request.ifname)
    try:
        os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
        with open(path, "w") as f:
            json.dump(state, f)
        result = _attach(state, config)
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError) as exc:
        log.warn(
            f"pool {config.pool}: {netns} could not be attached ({exc}); given back, delegating"
        )
        _release(state, request, log)
        _quiet(lambda: os.unlink(path))
        return None
    log.fields["pool"] = netns
    return result


def _attach(state: dict[str, Any], config: PluginConfig) -> bytes:
    result = json.loads(state["result"])
    interfaces = result.get("interfaces", [])
    inside = [k for k, i in enumerate(interfaces) if i.get("sandbox")]
    if len(inside) != 1:
        raise ValueError(f"the pooled result has {len(inside)} interfaces in a sandbox, not 1")
    index, ifname, target = inside[0], state["ifname"], state["sandbox_netns"]
    ip = _tool("ip")
    _exec([ip, "-n", state["netns"], "link", "set", POOL_IFNAME, "netns", target, "name", ifname])
    batch = []
    for entry in result.get("ips", []):
        if entry.get("interface") == index:
            batch.append(f"addr add {entry['address']} dev {ifname}")
    batch.append(f"link set {ifname} up")
    for route in result.get("routes", []):
        via = f" via {route['gw']}" if route.get("gw") else ""
        batch.append(f"route add {route['dst']}{via} dev {ifname}")
    _exec(
        [_tool("nsenter"), f"--net={target}", ip, "-batch", "-"],
        stdin="\n".join(batch).encode() + b"\n",
    )
    _exec([ip, "netns", "del", state["netns"]])
    interfaces[index] = {**interfaces[index], "name": ifname, "sandbox": target}
    result["cniVersion"] = config.cni_version
    return json.dumps(result).encode()


def _quiet(action: Any) -> None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        action()


def _release(state: dict[str, Any], request: Request, log: _Log) -> None:
    """Give back what an ADD took (module doc); every step tolerates a step done before."""
    conflist = state.get("conflist") or {}
    plugins = conflist.get("plugins", []) if isinstance(conflist, dict) else []
    prev = None
    with contextlib.suppress(ValueError, KeyError, TypeError):
        prev = json.loads(state["result"])
    for plugin in reversed(plugins):
        conf = {
            **plugin,
            "name": conflist.get("name", ""),
            "cniVersion": conflist.get("cniVersion", "1.0.0"),
        }
        if prev is not None:
            conf["prevResult"] = prev
        env = {
            **os.environ,
            "CNI_COMMAND": "DEL",
            "CNI_CONTAINERID": state["container_id"],
            "CNI_NETNS": os.path.join(NETNS_DIR, state["netns"]),
            "CNI_IFNAME": POOL_IFNAME,
            "CNI_PATH": os.pathsep.join(request.path),
        }
        try:
            run = run_plugin(
                find_plugin(str(plugin.get("type")), request.path),
                stdin=json.dumps(conf).encode(),
                environ=env,
            )
        except Exception as exc:  # a DEL goes on to the next step whatever failed
            log.warn(f"pool: DEL of {state['container_id']} through {plugin.get('type')}: {exc}")
            continue
        if run.rc != 0:
            log.warn(
                f"pool: DEL of {state['container_id']} through {run.program} failed: "
                f"{run.stdout[:200]!r}"
            )
    if state.get("sandbox_netns"):
        _quiet(
            lambda: _exec(
                [
                    _tool("nsenter"),
                    f"--net={state['sandbox_netns']}",
                    _tool("ip"),
                    "link",
                    "del",
                    state["ifname"],
                ]
            )
        )
    if os.path.exists(os.path.join(NETNS_DIR, state["netns"])):
        _quiet(lambda: _exec([_tool("ip"), "netns", "del", state["netns"]]))


def _read_state(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def release_taken(config: PluginConfig, request: Request, log: _Log) -> bool:
    """DEL of a sandbox whose ADD took from the pool: what it took given back; False: none did."""
    path = state_path(config, request.container_id, request.ifname)
    state = _read_state(path)
    if state is None:
        return False
    _release(state, request, log)
    _quiet(lambda: os.unlink(path))
    log.fields["pool"] = state.get("netns")
    return True


def check_taken(config: PluginConfig, request: Request, log: _Log) -> bool:
    """CHECK of a pooled sandbox: its interface is in its namespace; False: not pooled."""
    from ._errors import CODE_IO, PluginError

    state = _read_state(state_path(config, request.container_id, request.ifname))
    if state is None:
        return False
    try:
        _exec(
            [
                _tool("nsenter"),
                f"--net={request.netns}",
                _tool("ip"),
                "link",
                "show",
                request.ifname,
            ]
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PluginError(
            CODE_IO,
            f"CHECK: the pooled interface {request.ifname} is not in {request.netns}",
            str(exc),
        ) from None
    return True


def collect(config: PluginConfig, *, keep: set[tuple[str, str]], log: _Log) -> None:
    """GC: give back what ADDs of attachments not in ``keep`` took."""
    try:
        names = os.listdir(config.state_dir)
    except OSError:
        return
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(config.state_dir, name)
        state = _read_state(path)
        if state is None:
            continue
        if (str(state.get("sandbox_container_id")), str(state.get("ifname"))) in keep:
            continue
        from ._config import Request

        request = Request(
            command="DEL",
            container_id=str(state.get("sandbox_container_id")),
            netns=str(state.get("sandbox_netns") or ""),
            ifname=str(state.get("ifname")),
            args="",
            path=tuple(p for p in os.environ.get("CNI_PATH", "").split(os.pathsep) if p),
        )
        _release(state, request, log)
        with contextlib.suppress(OSError):
            os.unlink(path)
        log.warn(f"GC: gave back {state.get('netns')} of {state.get('sandbox_container_id')}")
