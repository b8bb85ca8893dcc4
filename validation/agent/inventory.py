"""A fleet of node agents, and pushing one tuned config to all of them.

An inventory is YAML, a list of nodes (or ``{nodes: [...]}``)::

    - name: node-a
      url: http://10.0.0.5:8787
      token_env: NODE_A_TOKEN        # or token_file: /etc/bootstorm/node-a.token
      labels: {role: gpu}            # optional: its class, for per-class configs

:class:`AgentFleet` is the inventory as :mod:`.rollout` talks to it (read a
node's config in force, push one, scrape its metrics), over :class:`AgentClient`.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ...models import ConfigError, TunedConfig
from ...models._errors import format_validation_error
from ...models._yaml import YamlInputError, parse_yaml, read_text_bounded, shown_path
from ...traces import files
from .client import AgentClient, AgentError, ConfigInForce

__all__ = [
    "LABEL_KEY_PATTERN",
    "LABEL_VALUE_PATTERN",
    "MAX_LABELS",
    "AgentFleet",
    "Inventory",
    "InventoryNode",
    "PushResult",
    "push_config",
    "read_token_file",
]

#: A node label's key and value (``role: gpu``, ``zone: eu-1``): names, no
#: spaces, no ``=`` or ``:`` (``--config-for KEY=VALUE:FILE`` splits on them).
LABEL_KEY_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
#: Labels one node may carry.
MAX_LABELS = 32

_LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN)]
_LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN)]


def read_token_file(path: Path, *, field: str) -> str:
    """The token in ``path`` (surrounding whitespace dropped); ConfigError names
    ``field``. Through the one bounded reader: a FIFO, a device or an oversize
    file is refused in one line rather than hanging or filling the memory,
    and no byte of the file is shown (it is a secret)."""
    token: str = files.read_token_file(path, field=field)
    return token


class InventoryNode(BaseModel):
    """One node: its agent's URL and where its token comes from (exactly one source)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=128)]
    url: Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$")]
    token_env: Annotated[str, Field(min_length=1)] | None = None
    token_file: Path | None = None
    #: The node's class (``{role: gpu}``): ``config push --config-for
    #: role=gpu:gpu.yaml`` sends nodes of that class their own config.
    labels: Annotated[dict[_LabelKey, _LabelValue], Field(max_length=MAX_LABELS)] = Field(
        default_factory=dict
    )

    @field_validator("url")
    @classmethod
    def _a_reachable_form(cls, url: str) -> str:
        """A host and, if given, a port a client can dial: ``http://[::1``
        passed the pattern and failed in the HTTP client with a traceback."""
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(url)
            port = parts.port  # ValueError past 65535 or not a number
        except ValueError as exc:
            raise ValueError(f"not a URL an agent is reached at ({exc})") from None
        if not parts.hostname:
            raise ValueError("names no host")
        if port == 0:
            raise ValueError("names port 0")
        return url

    @model_validator(mode="after")
    def _one_token_source(self) -> InventoryNode:
        if (self.token_env is None) == (self.token_file is None):
            raise ValueError(
                f"node {self.name!r}: give exactly one of token_env and token_file "
                f"(got token_env={self.token_env!r}, token_file={self.token_file!r})"
            )
        return self

    def token(self, *, where: str) -> str:
        """The node's token, read now; ConfigError naming the field if missing."""
        if self.token_env is not None:
            value = os.environ.get(self.token_env, "").strip()
            if not value:
                raise ConfigError(
                    f"{where}.token_env: environment variable {self.token_env!r} is not set"
                )
            return value
        assert self.token_file is not None
        return read_token_file(self.token_file, field=f"{where}.token_file")


class Inventory(BaseModel):
    """The nodes one config goes to; names are unique."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: Annotated[list[InventoryNode], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_names(self) -> Inventory:
        names = [n.name for n in self.nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node names must be unique, but got {dupes} more than once")
        return self

    @classmethod
    def from_yaml(cls, path: str | Path) -> Inventory:
        path = Path(path)
        # Bounded, as every file bootstorm reads: a regular file of at most
        # 4 MiB, no aliases (a 390-byte alias bomb took 8.7 s and 563 MB with
        # yaml.safe_load), no nesting past 32 levels (a RecursionError), no
        # FIFO (it hung) and no /dev/zero (read to 3 GB). Keys must look like
        # names, so a file that is not an inventory is not quoted back.
        text = read_text_bounded(path)
        try:
            data: Any = parse_yaml(text, mapping_keys=True)
        except YamlInputError as exc:
            raise ConfigError(f"{shown_path(path)}: {exc}") from None
        if isinstance(data, list):  # the short form: just the nodes
            data = {"nodes": data}
        if not isinstance(data, dict):
            raise ConfigError(
                f"{shown_path(path)}: expected a list of nodes, but got {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(
                format_validation_error(exc, prefix=f"{shown_path(path)}: ")
            ) from None


@dataclass(frozen=True, slots=True)
class PushResult:
    node: str
    url: str
    ok: bool
    #: HTTP status, None when the node could not be reached.
    status: int | None
    generation: int | None
    message: str


def push_config(
    inventory: Inventory, config: TunedConfig, *, timeout_s: float = 10.0
) -> list[PushResult]:
    """PUT ``config`` on every node at once; one result per node, in inventory order.

    Tokens are read before anything is sent, so a missing one changes no node.
    """
    tokens = [node.token(where=f"nodes.{i}") for i, node in enumerate(inventory.nodes)]

    def push(node: InventoryNode, token: str) -> PushResult:
        try:
            with AgentClient(node.url, token=token, timeout_s=timeout_s) as client:
                generation = client.put_config(config)
        except AgentError as exc:
            return PushResult(node.name, node.url, False, exc.status, None, exc.message)
        return PushResult(node.name, node.url, True, 200, generation, "applied")

    workers = min(32, len(inventory.nodes))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bootstorm-push") as pool:
        return list(pool.map(push, inventory.nodes, tokens))


class AgentFleet:
    """The nodes of an inventory as a rollout talks to them, by name.

    Tokens are read when the fleet is made (a missing one is a ConfigError
    before anything is sent); one :class:`AgentClient` per node, made on
    first use and shared by threads. Every call raises :class:`AgentError`
    on a refusal or an unreachable node. Close it (or use ``with``).
    """

    def __init__(self, inventory: Inventory, *, timeout_s: float = 10.0) -> None:
        self._nodes = {node.name: node for node in inventory.nodes}
        self._tokens = {
            node.name: node.token(where=f"nodes.{i}") for i, node in enumerate(inventory.nodes)
        }
        self._timeout_s = timeout_s
        self._clients: dict[str, AgentClient] = {}
        self._lock = threading.Lock()

    def _client(self, node: str) -> AgentClient:
        with self._lock:
            client = self._clients.get(node)
            if client is None:
                client = AgentClient(
                    self._nodes[node].url, token=self._tokens[node], timeout_s=self._timeout_s
                )
                self._clients[node] = client
            return client

    def read(self, node: str) -> ConfigInForce:
        """The config in force on ``node``, its generation and source."""
        return self._client(node).config_in_force()

    def push(self, node: str, config: TunedConfig) -> int:
        """``PUT /config`` on ``node``; its new generation."""
        return self._client(node).put_config(config)

    def scrape(self, node: str) -> str:
        """``node``'s Prometheus text."""
        return self._client(node).metrics()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def __enter__(self) -> AgentFleet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
