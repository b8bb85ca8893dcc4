"""Kernel trace text → contention and softirq spans, with lock names from call stacks.

Input is the text of a tracefs ``trace`` (or ``trace_pipe``) file with
``trace_clock=mono`` and ``options/stacktrace`` on: every event line is
followed, on the same CPU, by a ``<stack trace>`` line and its ``=> frame``
lines. Other CPUs' events can land in between (the file is merged by
timestamp), so a stack belongs to the last event *of its CPU*.

Pairing: a waiter's ``contention_begin`` and ``contention_end`` are matched
per (thread id, lock address), not per CPU: a mutex waiter sleeps and can
wake on another CPU. A mutex emits ``contention_begin`` twice — first with
``SPIN|MUTEX`` for the optimistic spin, then ``MUTEX`` when it goes to
sleep — and one ``contention_end``: the span runs from the first begin to
the end, and ``spin`` says whether it never slept.

Naming: the lock's address, when /proc/kallsyms has a symbol exactly there
(``rtnl_mutex`` often is not: data symbols need CONFIG_KALLSYMS_ALL); else
the first frame above the locking primitives (the *caller*): ``rtnl_lock``
and friends, or RTNL's callers (``rtnetlink_rcv_msg``, ``tc_new_tfilter``,
``__tun_chr_ioctl``…) when ``rtnl_lock`` was inlined or tail-called, name
RTNL; ``cgroup_kn_lock_live``/``cgroup_lock`` name cgroup_mutex; the
functions that take ``css_set_lock`` name it for spin contention. An address
named once keeps its name for contention whose stack is ambiguous
(``addrconf_dad_work`` and ``linkwatch_event`` wait on RTNL too). Anything
else is ``<kind>@<caller>`` (``spinlock@__register_sysctl_table``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = [
    "TRACE_LINE",
    "Contention",
    "KernelEvent",
    "LockNamer",
    "SoftirqRun",
    "pair_contention",
    "pair_softirqs",
    "parse_events",
    "read_kallsyms",
]

#: One line of a tracefs ``trace`` file: task, tid, tgid (``record-tgid``),
#: cpu, timestamp (s), the event's name (or ``<stack trace>``) and the rest.
TRACE_LINE = re.compile(
    r"^\s*(?P<task>.*?)-(?P<tid>\d+)\s+(?:\(\s*(?P<tgid>[-\d]+)\)\s+)?\[(?P<cpu>\d+)\]\s+"
    r"(?:\S+\s+)?(?P<ts>\d+\.\d+):\s+(?P<event><stack trace>|\w+):?\s*(?P<rest>.*)$"
)
_FRAME = re.compile(r"^\s*=>\s+(?P<fn>\S+)")
_ADDR = re.compile(r"^(?P<addr>[0-9a-fA-F]+)\s+\((?:flags|ret)=(?P<arg>[^)]*)\)")
_VEC = re.compile(r"vec=(?P<vec>\d+)(?:\s+\[action=(?P<name>\w+)\])?")

SOFTIRQ_NAMES = (
    "HI",
    "TIMER",
    "NET_TX",
    "NET_RX",
    "BLOCK",
    "IRQ_POLL",
    "TASKLET",
    "SCHED",
    "HRTIMER",
    "RCU",
)

RTNL = "rtnl"
CGROUP_MUTEX = "cgroup_mutex"
CSS_SET_LOCK = "css_set_lock"

#: Functions that take RTNL themselves.
RTNL_TAKERS = frozenset(
    {
        "rtnl_lock",
        "rtnl_lock_killable",
        "rtnl_lock_interruptible",
        "__rtnl_lock",
        "rtnl_net_lock",
        "__rtnl_net_lock",
        "rtnl_nets_lock",
    }
)
#: Functions whose direct mutex contention is RTNL when ``rtnl_lock`` is inlined.
RTNL_CONTEXT = frozenset(
    {
        "rtnetlink_rcv_msg",
        "rtnl_newlink",
        "rtnl_dellink",
        "rtnl_setlink",
        "rtnl_newaddr",
        "rtnl_deladdr",
        "tc_new_tfilter",
        "tc_del_tfilter",
        "tc_modify_qdisc",
        "tc_get_qdisc",
        "tc_ctl_action",
        "__tun_chr_ioctl",
        "tun_chr_ioctl",
        "tun_set_iff",
        "devinet_ioctl",
        "dev_ioctl",
        "register_netdev",
        "unregister_netdev",
    }
)
#: Functions that take cgroup_mutex.
CGROUP_MUTEX_TAKERS = frozenset(
    {
        "cgroup_lock",
        "cgroup_kn_lock_live",
        "cgroup_lock_and_drain_offline",
        "cgroup_mkdir",
        "cgroup_rmdir",
        "cgroup_procs_write_start",
        "cgroup_destroy_locked",
        "css_release_work_fn",
        "css_killed_work_fn",
        "cgroup_get_from_path",
    }
)
#: Functions that take css_set_lock (a spinlock) directly.
CSS_SET_TAKERS = frozenset(
    {
        "cgroup_post_fork",
        "cgroup_can_fork",
        "cgroup_cancel_fork",
        "cgroup_exit",
        "cgroup_release",
        "cgroup_free",
        "cgroup_create",
        "cgroup_migrate",
        "cgroup_migrate_execute",
        "cgroup_migrate_prepare_dst",
        "cgroup_migrate_add_src",
        "cgroup_migrate_finish",
        "cgroup_attach_task",
        "cgroup_update_populated",
        "find_css_set",
        "link_css_set",
        "put_css_set",
        "css_set_move_task",
        "css_task_iter_start",
        "css_task_iter_next",
        "css_task_iter_end",
        "cgroup_procs_write_start",
        "cgroup_enable_threaded",
        "proc_cgroup_show",
    }
)
#: Frame prefixes of the locking machinery itself, skipped to find the caller.
_LOCK_FRAMES = (
    "trace_event_raw_event_",
    "__traceiter_",
    "trace_contention",
    "__mutex_lock",
    "mutex_lock",
    "__mutex_lock_slowpath",
    "mutex_optimistic_spin",
    "osq_lock",
    "__pv_queued_spin_lock_slowpath",
    "native_queued_spin_lock_slowpath",
    "queued_spin_lock_slowpath",
    "pv_queued_spin_lock_slowpath",
    "_raw_spin_lock",
    "do_raw_spin_lock",
    "queued_read_lock_slowpath",
    "queued_write_lock_slowpath",
    "_raw_read_lock",
    "_raw_write_lock",
    "rwsem_down_",
    "down_read",
    "down_write",
    "__down_read",
    "__down_write",
    "percpu_down_",
    "__percpu_down_",
    "rt_mutex",
    "__rt_mutex",
    "rt_spin_lock",
)


def _base(fn: str) -> str:
    """``__mutex_lock.constprop.0+0x1a/0x500`` → ``__mutex_lock``."""
    return fn.split("+", 1)[0].split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One event line (and the stack that followed it on its CPU)."""

    task: str
    tid: int
    cpu: int
    ts_s: float
    event: str
    #: The task's process id (``options/record-tgid``); None when not recorded.
    tgid: int | None = None
    lock_addr: int | None = None
    flags: frozenset[str] = frozenset()
    ret: int | None = None
    vec: str | None = None
    stack: tuple[str, ...] = ()


