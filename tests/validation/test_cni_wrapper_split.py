"""Half a storm through ``bootstorm-cni`` (``cni_wrapper_every``): which
sandboxes go through the plugin, who takes their AddCNI permit, and the
like-for-like split of its ADD against the plain plugin's in one storm."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from bootstorm.traces import ExecSpan
from bootstorm.validation.testbed import StormOptions, wrapper_split
from bootstorm.validation.testbed._cni_stages import wrapper_overhead
from bootstorm.validation.testbed.cni_runtime import _PluginAdmitted


def _exec(sandbox: int, program: str, start_s: float, end_s: float) -> ExecSpan:
    return ExecSpan(
        sandbox=sandbox,
        stage="AddCNI",
        program=program,
        command="ADD",
        pid=1000 + sandbox * 2 + (program == "bridge"),
        rc=0,
        start_s=start_s,
        end_s=end_s,
    )


def test_every_needs_the_wrapper_and_the_cni_runtime() -> None:
    assert StormOptions(runtime="cni").cni_wrapper_every == 1
    opts = StormOptions(runtime="cni", cni_wrapper="bootstorm-cni", cni_wrapper_every=2)
    assert opts.cni_wrapper_every == 2
    with pytest.raises(ValueError, match=r"cni_wrapper_every: 2 picks the sandboxes .* 'none'"):
        StormOptions(runtime="cni", cni_wrapper_every=2)
    with pytest.raises(ValueError, match="cni_wrapper_every: 3 applies to runtime 'cni' only"):
        StormOptions(cni_wrapper_every=3)
    with pytest.raises(ValueError, match="cni_wrapper_every"):
        StormOptions(runtime="cni", cni_wrapper="bootstorm-cni", cni_wrapper_every=0)


def test_the_split_weighs_the_wrapped_add_against_the_plain_one_in_the_same_storm() -> None:
    # Sandboxes 0 and 2 through the plugin (its exec 1.2 s, its delegate's 1.0 s
    # inside it), 1 and 3 exec'd the bridge themselves (1.0 and 1.1 s).
    execs = [
        _exec(0, "bootstorm-cni", 0.0, 1.2),
        _exec(0, "bridge", 0.1, 1.1),
        _exec(2, "bootstorm-cni", 0.0, 1.3),
        _exec(2, "bridge", 0.1, 1.2),
        _exec(1, "bridge", 0.0, 1.0),
        _exec(3, "bridge", 0.0, 1.1),
    ]
    split = wrapper_split(execs)
    assert split is not None
    assert (split.wrapped, split.plain, split.program) == (2, 2, "bridge")
    assert split.wrapped_add_s == pytest.approx(1.25)
    assert split.delegate_s == pytest.approx(1.05)
    assert split.own_s == pytest.approx(0.2)
    assert split.plain_add_s == pytest.approx(1.05)
    assert split.ratio == pytest.approx(1.25 / 1.05)
    note = wrapper_overhead(execs)
    assert note is not None
    assert note.endswith("bridge alone in the same storm 1050.0 ms (2 sandboxes): 1.19x")


def test_a_storm_wholly_through_the_plugin_has_no_plain_anchor() -> None:
    execs = [_exec(0, "bootstorm-cni", 0.0, 1.2), _exec(0, "bridge", 0.1, 1.1)]
    split = wrapper_split(execs)
    assert split is not None and split.plain_add_s is None and split.ratio is None
    note = wrapper_overhead(execs)
    assert note is not None and "same storm" not in note
    assert wrapper_split([_exec(1, "bridge", 0.0, 1.0)]) is None


class _Counting:
    """An admission that counts the stages it was asked to admit."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def gated(self, name: str) -> bool:
        return name == "AddCNI"

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        yield

    def stage(self, name: str, holder: str) -> contextlib.AbstractContextManager[None]:
        self.asked.append((name, holder))
        return self._held()


def test_the_driver_takes_the_permit_of_the_sandboxes_the_plugin_does_not_wrap() -> None:
    inner = _Counting()
    half = _PluginAdmitted(inner, stage="AddCNI", holders=frozenset({"r/0", "r/2"}))
    for holder in ("r/0", "r/1", "r/2", "r/3"):
        with half.stage("AddCNI", holder), half.stage("Cgroup", holder):
            pass
    assert [h for name, h in inner.asked if name == "AddCNI"] == ["r/1", "r/3"]
    assert [h for name, h in inner.asked if name == "Cgroup"] == ["r/0", "r/1", "r/2", "r/3"]
    # Some sandboxes still wait at the driver's gate: its waits are admission waits.
    assert half.gated("AddCNI")
    whole = _PluginAdmitted(inner, stage="AddCNI", holders=None)
    inner.asked.clear()
    with whole.stage("AddCNI", "r/1"):
        pass
    assert inner.asked == [] and not whole.gated("AddCNI")
