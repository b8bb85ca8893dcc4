"""The CNI protocol as a container runtime speaks it: configs, discovery, ADD/CHECK/DEL.

A plugin is an executable found in a plugin directory; the runtime runs it
with the command and the sandbox in environment variables (``CNI_COMMAND``,
``CNI_CONTAINERID``, ``CNI_NETNS``, ``CNI_IFNAME``, ``CNI_PATH``) and the
network's configuration as JSON on stdin. On success it prints a result
JSON (interfaces, IPs); on failure it exits non-zero and prints an error
JSON (``code``, ``msg``, ``details``).

A network of several plugins (a *conflist*) is run the way the spec's
runtime (libcni) runs it: ADD calls each plugin in order, giving each the
previous one's result as ``prevResult``; CHECK calls each in order with
the final ADD result as ``prevResult``; DEL calls them in reverse order,
with that result when the runtime has it.

Nothing here needs root; :mod:`._cni_stages` runs it against real
namespaces.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

from ..._params import Check, Each, Interval, NonEmpty, Rules, Satisfies, validate
from ._errors import TestbedError

__all__ = [
    "BANDWIDTH_BURST_BITS",
    "BANDWIDTH_RATE_BPS",
    "CHAIN_PLUGINS",
    "CNI_VERSION",
    "DEFAULT_BIN_DIRS",
    "INSTALL_HINT",
    "IPAM_PLUGIN",
    "MAIN_PLUGINS",
    "TUNING_MTU",
    "CniError",
    "CniInterface",
    "CniIp",
    "CniNetwork",
    "CniPluginError",
    "CniResult",
    "CniSetupError",
    "ExecRecord",
    "add",
    "build_network",
    "check",
    "delete",
    "delete_logged",
    "discover_bin_dir",
    "exec_plugin",
    "parse_result",
    "pick_subnet",
    "plugin_path",
    "verify_result",
]

log = logging.getLogger(__name__)

#: The spec version the runtime speaks (containernetworking-plugins >= 1.0).
CNI_VERSION: Final = "1.0.0"
#: Where plugins are looked for without ``--cni-bin-dir``: Debian's package, then upstream's.
DEFAULT_BIN_DIRS: Final = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
INSTALL_HINT: Final = "apt-get install containernetworking-plugins"
MAIN_PLUGINS: Final = ("bridge", "ptp", "macvlan", "ipvlan")
CHAIN_PLUGINS: Final = ("tuning", "bandwidth")
IPAM_PLUGIN: Final = "host-local"
#: What the ``tuning`` plugin sets: an MTU, and a per-namespace sysctl.
TUNING_MTU: Final = 1400
TUNING_SYSCTLS: Final = {"net.core.somaxconn": "512"}
#: The ``bandwidth`` plugin's shaping, both ways (a token bucket per direction).
BANDWIDTH_RATE_BPS: Final = 100_000_000
BANDWIDTH_BURST_BITS: Final = 1_000_000
#: A plugin that takes longer than this is killed (a wedged plugin must not hang a storm).
PLUGIN_TIMEOUT_S: Final = 120.0
#: Subnets a run's network may take: the first /16 in 10.200-10.254 that overlaps nothing.
SUBNET_FIRST_OCTET: Final = 10
SUBNET_SECOND_OCTETS: Final = range(200, 255)

Command = Literal["ADD", "CHECK", "DEL"]


class CniError(RuntimeError):
    """A CNI call failed or returned something the runtime cannot use."""


class CniSetupError(TestbedError):
    """The CNI runtime cannot run here (no plugins, no kernel module)."""


class CniPluginError(CniError):
    """A plugin exited non-zero; ``code``/``msg``/``details`` from its error JSON."""

    def __init__(
        self,
        *,
        plugin: str,
        command: str,
        rc: int,
        code: int | None,
        msg: str,
        details: str,
        record: ExecRecord | None = None,
    ) -> None:
        self.plugin = plugin
        self.record = record
        self.command = command
        self.rc = rc
        self.code = code
        self.msg = msg
        self.details = details
        what = f"code {code}: {msg}" if code is not None else msg
        tail = f" ({details})" if details else ""
        super().__init__(f"CNI {command} {plugin} failed (exit {rc}): {what}{tail}")


@dataclass(frozen=True, kw_only=True)
class ExecRecord:
    """One process the runtime ran: which, why, its pid, exit status and times
    (CLOCK_MONOTONIC seconds, the clock of the trace)."""

    program: str
    command: str
    pid: int
    rc: int | None
    start_s: float
    end_s: float

    __rules__: ClassVar[Rules] = Rules(
        program=NonEmpty(),
        pid=Interval(int, 0),
        checks=(
            Check(
                "end_s",
                lambda r: r.end_s >= r.start_s,
                lambda r: f"must not be before start_s={r.start_s!r}",
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True, kw_only=True)
class CniInterface:
    name: str
    mac: str | None = None
    #: The namespace path for an interface inside the sandbox; None on the host.
    sandbox: str | None = None


@dataclass(frozen=True, kw_only=True)
class CniIp:
    address: str
    interface: int | None = None
    gateway: str | None = None


@dataclass(frozen=True, kw_only=True)
class CniResult:
    """A plugin's success result; ``text`` is the JSON as printed (the next
    plugin's ``prevResult``)."""

    cni_version: str
    interfaces: tuple[CniInterface, ...]
    ips: tuple[CniIp, ...]
    text: str

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.text)
        return data


