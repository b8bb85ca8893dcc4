"""``bootstorm agent serve`` and ``bootstorm config push``: the node agent's commands.

Kept apart from :mod:`bootstorm.cli` (one ``register`` call there), and the
agent's own imports (aiohttp, pyroute2) wait until a command runs, so
``bootstorm simulate`` does not pay for them.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ._io import terminal_console
from ._params import short_repr
from .models import ConfigError
from .traces.files import shown_path
from .validation._names import AGENT_TOKEN_ENV

if TYPE_CHECKING:
    from .validation.agent import CniPoolSettings

__all__ = ["TOKEN_ENV", "register"]

#: Environment variable holding the agent's bearer token when no file is given.
TOKEN_ENV = AGENT_TOKEN_ENV
#: Bounds of ``config push --timeout-s`` (per node, seconds): a node that has
#: not answered a PUT in ten minutes (the longest long-poll an agent grants)
#: is down; beyond it, and at inf, httpx's timer overflows.
MIN_PUSH_TIMEOUT_S = 0.01
MAX_PUSH_TIMEOUT_S = 600.0

agent_app = typer.Typer(
    help="The node agent: stage permits, device pools, tuned config.",
    add_completion=False,
    rich_markup_mode=None,
)
config_app = typer.Typer(
    help="Tuned configs on nodes.", add_completion=False, rich_markup_mode=None
)


def register(app: typer.Typer) -> None:
    """Add the ``agent`` and ``config`` command groups to the main app."""
    app.add_typer(agent_app, name="agent")
    app.add_typer(config_app, name="config")


def _regular_file(path: Path, *, field: str) -> int:
    """``path``'s mode; ConfigError unless it is a regular file (OpenSSL would
    block opening a FIFO, and read a device forever)."""
    try:
        st = path.stat()  # stat, not open: a FIFO or a device is never opened
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ConfigError(f"{field}: cannot read {shown_path(path)!r} ({reason})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{field}: {shown_path(path)!r} is not a regular file")
    return st.st_mode


def _private_file(path: Path, *, field: str) -> None:
    """ConfigError unless only its owner may read ``path`` (a secret: token, TLS key)."""
    mode = stat.S_IMODE(_regular_file(path, field=field))
    if mode & 0o077:
        raise ConfigError(
            f"{field}: {shown_path(path)!r} has mode {mode:04o}, open to group or others; "
            f"it holds a secret: chmod 600 {shown_path(path)}"
        )


def _token(token_file: Path | None) -> str:
    from .validation.agent._server import check_token
    from .validation.agent.inventory import read_token_file

    if token_file is not None:
        _private_file(token_file, field="token-file")
        token: str = read_token_file(token_file, field="token-file")
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise ConfigError(f"token: none given; pass --token-file or set {TOKEN_ENV}")
    check_token(token)
    return token


@agent_app.command("serve")
def serve_cmd(
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.")] = 8787,
    token_file: Annotated[
        Path | None, typer.Option(help=f"File holding the bearer token (else ${TOKEN_ENV}).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="Tuned config YAML to start with (else no limits/pools)."),
    ] = None,
    pool_id: Annotated[
        int, typer.Option(help="Number in pooled device names; one per agent on a host.")
    ] = 0,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote", help="Allow a non-loopback --host (with TLS, or --insecure)."
        ),
    ] = False,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate (chain): serve HTTPS; needs --tls-key.")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(help="PEM private key of --tls-cert (mode 600).")
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Allow --allow-remote over plain HTTP (the token crosses the network in clear).",
        ),
    ] = False,
    read_timeout_s: Annotated[
        float,
        typer.Option(
            "--read-timeout-s",
            help="Seconds a client has to send a request's headers, then its body.",
        ),
    ] = 20.0,
    cni: Annotated[
        str | None,
        typer.Option(
            help="Plumb the netns-veth pool with this CNI plugin (bridge or ptp, host-local "
            "IPAM) on a network of the agent's own, for the testbed's --runtime cni."
        ),
    ] = None,
    cni_bin_dir: Annotated[
        Path | None,
        typer.Option(help="CNI plugin directory (else /usr/lib/cni or /opt/cni/bin)."),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the config in force is saved, so a restart keeps a pushed config "
            "(else $STATE_DIRECTORY, /var/lib/bootstorm-agent for root, "
            "$XDG_STATE_HOME/bootstorm/agent otherwise)."
        ),
    ] = None,
    force_config: Annotated[
        bool,
        typer.Option(
            "--force-config",
            help="Start with --config even if a config pushed later was saved "
            "(by default the newer of the two wins).",
        ),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO.")] = False,
) -> None:
    """Run the node agent until SIGTERM or SIGINT; pooled devices are removed on the way out."""
    import asyncio

    from pydantic import SecretStr

    from .models import TunedConfig
    from .validation.agent import AgentSettings, StartupConfig, default_state_dir, serve
    from .validation.agent._pools import MAX_POOL_ID
    from .validation.agent._protocol import MAX_READ_TIMEOUT_S, MIN_READ_TIMEOUT_S
    from .validation.agent._server import tls_context

    if not 0 <= port <= 65535:
        raise ConfigError(f"port: must be within 0..65535 (got {port})")
    if not 0 <= pool_id <= MAX_POOL_ID:
        raise ConfigError(f"pool-id: must be within 0..{MAX_POOL_ID} (got {pool_id})")
    if not MIN_READ_TIMEOUT_S <= read_timeout_s <= MAX_READ_TIMEOUT_S:
        raise ConfigError(
            f"read-timeout-s: must be within {MIN_READ_TIMEOUT_S:g}..{MAX_READ_TIMEOUT_S:g} "
            f"(got {read_timeout_s:g})"
        )
    if (tls_cert is None) != (tls_key is None):
        given, missing = ("tls-cert", "tls-key") if tls_key is None else ("tls-key", "tls-cert")
        raise ConfigError(f"{missing}: --{given} given without --{missing}")
    tls = tls_cert is not None
    from .validation.agent._server import is_loopback_host

    remote = not is_loopback_host(host)
    if remote and not allow_remote:
        raise ConfigError(
            f"host: {short_repr(host)} is not loopback; pass --allow-remote to serve it"
        )
    if remote and not tls and not insecure:
        raise ConfigError(
            f"host: serving {short_repr(host)} over plain HTTP would send the bearer token "
            "in clear; give --tls-cert and --tls-key, or --insecure to accept that"
        )
    if tls_cert is not None and tls_key is not None:
        _regular_file(tls_cert, field="tls-cert")
        _private_file(tls_key, field="tls-key")
        tls_context(tls_cert, tls_key)  # refused here, one line, before anything starts
    plumbing = _cni_settings(cni, cni_bin_dir) if cni is not None else None
    if cni is None and cni_bin_dir is not None:
        raise ConfigError(f"cni-bin-dir: {shown_path(cni_bin_dir)} given without --cni")
    if force_config and config is None:
        raise ConfigError("force-config: given without --config")
    token = _token(token_file)
    startup = None
    if config is not None:
        tuned = TunedConfig.from_yaml(config)  # bounded, refused in one line
        # Its mtime decides whether a config pushed since wins (docs/agent.md).
        startup = StartupConfig(
            config=tuned,
            path=config,
            modified_at_s=_modified_at_s(config),
            force=force_config,
        )
    if verbose:
        logging.getLogger("bootstorm").setLevel(logging.INFO)
    settings = AgentSettings(
        token=SecretStr(token),
        host=host,
        port=port,
        pool_id=pool_id,
        cni=plumbing,
        read_timeout_s=read_timeout_s,
        tls_cert=tls_cert,
        tls_key=tls_key,
        state_dir=state_dir if state_dir is not None else default_state_dir(),
    )
    console = terminal_console()

    def ready(url: str) -> None:
        console.print(f"bootstorm agent listening on {url}", soft_wrap=True, highlight=False)
        sys.stdout.flush()

    asyncio.run(serve(settings, startup, on_ready=ready))
    console.print("bootstorm agent stopped; pooled devices removed", highlight=False)


def _modified_at_s(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:  # gone since it was read: as if modified now (the file wins)
        return None


def _cni_settings(plugin: str, bin_dir: Path | None) -> CniPoolSettings:
    """The agent's CNI plumbing, its plugins found now: one line (exit 2) if not."""
    from .validation.agent import CniPoolSettings

    try:
        return CniPoolSettings.discover(plugin, bin_dir)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@config_app.command("push")
