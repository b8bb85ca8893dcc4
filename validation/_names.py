"""Names of everything the testbed and the node agent create on a host.

Everything bootstorm creates on a real node carries one of these prefixes or
lives in a namespace it made, so a sweep can find (and only find) its own
leftovers after a killed run. Linux interface names are at most 15 bytes
(IFNAMSIZ - 1), so link prefixes are short.
"""

from __future__ import annotations

from ..traces._names import TRACEFS_INSTANCE_PREFIX

__all__ = [
    "AGENT_POOL_LINK_PREFIX",
    "AGENT_POOL_NETNS_PREFIX",
    "AGENT_TOKEN_ENV",
    "CGROUP_PARENT",
    "LINK_PREFIX",
    "NETNS_PREFIX",
    "TRACEFS_INSTANCE_PREFIX",
    "owned_link",
    "owned_netns",
]

#: Network namespaces of testbed sandboxes: ``bst-<run>-<sandbox>``.
NETNS_PREFIX = "bst-"
#: Host-side links the testbed creates: ``bst<run4><idx>`` (<= 15 bytes).
LINK_PREFIX = "bst"
#: Pre-created namespaces the node agent keeps in its pools: ``bstpool-<kind>-<n>``.
AGENT_POOL_NETNS_PREFIX = "bstpool-"
#: Pre-created links in the agent's pools: ``bsp<n>`` (<= 15 bytes).
AGENT_POOL_LINK_PREFIX = "bsp"
#: The cgroup-v2 directory under which the testbed makes one cgroup per sandbox.
CGROUP_PARENT = "bootstorm-testbed"
# TRACEFS_INSTANCE_PREFIX (tracefs instances of the kernel collector,
# ``instances/bootstorm-<pid>``) is defined by the collector's layer, below
# this one, and re-exported here with the other prefixes.


def owned_netns(name: str) -> bool:
    """Whether a network namespace was made by the testbed or the agent."""
    return name.startswith((NETNS_PREFIX, AGENT_POOL_NETNS_PREFIX))


def owned_link(name: str) -> bool:
    """Whether a host link was made by the testbed or the agent."""
    return name.startswith((LINK_PREFIX, AGENT_POOL_LINK_PREFIX))


#: The environment variable holding a node agent's bearer token (``agent
#: serve`` reads it when no ``--token-file`` is given; its clients too).
AGENT_TOKEN_ENV = "BOOTSTORM_AGENT_TOKEN"