def _field_error(plugin: str, field: str, problem: str) -> CniError:
    return CniError(f"CNI result of {plugin}: {field}: {problem}")


def parse_result(text: str, *, plugin: str) -> CniResult:
    """A result JSON as printed by ``plugin``; :class:`CniError` naming the field if malformed."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        shown = text.strip()[:80]
        raise CniError(
            f"CNI result of {plugin}: malformed JSON: {exc.msg} (got {shown!r})"
        ) from None
    if not isinstance(data, dict):
        raise _field_error(plugin, "(top level)", f"expected an object, but got {data!r}"[:120])
    version = data.get("cniVersion")
    if not isinstance(version, str) or not version:
        raise _field_error(plugin, "cniVersion", f"expected a version string, but got {version!r}")
    raw_ifs = data.get("interfaces", [])
    if not isinstance(raw_ifs, list):
        raise _field_error(plugin, "interfaces", f"expected a list, but got {raw_ifs!r}")
    interfaces = []
    for k, item in enumerate(raw_ifs):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _field_error(plugin, f"interfaces.{k}.name", f"expected a name in {item!r}")
        sandbox = item.get("sandbox")
        interfaces.append(
            CniInterface(
                name=item["name"],
                mac=item.get("mac") if isinstance(item.get("mac"), str) else None,
                sandbox=sandbox if isinstance(sandbox, str) and sandbox else None,
            )
        )
    raw_ips = data.get("ips", [])
    if not isinstance(raw_ips, list):
        raise _field_error(plugin, "ips", f"expected a list, but got {raw_ips!r}")
    ips = []
    for k, item in enumerate(raw_ips):
        if not isinstance(item, dict) or not isinstance(item.get("address"), str):
            raise _field_error(plugin, f"ips.{k}.address", f"expected an address in {item!r}")
        try:
            ipaddress.ip_interface(item["address"])
        except ValueError:
            raise _field_error(
                plugin, f"ips.{k}.address", f"not an address/prefix (got {item['address']!r})"
            ) from None
        index = item.get("interface")
        if index is not None and (
            not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(raw_ifs)
        ):
            raise _field_error(
                plugin,
                f"ips.{k}.interface",
                f"expected an index into interfaces (0..{len(raw_ifs) - 1}), but got {index!r}",
            )
        gateway = item.get("gateway")
        ips.append(
            CniIp(
                address=item["address"],
                interface=index,
                gateway=gateway if isinstance(gateway, str) else None,
            )
        )
    return CniResult(
        cni_version=version, interfaces=tuple(interfaces), ips=tuple(ips), text=text.strip()
    )


def verify_result(result: CniResult, *, plugin: str, netns: str, ifname: str) -> None:
    """What a runtime needs of an ADD result: our spec version, the sandbox's
    interface inside ``netns``, and an IP on it; :class:`CniError` if not."""
    if result.cni_version != CNI_VERSION:
        raise _field_error(
            plugin, "cniVersion", f"expected {CNI_VERSION!r}, but got {result.cni_version!r}"
        )
    inside = [k for k, i in enumerate(result.interfaces) if i.sandbox == netns and i.name == ifname]
    if not inside:
        names = [(i.name, i.sandbox) for i in result.interfaces]
        raise _field_error(
            plugin, "interfaces", f"no interface {ifname!r} in sandbox {netns} (got {names!r})"
        )
    if not any(ip.interface in inside for ip in result.ips):
        raise _field_error(
            plugin, "ips", f"no IP on the sandbox's {ifname!r} (got {list(result.ips)!r})"[:200]
        )


def _is_plugin_conf(text: object) -> bool:
    try:
        conf = json.loads(text) if isinstance(text, (str, bytes)) else None
    except ValueError:
        return False
    return isinstance(conf, dict) and isinstance(conf.get("type"), str)


@dataclass(frozen=True, kw_only=True)
class CniNetwork:
    """A network configuration list: a name, a spec version, and its
    plugins' configurations in call order (each as JSON text, so the value
    stays immutable)."""

    name: str
    cni_version: str = CNI_VERSION
    plugins: tuple[str, ...]

    __rules__: ClassVar[Rules] = Rules(
        name=NonEmpty(),
        plugins=(
            NonEmpty(),
            Each(Satisfies(_is_plugin_conf, 'must be a plugin\'s JSON object with a "type"')),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def types(self) -> tuple[str, ...]:
        """The plugins' types (executable names), in call order."""
        return tuple(str(json.loads(text)["type"]) for text in self.plugins)

    def config(self, index: int, prev_result: CniResult | None) -> bytes:
        """Plugin ``index``'s stdin: its configuration with the network's
        ``name`` and ``cniVersion``, and ``prevResult`` when given."""
        conf: dict[str, Any] = json.loads(self.plugins[index])
        conf["cniVersion"] = self.cni_version
        conf["name"] = self.name
        if prev_result is not None:
            conf["prevResult"] = prev_result.as_dict()
        return json.dumps(conf).encode()

    def conflist(self) -> dict[str, Any]:
        """The network as a ``.conflist`` file holds it."""
        return {
            "cniVersion": self.cni_version,
            "name": self.name,
            "plugins": [json.loads(text) for text in self.plugins],
        }

    @classmethod
    def from_conflist(cls, data: Mapping[str, Any]) -> CniNetwork:
        plugins = data.get("plugins")
        if not isinstance(plugins, list):
            raise ValueError(f"plugins: expected a list, but got {plugins!r}")
        return cls(
            name=str(data.get("name", "")),
            cni_version=str(data.get("cniVersion", CNI_VERSION)),
            plugins=tuple(json.dumps(p, sort_keys=True) for p in plugins),
        )


