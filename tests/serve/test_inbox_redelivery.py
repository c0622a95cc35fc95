"""A message delivered twice (``Event.delivery_id``, e.g. a Telegram update sent again) is handled once
by the worker that owns its session, whether both copies come through the inbox from another worker or
one comes through the inbox and one directly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from baf.core.events import ReceiveTextEvent
from baf.serve import Worker

from .helpers import assert_each_question_answered_once, fresh_agent, wait_for_answers


@pytest.fixture
async def workers(postgres_dsn: str) -> AsyncIterator[tuple[Worker, Worker]]:
    a = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
    b = Worker(fresh_agent(), postgres_dsn, worker_id="b", lease_ttl=10, poll_interval=1)
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await a.stop()
        await b.stop()


def update(session_id: str, text: str, delivery: str | None) -> ReceiveTextEvent:
    """A message as a platform with delivery ids (Telegram: the bot and the update id) makes it."""
    event = ReceiveTextEvent(session_id, message=text)
    event.delivery_id = delivery
    return event


async def inbox_empty(worker: Worker, session_id: str) -> None:
    async with asyncio.timeout(30):
        while True:
            if not await worker.inbox.pending(session_id):
                return
            await asyncio.sleep(0.05)


async def test_an_update_forwarded_twice_is_handled_once(workers: tuple[Worker, Worker], postgres_dsn: str) -> None:
    a, b = workers
    await (await a.runtime.receive(update("r1", "q1", "telegram:1:100")))  # a owns r1
    # The service sent update 101 twice (it did not hear the first was taken), both times to b.
    await b.runtime.receive(update("r1", "q2", "telegram:1:101"))
    await b.runtime.receive(update("r1", "q2", "telegram:1:101"))
    await b.runtime.receive(update("r1", "q3", "telegram:1:102"))
    records = await wait_for_answers(postgres_dsn, {"r1": ["q1", "q2", "q3"]})
    await inbox_empty(a, "r1")
    await asyncio.sleep(0.3)  # a second copy handled late would be recorded now
    records = await wait_for_answers(postgres_dsn, {"r1": ["q1", "q2", "q3"]})
    assert_each_question_answered_once(records, {"r1": ["q1", "q2", "q3"]})  # q2 once
    assert "r1" not in b.runtime.sessions  # b only forwarded


async def test_an_update_received_directly_then_forwarded_again_is_handled_once(
    workers: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, b = workers
    await (await a.runtime.receive(update("r2", "q1", "telegram:1:200")))
    await b.runtime.receive(update("r2", "q1", "telegram:1:200"))  # the same update again, through b
    await b.runtime.receive(update("r2", "q2", "telegram:1:201"))
    await a.runtime.receive(update("r2", "q2", "telegram:1:201"))  # and once more, directly
    records = await wait_for_answers(postgres_dsn, {"r2": ["q1", "q2"]})
    await inbox_empty(a, "r2")
    await asyncio.sleep(0.3)
    records = await wait_for_answers(postgres_dsn, {"r2": ["q1", "q2"]})
    assert_each_question_answered_once(records, {"r2": ["q1", "q2"]})
    assert [r.data["delivery"] for r in records["r2"] if r.kind == "message_received"] == [
        "telegram:1:200",
        "telegram:1:201",
    ]