def _event(m: re.Match[str]) -> KernelEvent:
    event = m["event"].split(":")[-1]
    rest = m["rest"]
    addr: int | None = None
    flags: frozenset[str] = frozenset()
    ret: int | None = None
    vec: str | None = None
    if event in ("contention_begin", "contention_end"):
        a = _ADDR.match(rest)
        if a is not None:
            addr = int(a["addr"], 16)
            if event == "contention_begin":
                flags = frozenset(f for f in a["arg"].split("|") if f and f != "0")
            else:
                try:
                    ret = int(a["arg"], 0)
                except ValueError:
                    ret = None
    elif event.startswith("softirq_"):
        v = _VEC.search(rest)
        if v is not None:
            n = int(v["vec"])
            vec = v["name"] or (SOFTIRQ_NAMES[n] if n < len(SOFTIRQ_NAMES) else str(n))
    tgid = m["tgid"]
    return KernelEvent(
        task=m["task"].strip(),
        tid=int(m["tid"]),
        cpu=int(m["cpu"]),
        ts_s=float(m["ts"]),
        event=event,
        # ``-------`` when tracefs did not know the task's process.
        tgid=int(tgid) if tgid is not None and tgid.isdigit() else None,
        lock_addr=addr,
        flags=flags,
        ret=ret,
        vec=vec,
    )


