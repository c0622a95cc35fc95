"""Steps left open when cancelled (``baf.core.engine._leave_open``): nothing is sent that the log lacks, and
a CancelledError a body raises itself (nobody cancelled the step) does not close the session."""

from __future__ import annotations

import asyncio

import pytest

from baf import Agent, ReceiveTextEvent, Session
from baf.errors import LogError
from baf.log import open_log
from baf.testing import RecordingPlatform


async def test_a_clean_up_reply_whose_record_the_stop_dropped_is_not_sent(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent = Agent("a", log=db_url)
    idle = agent.new_state("idle", initial=True)
    work = agent.new_state("work")
    started = asyncio.Event()

    async def body(session: Session) -> None:
        started.set()
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            session.reply("cleaning up")
            raise

    work.set_body(body)
    idle.when_event().go_to(work)
    agent.add_platform(platform)
    await agent.start()
    await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
    await asyncio.wait_for(started.wait(), 10)
    await agent.runtime.stop(timeout=0.1)
    await asyncio.sleep(0.2)
    async with open_log(db_url) as log:
        recorded = [r.data["text"] for r in await log.read("s") if r.kind == "reply"]
    assert platform.replies.get("s", []) == recorded  # write-ahead: a reply sent is in the log


async def test_a_body_raising_cancelled_error_itself_leaves_its_session_usable(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent = Agent("a", log=db_url)
    idle = agent.new_state("idle", initial=True)

    async def body(session: Session) -> None:
        if session.get("n", 0) == 0:
            session.set("n", 1)
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            future.cancel()  # e.g. a library future cancelled by someone else
            await future
        session.reply("second")

    idle.set_fallback_body(body)
    agent.add_platform(platform)
    async with agent:
        try:
            await agent.runtime.receive_message("s", "one", platform)
        except asyncio.CancelledError:
            pass
        await agent.runtime.receive_message("s", "two", platform)
    assert platform.replies["s"] == ["second"]


class GatedPlatform(RecordingPlatform):
    """Holds the first reply until ``gate`` is set (its commit holds the session's commit lock meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.holding = asyncio.Event()

    async def reply(self, session: Session, message: str) -> None:
        if message == "a":
            self.holding.set()
            await self.gate.wait()
        await super().reply(session, message)


async def test_a_dropped_session_does_not_send_a_reply_whose_record_it_dropped(db_url: str) -> None:
    platform = GatedPlatform()
    agent = Agent("a", log=db_url)
    idle = agent.new_state("idle", initial=True)
    work = agent.new_state("work")
    waiting = asyncio.Event()

    async def body(session: Session) -> None:
        session.reply("a")
        await platform.holding.wait()  # its commit is sending "a", holding the commit lock
        session.reply("b")  # recorded; its commit waits for the lock
        waiting.set()
        await asyncio.sleep(600)

    work.set_body(body)
    idle.when_event().go_to(work)
    agent.add_platform(platform)
    async with agent:
        handled = await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
        await asyncio.wait_for(waiting.wait(), 10)
        agent.runtime.drop("s")  # a worker's heartbeat found its lease lost
        with pytest.raises(LogError, match="lost its lease"):
            await handled
        await asyncio.sleep(0.1)
        platform.gate.set()
        await asyncio.sleep(0.2)
        async with open_log(db_url) as log:
            recorded = [r.data["text"] for r in await log.read("s") if r.kind == "reply"]
    assert platform.replies["s"] == recorded  # write-ahead: a reply sent is in the log
