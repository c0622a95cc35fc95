"""A session dropped from memory while messages of a WebSocket client wait in its mailbox (its worker lost
the lease, or the log refused a write): the messages are recorded, and their handling goes on where the
session is loaded next. The futures the platform kept for them fail, and nothing complains about it."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from baf.core.session import Session

from .helpers import Client, body_agent
from .test_websocket_protocol import serving


async def test_messages_waiting_in_a_dropped_session_leave_no_unretrieved_future_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def slow(session: Session) -> None:
        await release.wait()
        session.reply("done")

    agent = body_agent(slow)
    async with serving(agent) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        for text in ("first", "second", "third"):  # the first runs, the others wait in the mailbox
            await client.send({"type": "message", "text": text, "id": text})
            await client.until("user", id=text)
        assert client.session_id is not None
        agent.runtime.drop(client.session_id)  # as a worker that lost the session's lease does
        release.set()
        await asyncio.sleep(0.05)
        await client.close()
    gc.collect()
    await asyncio.sleep(0)
    unretrieved = [r for r in caplog.records if "exception was never retrieved" in r.getMessage()]
    assert unretrieved == [], [r.getMessage() for r in unretrieved]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name == "asyncio"]
