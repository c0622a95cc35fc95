"""examples/human_approval.py runs offline as a user would start it: a payment over 100 waits for the
terminal's question, one under it runs at once, a denial's reason reaches the model; and a waiting payment
survives a restart of the example."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "human_approval.py"

pytestmark = pytest.mark.slow


def _chat(cwd: Path, lines: str) -> str:
    env = {key: value for key, value in os.environ.items() if key != "OPENAI_API_KEY"}
    env["COLUMNS"] = "200"
    result = subprocess.run([sys.executable, str(EXAMPLE)], input=lines, cwd=cwd, capture_output=True, text=True,
                            timeout=60, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_example_asks_before_large_payments_only(tmp_path: Path) -> None:
    shown = _chat(tmp_path, "pay Alice 250 for the design work\ny\npay Bob 40\npay Carol 500\nnot this month\n")
    assert shown.count("approval needed") == 2  # Alice and Carol; Bob's 40 runs without asking
    assert "Done: sent 250.00 EUR to Alice (the design work)" in shown
    assert "Done: sent 40.00 EUR to Bob" in shown
    assert "Not sent." in shown and "not this month" in shown


def test_a_waiting_payment_is_asked_about_again_after_a_restart(tmp_path: Path) -> None:
    first = _chat(tmp_path, "pay Dana 300\n")  # the input ends while the payment waits: the agent stops
    assert "approval needed" in first and "Done" not in first
    second = _chat(tmp_path, "yes\n")  # a new process: the chat asks first
    assert "approve send_payment?" in second and "Done: sent 300.00 EUR to Dana" in second
