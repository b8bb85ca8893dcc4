"""The testbed's sandboxes: what ``bootstorm testbed run`` does, as steps.

A testbed sandbox is one Python thread doing seed 000's pipeline with real
kernel operations (``validation/testbed/driver.py``); this catalog is that
thread, operation by operation, so that a profile fitted to one recorded
storm predicts others — another size, a pool, stage limits. Each operation
is a Python call under the GIL (pyroute2 building and parsing the message),
then the kernel's work, under the lock it takes:

- **NetNS**: ``unshare(CLONE_NEWNET)`` (``setup_net``, the loopback under
  RTNL) and the bind mount — or a namespace taken from the pool;
- **AddCNI**: a netlink socket in the namespace, a veth pair (its peer made
  in the namespace, or made on the host and moved in: ``synchronize_net``
  under RTNL) — or one taken from the pool, its peer moved in and its host
  end renamed — both ends up, an address;
- a ``netns-veth`` pool holds namespaces made with their veth pair's peer
  already inside (the host end down on the host): NetNS takes one (a fetch,
  no unshare) and AddCNI only brings both ends up and addresses the peer — no
  creation, no move, no rename. It comes first: a sandbox that finds it empty
  falls back to the ``netns`` and ``veth`` pools (or creates), so in the
  model NetNS's creation branch also makes the veth pair, and AddCNI makes
  none;
- **Cgroup**: ``cgroup_mkdir`` under cgroup_mutex;
- **AttachIf**: ``TUNSETIFF`` (a netdev under RTNL), the tap up, an ingress
  qdisc and a u32 + mirred filter on each of veth and tap (RTNL each);
- **StartVM**: fork/exec of QEMU (under the GIL), the VMM moved into the
  cgroup (cgroup_mutex, css_set_lock), QEMU's tap ioctls (RTNL each), then
  the VMM's and the guest's boot, outside the Python process.

Links brought up make work for the kernel's kworkers (linkwatch, addrconf),
which take RTNL too: a branch per sandbox nobody waits for.

The GIL is a lock like the kernel's: the threads' Python work is serial.
"""

from __future__ import annotations

from typing import Literal

from ..simulator import Async, Cpu, Hold, LockSpec, Pooled, Sleep, Stage, Step
from ._errors import ConfigError
from .cni import CGROUP_MUTEX, CSS_SET_LOCK, RTNL
from .profile import Profile, TestbedCostTable
from .scenario import Scenario

__all__ = [
    "GIL",
    "TESTBED_CNIS",
    "TESTBED_POOL_KINDS",
    "TESTBED_STAGES",
    "testbed_costs",
    "testbed_lock_specs",
    "testbed_plan",
]

TESTBED_STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")
#: The testbed's variants, by the ``cni`` a scenario names: where the veth peer is made.
TESTBED_CNIS: dict[str, Literal["in-netns", "moved"]] = {
    "testbed-veth": "in-netns",
    "testbed-veth-moved": "moved",
}
#: Pool kinds of the testbed: ``netns-veth`` (a namespace with its veth peer
#: inside) is taken before ``netns`` and ``veth`` (see :func:`testbed_plan`).
TESTBED_POOL_KINDS = ("netns", "veth", "netns-veth")
GIL = "gil"


def testbed_costs(profile: Profile) -> TestbedCostTable:
    if profile.testbed is None:
        raise ConfigError(
            f"profile: {profile.name!r} has no `testbed` section; fit one to a recorded storm "
            "with `bootstorm calibrate --trace FILE --output local.yaml`"
        )
    return profile.testbed


def testbed_lock_specs() -> list[LockSpec]:
    return [
        LockSpec(name=RTNL),
        LockSpec(name=CGROUP_MUTEX),
        LockSpec(name=CSS_SET_LOCK),
        LockSpec(name=GIL),
    ]


