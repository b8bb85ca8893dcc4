"""The plugin's network configuration and the runtime's environment, checked.

A refusal is a :class:`PluginError` with code 7 (invalid network config) or 4
(invalid environment) whose message names the field and the value received.
"""

from __future__ import annotations

import json
import os

from ._errors import (
    CODE_DECODE,
    CODE_INCOMPATIBLE_VERSION,
    CODE_INVALID_CONFIG,
    CODE_INVALID_ENV,
    Frozen,
    PluginError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "COMMANDS",
    "DEFAULT_STATE_DIR",
    "PLUGIN_TYPE",
    "POOL_KINDS",
    "SUPPORTED_VERSIONS",
    "AgentConfig",
    "PluginConfig",
    "Request",
    "parse_config",
    "parse_request",
    "state_path",
]

PLUGIN_TYPE = "bootstorm-cni"
#: Spec versions the plugin speaks; STATUS and GC exist from 1.1.0.
SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
COMMANDS = ("ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC")
#: Pools whose devices a CNI ADD plumbed (an agent started with ``--cni``).
POOL_KINDS = ("netns-veth",)
FAILURE_POLICIES = ("open", "closed")
#: What an ADD took, by container and interface (DEL and GC read it back).
DEFAULT_STATE_DIR = "/run/bootstorm-cni/plugin"
#: Keys the spec or a runtime puts in any plugin's config besides the plugin's own.
_SPEC_KEYS = frozenset(
    {"cniVersion", "name", "type", "args", "capabilities", "runtimeConfig", "prevResult", "dns"}
)
_OWN_KEYS = frozenset(
    {"agent", "stage", "failure_policy", "pool", "delegate", "log_file", "state_dir"}
)
_AGENT_KEYS = frozenset({"url", "token_file", "ca_file", "timeout_s", "wait_s"})
# A stage name as the agent takes it in its URLs (models.tuned.STAGE_NAME_PATTERN).
_STAGE_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_STAGE_REST = frozenset(_STAGE_FIRST + "0123456789_.-")
#: Bounds of ``agent.timeout_s`` (one call's connect and answer) and ``agent.wait_s``
#: (a permit's wait; the agent's own ceiling is 600 s).
TIMEOUT_S_RANGE = (0.01, 60.0)
WAIT_S_RANGE = (0.0, 600.0)
DEFAULT_TIMEOUT_S = 2.0
DEFAULT_WAIT_S = 30.0
#: A token file larger than this is not a token (the agent's own rule).
MAX_TOKEN_BYTES = 4096


def _bad(field: str, rule: str, value: object) -> PluginError:
    shown = repr(value)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return PluginError(CODE_INVALID_CONFIG, f"{field}: {rule} (got {shown})")


class AgentConfig(Frozen):
    """Where the node agent is and how long the plugin waits for it."""

    __slots__ = (
        "base_path",
        "ca_file",
        "host",
        "port",
        "scheme",
        "timeout_s",
        "token_file",
        "url",
        "wait_s",
    )
    url: str
    scheme: str
    host: str
    port: int
    base_path: str
    token_file: str
    ca_file: str | None
    timeout_s: float
    wait_s: float

    def __init__(
        self,
        *,
        url: str,
        token_file: str,
        ca_file: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        wait_s: float = DEFAULT_WAIT_S,
    ) -> None:
        scheme, host, port, base_path = _split_url(url)
        if ca_file is not None and scheme != "https":
            raise _bad("agent.ca_file", "applies to an https url only", ca_file)
        self._set(
            url=url,
            scheme=scheme,
            host=host,
            port=port,
            base_path=base_path,
            token_file=token_file,
            ca_file=ca_file,
            timeout_s=timeout_s,
            wait_s=wait_s,
        )

    def token(self) -> str:
        """The bearer token, read now (a rotated file is picked up by the next ADD)."""
        path = self.token_file
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise _bad("agent.token_file", f"cannot be opened ({exc.strerror})", path) from None
        try:
            st = os.fstat(fd)
            if (st.st_mode & 0o170000) != 0o100000:
                raise _bad("agent.token_file", "must be a regular file", path)
            if st.st_size > MAX_TOKEN_BYTES:
                raise _bad("agent.token_file", f"must be at most {MAX_TOKEN_BYTES} bytes", path)
            data = os.read(fd, MAX_TOKEN_BYTES + 1)
        finally:
            os.close(fd)
        token = data.decode("ascii", errors="replace").strip()
        if not token or not token.isprintable() or " " in token:
            raise _bad("agent.token_file", "must hold one token of visible ASCII", path)
        return token


