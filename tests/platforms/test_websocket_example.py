"""examples/websocket_agent.py runs offline: started as a user would, it serves the UI and answers over the
WebSocket protocol with the scripted demo model."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import urllib.request
from pathlib import Path

import pytest

from baf.library.demo import EXAMPLE_QUESTIONS

from .helpers import Client

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "websocket_agent.py"


@pytest.mark.slow
async def test_the_websocket_example_serves_the_ui_and_answers_offline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "BAF_MODEL")}
    env.update(PORT="0", PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        port = None
        async with asyncio.timeout(30):
            while port is None:
                line = (await process.stderr.readline()).decode()
                assert line, "the example ended before listening"
                if found := re.search(r"listening on ws://127\.0\.0\.1:(\d+)/ws", line):
                    port = int(found.group(1))
        page = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read())
        assert b"empty-hint" in page
        client = await Client.open(f"ws://127.0.0.1:{port}/ws")
        welcome = await client.hello()
        assert welcome["agent"] == "reasoning_demo" and welcome["examples"] == list(EXAMPLE_QUESTIONS[:3])
        await client.send({"type": "message", "text": welcome["examples"][0]})
        reply, frames = await client.until("reply", wait=30)
        assert any(f["type"] == "reasoning_step" for f in frames) and reply["text"]
        await client.close()
        assert (tmp_path / "websocket_demo.db").exists()
        assert (tmp_path / "websocket_demo.db.websocket-secret").stat().st_mode & 0o077 == 0
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
    assert process.returncode == 0
    assert process.stdout is not None
    intro = (await process.stdout.read()).decode()
    assert "Ctrl-C stops the server" in intro and "Type exit" not in intro  # a server, not the terminal
