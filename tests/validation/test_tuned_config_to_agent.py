"""The loop closes: ``bootstorm optimize`` writes a tuned config that a running
node agent accepts as it is, and the testbed, simulator and agent read the
same file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import TOKEN, thread_agent

from bootstorm.models import Scenario, TunedConfig


def test_optimize_writes_what_the_agent_takes(tmp_path: Path) -> None:
    tuned = tmp_path / "tuned.yaml"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from bootstorm.cli import main; main()",
            "optimize",
            "--sandboxes",
            "60",
            "--trials",
            "4",
            "--storage",
            "memory",
            "--output",
            str(tuned),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    config = TunedConfig.from_yaml(tuned)
    assert config.origin is not None and config.origin.sandboxes == 60
    with thread_agent() as agent:
        generation = agent.put_config(config)
        assert generation >= 1
        assert agent.get_config() == config  # schema-validated on both ends, nothing lost
        metrics = agent.metrics()
    for stage, limit in config.limits.items():
        assert f'stage="{stage}"' in metrics and limit >= 1
    # The simulator applies the very same file.
    scenario = Scenario(cni="ipvtap", sandboxes=60, config=tuned)
    assert scenario.limits == config.limits
    assert TOKEN  # the agent refused nothing: the token and the config were right
