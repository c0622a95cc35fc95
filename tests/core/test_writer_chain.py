"""The session writer's ordering of appends (``baf.core.writer``): a flush returns once its records and
every earlier flush's are durable, appends land in seq order, and after an append fails no later one
lands (a gap in the session would follow). The first append runs in the flushing task; these tests hold
it mid-append to check what the flushes made meanwhile do."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from baf.core.writer import SessionWriter
from baf.errors import LogError
from baf.log import MemoryLog, Record
from baf.log.projection import SessionProjection


class HeldLog(MemoryLog):
    """A memory log whose appends wait for ``release`` while ``held``, and fail while ``failing``."""

    def __init__(self) -> None:
        super().__init__()
        self.held = False
        self.failing = False
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()
        self.calls = 0

    async def append(self, records: Sequence[Record]) -> None:
        self.calls += 1
        if self.held:
            self.waiting.set()
            await self.release.wait()
        if self.failing:
            raise OSError("disk on fire")
        await super().append(records)


def writer_of(log: HeldLog) -> SessionWriter:
    return SessionWriter(log, SessionProjection("s"))


async def seqs(log: HeldLog) -> list[int]:
    return [r.seq for r in await log.read("s")]


async def test_flushes_made_while_an_append_waits_return_only_once_it_is_durable() -> None:
    log = HeldLog()
    writer = writer_of(log)
    writer.record("note", {"n": 1})
    log.held = True
    first = asyncio.ensure_future(writer.flush())
    await log.waiting.wait()
    log.held = False
    writer.record("note", {"n": 2})
    second = asyncio.ensure_future(writer.flush())  # records of its own: chained behind the first
    empty = asyncio.ensure_future(writer.flush())  # nothing of its own: still waits for the others
    await asyncio.sleep(0.01)
    assert not first.done() and not second.done() and not empty.done()
    assert not writer.settled
    log.release.set()
    await asyncio.gather(first, second, empty)
    assert await seqs(log) == [1, 2]
    assert writer.settled


async def test_a_flush_with_nothing_to_write_waits_for_the_append_under_way() -> None:
    # What LiveSession.read_delivered relies on: once flush() returns, what was recorded is in the log.
    log = HeldLog()
    writer = writer_of(log)
    writer.record("note", {"n": 1})
    log.held = True
    first = asyncio.ensure_future(writer.flush())
    await log.waiting.wait()
    empty = asyncio.ensure_future(writer.flush())
    await asyncio.sleep(0.01)
    assert not empty.done()
    log.release.set()
    await empty
    assert await seqs(log) == [1]
    await first


async def test_after_a_failed_append_no_later_append_lands() -> None:
    log = HeldLog()
    writer = writer_of(log)
    writer.record("note", {"n": 1})
    log.held = log.failing = True
    first = asyncio.ensure_future(writer.flush())
    await log.waiting.wait()
    writer.record("note", {"n": 2})
    second = asyncio.ensure_future(writer.flush())
    await asyncio.sleep(0)
    log.held = False
    log.release.set()
    with pytest.raises(LogError, match=r"appending seq 1\.\.1 failed"):
        await first
    with pytest.raises(LogError, match="disk on fire"):
        await second
    log.failing = False
    writer.record("note", {"n": 3})
    with pytest.raises(LogError, match="disk on fire"):
        await writer.flush()
    assert log.calls == 1  # neither later batch was handed to the store
    assert await seqs(log) == []


async def test_after_a_failed_append_that_did_not_wait_the_next_flush_fails() -> None:
    log = HeldLog()
    writer = writer_of(log)
    writer.record("note", {"n": 1})
    log.failing = True
    with pytest.raises(LogError, match="disk on fire"):
        await writer.flush()
    log.failing = False
    writer.record("note", {"n": 2})
    with pytest.raises(LogError, match="disk on fire"):
        await writer.flush()
    assert log.calls == 1
    assert await seqs(log) == []


async def test_appends_that_do_not_wait_leave_the_writer_settled_after_each_flush() -> None:
    log = HeldLog()
    writer = writer_of(log)
    for n in range(1, 4):
        writer.record("note", {"n": n})
        assert not writer.settled
        await writer.flush()
        assert writer.settled
    await writer.flush()  # nothing to write, nothing in flight
    assert await seqs(log) == [1, 2, 3]