def testbed_plan(
    scenario: Scenario, c: TestbedCostTable, *, peer: Literal["in-netns", "moved"]
) -> tuple[Stage, ...]:
    """The stages of one testbed sandbox."""

    def py(label: str) -> Step:
        return Hold(GIL, (Cpu(c.py_op_cpu_s, label),))

    def rtnl(hold_s: float, label: str) -> tuple[Step, ...]:
        return (py(label), Hold(RTNL, (Cpu(hold_s, label),)))

    create_ns: tuple[Step, ...] = (
        py("unshare"),
        Cpu(c.netns_create_cpu_s, "setup_net"),
        Hold(RTNL, (Cpu(c.rtnl_netns_hold_s, "loopback"),)),
    )
    netns: tuple[Step, ...] = create_ns
    if scenario.pools.get("netns", 0) > 0:
        netns = (Pooled("netns", create=create_ns, fetch=(py("take netns"),)),)

    veth: tuple[Step, ...]
    if peer == "in-netns":
        veth = rtnl(c.rtnl_veth_hold_s, "veth pair")
    else:
        veth = (
            *rtnl(c.rtnl_veth_hold_s, "veth pair"),
            py("move peer"),
            Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "move"), Sleep(c.rcu_grace_s, "synchronize_net"))),
        )
    if scenario.pools.get("veth", 0) > 0:
        # A pre-made pair: the peer moves in (synchronize_net under RTNL) and
        # the host end is renamed to the sandbox's name.
        fetch_veth: tuple[Step, ...] = (
            py("take veth"),
            py("move peer"),
            Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "move"), Sleep(c.rcu_grace_s, "synchronize_net"))),
            *rtnl(c.rtnl_small_hold_s, "rename host end"),
        )
        veth = (Pooled("veth", create=veth, fetch=fetch_veth),)
    if scenario.pools.get("netns-veth", 0) > 0:
        # A namespace made with the pair's peer inside it: taking one is the
        # whole endpoint (no unshare, no veth, no move, no rename). An empty
        # pool falls back to the other pools or to creation, all in NetNS
        # here: the branch is one, so AddCNI makes no pair in either case.
        netns = (Pooled("netns-veth", create=(*netns, *veth), fetch=(py("take netns+veth"),)),)
        veth = ()
    # New links up: the kernel queues linkwatch and address work for kworkers,
    # which take RTNL behind the sandbox's back.
    kworker: tuple[Step, ...] = ()
    if c.kworker_rtnl_ops:
        deferred = tuple(
            Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "linkwatch/addrconf"),))
            for _ in range(c.kworker_rtnl_ops)
        )
        kworker = (Async("kworker", deferred),)
    add_cni: tuple[Step, ...] = (
        py("netlink socket"),
        *veth,
        *rtnl(c.rtnl_small_hold_s, "host end up"),
        *rtnl(c.rtnl_small_hold_s, "peer up"),
        *rtnl(c.rtnl_small_hold_s, "address"),
        *kworker,
    )
    cgroup: tuple[Step, ...] = (
        py("mkdir"),
        Hold(CGROUP_MUTEX, (Cpu(c.cgroup_mkdir_hold_s, "mkdir"),)),
    )
    attach: tuple[Step, ...] = (
        *rtnl(c.rtnl_tap_hold_s, "TUNSETIFF"),
        *rtnl(c.rtnl_small_hold_s, "tap up"),
        *(rtnl(c.rtnl_tc_hold_s, "tc") * 4),  # ingress qdisc + u32 filter, on veth and on tap
    )
    start: tuple[Step, ...] = (
        Hold(GIL, (Cpu(c.vm_spawn_cpu_s, "fork/exec qemu"),)),
        py("cgroup.procs"),
        Hold(
            CGROUP_MUTEX,
            (
                Cpu(c.cgroup_attach_hold_s, "attach"),
                Hold(CSS_SET_LOCK, (Cpu(c.cgroup_attach_hold_s * 0.1, "css_set"),)),
            ),
        ),
        *(Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "tap ioctl"),)) for _ in range(c.vm_tap_ioctls)),
        Cpu(c.vm_boot_cpu_s, "qemu + guest"),
        Sleep(c.vm_boot_s, "boot"),
    )
    stages = {
        "NetNS": netns,
        "AddCNI": add_cni,
        "Cgroup": cgroup,
        "AttachIf": attach,
        "StartVM": start,
    }
    return tuple(
        Stage(name, steps, gate=name if name in scenario.limits else None)
        for name, steps in stages.items()
    )
