"""A fleet of node agents, and pushing one tuned config to all of them.

An inventory is YAML, a list of nodes (or ``{nodes: [...]}``)::

    - name: node-a
      url: http://10.0.0.5:8787
      token_env: NODE_A_TOKEN        # or token_file: /etc/bootstorm/node-a.token
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ...models import ConfigError, TunedConfig
from ...models._errors import format_validation_error
from ...models._yaml import YamlInputError, parse_yaml, read_text_bounded, shown_path
from ...traces import files
from .client import AgentClient, AgentError

__all__ = ["Inventory", "InventoryNode", "PushResult", "push_config", "read_token_file"]


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
