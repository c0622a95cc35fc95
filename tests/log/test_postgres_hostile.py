"""Values PostgreSQL itself refuses (a session id past the size of an index entry): the append or lease
carrying one fails alone, with an error that says so; the others asked for at the same time go through."""

from __future__ import annotations

import asyncio
import secrets

from baf.log import Record
from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases

#: Too long for an index entry (PostgreSQL's limit is about 2.7 kB; random text does not compress).
OVERSIZED = "s-" + secrets.token_hex(2000)


def rec(session_id: str, seq: int) -> Record:
    return Record(session_id, seq, "note", {"text": "hi"}, 1.5, 1)


async def test_an_append_postgresql_refuses_fails_alone_and_its_group_commits(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn) as log:
        await log.append([rec("good", 1)])
        good, bad = await asyncio.gather(  # queued together: one group
            log.append([rec("good", 2)]), log.append([rec(OVERSIZED, 1)]), return_exceptions=True
        )
        assert good is None
        assert isinstance(bad, ValueError) and "PostgreSQL refused the append" in str(bad)
        assert [r.seq for r in await log.read("good")] == [1, 2]
        assert await log.sessions() == ["good"]
        await log.append([rec("good", 3)])  # the writer goes on on the same connection
        assert [r.seq for r in await log.read("good")] == [1, 2, 3]


async def test_a_lease_postgresql_refuses_fails_alone_among_those_asked_for_together(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn, worker_id="w") as log:
        leases = Leases(log)
        results = await asyncio.gather(
            leases.acquire("a"), leases.acquire(OVERSIZED), leases.acquire("b"), return_exceptions=True
        )
        assert results[0] == 1 and results[2] == 1
        assert isinstance(results[1], Exception)
        assert log.fenced() == {"a": 1, "b": 1}
