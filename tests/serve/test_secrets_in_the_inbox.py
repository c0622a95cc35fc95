"""A message forwarded to another worker waits in ``baf_inbox``, a table of the database like the log:
the agent's secrets are redacted from it before it is stored, as from every record."""

from __future__ import annotations

import asyncpg

from baf.core.events import ReceiveTextEvent
from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases
from baf.log.redaction import REDACTED
from baf.serve import Worker

from .helpers import fresh_agent

SECRET = "sk-live-do-not-store-4242"


async def test_a_forwarded_message_is_stored_in_the_inbox_with_the_agents_secrets_redacted(postgres_dsn: str) -> None:
    agent = fresh_agent()
    agent.mark_secret(SECRET)
    # Another live worker owns the session: a message for it goes through the inbox (and waits there).
    async with PostgresLog(postgres_dsn, worker_id="owner") as owner_log:
        owner = Leases(owner_log, ttl=30)
        await owner.register()
        assert await owner.acquire("s") is not None
        async with Worker(agent, postgres_dsn, worker_id="b", lease_ttl=30, poll_interval=1) as worker:
            await worker.runtime.receive(ReceiveTextEvent("s", message=f"my key is {SECRET}"))
            connection = await asyncpg.connect(postgres_dsn)
            try:
                stored = await connection.fetch("SELECT payload FROM baf_inbox WHERE session_id = 's'")
            finally:
                await connection.close()
            assert len(stored) == 1
            assert SECRET not in stored[0]["payload"] and f"my key is {REDACTED}" in stored[0]["payload"]
            # and the owner can still take it: a message as a worker forwards it
            (waiting,) = await worker.inbox.pending("s")
            assert waiting.error is None and waiting.payload is not None
            assert waiting.payload["text"] == f"my key is {REDACTED}"