def build_network(
    *,
    name: str,
    plugin: str,
    chain: Sequence[str] = (),
    subnet: ipaddress.IPv4Network,
    ipam_dir: Path,
    bridge: str | None = None,
    parent: str | None = None,
    tuning_dir: Path | None = None,
) -> CniNetwork:
    """The run's network: ``plugin`` with host-local IPAM on ``subnet``
    (state in ``ipam_dir``), then ``chain``'s plugins in order.

    ``bridge`` names the bridge plugin's bridge, ``parent`` the macvlan or
    ipvlan master link; ``tuning_dir`` is where tuning keeps what it changed.
    """
    ipam = {
        "type": IPAM_PLUGIN,
        "ranges": [[{"subnet": str(subnet)}]],
        "dataDir": str(ipam_dir),
    }
    main: dict[str, Any]
    if plugin == "bridge":
        if not bridge:
            raise ValueError("bridge: the bridge plugin needs a bridge name")
        main = {
            "type": "bridge",
            "bridge": bridge,
            "isGateway": True,
            "ipMasq": False,
            "hairpinMode": False,
            "ipam": ipam,
        }
    elif plugin == "ptp":
        main = {"type": "ptp", "ipMasq": False, "ipam": ipam}
    elif plugin in ("macvlan", "ipvlan"):
        if not parent:
            raise ValueError(f"parent: the {plugin} plugin needs a master link")
        mode = "bridge" if plugin == "macvlan" else "l2"
        main = {"type": plugin, "master": parent, "mode": mode, "ipam": ipam}
    else:
        known = ", ".join(MAIN_PLUGINS)
        raise ValueError(f"plugin: unknown CNI plugin {plugin!r} (known: {known})")
    confs: list[dict[str, Any]] = [main]
    seen: set[str] = set()
    for link in chain:
        if link in seen:
            raise ValueError(f"chain: {link!r} appears twice")
        seen.add(link)
        if link == "tuning":
            tuning: dict[str, Any] = {
                "type": "tuning",
                "mtu": TUNING_MTU,
                "sysctl": dict(TUNING_SYSCTLS),
            }
            if tuning_dir is not None:
                tuning["dataDir"] = str(tuning_dir)
            confs.append(tuning)
        elif link == "bandwidth":
            confs.append(
                {
                    "type": "bandwidth",
                    "ingressRate": BANDWIDTH_RATE_BPS,
                    "ingressBurst": BANDWIDTH_BURST_BITS,
                    "egressRate": BANDWIDTH_RATE_BPS,
                    "egressBurst": BANDWIDTH_BURST_BITS,
                }
            )
        else:
            raise ValueError(
                f"chain: unknown chained plugin {link!r} (known: {', '.join(CHAIN_PLUGINS)})"
            )
    return CniNetwork(name=name, plugins=tuple(json.dumps(c, sort_keys=True) for c in confs))