def push_cmd(
    config: Annotated[Path, typer.Argument(help="Tuned config YAML.")],
    nodes: Annotated[Path, typer.Option(help="Inventory YAML: a list of nodes.")],
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="Per-node timeout.")] = 10.0,
) -> None:
    """Push one tuned config to every node at once; exit 1 if any node refused."""
    from .models import TunedConfig
    from .validation.agent import Inventory, push_config

    # Options first, then the files, then the nodes: nothing is sent on a refusal.
    if not MIN_PUSH_TIMEOUT_S <= timeout_s <= MAX_PUSH_TIMEOUT_S:  # NaN fails both
        raise ConfigError(
            f"timeout-s: must be within {MIN_PUSH_TIMEOUT_S:g}..{MAX_PUSH_TIMEOUT_S:g} s "
            f"(got {timeout_s:g})"
        )
    tuned = TunedConfig.from_yaml(config)  # refused here, before any node sees it
    inventory = Inventory.from_yaml(nodes)
    results = push_config(inventory, tuned, timeout_s=timeout_s)
    table = Table(title=f"{config} → {len(results)} nodes")
    for column in ("node", "url", "result", "status", "generation", "detail"):
        # A URL or a refusal's reason folds in a narrow terminal; never cut to "…".
        table.add_column(column, overflow="fold")
    for r in results:
        table.add_row(
            r.node,
            r.url,
            "[green]applied[/]" if r.ok else "[red]refused[/]",
            "-" if r.status is None else str(r.status),
            "-" if r.generation is None else str(r.generation),
            r.message,
        )
    terminal_console().print(table)
    if not all(r.ok for r in results):
        raise typer.Exit(1)
