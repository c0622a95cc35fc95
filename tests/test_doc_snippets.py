"""Code in the docs that readers copy: it must run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_block(doc: str, containing: str) -> str:
    """The ```python block of ``docs/doc`` that contains ``containing``."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / doc).read_text(encoding="utf-8"), re.S)
    return next(block for block in blocks if containing in block)


@pytest.mark.slow
def test_the_reasoning_state_testing_example_passes_as_written(tmp_path: Path) -> None:
    # Copied into a project of its own, whose pytest-asyncio runs in its default (strict) mode, not
    # in this repository's asyncio_mode = "auto".
    (tmp_path / "test_example.py").write_text(python_block("reasoning_state.md", "async def test_"))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pytest.ini", "test_example.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


async def test_the_intents_page_example_routes_as_described(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from baf.testing import RecordingPlatform

    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(python_block("intents.md", "set_global"), "intents.md", "exec"), namespace)
    agent = namespace["agent"]
    platform = RecordingPlatform()
    agent.add_platform(platform)  # type: ignore[attr-defined]
    async with agent:  # type: ignore[attr-defined]
        for text in ("hi", "do you deliver to Porto", "what can you do", "blue"):
            await agent.receive_message("u", text, platform)  # type: ignore[attr-defined]
    assert platform.replies["u"] == ["Hello!", "Yes, we deliver to Porto.", "I know about greetings and deliveries.",
                                     "Sorry, say 'help' to see what I can do."]  # fmt: skip