def discover_bin_dir(explicit: Path | None, plugins: Iterable[str]) -> Path:
    """The plugin directory: ``explicit``, else the first default that has
    the first of ``plugins``; :class:`CniSetupError` (one line, with the
    install command) when a plugin is missing."""
    wanted = list(dict.fromkeys(plugins))
    if not wanted:
        raise ValueError("plugins: name at least one plugin to look for")

    def has(directory: Path, name: str) -> bool:
        path = directory / name
        return path.is_file() and os.access(path, os.X_OK)

    if explicit is not None:
        candidates: tuple[Path, ...] = (explicit,)
        field = f"cni_bin_dir: {explicit}"
    else:
        candidates = DEFAULT_BIN_DIRS
        field = "cni_bin_dir: " + " or ".join(str(d) for d in DEFAULT_BIN_DIRS)
    for directory in candidates:
        if has(directory, wanted[0]):
            missing = [name for name in wanted if not has(directory, name)]
            if missing:
                raise CniSetupError(
                    f"cni_bin_dir: {directory} has no CNI plugin {missing[0]!r} "
                    f"(needed: {', '.join(wanted)}); install them: {INSTALL_HINT}"
                )
            return directory
    raise CniSetupError(f"{field}: no CNI plugin {wanted[0]!r} there; install them: {INSTALL_HINT}")


