"""A worker's runtime whose append of a message found the session's lease lost drops the session and follows
it for its clients here. The step the message had queued never starts (nor fails in the background), and
stopping the runtime meanwhile ends the follow: nothing is followed, nor asked of the router, after it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from baf import Agent, Runtime
from baf.core.events import ReceiveTextEvent
from baf.core.session import Session
from baf.errors import LeaseLostError
from baf.log import Record
from baf.log.memory import MemoryLog
from baf.testing import RecordingPlatform


class LosingLog(MemoryLog):
    """Once ``lost`` is set, appends find the lease lost, and loads wait for ``gate`` (a slow database)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = False
        self.gate = asyncio.Event()

    async def append(self, records: Sequence[Record]) -> None:
        if self.lost:
            raise LeaseLostError(records[0].session_id, "another worker took the session over")
        await super().append(records)

    async def read_for_load(self, session_id: str) -> list[Record]:
        if self.lost:
            await self.gate.wait()
        return await super().read_for_load(session_id)


class ConnectedPlatform(RecordingPlatform):
    """A client of every session is connected here."""

    def has_client(self, session_id: str) -> bool:
        return True


class Router:  # what baf.serve's worker is to its runtime; here it notes the follows it is asked for
    def __init__(self) -> None:
        self.followed: list[str] = []

    async def claim(self, session_id: str) -> bool:
        return True

    async def forward(self, session_id: str, data: dict[str, Any], platform: object) -> None:
        raise AssertionError("nothing is forwarded: this runtime claims every session")

    async def release(self, session_id: str) -> None:
        pass

    def follow(self, session_id: str) -> None:
        self.followed.append(session_id)


async def test_a_session_whose_append_found_the_lease_lost_is_dropped_quietly_and_stopping_ends_its_follow(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = LosingLog()
    agent = Agent("a", log=log)
    state = agent.new_state("main", initial=True)

    def body(session: Session) -> None:
        session.reply("hi")

    state.set_body(body)
    state.when_event().go_to(state)
    router, platform = Router(), ConnectedPlatform()
    runtime = Runtime(agent, router=router)
    await runtime.start()
    await (await runtime.receive(ReceiveTextEvent("s", message="one"), platform))
    log.lost = True
    with contextlib.suppress(LeaseLostError):
        await (await runtime.receive(ReceiveTextEvent("s", message="two"), platform))
    for _ in range(5):  # the follow starts, and waits for the load
        await asyncio.sleep(0)
    await runtime.stop()
    log.gate.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert router.followed == [] and dict(runtime.followed) == {}
    gc.collect()  # a task that failed unretrieved says so when collected
    assert not [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "cannot follow" in r.getMessage()]
