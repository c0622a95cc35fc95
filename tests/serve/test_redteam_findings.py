"""Red-team findings on the multi-worker runtime (issue 13): each test fails on main as it stands.

Reproductions with real worker processes are in the red-team report; these are the in-process versions.
"""

from __future__ import annotations

import json

import asyncpg
import pytest

from baf.core.events import ReceiveTextEvent
from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases

from .helpers import eventually, message, two_workers, wait_for_answers

# Fails the first insert of an llm_response once, with an error PostgreSQL raises under contention
# (deadlock_detected): the writer's group fails as a whole, as when the connection drops mid-commit or the
# server is briefly away. The sequence is not transactional: the failure happens once.
_FAIL_ONCE = """
CREATE SEQUENCE rt_fail_seq;
CREATE FUNCTION rt_fail_fn() RETURNS trigger AS $$
BEGIN
  IF NEW.kind = 'llm_response' AND nextval('rt_fail_seq') = 1 THEN
    RAISE EXCEPTION 'injected transient failure' USING ERRCODE = '40P01';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER rt_fail_tr BEFORE INSERT ON baf_records FOR EACH ROW EXECUTE FUNCTION rt_fail_fn();
"""


async def test_a_session_whose_commit_failed_mid_step_is_resumed_by_its_owner(postgres_dsn: str) -> None:
    """A commit that fails mid-step (the database away for a moment) evicts the session from memory, but the
    worker keeps its lease (the heartbeat renews it, being still fenced): the poll skips it (its lease is live)
    and no mail wakes it, so its open step is never resumed and the message never answered."""
    async with two_workers(postgres_dsn) as (a, _b):
        connection = await asyncpg.connect(postgres_dsn)
        try:
            await connection.execute(_FAIL_ONCE)
            await a.inbox.post("s", message("s", "q1"))
            await eventually(
                lambda: connection.fetchval("SELECT last_value = 1 AND is_called FROM rt_fail_seq"),
                "the injected failure",
            )
        finally:
            await connection.close()
        # well within lease_ttl (10 s): the owner is alive and holds the lease all along
        await wait_for_answers(postgres_dsn, {"s": ["q1"]}, within=8)


async def test_a_message_waiting_in_the_inbox_is_recorded_before_a_later_one_taken_directly(
    postgres_dsn: str,
) -> None:
    """m1 reaches worker b while another worker holds the session: b forwards it to the inbox (durable, the
    client is answered). The owner dies; once its lease has expired the same client sends m2 to b, which
    claims the session on its own socket and records m2 at once: m1 is recorded after it, at b's next poll."""
    async with two_workers(postgres_dsn, poll_interval=5) as (_a, b):
        async with PostgresLog(postgres_dsn, worker_id="ghost") as ghost_log:
            ghost = Leases(ghost_log, ttl=30)
            await ghost.register()
            assert await ghost.acquire("s") is not None  # a worker that then dies holding the session
            await b.runtime.receive(ReceiveTextEvent("s", message="m1"))  # forwarded: the ghost owns it
            connection = await asyncpg.connect(postgres_dsn)
            try:
                await connection.execute(
                    "UPDATE baf_leases SET expires_at = now() - interval '1 second' WHERE session_id = 's'"
                )
                await connection.execute("DELETE FROM baf_workers WHERE worker_id = 'ghost'")
            finally:
                await connection.close()
            await b.runtime.receive(ReceiveTextEvent("s", message="m2"))
            records = await wait_for_answers(postgres_dsn, {"s": ["m1", "m2"]}, within=30)
    received = [r.data["text"] for r in records["s"] if r.kind == "message_received"]
    assert received == ["m1", "m2"], received


async def test_an_inbox_row_of_an_id_no_session_may_have_is_consumed(postgres_dsn: str) -> None:
    """An inbox row for the empty session id (posted by other code, or by hand): the worker takes its lease,
    then fails on the id, with a traceback, at every poll, for ever; the row is never consumed."""
    async with two_workers(postgres_dsn) as (a, _b):
        with pytest.raises(ValueError, match="empty session id"):
            await a.inbox.post("", message("", "hello"))  # baf's own inbox refuses it
        connection = await asyncpg.connect(postgres_dsn)
        try:
            await connection.execute(  # so other code (or a hand) posts it
                "INSERT INTO baf_inbox (session_id, payload) VALUES ('', $1)", json.dumps(message("", "hello"))
            )
            await connection.execute("SELECT pg_notify($1, '')", a.log.channels.inbox)
            await eventually(
                lambda: connection.fetchval("SELECT NOT EXISTS (SELECT 1 FROM baf_inbox WHERE session_id = '')"),
                "the row for the empty id deleted",
            )
            assert await connection.fetchval("SELECT count(*) FROM baf_leases WHERE session_id = ''") == 0
        finally:
            await connection.close()
