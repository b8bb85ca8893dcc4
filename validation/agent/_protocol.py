"""What travels on the wire between the node agent and its clients.

Request bodies are frozen pydantic objects that refuse unknown fields, so a
typo in a client is an error rather than a silently ignored option. Both
ends import these names; the wire format is plain JSON.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from ...models.tuned import STAGE_NAME_PATTERN, TunedConfig

__all__ = [
    "DEFAULT_READ_TIMEOUT_S",
    "DEFAULT_WAIT_S",
    "MAX_BODY_BYTES",
    "MAX_READ_TIMEOUT_S",
    "MAX_TOKEN_CHARS",
    "MAX_WAIT_S",
    "MIN_READ_TIMEOUT_S",
    "MIN_TOKEN_CHARS",
    "NETNS_VETH_PEER",
    "POOL_KINDS",
    "STAGE_NAME",
    "AcquireRequest",
    "EmptyRequest",
    "PoolKind",
    "TakeRequest",
    "ignored_pools",
]

#: How long an acquire waits for a permit when the client names no ``wait_s``.
DEFAULT_WAIT_S = 30.0
#: The longest long-poll an agent grants; a longer ``wait_s`` is refused (422).
MAX_WAIT_S = 600.0

PoolKind = Literal["netns", "veth", "tap", "netns-veth"]
#: Device kinds the agent can pre-create; other pool keys of a config are ignored.
POOL_KINDS: tuple[str, ...] = get_args(PoolKind)
#: The order a sandbox asks an agent for the kinds it uses (the testbed's
#: runtimes and ``bootstorm-cni``): a ``netns-veth`` first (the whole
#: endpoint), a namespace only if none was left, then a veth pair or a tap.
#: So the first of these a config pools is the one every sandbox asks for:
#: its takes, empty ones too, are the starts a rate-following target counts.
ASK_ORDER: tuple[str, ...] = ("netns-veth", "netns", "veth", "tap")
#: The name of a ``netns-veth``'s peer inside its namespace (a CNI's default ifname).
NETNS_VETH_PEER = "eth0"


def ignored_pools(config: TunedConfig) -> tuple[str, ...]:
    """The kinds ``config`` pools that an agent does not make
    (:data:`POOL_KINDS`): a fleet's config may pool kinds of other nodes'
    CNIs, which an agent keeps but ignores, and says so."""
    return tuple(k for k, n in config.pools.items() if n and k not in POOL_KINDS)


#: How long the agent waits for a request's line and headers (from the
#: connection's start or the previous answer) and then for its body, seconds;
#: a client that sends half a request is cut off after it. It doubles as the
#: idle keep-alive time, so it is longer than the clients' own (httpx 5 s,
#: aiohttp 15 s): the agent never closes a connection a client is reusing.
DEFAULT_READ_TIMEOUT_S = 20.0
#: Bounds of ``--read-timeout-s``: a slow but live client gets its request in.
MIN_READ_TIMEOUT_S = 0.05
MAX_READ_TIMEOUT_S = 600.0
#: Largest request body (bytes). A tuned config is under 2 KiB; 256 limits of
#: 64-character names fit in 20 KiB; a larger body is refused (413) unread.
MAX_BODY_BYTES = 64 * 1024
#: Shortest bearer token: 16 characters of a random base64 token are 96 bits,
#: too many to guess through the network.
MIN_TOKEN_CHARS = 16
#: Longest bearer token: the agent reads header fields of up to 8 190 bytes.
MAX_TOKEN_CHARS = 4096

#: Stage names in URLs: the simulator's (``StartVM``) and the testbed's own
#: (the same rule as a TunedConfig's keys).
STAGE_NAME = re.compile(STAGE_NAME_PATTERN)

# Printable, no control characters: a holder's name goes into the agent's log.
Holder = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")]


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmptyRequest(_Request):
    """``POST /v1/leases/{id}/renew`` and ``/release``: no fields (an empty
    body or ``{}``); anything else is refused, not ignored."""


class AcquireRequest(_Request):
    """``POST /v1/stages/{stage}/acquire``: who wants a permit, and how long it waits."""

    holder: Holder
    # Strict: an int or a float, not ``true`` or ``"5"``.
    wait_s: (
        Annotated[float, Field(strict=True, ge=0.0, le=MAX_WAIT_S, allow_inf_nan=False)] | None
    ) = None


class TakeRequest(_Request):
    """``POST /v1/pools/{kind}/take``: who takes a pre-created device."""

    holder: Holder
