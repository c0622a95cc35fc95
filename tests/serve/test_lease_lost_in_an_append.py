"""A worker paused past its lease (SIGSTOP, a long GC) finds out it lost a session when an append of it is
refused, before its next heartbeat says so. Its clients of the session then follow it from the log, as
when the heartbeat finds the lease lost: they are shown what the new owner writes, live."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from baf.serve import Worker

from .helpers import turn_done, two_ws_workers
from .ws_client import Client


@pytest.fixture
async def workers(postgres_dsn: str) -> AsyncIterator[tuple[tuple[Worker, int], tuple[Worker, int]]]:
    async with two_ws_workers(postgres_dsn) as pair:
        yield pair


async def test_a_client_of_a_session_whose_append_found_the_lease_lost_follows_the_new_owner(
    workers: Any, postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    (a, port_a), (b, port_b) = workers
    on_b = await Client.open(port_b)
    welcome = await on_b.hello()
    session_id = welcome["session_id"]
    await on_b.ask("q1")
    assert session_id in b.runtime.sessions
    # b is paused: no heartbeat from now on, and meanwhile its lease expires and a takes the session.
    heartbeats = next(task for task in b._tasks if task.get_name() == "baf-worker-heartbeat")
    heartbeats.cancel()
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await connection.execute("UPDATE baf_leases SET expires_at = now() - interval '1 second'")
    finally:
        await connection.close()
    assert await a.claim(session_id)
    # b goes on: its client's message is refused (the append finds the lease lost; nothing is written) ...
    await on_b.send(type="message", text="q2", id="refused")
    async with asyncio.timeout(10):
        while (refusal := json.loads(await on_b.ws.recv()))["type"] != "error":
            on_b.frames.append(refusal)
    assert refusal["code"] == "unavailable" and refusal["id"] == "refused", refusal
    assert session_id not in b.runtime.sessions
    # ... and the session goes on at a: what a writes reaches b's client live, from the log.
    on_a = await Client.open(port_a)
    await on_a.hello(welcome["resume_token"])
    await on_a.ask("q3")
    await turn_done(postgres_dsn, session_id, "q3")
    reply = await on_b.until("reply", within=10, text="answer to q3")
    assert reply["seq"] > 0
    # A later turn: the follower delivers in log order, so anything shown twice so far arrives before it.
    await on_a.ask("q4")
    await on_b.until("reply", within=10, text="answer to q4")
    seqs = [frame["seq"] for frame in on_b.live()]
    assert len(seqs) == len(set(seqs)) and seqs == sorted(seqs)
    await on_a.close()
    await on_b.close()
    gc.collect()
    await asyncio.sleep(0)
    never_retrieved = [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
    assert never_retrieved == []  # the refused message's mailbox was dropped before its drain began
