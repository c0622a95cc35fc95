"""What a faulty or hostile peer on the database can do to a worker: inbox rows that are JSON objects but
not messages (each is an error record of its session, consumed; the session goes on), and a second live
worker with the same id (refused at start: both would count as the owner of the same sessions); and another
role of the database without rights on baf's tables, whose notifications never reach the worker."""

from __future__ import annotations

import asyncio

import asyncpg
import orjson
import pytest

from baf.core.events import ReceiveTextEvent
from baf.errors import ConfigurationError, LogError, SessionIdError
from baf.log.projection import project
from baf.serve import Worker

from .helpers import assert_each_question_answered_once, fresh_agent, message, wait_for_answers

HOSTILE_ROWS = {
    "unknown event type": {"event": {"type": "NoSuchEvent"}, "text": "x"},
    "unknown event field": {"event": {"type": "text", "message": "x", "evil": 1}, "text": "x"},
    "a field set by the platform": {"event": {"type": "text", "message": "x", "session_id": "other"}, "text": "x"},
    "event field of the wrong type": {"event": {"type": "text", "message": 5}, "text": 5},
    "text not a string": {"event": {"type": "text", "message": "x"}, "text": {"a": 1}},
    "text not the event's": {"event": {"type": "text", "message": "x"}, "text": "y"},
    "delivery id not a string": {"event": {"type": "text", "message": "x"}, "text": "x", "delivery": [1]},
    "client message id not a string": {
        "event": {"type": "text", "message": "x"},
        "text": "x",
        "client_message_id": {"a": 1},
    },
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


async def test_a_second_live_worker_with_the_same_id_is_refused_at_start(worker: Worker, postgres_dsn: str) -> None:
    await worker.runtime.receive(ReceiveTextEvent("s", message="q1"))
    twin = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
    with pytest.raises(ConfigurationError, match="worker id 'a' is in use by a live worker"):
        await twin.start()
    info = await worker.leases.owner_of("s")
    assert info is not None and info.epoch == 1  # the twin took nothing
    records = await wait_for_answers(postgres_dsn, {"s": ["q1"]})
    assert_each_question_answered_once(records, {"s": ["q1"]})


async def test_the_id_of_a_worker_that_died_can_be_used_again(postgres_dsn: str) -> None:
    dead = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
    await dead.start()
    await dead.runtime.receive(ReceiveTextEvent("s", message="q1"))
    await wait_for_answers(postgres_dsn, {"s": ["q1"]})
    connection = await asyncpg.connect(postgres_dsn)
    try:  # it dies: no heartbeat since a lease_ttl
        await connection.execute("UPDATE baf_workers SET heartbeat_at = now() - interval '11 seconds'")
        await connection.execute("UPDATE baf_leases SET expires_at = now() - interval '1 second'")
    finally:
        await connection.close()
    async with Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1) as again:
        assert await again.claim("s")
        info = await again.leases.owner_of("s")
        assert info is not None and info.owner == "a" and info.epoch == 2  # taken over: the dead one is fenced
    await dead.stop()