def pick_subnet(taken: Iterable[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The first /16 in 10.200-10.254 that overlaps none of ``taken``."""
    used = list(taken)
    for second in SUBNET_SECOND_OCTETS:
        candidate = ipaddress.IPv4Network(f"{SUBNET_FIRST_OCTET}.{second}.0.0/16")
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise CniSetupError(
        "subnet: every /16 in 10.200.0.0-10.254.255.255 overlaps a route or another run's "
        "network on this host"
    )


def _error_of(
    plugin: str, command: str, rc: int, stdout: str, stderr: str, record: ExecRecord
) -> CniPluginError:
    code: int | None = None
    msg = ""
    details = ""
    with contextlib.suppress(json.JSONDecodeError):
        data = json.loads(stdout)
        if isinstance(data, dict):
            raw_code = data.get("code")
            code = raw_code if isinstance(raw_code, int) else None
            msg = str(data.get("msg", ""))
            details = str(data.get("details", ""))
    if not msg:
        # Not the spec's error JSON: whatever it printed, shortened to one line.
        text = (stdout.strip() or stderr.strip() or "no output").splitlines()
        msg = " ".join(text)[-300:]
    return CniPluginError(
        plugin=plugin,
        command=command,
        rc=rc,
        code=code,
        msg=msg,
        details=details,
        record=record,
    )


#: Where plugins are looked for: one directory, or ``CNI_PATH``'s several in order.
PluginDirs = Path | tuple[Path, ...]


def plugin_path(bin_dir: PluginDirs, plugin: str) -> Path:
    """``plugin``'s executable: in the first of ``bin_dir``'s directories that has it."""
    dirs = (bin_dir,) if isinstance(bin_dir, Path) else bin_dir
    for directory in dirs:
        if (directory / plugin).is_file():
            return directory / plugin
    return dirs[0] / plugin  # its exec fails, naming it


def exec_plugin(
    *,
    bin_dir: PluginDirs,
    plugin: str,
    command: Command,
    config: bytes,
    container_id: str,
    netns: str,
    ifname: str,
    timeout_s: float = PLUGIN_TIMEOUT_S,
) -> tuple[ExecRecord, str]:
    """Run one plugin once, the spec's way; its record and its stdout.

    A non-zero exit raises :class:`CniPluginError` (its ``record`` set).
    """
    env = {
        # The plugin's own PATH (it may run iptables or the IPAM plugin by path).
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_PATH": os.pathsep.join(
            str(d) for d in ((bin_dir,) if isinstance(bin_dir, Path) else bin_dir)
        ),
    }
    path = plugin_path(bin_dir, plugin)
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        close_fds=True,
        # As a daemon's child: a Ctrl-C at the terminal reaches the runtime,
        # not a plugin half-way through its ADD (the runtime DELs in order).
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(config, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err = err + f"\nkilled after {timeout_s:.0f} s".encode()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    end = time.monotonic()
    record = ExecRecord(
        program=plugin, command=command, pid=proc.pid, rc=proc.returncode, start_s=start, end_s=end
    )
    stdout = out.decode(errors="replace")
    if proc.returncode != 0:
        raise _error_of(
            plugin, command, proc.returncode, stdout, err.decode(errors="replace"), record
        )
    return record, stdout


OnExec = Callable[[ExecRecord], None]


def _run(
    network: CniNetwork,
    index: int,
    command: Command,
    prev: CniResult | None,
    *,
    bin_dir: PluginDirs,
    container_id: str,
    netns: str,
    ifname: str,
    on_exec: OnExec,
) -> str:
    plugin = network.types[index]
    try:
        record, out = exec_plugin(
            bin_dir=bin_dir,
            plugin=plugin,
            command=command,
            config=network.config(index, prev),
            container_id=container_id,
            netns=netns,
            ifname=ifname,
        )
    except CniPluginError as exc:
        if exc.record is not None:
            on_exec(exc.record)
        raise
    on_exec(record)
    return out


def add(
    network: CniNetwork,
    *,
    bin_dir: PluginDirs,
    container_id: str,
    netns: str,
    ifname: str,
    on_exec: OnExec,
) -> CniResult:
    """ADD through the chain (each plugin gets the previous result); the
    final result, verified (:func:`verify_result`)."""
    prev: CniResult | None = None
    for index, plugin in enumerate(network.types):
        out = _run(
            network,
            index,
            "ADD",
            prev,
            bin_dir=bin_dir,
            container_id=container_id,
            netns=netns,
            ifname=ifname,
            on_exec=on_exec,
        )
        prev = parse_result(out, plugin=plugin)
    assert prev is not None  # a network has at least one plugin
    verify_result(prev, plugin=network.types[-1], netns=netns, ifname=ifname)
    return prev


def check(
    network: CniNetwork,
    result: CniResult,
    *,
    bin_dir: PluginDirs,
    container_id: str,
    netns: str,
    ifname: str,
    on_exec: OnExec,
) -> None:
    """CHECK through the chain in order, each with the ADD's result as ``prevResult``."""
    for index in range(len(network.plugins)):
        _run(
            network,
            index,
            "CHECK",
            result,
            bin_dir=bin_dir,
            container_id=container_id,
            netns=netns,
            ifname=ifname,
            on_exec=on_exec,
        )


def delete(
    network: CniNetwork,
    result: CniResult | None,
    *,
    bin_dir: PluginDirs,
    container_id: str,
    netns: str,
    ifname: str,
    on_exec: OnExec,
) -> None:
    """DEL through the chain in reverse order (with the ADD's result when
    known); every plugin is called, the first failure raised after."""
    first: CniError | None = None
    for index in reversed(range(len(network.plugins))):
        try:
            _run(
                network,
                index,
                "DEL",
                result,
                bin_dir=bin_dir,
                container_id=container_id,
                netns=netns,
                ifname=ifname,
                on_exec=on_exec,
            )
        except CniError as exc:
            first = first or exc
    if first is not None:
        raise first


def delete_logged(
    network: CniNetwork,
    result: CniResult | None,
    *,
    bin_dir: PluginDirs,
    container_id: str,
    netns: str,
    ifname: str,
    on_exec: OnExec | None = None,
) -> bool:
    """:func:`delete`, a failure logged instead of raised: a teardown or a
    sweep goes on to the next container. Whether every plugin succeeded."""
    try:
        delete(
            network,
            result,
            bin_dir=bin_dir,
            container_id=container_id,
            netns=netns,
            ifname=ifname,
            on_exec=on_exec or (lambda _record: None),
        )
    except (CniError, OSError) as exc:
        log.warning("CNI DEL of %s failed: %s", container_id, exc)
        return False
    return True
