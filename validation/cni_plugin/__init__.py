"""``bootstorm-cni``: a CNI plugin that puts the node agent in a node's own startup path.

A node's conflist names it in place of its real plugin and gives it that
plugin's config as ``delegate``. On ADD it takes a permit for its stage from
the node agent (a lease, renewed while the delegate runs and released after),
takes a plumbed namespace's interface from the agent's ``netns-veth`` pool
where the config names ``pool``, else execs the delegate (found in
``CNI_PATH``) and prints its result unchanged. DEL gives back what ADD took.
What it does when the agent is down, slow or restarted is the config's
``failure_policy``: ``open`` (go ahead without a permit, logged) or
``closed`` (the ADD fails with a CNI error), each bounded by ``timeout_s``.

The plugin runs as a fresh process on the critical path of every sandbox, so
this package imports the standard library only, and little of it: no
``typing``, ``dataclasses``, ``http.client`` or ``urllib`` (30 ms of imports
on this project's host, against a bridge ADD of a few tens); see
``docs/agent.md``, "In the node's startup path".
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
