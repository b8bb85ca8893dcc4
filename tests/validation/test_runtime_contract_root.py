"""Every testbed runtime meets :class:`bootstorm.validation.testbed.testing.StormRuntimeContract`.

Real storms (root): a few sandboxes each, the StartVM fallback process, no
kernel trace. A new runtime is a new class here, with its marks.
"""

from __future__ import annotations

import os
import sys
from typing import Any, ClassVar

import pytest
from conftest import CNI_ROOT_MARKS

from bootstorm.validation.testbed.testing import StormRuntimeContract

ROOT_MARKS = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, cgroups)"),
    pytest.mark.skipif(sys.platform != "linux", reason="Linux only"),
]


class TestThreadsRuntime(StormRuntimeContract):
    pytestmark: ClassVar[list[Any]] = ROOT_MARKS
    runtime = "threads"


class TestCniRuntime(StormRuntimeContract):
    pytestmark: ClassVar[list[Any]] = CNI_ROOT_MARKS
    runtime = "cni"
    runs_processes = True