async def test_a_worker_paused_past_its_lease_ttl_whose_id_was_taken_meanwhile_runs_nothing_after(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    paused = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
    await paused.start()
    try:
        heartbeats = next(task for task in paused._tasks if task.get_name() == "baf-worker-heartbeat")
        heartbeats.cancel()  # it pauses (as under SIGSTOP): no heartbeat from now on ...
        await (await paused.runtime.receive(ReceiveTextEvent("s", message="q1")))
        connection = await asyncpg.connect(postgres_dsn)
        try:  # ... for longer than lease_ttl (its lease on s, taken after its last heartbeat, is still live)
            await connection.execute("UPDATE baf_workers SET heartbeat_at = now() - interval '11 seconds'")
        finally:
            await connection.close()
        async with Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1) as twin:
            info = await twin.leases.owner_of("s")
            assert info is not None and not info.live and info.epoch == 2  # the paused one's lease is fenced off
            # The paused worker resumes: its client's next message. Its append is refused, so the message goes
            # to the twin through the inbox; the twin runs the session from then on.
            with pytest.raises(LogError):
                await (await paused.runtime.receive(ReceiveTextEvent("s", message="q2")))
            await paused.runtime.receive(ReceiveTextEvent("s", message="q2"))
            records = await wait_for_answers(postgres_dsn, {"s": ["q1", "q2"]})
            assert_each_question_answered_once(records, {"s": ["q1", "q2"]})
            assert "s" not in paused.runtime.sessions
            lost = await paused.leases.heartbeat()  # its next heartbeat: refused, every session lost
            assert lost == [] and paused.leases.replaced and paused.log.fenced() == {}
            assert not await paused.claim("t")  # it takes nothing more under the id
    finally:
        await paused.stop()
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("bad_id", ["s\x00nul", "s\ud800surrogate"], ids=["NUL", "lone surrogate"])
async def test_a_session_id_no_store_can_hold_is_refused_and_the_others_asked_with_it_go_on(
    worker: Worker, postgres_dsn: str, bad_id: str
) -> None:
    bad, good = await asyncio.gather(
        worker.runtime.receive(ReceiveTextEvent(bad_id, message="q0")),
        worker.runtime.receive(ReceiveTextEvent("good", message="q1")),
        return_exceptions=True,
    )
    assert isinstance(bad, SessionIdError) and "valid Unicode" in str(bad), bad
    assert not isinstance(good, BaseException), good
    records = await wait_for_answers(postgres_dsn, {"good": ["q1"]})
    assert_each_question_answered_once(records, {"good": ["q1"]})
    assert worker.log.fenced() == {"good": 1}


async def test_a_notification_with_no_message_behind_it_starts_nothing(worker: Worker, postgres_dsn: str) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:  # a peer that can read baf's tables (so knows the inbox channel) and notifies a session with no mail
        await connection.execute("SELECT pg_notify($1, 'ghost')", worker.log.channels.inbox)
    finally:
        await connection.close()
    await worker.inbox.post("real", message("real", "q1"))  # notified after the ghost, and answered
    await wait_for_answers(postgres_dsn, {"real": ["q1"]})
    await worker.runtime.wait_idle()
    assert await worker.log.sessions() == ["real"]
    assert await worker.leases.owner_of("ghost") is None


async def test_a_role_without_rights_on_the_tables_can_neither_wake_nor_flood_the_worker(
    worker: Worker, postgres_dsn: str, other_role_dsn: str
) -> None:
    wanted: list[str] = []
    stale: list[int] = []
    want, peers_stale = worker._want, worker._peers_stale

    def spy_want(session_id: str, polled: bool = False) -> None:
        if not polled:  # woken by a notification, not found by the poll
            wanted.append(session_id)
        want(session_id, polled)

    def spy_peers_stale() -> asyncio.Task[None]:
        stale.append(1)
        return peers_stale()

    worker._want = spy_want  # type: ignore[method-assign]
    worker._peers_stale = spy_peers_stale  # type: ignore[method-assign]
    connection = await asyncpg.connect(other_role_dsn)
    try:  # NOTIFY needs no privilege: a flood on every name it can think of (the old fixed ones, guesses)
        guesses = ["baf_inbox", "baf_records", "baf_workers", *(f"baf_{k}_{'0' * 32}" for k in ("inbox", "workers"))]
        await connection.execute(
            "SELECT pg_notify(c, 'ghost-' || i) FROM unnest($1::text[]) AS c, generate_series(1, 10000) AS i", guesses
        )
    finally:
        await connection.close()
    await worker.inbox.post("real", message("real", "q1"))  # notified after the flood, and answered
    await wait_for_answers(postgres_dsn, {"real": ["q1"]})
    assert wanted == ["real"] and stale == []
