"""What a faulty or hostile peer on the database can send a worker: inbox rows that are JSON objects but
not messages. Each is an error record of its session, consumed; the session goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import orjson
import pytest

from baf.log.projection import project
from baf.serve import Worker

from .helpers import assert_each_question_answered_once, fresh_agent, message, wait_for_answers


@pytest.fixture
async def worker(postgres_dsn: str) -> AsyncIterator[Worker]:
    a = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
    await a.start()
    try:
        yield a
    finally:
        await a.stop()


HOSTILE_ROWS = {
    "unknown event type": {"event": {"type": "NoSuchEvent"}, "text": "x"},
    "unknown event field": {"event": {"type": "text", "message": "x", "evil": 1}, "text": "x"},
    "a field set by the platform": {"event": {"type": "text", "message": "x", "session_id": "other"}, "text": "x"},
    "event field of the wrong type": {"event": {"type": "text", "message": 5}, "text": 5},
    "text not a string": {"event": {"type": "text", "message": "x"}, "text": {"a": 1}},
    "text not the event's": {"event": {"type": "text", "message": "x"}, "text": "y"},
    "delivery id not a string": {"event": {"type": "text", "message": "x"}, "text": "x", "delivery": [1]},
    "event not an object": {"event": "text", "text": "x"},
    "no event": {"text": "x"},
}


@pytest.mark.parametrize("payload", HOSTILE_ROWS.values(), ids=HOSTILE_ROWS.keys())
async def test_an_inbox_row_that_is_not_a_message_is_an_error_record_and_the_session_goes_on(
    worker: Worker, postgres_dsn: str, payload: dict[str, object]
) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:  # as a faulty peer would write it, ahead of a good message
        await connection.execute(
            "INSERT INTO baf_inbox (session_id, payload) VALUES ('s', $1)", orjson.dumps(payload).decode()
        )
    finally:
        await connection.close()
    await worker.inbox.post("s", message("s", "q1"))
    records = await wait_for_answers(postgres_dsn, {"s": ["q1"]}, within=20)
    errors = [r.data["message"] for r in records["s"] if r.kind == "error"]
    assert len(errors) == 1 and "malformed message" in errors[0], errors
    assert_each_question_answered_once(records, {"s": ["q1"]})
    assert await worker.inbox.pending("s") == []
    # nothing of the row reached the conversation the model is shown
    history = project("s", records["s"]).history
    assert [entry.text for entry in history if entry.role == "user"] == ["q1"]
