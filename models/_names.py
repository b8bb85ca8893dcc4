"""Names the command line shows in its help, in a module that imports nothing
heavy: ``bootstorm --help`` must not load pydantic and NumPy to list them."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["PATH_NAMES", "PathName"]

#: The receive data paths the data-plane model knows (see :mod:`.dataplane`).
PathName = Literal[
    "native",
    "linux-overlay",
    "docker-overlay",
    "ovs-overlay",
    "macvlan",
    "kata-veth",
    "kata-tap",
    "sriov",
    "bridge-intra",
    "ovs-intra",
    "macvlan-intra",
]
PATH_NAMES: tuple[str, ...] = get_args(PathName)
