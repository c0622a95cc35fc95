"""The bridge examples run offline, as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.slow
def test_the_mcp_calculator_example_runs_offline() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = subprocess.run([sys.executable, str(EXAMPLES / "mcp" / "calculator_agent.py")],
                            capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "tools: calc__add, calc__multiply, calc__divide" in result.stdout
    assert "calc__multiply -> 100.0 (ok)" in result.stdout
    assert "calc__divide -> Error: Error executing tool divide: division by zero (error)" in result.stdout
    assert "identical" in result.stdout and "2 tool results served" in result.stdout


@pytest.mark.slow
def test_the_opentelemetry_example_prints_nested_spans() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLES / "opentelemetry_agent.py")],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("baf.step") for line in lines)
    assert any(line.startswith("  invoke_agent traced_agent") for line in lines)
    assert any(
        line.startswith("    execute_tool convert") and "'gen_ai.tool.name': 'convert'" in line for line in lines
    )
    assert sum(line.startswith("    chat scripted") for line in lines) == 2
