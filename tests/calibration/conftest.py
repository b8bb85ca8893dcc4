"""Fixtures the calibration tests share."""

from __future__ import annotations

import pytest

from bootstorm.calibration import trace_fit
from bootstorm.models import Profile


@pytest.fixture(scope="module")
def truth() -> Profile:
    """A synthetic CNI-runtime node: the costs a storm of it reveals."""
    start = trace_fit.testbed_template(cores=2, memory_mib=2048, service_cv=0.05, runtimes=("cni",))
    return start.with_values(
        {
            "testbed.cni_exec_cpu_s": 4e-3,
            "testbed.shim_start_cpu_s": 15e-3,
            "testbed.tc_exec_cpu_s": 1.5e-3,
            "testbed.vm_boot_s": 0.1,
            "testbed.vm_boot_cpu_s": 0.02,
        },
        source="the synthetic node",
    )
