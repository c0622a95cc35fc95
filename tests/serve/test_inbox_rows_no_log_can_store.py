"""An inbox row written by hand whose JSON spells a lone surrogate (``\\ud800``): valid JSON, but text no
log can store, so its message could never be recorded. It is an error record of its session, consumed;
the messages behind it are answered (before, it was retried on every poll and held them back for good)."""

from __future__ import annotations

import asyncpg
import pytest

from baf.serve import Worker

from .helpers import assert_each_question_answered_once, message, wait_for_answers

ROWS = {
    "in the text": r'{"event": {"type": "text", "message": "a\ud800b"}, "text": "a\ud800b"}',
    "in the client message id": r'{"event": {"type": "text", "message": "x"}, "text": "x", '
    r'"client_message_id": "\udfff"}',
    "in a key": r'{"event": {"type": "text", "message": "x"}, "text": "x", "\udfff": 1}',
}


@pytest.mark.parametrize("payload", ROWS.values(), ids=ROWS.keys())
async def test_an_inbox_row_spelling_a_lone_surrogate_is_an_error_record_and_the_session_goes_on(
    worker: Worker, postgres_dsn: str, payload: str
) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await connection.execute("INSERT INTO baf_inbox (session_id, payload) VALUES ('s', $1)", payload)
    finally:
        await connection.close()
    await worker.inbox.post("s", message("s", "q1"))
    records = await wait_for_answers(postgres_dsn, {"s": ["q1"]}, within=20)
    errors = [r.data["message"] for r in records["s"] if r.kind == "error"]
    assert errors == ["a malformed message was dropped: it holds text that is not valid Unicode (a lone surrogate)"]
    assert_each_question_answered_once(records, {"s": ["q1"]})
    assert await worker.inbox.pending("s") == []
