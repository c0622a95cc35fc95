"""Every pattern example runs offline and prints a successful answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted(
    p for p in (Path(__file__).parents[2] / "examples" / "patterns").glob("*.py") if not p.name.startswith("_")
)


def test_there_is_one_example_per_pattern() -> None:
    names = {p.stem for p in EXAMPLES}
    assert names == {
        "chain_of_thought", "react", "plan_and_execute", "reflexion", "tree_of_thoughts", "goal_decomposition",
        "pipeline",
    }  # fmt: skip


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_offline(example: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert "answer:" in result.stdout and "success: True" in result.stdout
