"""What travels on the wire between the node agent and its clients.

Request bodies are frozen pydantic objects that refuse unknown fields, so a
typo in a client is an error rather than a silently ignored option. Both
ends import these names; the wire format is plain JSON.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DEFAULT_WAIT_S",
    "MAX_WAIT_S",
    "NETNS_VETH_PEER",
    "POOL_KINDS",
    "STAGE_NAME",
    "AcquireRequest",
    "PoolKind",
    "TakeRequest",
]

#: How long an acquire waits for a permit when the client names no ``wait_s``.
DEFAULT_WAIT_S = 30.0
#: The longest long-poll an agent grants; a longer ``wait_s`` is refused (422).
MAX_WAIT_S = 600.0

PoolKind = Literal["netns", "veth", "tap", "netns-veth"]
#: Device kinds the agent can pre-create; other pool keys of a config are ignored.
POOL_KINDS: tuple[str, ...] = get_args(PoolKind)
#: The name of a ``netns-veth``'s peer inside its namespace (a CNI's default ifname).
NETNS_VETH_PEER = "eth0"

#: Stage names in URLs: the simulator's (``StartVM``) and the testbed's own.
STAGE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")

Holder = Annotated[str, Field(min_length=1, max_length=128)]


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AcquireRequest(_Request):
    """``POST /v1/stages/{stage}/acquire``: who wants a permit, and how long it waits."""

    holder: Holder
    wait_s: Annotated[float, Field(ge=0.0, le=MAX_WAIT_S, allow_inf_nan=False)] | None = None


class TakeRequest(_Request):
    """``POST /v1/pools/{kind}/take``: who takes a pre-created device."""

    holder: Holder
