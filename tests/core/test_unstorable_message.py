"""A message whose text no log can store (a lone surrogate, which a JSON escape can spell): refused with a
``LogError`` when its append fails, nothing else goes wrong, and the session answers the next message."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from baf import Agent
from baf.core.events import ReceiveTextEvent
from baf.core.session import Session
from baf.errors import LogError


def echo(session: Session) -> None:
    if session.event is not None:
        session.reply(f"echo: {session.event.text}")


async def test_a_message_no_log_can_store_is_refused_and_the_session_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = Agent("echo", log=f"sqlite:///{tmp_path / 'baf.db'}")
    state = agent.new_state("main", initial=True)
    state.set_body(echo)
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "hello")  # the session is in memory, at rest
        with pytest.raises(LogError, match="not valid Unicode"):
            await agent.receive_event(ReceiveTextEvent("s", message="a\ud800b"))
        await asyncio.sleep(0.05)
        await agent.receive_message("s", "q1")
        records = await agent.runtime.log.read("s")
    assert [r.data["text"] for r in records if r.kind == "message_received"] == ["hello", "q1"]
    assert [r.data["text"] for r in records if r.kind == "reply"] == ["echo: hello", "echo: q1"]
    gc.collect()
    await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []
