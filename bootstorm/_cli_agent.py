"""``bootstorm agent serve`` and ``bootstorm config push``: the node agent's commands.

Kept apart from :mod:`bootstorm.cli` (one ``register`` call there), and the
agent's own imports (aiohttp, pyroute2) wait until a command runs, so
``bootstorm simulate`` does not pay for them.
"""

from __future__ import annotations

import enum
import logging
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ._io import terminal_console
from ._options import named_as_options
from ._params import short_repr
from .models import ConfigError
from .traces.files import shown_path
from .validation._names import AGENT_TOKEN_ENV

if TYPE_CHECKING:
    from .validation.agent import CniPoolSettings
    from .validation.agent.inventory import AgentFleet
    from .validation.agent.rollout import RolloutState

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
    host: Annotated[str, typer.Option(help="Address to listen on (loopback).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.")] = 8787,
    token_file: Annotated[
        Path | None,
        typer.Option(help=f"File holding the bearer token.  [default: ${TOKEN_ENV}]"),
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
    cni_plugin: Annotated[
        str | None,
        typer.Option(
            help="Plumb the netns-veth pool with this CNI plugin (bridge or ptp, host-local "
            "IPAM) on a network of the agent's own, for the testbed's --runtime cni.  "
            "[default: none: no CNI-plumbed netns-veth pool]"
        ),
    ] = None,
    cni_bin_dir: Annotated[
        Path | None,
        typer.Option(
            help="CNI plugin directory (with --cni-plugin).  "
            "[default: /usr/lib/cni, else /opt/cni/bin]"
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the config in force is saved, so a restart keeps a pushed config.  "
            "[default: $STATE_DIRECTORY, /var/lib/bootstorm-agent for root, "
            "$XDG_STATE_HOME/bootstorm/agent otherwise]"
        ),
    ] = None,
    force_config: Annotated[
        bool,
        typer.Option(
            "--force-config",
            help="Start with --config even if a config pushed later was saved "
            "(without it, the newer of the two wins).",
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
    plumbing = _cni_settings(cni_plugin, cni_bin_dir) if cni_plugin is not None else None
    if cni_plugin is None and cni_bin_dir is not None:
        raise ConfigError(f"cni-bin-dir: {shown_path(cni_bin_dir)} given without --cni-plugin")
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

    # The option's name, not the settings' field it fills.
    with named_as_options({"plugin": "cni-plugin"}):
        try:
            return CniPoolSettings.discover(plugin, bin_dir)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


class FewStarts(enum.StrEnum):
    fail = "fail"
    passed = "pass"


@config_app.command("push")
def push_cmd(
    config: Annotated[
        Path | None,
        typer.Argument(help="Tuned config YAML for every node (or those no --config-for names)."),
    ] = None,
    nodes: Annotated[
        Path | None, typer.Option(help="Inventory YAML: a list of nodes (labels optional).")
    ] = None,
    config_for: Annotated[
        list[str] | None,
        typer.Option(
            "--config-for",
            help="KEY=VALUE:FILE: nodes labelled KEY: VALUE take FILE's config (repeatable).",
        ),
    ] = None,
    waves: Annotated[
        int,
        typer.Option(
            help="Waves: 1 pushes to every node at once; 2+: a canary, then growing waves."
        ),
    ] = 1,
    canary: Annotated[
        str,
        typer.Option(help="With --waves: nodes in the first wave, a count or a share (5%)."),
    ] = "1",
    soak_s: Annotated[
        float | None,
        typer.Option(
            "--soak-s",
            help="Seconds each gate window lasts (before and after a wave's push); 0: no gate.  "
            "[default: 60 with --waves 2+, else 0]",
        ),
    ] = None,
    max_p99_increase: Annotated[
        float,
        typer.Option(help="A wave fails if a stage's p99 after > p99 before x (1 + this) + slack."),
    ] = 0.2,
    p99_slack_s: Annotated[
        float, typer.Option("--p99-slack-s", help="Seconds added to the p99 bound (noise).")
    ] = 0.005,
    max_empty_increase: Annotated[
        float,
        typer.Option(help="A wave fails if empty-pool takes per start rise by more than this."),
    ] = 0.05,
    min_starts: Annotated[
        int, typer.Option(help="Starts a window needs to judge a stage's p99.")
    ] = 20,
    few_starts: Annotated[
        FewStarts,
        typer.Option(help="A wave with too few starts to judge: fail (roll back) or pass."),
    ] = FewStarts.fail,
    max_failures: Annotated[
        int | None,
        typer.Option(
            help="Nodes that may refuse or be unreachable before a rollback.  "
            "[default: 0 with a gate or waves, else any]"
        ),
    ] = None,
    state: Annotated[
        Path | None,
        typer.Option(
            help="JSON file of the rollout's progress, saved after each step; "
            "run again with it to resume."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the plan (reads GET /config); send nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="Per-node timeout.")] = 10.0,
) -> None:
    """Push tuned configs to nodes: at once, or in gated waves with rollback.

    Exit 1 if any node refused or was unreachable, or the rollout rolled back.
    """
    from .models import TunedConfig
    from .validation.agent import POOL_KINDS, Inventory, ignored_pools
    from .validation.agent import rollout as ro
    from .validation.agent.inventory import AgentFleet

    # Options first, then the files, then the nodes: nothing is sent on a refusal.
    if not MIN_PUSH_TIMEOUT_S <= timeout_s <= MAX_PUSH_TIMEOUT_S:  # NaN fails both
        raise ConfigError(
            f"timeout-s: must be within {MIN_PUSH_TIMEOUT_S:g}..{MAX_PUSH_TIMEOUT_S:g} s "
            f"(got {timeout_s:g})"
        )
    if nodes is None:
        raise ConfigError("nodes: an inventory is needed (--nodes inventory.yaml)")
    if not 1 <= waves <= MAX_WAVES:
        raise ConfigError(f"waves: must be within 1..{MAX_WAVES} (got {waves})")
    ro.parse_canary(canary, nodes=1)  # its form, before any file is read
    if waves == 1 and canary != "1":
        raise ConfigError(f"canary: needs --waves 2 or more (got --canary {short_repr(canary)})")
    gated_default = waves > 1
    soak = (60.0 if gated_default else 0.0) if soak_s is None else soak_s
    options = ro.RolloutOptions(
        soak_s=soak,
        gate=ro.GateRule(
            max_p99_increase=max_p99_increase,
            p99_slack_s=p99_slack_s,
            max_empty_increase=max_empty_increase,
            min_starts=min_starts,
            few_starts="pass" if few_starts is FewStarts.passed else "fail",
        ),
        max_failures=(0 if gated_default or soak > 0 else None)
        if max_failures is None
        else max_failures,
    )
    selectors = [ro.parse_config_for(text) for text in config_for or []]
    if config is None and not selectors:
        raise ConfigError("config: give a CONFIG file, or --config-for KEY=VALUE:FILE")
    default = TunedConfig.from_yaml(config) if config is not None else None
    classes = [
        ro.ClassConfig(key=k, value=v, config=TunedConfig.from_yaml(Path(f)), source=f)
        for k, v, f in selectors
    ]
    inventory = Inventory.from_yaml(nodes)
    assignments = ro.assign_configs(
        [(n.name, n.labels) for n in inventory.nodes], default=default, per_class=classes
    )
    urls = {n.name: n.url for n in inventory.nodes}
    plan = ro.plan_waves(
        [(a.node, a.node_class) for a in assignments],
        waves=waves,
        canary=ro.parse_canary(canary, nodes=len(assignments)),
    )
    fresh = ro.new_state(assignments, urls, plan)
    current = fresh
    if state is not None:
        if not dry_run:
            ro.check_state_path(state)
        saved = ro.load_state(state)
        if saved is not None:
            if saved.key != fresh.key:
                raise ConfigError(
                    f"state: {shown_path(state)} is another rollout's (other configs, nodes "
                    "or waves); remove it or give another --state"
                )
            current = saved
    configs = {a.node_class: a.config for a in assignments}
    sources = {c.name: c.source for c in classes}
    if config is not None:
        sources[ro.DEFAULT_CLASS] = str(config)
    console = terminal_console()
    for node_class, tuned in configs.items():
        if ignored := ignored_pools(tuned):
            console.print(
                f"note: {sources.get(node_class, node_class)} pools {', '.join(ignored)}, which "
                f"no node agent makes (they make {', '.join(POOL_KINDS)}): the agents keep "
                "those sizes and ignore them",
                style="yellow",
            )
    with AgentFleet(inventory, timeout_s=timeout_s) as fleet:  # tokens read here
        if dry_run:
            _print_plan(current, fleet, sources, as_json=as_json)
            return

        staged = len(plan) > 1 or soak > 0

        def progress(event: str, _state: ro.RolloutState) -> None:
            if staged and not as_json:
                sys.stderr.write(f"{event}\n")
                sys.stderr.flush()

        def save(st: ro.RolloutState) -> None:
            if state is not None:
                ro.save_state(state, st)

        final = ro.run_rollout(
            current, configs=configs, fleet=fleet, options=options, save=save, on_step=progress
        )
    if as_json:
        console.print_json(data=_state_json(final), highlight=False)
    else:
        _print_rollout(
            final,
            sources,
            title=f"{config or 'per-class configs'} → {_count(len(final.nodes), 'node')}",
        )
    if not final.ok:
        raise typer.Exit(1)


#: Most waves a push may have (a 10 000-node fleet doubling from 1 needs 14).
MAX_WAVES = 64

_RESULT = {
    "pending": "not reached",
    "unchanged": "[green]unchanged[/]",
    "pushed": "[green]applied[/]",
    "failed": "[red]refused[/]",
    "unknown": "[red]unknown[/]",
    "rolled_back": "[yellow]rolled back[/]",
    "rollback_failed": "[red]rollback failed[/]",
}


def _state_json(state: RolloutState) -> dict[str, object]:
    data: dict[str, object] = state.model_dump(
        mode="json", exclude={"nodes": {"__all__": {"before", "previous"}}}
    )
    data["ok"] = state.ok
    return data


def _print_rollout(state: RolloutState, sources: dict[str, str], *, title: str) -> None:
    console = terminal_console()
    several = len(state.configs) > 1
    if len(state.waves) > 1 or any(w.gates for w in state.waves):
        waves = Table(title="waves")
        for column in ("wave", "nodes", "result", "gate"):
            waves.add_column(column, overflow="fold")
        for w in state.waves:
            gate = "; ".join((f"{g.node_class}: " if several else "") + g.reason for g in w.gates)
            waves.add_row(str(w.index + 1), str(len(w.nodes)), w.status, gate or "-")
        console.print(waves)
    table = Table(title=title)
    staged = len(state.waves) > 1
    columns = [
        "node",
        *(["wave"] if staged else []),
        *(["class"] if several else []),
        *("result", "status", "gen", "detail"),
    ]
    for column in columns:
        # A URL or a refusal's reason folds in a narrow terminal; never cut to "…".
        table.add_column(column, overflow="fold")
    for n in state.nodes.values():
        row = [n.name, *([str(n.wave + 1)] if staged else [])]
        if several:
            row.append(n.node_class)
        row += [
            _RESULT[n.status],
            "-" if n.http_status is None else str(n.http_status),
            "-" if n.generation is None else str(n.generation),
            n.message or "-",
        ]
        table.add_row(*row)
    console.print(table)
    whole = {
        True: "every node touched is whole (GET /config checked)",
        False: "[red]NOT whole[/]: see the nodes above",
        None: "",
    }[state.consistent]
    at = sum(1 for n in state.nodes.values() if n.status in ("pushed", "unchanged"))
    summary = {
        "completed": f"completed: {at} of {len(state.nodes)} nodes at their target config",
        "rolled_back": f"[yellow]rolled back[/]: {state.reason}",
        "rollback_incomplete": (
            f"[red]rollback incomplete[/]: {state.reason}; run again with --state to retry"
        ),
        "running": "[red]stopped[/]",
    }[state.status]
    console.print(f"{summary}; {whole}" if whole else summary, highlight=False)


def _print_plan(
    state: RolloutState, fleet: AgentFleet, sources: dict[str, str], *, as_json: bool
) -> None:
    """The dry run: the waves, each node's class and whether it would change."""
    from concurrent.futures import ThreadPoolExecutor

    from .validation.agent import AgentError
    from .validation.agent.rollout import config_digest

    def now(name: str) -> str:
        node = state.nodes[name]
        if node.status != "pending":
            return f"{node.status} (state file)"
        try:
            digest = config_digest(fleet.read(name).config)
        except AgentError as exc:
            return f"unreachable: {exc.message}"
        return "at target: skip" if digest == node.target else "would push"

    names = list(state.nodes)
    with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
        actions = dict(zip(names, pool.map(now, names), strict=True))
    if as_json:
        terminal_console().print_json(
            data={
                "dry_run": True,
                "configs": state.configs,
                "waves": [
                    [
                        {"node": n, "class": state.nodes[n].node_class, "action": actions[n]}
                        for n in w.nodes
                    ]
                    for w in state.waves
                ],
            },
            highlight=False,
        )
        return
    several = len(state.configs) > 1
    table = Table(title=f"plan: {_count(len(state.waves), 'wave')}, {_count(len(names), 'node')}")
    for column in ("wave", "node", *(["class"] if several else []), "now"):
        table.add_column(column, overflow="fold")
    for w in state.waves:
        for n in w.nodes:
            row = [str(w.index + 1), n]
            if several:
                row.append(state.nodes[n].node_class)
            row.append(actions[n])
            table.add_row(*row)
    console = terminal_console()
    console.print(table)
    for klass, digest in state.configs.items():
        console.print(f"{klass}: {sources.get(klass, '?')} ({digest})", highlight=False)
    console.print("dry run: nothing sent", highlight=False)


@agent_app.command("install-cni")
def install_cni_cmd(
    cni_bin_dir: Annotated[
        Path,
        typer.Option(help="The node's CNI plugin directory (the runtime's CNI_PATH)."),
    ] = Path("/opt/cni/bin"),
    launcher: Annotated[
        bool,
        typer.Option(help="Write the Python launcher (python -I -S) even if a C compiler is here."),
    ] = False,
) -> None:
    """Install bootstorm-cni: ADD compiled from C (the system cc), every other
    command the Python plugin; without a compiler, the Python launcher alone."""
    from .validation.cni_plugin.install import BuildError, InstallError, install

    try:
        installed = install(cni_bin_dir, launcher=launcher)
    except InstallError as exc:
        raise ConfigError(str(exc)) from None
    except BuildError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(1) from None
    sys.stdout.write(f"{installed.path}: {installed.detail}\n")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
