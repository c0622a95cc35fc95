"""Two workers in one process after something went wrong: a commit that failed mid-step, mail left by a
worker that died, mail for an id no session may have."""

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
    """A commit that fails mid-step (the database away for a moment) drops the session from memory while the
    worker keeps its lease: no poll and no mail would wake it. It is loaded again as soon as the log answers,
    its step resumes, and the message is answered well within the lease."""
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
    """m1 reaches worker b while another worker holds the session: b forwards it to the inbox. The owner dies
    before taking it; once its lease has expired the same client sends m2 to b, which claims the session:
    m1, waiting in the inbox, is recorded first, and m2 after it, in the order they came."""
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
    """An inbox row for the empty session id (posted by other code, or by hand): deleted, with one error line,
    and no lease is taken on the id."""
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