def parse_events(lines: Iterable[str]) -> list[KernelEvent]:
    """Events in time order, each with the stack recorded right after it on its CPU.

    Lines that are neither events nor frames (``#`` comments, ``CPU:1
    [LOST 3 EVENTS]``) are skipped.
    """
    done: list[KernelEvent] = []
    pending: dict[int, tuple[KernelEvent, list[str]]] = {}
    current: list[str] | None = None  # frames of the stack being read

    def flush(cpu: int) -> None:
        held = pending.pop(cpu, None)
        if held is not None:
            ev, frames = held
            done.append(_with_stack(ev, frames))

    for line in lines:
        f = _FRAME.match(line)
        if f is not None:
            if current is not None:
                current.append(f["fn"])
            continue
        m = TRACE_LINE.match(line)
        if m is None:
            current = None
            continue
        cpu = int(m["cpu"])
        if m["event"] == "<stack trace>":
            held = pending.get(cpu)
            current = held[1] if held is not None and not held[1] else None
            continue
        flush(cpu)
        pending[cpu] = (_event(m), [])
        current = None
    for cpu in list(pending):
        flush(cpu)
    done.sort(key=lambda ev: ev.ts_s)  # stable: per-CPU order is kept at equal times
    return done


def _with_stack(ev: KernelEvent, frames: list[str]) -> KernelEvent:
    if not frames:
        return ev
    return KernelEvent(
        task=ev.task,
        tid=ev.tid,
        cpu=ev.cpu,
        ts_s=ev.ts_s,
        event=ev.event,
        tgid=ev.tgid,
        lock_addr=ev.lock_addr,
        flags=ev.flags,
        ret=ev.ret,
        vec=ev.vec,
        stack=tuple(frames),
    )


@dataclass(frozen=True, slots=True)
class Contention:
    """One wait: from the first ``contention_begin`` to the matching end."""

    lock_addr: int
    tid: int
    task: str
    cpu: int
    start_s: float
    end_s: float
    flags: frozenset[str]
    slept: bool
    stack: tuple[str, ...]
    #: The waiter's process id, when the trace recorded it.
    tgid: int | None = None

    @property
    def spin(self) -> bool:
        """Whether the waiter only spun (spinlock, or a mutex won while spinning)."""
        return not self.slept


@dataclass
class _Open:
    ev: KernelEvent
    slept: bool = False
    flags: set[str] = field(default_factory=set)


def pair_contention(events: Iterable[KernelEvent]) -> tuple[list[Contention], int]:
    """Contention spans, and how many begins or ends found no partner.

    A begin whose end never came (the trace stopped first) is dropped and
    counted; so is an end without a begin (the trace started mid-wait).
    """
    open_: dict[tuple[int, int], _Open] = {}
    out: list[Contention] = []
    unmatched = 0
    for ev in events:
        if ev.lock_addr is None:
            continue
        key = (ev.tid, ev.lock_addr)
        if ev.event == "contention_begin":
            held = open_.get(key)
            if held is None:
                open_[key] = _Open(ev, slept="SPIN" not in ev.flags, flags=set(ev.flags))
            else:
                # The mutex's second begin: the optimistic spin failed, it sleeps now.
                held.slept = held.slept or "SPIN" not in ev.flags
                held.flags |= ev.flags
        elif ev.event == "contention_end":
            held = open_.pop(key, None)
            if held is None:
                unmatched += 1
                continue
            first = held.ev
            out.append(
                Contention(
                    lock_addr=ev.lock_addr,
                    tid=ev.tid,
                    task=first.task,
                    cpu=first.cpu,
                    start_s=first.ts_s,
                    end_s=max(ev.ts_s, first.ts_s),
                    flags=frozenset(held.flags),
                    slept=held.slept,
                    stack=first.stack,
                    tgid=first.tgid if first.tgid is not None else ev.tgid,
                )
            )
    unmatched += len(open_)
    return out, unmatched


