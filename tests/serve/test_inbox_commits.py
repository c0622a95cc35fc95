"""How a message taken from the inbox is committed: with the first records of the step it starts, its row
deleted in the same transaction, taken once however often the inbox is read before that commit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from baf.log import Record
from baf.log.record import RecordKind
from baf.serve import Worker

from .helpers import assert_each_question_answered_once, eventually, fresh_agent, message, wait_for_answers


def spy_on_commits(worker: Worker) -> list[tuple[list[str], list[int]]]:
    """Every append the worker's store makes from now on (appends go through ``append_consuming``): the
    kinds of its records and the inbox rows it deletes."""
    commits: list[tuple[list[str], list[int]]] = []
    original = worker.log.append_consuming

    async def append_consuming(
        records: Sequence[Record], session_id: str | None = None, inbox_ids: Sequence[int] = ()
    ) -> None:
        await original(records, session_id, inbox_ids)
        commits.append(([record.kind for record in records], list(inbox_ids)))

    worker.log.append_consuming = append_consuming  # type: ignore[method-assign]
    return commits


async def insert_unnotified(dsn: str, session_id: str, payload: dict[str, Any]) -> int:
    """An inbox row no notification announces (the test hands it to the runtime itself)."""
    connection = await asyncpg.connect(dsn)
    try:
        row_id: int = await connection.fetchval(
            "INSERT INTO baf_inbox (session_id, payload) VALUES ($1, $2) RETURNING id",
            session_id,
            json.dumps(payload),
        )
    finally:
        await connection.close()
    return row_id


async def test_a_message_for_an_idle_session_commits_with_the_first_records_of_its_step(
    worker: Worker, postgres_dsn: str
) -> None:
    """No round trip for the message alone: the step it starts commits it (and deletes its row) with the
    step's start and the model request, before the model is called; nothing acts before that commit."""
    assert await worker.claim("s")
    await worker.runtime.get_or_create("s")
    await worker.runtime.wait_idle("s")
    commits = spy_on_commits(worker)
    row_id = await worker.inbox.post("s", message("s", "q1"))
    records = await wait_for_answers(postgres_dsn, {"s": ["q1"]})
    assert_each_question_answered_once(records, {"s": ["q1"]})
    consuming = [kinds for kinds, rows in commits if rows]
    assert consuming == [
        [RecordKind.MESSAGE_RECEIVED, RecordKind.STEP_STARTED, RecordKind.TRANSITION, RecordKind.REASONING_STEP,
         RecordKind.LLM_REQUEST],
    ]  # fmt: skip
    assert [rows for _, rows in commits if rows] == [[row_id]]
    assert await worker.inbox.pending("s") == []


async def test_a_message_taken_twice_before_its_row_is_deleted_is_recorded_once(
    worker: Worker, postgres_dsn: str
) -> None:
    """Two takes of one row at once (a notification and the poll, say): the second finds it taken, its
    deletion not committed yet, and leaves it."""
    assert await worker.claim("s")
    await worker.runtime.get_or_create("s")
    await worker.runtime.wait_idle("s")
    payload = message("s", "q1")
    row_id = await insert_unnotified(postgres_dsn, "s", payload)
    await asyncio.gather(
        worker.runtime.receive_forwarded("s", row_id, payload), worker.runtime.receive_forwarded("s", row_id, payload)
    )
    await wait_for_answers(postgres_dsn, {"s": ["q1"]})
    await worker.runtime.wait_idle("s")
    records = await wait_for_answers(postgres_dsn, {"s": ["q1"]})
    assert_each_question_answered_once(records, {"s": ["q1"]})
    assert [r.kind for r in records["s"]].count(RecordKind.ERROR) == 0
    assert await worker.inbox.pending("s") == []


async def test_the_inbox_is_read_again_only_once_the_rows_taken_are_gone(postgres_dsn: str) -> None:
    """A take returns once the commit deleting its rows is over, so the next take of the session (new mail,
    the poll) reads the inbox without them. Here every read of the inbox answers late, with the rows as they
    were when it began: a read begun before that commit would hand the message over a second time."""
    worker = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=60)  # no poll here
    await worker.start()
    try:
        assert await worker.claim("s")
        await worker.runtime.get_or_create("s")
        await worker.runtime.wait_idle("s")
        read = worker.inbox._pending._run

        async def answering_late(session_ids: list[str]) -> dict[str, Any]:
            found = await read(session_ids)
            taken = [m.id for messages in found.values() if isinstance(messages, list) for m in messages]
            connection = await asyncpg.connect(postgres_dsn)
            try:
                for _ in range(30):  # until what it found is gone (taken meanwhile), or 0.3 s
                    if not await connection.fetchval("SELECT count(*) FROM baf_inbox WHERE id = ANY($1)", taken):
                        await asyncio.sleep(0.05)  # and the commit that took it is over in the worker too
                        break
                    await asyncio.sleep(0.01)
            finally:
                await connection.close()
            return found

        worker.inbox._pending._run = answering_late  # type: ignore[method-assign]
        await insert_unnotified(postgres_dsn, "s", message("s", "q1"))  # no notification: the test takes it
        await worker._take("s")
        await worker._take("s")  # new mail, say: the session's next take reads the inbox at once
        await worker.runtime.wait_idle("s")
        records = await wait_for_answers(postgres_dsn, {"s": ["q1"]})
        assert_each_question_answered_once(records, {"s": ["q1"]})
        assert [r.kind for r in records["s"]].count(RecordKind.ERROR) == 0
    finally:
        await worker.stop()


async def test_a_message_for_a_busy_session_is_committed_at_once(worker: Worker, postgres_dsn: str) -> None:
    """While a step runs, the message's own step is far off: it is committed (and its row deleted) at once,
    alone, so that it is in the log, and shown to its sender's clients elsewhere, without waiting for it."""
    assert await worker.claim("s")
    await worker.runtime.get_or_create("s")
    await worker.runtime.wait_idle("s")
    commits = spy_on_commits(worker)
    await worker.inbox.post("s", message("s", "q1"))

    async def asking_the_model() -> bool:
        return any(r.kind == RecordKind.LLM_REQUEST for r in await worker.log.read("s"))

    await eventually(asking_the_model, "q1's step asks the model")  # its model call takes 50 ms, then a tool
    second = await worker.inbox.post("s", message("s", "q2"))
    records = await wait_for_answers(postgres_dsn, {"s": ["q1", "q2"]})
    assert_each_question_answered_once(records, {"s": ["q1", "q2"]})
    at = next(i for i, (_, rows) in enumerate(commits) if rows == [second])
    assert commits[at][0] == [RecordKind.MESSAGE_RECEIVED]
    first_step_end = next(i for i, (kinds, _) in enumerate(commits) if RecordKind.STEP_FINISHED in kinds)
    assert at < first_step_end