def _split_url(url: object) -> tuple[str, str, int, str]:
    """``http(s)://host[:port][/path]`` → its parts (no ``urllib``: 6 ms to import)."""
    if not isinstance(url, str):
        raise _bad("agent.url", "must be an http:// or https:// URL", url)
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise _bad("agent.url", "must be an http:// or https:// URL", url)
    hostport, slash, path = rest.partition("/")
    base_path = ("/" + path).rstrip("/") if slash else ""
    if "@" in hostport or "?" in rest or "#" in rest:
        raise _bad("agent.url", "must hold no credentials, query or fragment", url)
    default_port = 443 if scheme == "https" else 80
    if hostport.startswith("["):
        host, bracket, tail = hostport[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise _bad("agent.url", "has a malformed IPv6 host", url)
        port_text = tail[1:] if tail else ""
    else:
        host, _colon, port_text = hostport.partition(":")
    if not host:
        raise _bad("agent.url", "names no host", url)
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise _bad("agent.url", "has a port outside 1..65535", url)
        port = int(port_text)
    else:
        port = default_port
    return scheme, host, port, base_path


class PluginConfig(Frozen):
    """The plugin's network configuration (its stdin), checked.

    ``delegate`` is the real plugin's config as given; ``raw`` the whole
    stdin, for what the plugin passes on (``runtimeConfig``, ``args``,
    ``prevResult``)."""

    __slots__ = (
        "agent",
        "cni_version",
        "delegate",
        "failure_policy",
        "log_file",
        "name",
        "pool",
        "raw",
        "stage",
        "state_dir",
    )
    cni_version: str
    name: str
    agent: AgentConfig
    stage: str
    failure_policy: str
    pool: str | None
    delegate: dict[str, Any]
    log_file: str | None
    state_dir: str
    raw: dict[str, Any]

    def __init__(
        self,
        *,
        cni_version: str,
        name: str,
        agent: AgentConfig,
        stage: str,
        failure_policy: str,
        pool: str | None,
        delegate: dict[str, Any],
        log_file: str | None,
        state_dir: str,
        raw: dict[str, Any],
    ) -> None:
        self._set(
            cni_version=cni_version,
            name=name,
            agent=agent,
            stage=stage,
            failure_policy=failure_policy,
            pool=pool,
            delegate=delegate,
            log_file=log_file,
            state_dir=state_dir,
            raw=raw,
        )

    @property
    def fail_open(self) -> bool:
        return self.failure_policy == "open"

    @property
    def delegate_type(self) -> str:
        return str(self.delegate["type"])


def _number(field: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(field, "must be a number of seconds", value)
    if not low <= value <= high:  # NaN fails both
        raise _bad(field, f"must be within {low:g}..{high:g} seconds", value)
    return float(value)


def _path(field: str, value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise _bad(field, "must be an absolute path", value)
    return value


def _unknown(field: str, data: Mapping[str, Any], known: frozenset[str]) -> None:
    # ``cni.dev/...`` keys are the spec's own (GC's ``cni.dev/valid-attachments``).
    extra = sorted(k for k in data if k not in known and not k.startswith("cni.dev/"))
    if extra:
        where = f"{field}.{extra[0]}" if field else extra[0]
        names = ", ".join(sorted(known - _SPEC_KEYS))
        raise _bad(where, f"is not a field of {PLUGIN_TYPE} (its fields: {names})", data[extra[0]])


def load_json(data: bytes) -> dict[str, Any]:
    """Stdin as a JSON object; code 6 if it is not one."""
    try:
        conf = json.loads(data)
    except ValueError as exc:
        raise PluginError(CODE_DECODE, f"network config: not JSON ({exc})") from None
    if not isinstance(conf, dict):
        raise PluginError(
            CODE_DECODE, f"network config: not a JSON object (got {type(conf).__name__})"
        )
    return conf


def check_version(conf: Mapping[str, Any]) -> str:
    """The config's ``cniVersion``, if this plugin speaks it (code 1 if not)."""
    version = conf.get("cniVersion")
    if not isinstance(version, str) or not version:
        raise _bad("cniVersion", "must be a version string", version)
    if version not in SUPPORTED_VERSIONS:
        raise PluginError(
            CODE_INCOMPATIBLE_VERSION,
            f"cniVersion: {PLUGIN_TYPE} does not speak {version!r} "
            f"(it speaks {', '.join(SUPPORTED_VERSIONS)})",
        )
    return version


def parse_config(conf: dict[str, Any]) -> PluginConfig:
    """The checked config; :class:`PluginError` code 7 naming the first bad field."""
    version = check_version(conf)
    _unknown("", conf, _SPEC_KEYS | _OWN_KEYS)
    name = conf.get("name")
    if not isinstance(name, str) or not name:
        raise _bad("name", "must be the network's name", name)
    raw_agent = conf.get("agent")
    if not isinstance(raw_agent, dict):
        raise _bad("agent", 'must be an object {"url", "token_file", ...}', raw_agent)
    _unknown("agent", raw_agent, _AGENT_KEYS)
    if "url" not in raw_agent:
        raise _bad("agent.url", "is required", None)
    ca_file = raw_agent.get("ca_file")
    agent = AgentConfig(
        url=raw_agent["url"],
        token_file=_path("agent.token_file", raw_agent.get("token_file")),
        ca_file=None if ca_file is None else _path("agent.ca_file", ca_file),
        timeout_s=_number(
            "agent.timeout_s", raw_agent.get("timeout_s", DEFAULT_TIMEOUT_S), *TIMEOUT_S_RANGE
        ),
        wait_s=_number("agent.wait_s", raw_agent.get("wait_s", DEFAULT_WAIT_S), *WAIT_S_RANGE),
    )
    stage = conf.get("stage", "AddCNI")
    if (
        not isinstance(stage, str)
        or not 0 < len(stage) <= 64
        or stage[0] not in _STAGE_FIRST
        or not set(stage) <= _STAGE_REST
    ):
        raise _bad("stage", "must be a stage name like AddCNI", stage)
    policy = conf.get("failure_policy", "closed")
    if policy not in FAILURE_POLICIES:
        raise _bad("failure_policy", "must be 'open' or 'closed'", policy)
    pool = conf.get("pool")
    if pool is not None and pool not in POOL_KINDS:
        raise _bad("pool", f"must be one of {', '.join(POOL_KINDS)} or absent", pool)
    delegate = conf.get("delegate")
    if not isinstance(delegate, dict):
        raise _bad(
            "delegate", 'must be the real plugin\'s config, an object with a "type"', delegate
        )
    kind = delegate.get("type")
    if not isinstance(kind, str) or not kind or "/" in kind or kind.startswith("."):
        raise _bad("delegate.type", "must be a plugin's name in CNI_PATH", kind)
    if kind == PLUGIN_TYPE:
        raise _bad("delegate.type", f"must be the real plugin, not {PLUGIN_TYPE} itself", kind)
    log_file = conf.get("log_file")
    return PluginConfig(
        cni_version=version,
        name=name,
        agent=agent,
        stage=stage,
        failure_policy=policy,
        pool=pool,
        delegate=delegate,
        log_file=None if log_file is None else _path("log_file", log_file),
        state_dir=_path("state_dir", conf.get("state_dir", DEFAULT_STATE_DIR)),
        raw=conf,
    )


class Request(Frozen):
    """The runtime's environment for one call (``CNI_*`` variables)."""

    __slots__ = ("args", "command", "container_id", "ifname", "netns", "path")
    command: str
    container_id: str
    netns: str
    ifname: str
    args: str
    path: tuple[str, ...]

    def __init__(
        self,
        *,
        command: str,
        container_id: str,
        netns: str,
        ifname: str,
        args: str,
        path: tuple[str, ...],
    ) -> None:
        self._set(
            command=command,
            container_id=container_id,
            netns=netns,
            ifname=ifname,
            args=args,
            path=path,
        )


def _env_error(name: str, rule: str, value: object) -> PluginError:
    return PluginError(CODE_INVALID_ENV, f"{name}: {rule} (got {value!r})")


def parse_request(environ: Mapping[str, str]) -> Request:
    """The ``CNI_*`` variables, as the spec requires them per command (code 4)."""
    command = environ.get("CNI_COMMAND", "")
    if command not in COMMANDS:
        raise _env_error("CNI_COMMAND", f"must be one of {', '.join(COMMANDS)}", command)
    container_id = environ.get("CNI_CONTAINERID", "")
    netns = environ.get("CNI_NETNS", "")
    ifname = environ.get("CNI_IFNAME", "")
    path = tuple(p for p in environ.get("CNI_PATH", "").split(os.pathsep) if p)
    if command in ("ADD", "DEL", "CHECK"):
        if not container_id:
            raise _env_error("CNI_CONTAINERID", "is required", container_id)
        if not ifname or len(ifname) > 15 or "/" in ifname or ifname in (".", ".."):
            raise _env_error("CNI_IFNAME", "must be an interface name of 1..15 characters", ifname)
        if command != "DEL" and not netns:
            raise _env_error("CNI_NETNS", "is required", netns)
    if command != "VERSION" and not path:
        raise _env_error(
            "CNI_PATH", "must name the plugin directories", environ.get("CNI_PATH", "")
        )
    return Request(
        command=command,
        container_id=container_id,
        netns=netns,
        ifname=ifname,
        args=environ.get("CNI_ARGS", ""),
        path=path,
    )


def state_path(config: PluginConfig, container_id: str, ifname: str) -> str:
    """Where what an ADD took from a pool is kept (DEL, CHECK and GC read it)."""
    safe = container_id.replace("/", "_")
    return os.path.join(config.state_dir, f"{safe}-{ifname}.json")