@dataclass(frozen=True, slots=True)
class SoftirqRun:
    """One softirq handler run on one CPU."""

    vec: str
    cpu: int
    start_s: float
    end_s: float


def pair_softirqs(events: Iterable[KernelEvent]) -> list[SoftirqRun]:
    """``softirq_entry``/``softirq_exit`` pairs per CPU (softirqs do not nest on a CPU)."""
    entry: dict[int, KernelEvent] = {}
    out = []
    for ev in events:
        if ev.event == "softirq_entry":
            entry[ev.cpu] = ev
        elif ev.event == "softirq_exit":
            start = entry.pop(ev.cpu, None)
            if start is not None and start.vec == ev.vec:
                out.append(SoftirqRun(ev.vec or "?", ev.cpu, start.ts_s, ev.ts_s))
    return out


def read_kallsyms(path: str = "/proc/kallsyms") -> dict[int, str]:
    """Address → symbol of the kernel's data and text (empty if hidden by kptr_restrict)."""
    out: dict[int, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3:
                    addr = int(parts[0], 16)
                    if addr:
                        out.setdefault(addr, parts[2])
    except OSError:
        pass
    return out


class LockNamer:
    """Names locks by address or call stack (see module doc); learns addresses."""

    def __init__(self, symbols: Mapping[int, str] | None = None) -> None:
        self._symbols = dict(symbols or {})
        self._learned: dict[int, str] = {}

    @staticmethod
    def caller(stack: tuple[str, ...]) -> str | None:
        """The first frame that is not the locking machinery."""
        for fn in stack:
            base = _base(fn)
            if not base.startswith(_LOCK_FRAMES):
                return base
        return None

    def _by_stack(self, c: Contention) -> tuple[str | None, bool]:
        """(name, certain): a certain name is learned for the address."""
        caller = self.caller(c.stack)
        is_mutex = "MUTEX" in c.flags
        if caller is None:
            return None, False
        if caller in RTNL_TAKERS:
            return RTNL, True
        if is_mutex and caller in RTNL_CONTEXT:
            # These take RTNL as their first mutex; rtnl_lock is often inlined
            # or tail-called away, so the address is learned from them too.
            return RTNL, True
        if is_mutex and caller in CGROUP_MUTEX_TAKERS:
            return CGROUP_MUTEX, caller in ("cgroup_lock", "cgroup_kn_lock_live")
        if not is_mutex and "SPIN" in c.flags and caller in CSS_SET_TAKERS:
            return CSS_SET_LOCK, False
        if is_mutex:
            kind = "mutex"
        elif "SPIN" in c.flags:
            kind = "rwlock" if c.flags & {"READ", "WRITE"} else "spinlock"
        elif c.flags & {"READ", "WRITE"}:
            kind = "rwsem"
        else:
            kind = "lock"
        return f"{kind}@{caller}", False

    def name(self, c: Contention) -> str:
        symbol = self._symbols.get(c.lock_addr)
        if symbol is not None:
            return {"rtnl_mutex": RTNL}.get(symbol, symbol)
        learned = self._learned.get(c.lock_addr)
        by_stack, certain = self._by_stack(c)
        if certain and by_stack is not None:
            self._learned[c.lock_addr] = by_stack
            return by_stack
        if learned is not None:
            return learned
        return by_stack or f"lock@{c.lock_addr:#x}"


def iter_named(
    contentions: Iterable[Contention], namer: LockNamer
) -> Iterator[tuple[str, Contention]]:
    """(lock name, contention); certain stacks are named first, so learning helps all."""
    items = list(contentions)
    for c in items:  # first pass: learn addresses from unambiguous stacks
        namer.name(c)
    for c in items:
        yield namer.name(c), c
