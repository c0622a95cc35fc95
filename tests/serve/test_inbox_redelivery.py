"""A message delivered twice (``Event.delivery_id``, e.g. a Telegram update sent again) is handled once
by the worker that owns its session, whether both copies come through the inbox from another worker or
one comes through the inbox and one directly."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from baf.core.events import ReceiveTextEvent
from baf.serve import Worker

from .helpers import assert_each_question_answered_once, two_workers, wait_for_answers


@pytest.fixture
async def workers(postgres_dsn: str) -> AsyncIterator[tuple[Worker, Worker]]:
    async with two_workers(postgres_dsn) as pair:
        yield pair


def update(session_id: str, text: str, delivery: str | None) -> ReceiveTextEvent:
    """A message as a platform with delivery ids (Telegram: the bot and the update id) makes it."""
    event = ReceiveTextEvent(session_id, message=text)
    event.delivery_id = delivery
    return event


async def test_an_update_forwarded_twice_is_handled_once(workers: tuple[Worker, Worker], postgres_dsn: str) -> None:
    a, b = workers
    await (await a.runtime.receive(update("r1", "q1", "telegram:1:100")))  # a owns r1
    # The service sent update 101 twice (it did not hear the first was taken), both times to b.
    await b.runtime.receive(update("r1", "q2", "telegram:1:101"))
    await b.runtime.receive(update("r1", "q2", "telegram:1:101"))
    await b.runtime.receive(update("r1", "q3", "telegram:1:102"))
    # The inbox keeps order: a second copy of q2 handled would be recorded before q4, the last one sent
    await b.runtime.receive(update("r1", "q4", "telegram:1:103"))
    records = await wait_for_answers(postgres_dsn, {"r1": ["q1", "q2", "q3", "q4"]})
    assert_each_question_answered_once(records, {"r1": ["q1", "q2", "q3", "q4"]})  # q2 once
    assert "r1" not in b.runtime.sessions  # b only forwarded


async def test_an_update_received_directly_then_forwarded_again_is_handled_once(
    workers: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, b = workers
    await (await a.runtime.receive(update("r2", "q1", "telegram:1:200")))
    await b.runtime.receive(update("r2", "q1", "telegram:1:200"))  # the same update again, through b
    await b.runtime.receive(update("r2", "q2", "telegram:1:201"))
    await a.runtime.receive(update("r2", "q2", "telegram:1:201"))  # and once more, directly
    # A copy handled twice would be recorded before q3: sent last, through the inbox, it reaches a's
    # mailbox after the copies sent directly and after those in the inbox before it
    await b.runtime.receive(update("r2", "q3", "telegram:1:202"))
    records = await wait_for_answers(postgres_dsn, {"r2": ["q1", "q2", "q3"]})
    assert_each_question_answered_once(records, {"r2": ["q1", "q2", "q3"]})
    assert [r.data["delivery"] for r in records["r2"] if r.kind == "message_received"] == [
        "telegram:1:200",
        "telegram:1:201",
        "telegram:1:202",
    ]
