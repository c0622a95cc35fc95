"""What PostgresLog does beyond the store contract: schema versions, leases with fencing, the inbox,
group commit and a server that goes away. Against a real PostgreSQL server (see tests/pg_cluster.py)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pg_cluster import SCRIPT

from baf.errors import (
    CorruptRecordError,
    LeaseLostError,
    LogConflictError,
    LogError,
    LogReadOnlyError,
    LogStorageError,
)
from baf.log import Record, open_log, postgres_inbox, postgres_leases
from baf.log.postgres import RESUME_CHUNK, PostgresLog
from baf.log.postgres_inbox import Inbox
from baf.log.postgres_leases import Leases
from baf.log.postgres_schema import SCHEMA_VERSION


def rec(session_id: str, seq: int, text: str = "hi") -> Record:
    return Record(session_id, seq, "note", {"text": text}, 1.5, 1)


@pytest.fixture
async def worker_logs(postgres_dsn: str) -> AsyncIterator[tuple[PostgresLog, PostgresLog]]:
    """Two workers' stores on one database."""
    a = PostgresLog(postgres_dsn, worker_id="worker-a")
    b = PostgresLog(postgres_dsn, worker_id="worker-b")
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def query(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(dsn)
    try:
        return await connection.fetch(sql, *args)
    finally:
        await connection.close()


# -- schema ---------------------------------------------------------------------------------------------


async def test_a_new_database_gets_the_current_schema(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn) as log:
        await log.append([rec("s", 1)])
    rows = await query(postgres_dsn, "SELECT value FROM baf_meta WHERE key = 'schema_version'")
    assert rows[0][0] == str(SCHEMA_VERSION)


async def test_a_version_1_schema_is_upgraded_with_its_records(postgres_dsn: str) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:  # the tables as baf wrote them at version 1
        await connection.execute(
            """
            CREATE TABLE baf_meta (key text PRIMARY KEY, value text NOT NULL);
            CREATE TABLE baf_sessions (session_id text PRIMARY KEY, ordinal bigserial UNIQUE);
            CREATE TABLE baf_records (session_id text NOT NULL, seq bigint NOT NULL CHECK (seq >= 1),
                kind text NOT NULL, data text NOT NULL, ts double precision NOT NULL, version integer NOT NULL,
                PRIMARY KEY (session_id, seq));
            INSERT INTO baf_meta VALUES ('schema_version', '1');
            INSERT INTO baf_sessions (session_id) VALUES ('old'), ('done');
            INSERT INTO baf_records VALUES ('old', 1, 'note', '{"text":"from v1"}', 2.5, 1),
                ('old', 2, 'session_started', '{}', 2.6, 1),
                ('old', 3, 'message_received', '{"event":{}}', 2.7, 1),
                ('done', 1, 'session_started', '{}', 2.8, 1),
                ('done', 2, 'step_started', '{"event_seq":null}', 2.9, 1),
                ('done', 3, 'step_finished', '{}', 3.0, 1);
            """
        )
    finally:
        await connection.close()
    async with PostgresLog(postgres_dsn, worker_id="w") as log:
        assert [r.kind for r in await log.read("old")] == ["note", "session_started", "message_received"]
        assert await log.sessions() == ["old", "done"]
        assert await log.unfinished_sessions() == ["old"]  # the work index was filled from the records
        assert await Leases(log).acquire("old") == 1  # the version-2 tables exist now
    rows = await query(postgres_dsn, "SELECT value FROM baf_meta WHERE key = 'schema_version'")
    assert rows[0][0] == str(SCHEMA_VERSION)


async def test_a_newer_schema_is_refused(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn):
        pass
    await query(postgres_dsn, "UPDATE baf_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LogError, match="version 99, written by a newer baf"):
        await PostgresLog(postgres_dsn).start()


async def test_read_only_needs_an_existing_log_and_never_writes(postgres_dsn: str) -> None:
    with pytest.raises(LogError, match="no baf log in this database"):
        await PostgresLog(postgres_dsn, read_only=True).start()
    assert await query(postgres_dsn, "SELECT to_regclass('baf_meta')") == [(None,)]
    async with PostgresLog(postgres_dsn) as log:
        await log.append([rec("s", 1)])
    async with open_log(postgres_dsn, read_only=True) as reader:
        assert len(await reader.read("s")) == 1
        with pytest.raises(LogReadOnlyError):
            await reader.append([rec("s", 2)])


async def test_a_server_that_cannot_be_reached_is_a_log_error_without_the_password() -> None:
    with socket_closed_port() as port:
        log = PostgresLog(f"postgresql://baf:hunter2secret@127.0.0.1:{port}/db", connect_timeout=2)
        with pytest.raises(LogError, match=f"127.0.0.1:{port}") as caught:
            await log.start()
    assert "hunter2secret" not in str(caught.value)


class socket_closed_port:
    """A loopback port nothing listens on (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


# -- group commit -----------------------------------------------------------------------------------------


async def test_a_conflicting_append_fails_alone_in_a_group(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn) as log:
        await log.append([rec("busy", 1)])
        results = await asyncio.gather(
            *(log.append([rec(f"s{i}", 1), rec(f"s{i}", 2)]) for i in range(20)),
            log.append([rec("busy", 2), rec("busy", 1)]),  # conflicts on seq 1: none of it lands
            return_exceptions=True,
        )
        assert results[:20] == [None] * 20
        assert isinstance(results[20], LogConflictError)
        assert (results[20].session_id, results[20].seq) == ("busy", 1)
        assert [r.seq for r in await log.read("busy")] == [1]
        assert [len(await log.read(f"s{i}")) for i in range(20)] == [2] * 20


async def test_a_big_group_wakes_its_appenders_a_few_per_turn_of_the_loop_in_order(postgres_dsn: str) -> None:
    loop_turns = 0

    def count() -> None:
        nonlocal loop_turns
        loop_turns += 1
        ticking.append(asyncio.get_running_loop().call_soon(count))

    ticking = [asyncio.get_running_loop().call_soon(count)]
    woken: list[tuple[int, int]] = []

    async def append(n: int) -> None:
        await log.append([rec(f"s{n}", 1)])
        woken.append((n, loop_turns))

    try:
        async with PostgresLog(postgres_dsn) as log:
            await log.append([rec("warm", 1)])
            await asyncio.gather(*(append(n) for n in range(3 * RESUME_CHUNK)))  # queued together: one group
    finally:
        ticking[-1].cancel()
    assert [n for n, _ in woken] == list(range(3 * RESUME_CHUNK))
    turns = [turn for _, turn in woken]
    chunks = [turns[i : i + RESUME_CHUNK] for i in range(0, len(turns), RESUME_CHUNK)]
    assert all(len(set(chunk)) == 1 for chunk in chunks)  # a chunk goes on in one turn
    assert chunks[0][0] < chunks[1][0] < chunks[2][0]  # the loop turned in between


async def test_commits_wake_listeners_of_the_records_channel(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn) as log:
        heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        stop = await Inbox(log).listen(lambda channel, session: heard.put_nowait((channel, session)))
        try:
            await log.append([rec("followed", 1)])
            assert await asyncio.wait_for(heard.get(), 5) == (log.channels.records, "followed")
        finally:
            await stop()


async def test_a_listener_whose_connection_is_lost_listens_again_and_says_so(postgres_dsn: str) -> None:
    name = "baf-test-listener-lost"  # its connections are told apart from others' on a shared server
    admin = await asyncpg.connect(postgres_dsn)
    async with PostgresLog(f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}application_name={name}") as log:
        heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        back = asyncio.Event()
        stop = await Inbox(log).listen(
            lambda channel, session: heard.put_nowait((channel, session)), (log.channels.records,), back.set
        )
        try:
            await _cut_listener(admin, name, listening=True)  # as a server restart would
            await asyncio.wait_for(back.wait(), 30)  # the caller is told: what was notified meanwhile is lost
            await log.append([rec("followed", 1)])
            assert await asyncio.wait_for(heard.get(), 30) == (log.channels.records, "followed")  # heard again
        finally:
            await stop()
    await admin.close()


async def _cut_listener(admin: asyncpg.Connection, application_name: str, listening: bool = False) -> None:
    """Terminate the listening backend of this test alone (others may share the server); ``listening``: the
    one of its connections listening (whose last statement is the ``SELECT 1`` a listener ends with)."""
    cut = await admin.fetch(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid() "
        "AND (NOT $2 OR query = 'SELECT 1')",
        application_name,
        listening,
    )
    assert len(cut) == 1


async def test_a_listener_keeps_trying_whatever_fails_and_listens_once_again(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reconnecting fails with an error that is not a connection's (here a RuntimeError): it goes on
    trying, a second report of the same loss starts no second reconnect, and ``stop()`` never raises."""
    name = "baf-test-relisten-any-error"
    admin = await asyncpg.connect(postgres_dsn)  # opened before connecting fails
    async with PostgresLog(postgres_dsn) as log:
        back = asyncio.Event()
        stop = await Inbox(log).listen(lambda channel, session: None, (log.channels.records,), back.set)
        listening = inspect.getclosurevars(stop).nonlocals["listening"]
        first = listening.connection
        (lost,) = [callback.cb for callback in first._termination_listeners]
        await first.execute(f"SET application_name = '{name}'")
        calls: list[int] = []
        gate = asyncio.Event()
        connect = asyncpg.connect

        async def failing_twice(*args: object, **kwargs: object) -> asyncpg.Connection:
            calls.append(1)
            await gate.wait()
            if len(calls) <= 2:
                raise RuntimeError("not a connection's error")
            return await connect(*args, **kwargs)

        monkeypatch.setattr(asyncpg, "connect", failing_twice)
        try:
            await _cut_listener(admin, name)
            async with asyncio.timeout(30):
                while not calls:  # noqa: ASYNC110 - the loss is heard on the event loop: no event to wait on
                    await asyncio.sleep(0.01)
            lost(first)  # heard again: no second reconnect
            await asyncio.sleep(0.1)
            assert len(calls) == 1
            gate.set()
            await asyncio.wait_for(back.wait(), 30)  # listening again, after two failures
            assert len(calls) == 3
        finally:
            await stop()
        # Stopped while retrying an error that is not a connection's: stop() returns.
        calls.clear()
        monkeypatch.setattr(asyncpg, "connect", connect)
        stop = await Inbox(log).listen(lambda channel, session: None, (log.channels.records,))
        first = inspect.getclosurevars(stop).nonlocals["listening"].connection
        await first.execute(f"SET application_name = '{name}'")
        monkeypatch.setattr(asyncpg, "connect", failing_twice)
        gate.set()
        await _cut_listener(admin, name)
        async with asyncio.timeout(30):
            while len(calls) < 2:  # noqa: ASYNC110 - the retries run on the event loop: no event to wait on
                await asyncio.sleep(0.01)
        await stop()
    await admin.close()


async def test_in_a_group_an_append_whose_inbox_row_is_gone_fails_alone(
    worker_logs: tuple[PostgresLog, PostgresLog],
) -> None:
    a, _ = worker_logs
    leases = Leases(a)
    for name in ("s", *(f"t{i}" for i in range(10))):
        await leases.acquire(name)
    row_id = await Inbox(a).post("s", {"text": "once"})
    await a.append_consuming([rec("s", 1, "once")], "s", [row_id])
    results = await asyncio.gather(
        a.append_consuming([rec("s", 2, "twice")], "s", [row_id]),  # consumed already: all of it is refused
        *(a.append([rec(f"t{i}", 1)]) for i in range(10)),
        return_exceptions=True,
    )
    assert isinstance(results[0], LogError) and "consumed already" in str(results[0])
    assert results[1:] == [None] * 10
    assert [r.data["text"] for r in await a.read("s")] == ["once"]
    assert [len(await a.read(f"t{i}")) for i in range(10)] == [1] * 10


def work_rec(session_id: str, seq: int, kind: str, **data: object) -> Record:
    return Record(session_id, seq, kind, dict(data), 1.5, 1)


async def hand_over(session_id: str, to: PostgresLog, *logs: PostgresLog) -> None:
    """Move ``session_id``'s lease to the worker store ``to`` from whichever of ``logs`` holds it."""
    for log in logs:
        if log is not to and session_id in log.fenced():
            await Leases(log).release(session_id)
    if session_id not in to.fenced():
        assert await Leases(to).acquire(session_id) is not None


async def test_the_work_index_stays_right_when_another_store_appended_in_between(
    postgres_dsn: str, worker_logs: tuple[PostgresLog, PostgresLog]
) -> None:
    # Each writer remembers the work status after its own appends; an append by another worker in between
    # (the session taken over, then taken back) must not let it build on what it remembers.
    first, second = worker_logs
    await hand_over("s", first)
    await first.append([work_rec("s", 1, "session_started"), work_rec("s", 2, "step_started", event_seq=None)])
    await first.append([work_rec("s", 3, "step_finished", event_seq=None)])
    assert await first.unfinished_sessions() == []
    await hand_over("s", second, first)
    await second.append([work_rec("s", 4, "message_received", text="hi")])  # another process's append
    assert await first.unfinished_sessions() == ["s"]
    await hand_over("s", first, second)
    await first.append([work_rec("s", 5, "step_started", event_seq=4)])  # handles it: a step is open
    await first.append([work_rec("s", 6, "step_finished", event_seq=4)])
    assert await second.unfinished_sessions() == []
    await hand_over("s", second, first)
    await second.append([work_rec("s", 7, "message_received", text="again")])
    await hand_over("s", first, second)
    await first.append([work_rec("s", 8, "note")])  # no work kind: changes nothing
    assert await first.unfinished_sessions() == ["s"]  # message 7 still waits
    rows = await query(postgres_dsn, "SELECT status FROM baf_work WHERE session_id = 's'")
    assert '"unhandled":[7]' in rows[0][0]


async def test_a_loaded_session_is_appended_to_without_reading_the_work_index_and_stays_right(
    postgres_dsn: str, worker_logs: tuple[PostgresLog, PostgresLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker taking over a session another store wrote learns its last seq and work status with the load
    # (one snapshot), so its first append is one statement; an append by someone else after the load makes
    # that append conflict (the seq is taken), never build on a stale status.
    import baf.log.postgres as postgres_module

    read_first: list[list[str]] = []
    original = postgres_module.stored_work

    async def counted(connection: asyncpg.Connection, sessions: list[str]) -> object:
        read_first.append(sessions)
        return await original(connection, sessions)

    monkeypatch.setattr(postgres_module, "stored_work", counted)
    first, second = worker_logs
    await hand_over("s", first)
    await hand_over("t", first)
    await first.append([work_rec("s", 1, "session_started"), work_rec("s", 2, "message_received", text="a")])
    await first.append([work_rec("t", 1, "note")])
    await hand_over("s", second, first)
    await asyncio.gather(second.read_for_load("s"), second.read_for_load("t"))
    await second.append([work_rec("s", 3, "step_started", event_seq=None)])
    assert read_first == []  # its status came with the load: nothing read before the append
    rows = await query(postgres_dsn, "SELECT status FROM baf_work WHERE session_id = 's'")
    assert '"open":0' in rows[0][0] and '"unhandled":[2]' in rows[0][0]  # built on the loaded status
    await first.append([work_rec("t", 2, "message_received", text="b")])  # after second's load of t
    await hand_over("t", second, first)
    with pytest.raises(LogConflictError):
        await second.append([work_rec("t", 2, "message_received", text="c")])
    assert read_first == [["t"]]  # the retry alone read the index, and the conflict wrote nothing
    assert await second.unfinished_sessions() == ["s", "t"]
    assert [r.data.get("text") for r in await second.read("t")] == [None, "b"]


# -- a burst of sessions: reads asked for together share one query ------------------------------------------


async def test_loads_and_inbox_reads_asked_together_share_a_query_and_a_damaged_session_fails_alone(
    postgres_dsn: str,
) -> None:
    async with PostgresLog(postgres_dsn) as log:
        names = [f"s{i}" for i in range(10)]
        await asyncio.gather(*(log.append([rec(name, 1, name), rec(name, 2)]) for name in names))
        await log.append([rec("gap", 1)])
        await query(postgres_dsn, "INSERT INTO baf_records VALUES ('gap', 3, 'note', '{}', 1.5, 1)")
        inbox = Inbox(log)
        for name in names[:3]:
            await inbox.post(name, {"text": f"for {name}"})
        batches: list[int] = []
        run_loads, run_pending = log._read_for_load_many, inbox._pending_many

        async def counted_loads(ids: list[str]) -> object:
            batches.append(len(ids))
            return await run_loads(ids)

        async def counted_pending(ids: list[str]) -> object:
            batches.append(len(ids))
            return await run_pending(ids)

        log._loads._run = counted_loads  # type: ignore[assignment]
        inbox._pending._run = counted_pending  # type: ignore[assignment]
        loaded = await asyncio.gather(*(log.read_for_load(name) for name in [*names, "gap"]), return_exceptions=True)
        waiting = await asyncio.gather(*(inbox.pending(name) for name in names))
        assert batches == [11, 10]  # one query for the eleven loads, one for the ten inbox reads
        assert [[r.seq for r in records] for records in loaded[:10]] == [[1, 2]] * 10  # type: ignore[union-attr]
        assert loaded[0][0].data == {"text": "s0"}  # type: ignore[index]
        assert isinstance(loaded[10], CorruptRecordError) and loaded[10].seq == 2  # only the damaged one fails
        assert [[m.payload for m in messages] for messages in waiting] == [
            *([{"text": f"for {name}"}] for name in names[:3]),
            *([] for _ in names[3:]),
        ]


async def test_inbox_reads_asked_together_read_at_most_the_limit_of_each_backlog_in_order(
    postgres_dsn: str,
) -> None:
    async with PostgresLog(postgres_dsn) as log:
        # Two sessions' rows interleaved: a long backlog (1,000) and a short one (3), and one with none.
        await query(
            postgres_dsn,
            "INSERT INTO baf_inbox (session_id, payload) SELECT CASE WHEN i % 300 = 0 THEN 'short' ELSE 'long' END, "
            "'{\"n\": ' || i || '}' FROM generate_series(1, 1003) AS i",
        )
        await query(postgres_dsn, "ANALYZE baf_inbox")
        inbox = Inbox(log)
        long, short, none = await asyncio.gather(inbox.pending("long"), inbox.pending("short"), inbox.pending("none"))
        assert [m.payload for m in long] == [{"n": i} for i in range(1, 101)]  # the first 100, in order
        assert [m.payload for m in short] == [{"n": 300}, {"n": 600}, {"n": 900}] and none == []
        # The read stops at each session's limit (the index in id order), whatever the backlog: 103 rows
        # read from baf_inbox (EXPLAIN rounds a scan's rows per loop), not the 1,003 waiting.
        [plan] = await query(
            postgres_dsn,
            f"EXPLAIN (ANALYZE, FORMAT JSON) {postgres_inbox._PENDING_MANY.replace('$2', '100')}".replace(
                "$1::text[]", "ARRAY['long', 'short', 'none']"
            ),
        )
        assert _rows_read(json.loads(plan[0])[0]["Plan"], "baf_inbox") <= 103


def _rows_read(node: dict[str, Any], table: str) -> float:
    """The rows the scans of ``table`` in an EXPLAIN ANALYZE plan returned, over all their loops."""
    own = node["Actual Rows"] * node["Actual Loops"] if node.get("Relation Name") == table else 0
    return own + sum(_rows_read(child, table) for child in node.get("Plans", []))


async def test_reads_asked_together_share_a_query_each_from_its_own_seq(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn) as log:
        names = [f"s{i}" for i in range(6)]
        await asyncio.gather(*(log.append([rec(name, 1, name), rec(name, 2), rec(name, 3)]) for name in names))
        await log.append([rec("gap", 1)])
        await query(postgres_dsn, "INSERT INTO baf_records VALUES ('gap', 3, 'note', '{}', 1.5, 1)")
        batches: list[int] = []
        run_reads = log._read_many

        async def counted(wanted: list[tuple[str, int]]) -> object:
            batches.append(len(wanted))
            return await run_reads(wanted)

        log._reads._run = counted  # type: ignore[assignment]
        # A follower catching up: each session after the last seq it showed; one session twice, from two seqs.
        asked = [(name, i % 3) for i, name in enumerate(names)] + [("s0", 2), ("gap", 0), ("none", 0)]
        got = await asyncio.gather(*(log.read(name, after) for name, after in asked), return_exceptions=True)
        assert batches == [9]  # one query
        for (name, after), records in zip(asked[:7], got[:7], strict=True):
            assert [r.seq for r in records] == list(range(after + 1, 4)), name  # type: ignore[union-attr]
        assert got[0][0].data == {"text": "s0"}  # type: ignore[index]
        assert isinstance(got[7], CorruptRecordError) and got[7].seq == 2  # only the damaged one fails
        assert got[8] == []
        assert [r.seq for r in await log.read("s1", 1)] == [2, 3]  # alone, as before


async def test_leases_asked_together_share_a_statement_and_a_busy_one_is_refused_alone(
    worker_logs: tuple[PostgresLog, PostgresLog],
) -> None:
    a, b = worker_logs
    await Leases(b, ttl=0.1).acquire("busy")
    await asyncio.sleep(0.2)  # b's lease expired, but b is in the middle of an append (its row locked)
    leases = Leases(a)
    names = [f"s{i}" for i in range(10)]
    assert await asyncio.gather(*(leases.acquire(name) for name in names)) == [1] * 10  # one statement
    connection = await asyncpg.connect(a.dsn)
    try:
        async with connection.transaction():
            await connection.execute("SELECT 1 FROM baf_leases WHERE session_id = 'busy' FOR KEY SHARE")
            epochs = await asyncio.gather(*(leases.acquire(name) for name in ["t0", "busy", "t1"]))
            assert epochs == [1, None, 1]  # the busy one alone is refused (retried by the poll)
    finally:
        await connection.close()
    assert await leases.acquire("busy") == 2
    assert set(a.fenced()) == {*names, "t0", "t1", "busy"}


# -- a pool exhausted -------------------------------------------------------------------------------------


async def test_more_calls_at_once_than_connections_queue_and_all_complete(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn, worker_id="w", pool_size=1) as log:
        leases, inbox, names = Leases(log), Inbox(log), [f"s{i}" for i in range(40)]
        epochs = await asyncio.gather(*(leases.acquire(name) for name in names))  # 40 claims, 1 connection
        assert epochs == [1] * 40
        ids = await asyncio.gather(*(inbox.post(name, {"text": name}) for name in names))
        await asyncio.gather(*(log.append_consuming([rec(n, 1, n)], n, [i]) for n, i in zip(names, ids, strict=True)))
        read, waiting = await asyncio.gather(
            asyncio.gather(*(log.read(name) for name in names)), asyncio.gather(*(inbox.pending(n) for n in names))
        )
        assert [[r.data["text"] for r in records] for records in read] == [[name] for name in names]
        assert waiting == [[]] * 40  # every message consumed once


async def test_a_pool_that_stays_busy_fails_with_a_typed_error_instead_of_hanging(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn, worker_id="w", pool_size=1, acquire_timeout=0.3) as log:
        leases = Leases(log)
        assert await leases.acquire("s") == 1
        await log.append([rec("s", 1)])  # the writer holds its own connection from here on
        async with log.connection():  # ... and this holds the only reading one
            with pytest.raises(LogStorageError, match=r"no database connection came free within 0\.3 s"):
                await asyncio.wait_for(log.read("s"), 5)
            with pytest.raises(LogStorageError, match="pool were busy"):
                await asyncio.wait_for(leases.acquire("t"), 5)
            with pytest.raises(LogStorageError):
                await asyncio.wait_for(Inbox(log).post("s", {"text": "x"}), 5)
            await asyncio.wait_for(log.append([rec("s", 2)]), 5)  # appends do not queue behind reads
        assert [r.seq for r in await log.read("s")] == [1, 2]  # freed: reads go on


async def test_a_takeover_does_not_wait_for_a_busy_lease_row(worker_logs: tuple[PostgresLog, PostgresLog]) -> None:
    a, b = worker_logs
    await Leases(a, ttl=0.1).acquire("s")
    await asyncio.sleep(0.2)  # a's lease expired, but a is in the middle of an append (its lease row locked)
    connection = await asyncpg.connect(a.dsn)
    try:
        async with connection.transaction():
            await connection.execute("SELECT 1 FROM baf_leases WHERE session_id = 's' FOR KEY SHARE")
            assert await asyncio.wait_for(Leases(b).acquire("s"), 2) is None  # not now: retried later
    finally:
        await connection.close()
    assert await Leases(b).acquire("s") == 2


# -- leases and fencing -----------------------------------------------------------------------------------


async def test_two_workers_racing_for_a_session_one_wins(worker_logs: tuple[PostgresLog, PostgresLog]) -> None:
    a, b = worker_logs
    epochs = await asyncio.gather(Leases(a).acquire("s"), Leases(b).acquire("s"))
    assert sorted(epochs, key=lambda e: e is None)[0] == 1 and epochs.count(None) == 1
    winner, loser = (a, b) if epochs[0] is not None else (b, a)
    info = await Leases(loser).owner_of("s")
    assert info is not None and info.owner == winner.worker_id and info.live
    await winner.append([rec("s", 1)])
    with pytest.raises(LeaseLostError, match="holds no lease"):
        await loser.append([rec("s", 2)])
    assert [r.seq for r in await winner.read("s")] == [1]


async def test_a_paused_owner_cannot_write_after_a_takeover(worker_logs: tuple[PostgresLog, PostgresLog]) -> None:
    a, b = worker_logs
    leases_a, leases_b = Leases(a, ttl=30), Leases(b, ttl=5)
    assert await leases_a.acquire("s") == 1
    await a.append([rec("s", 1, "a's first")])
    assert await leases_b.acquire("s") is None  # a's lease is live
    # a is "paused": no heartbeat, its lease expires (on the database's clock, as ttl would have it)
    await query(a.dsn, "UPDATE baf_leases SET expires_at = now() - interval '1 second' WHERE session_id = 's'")
    assert await leases_b.acquire("s") == 2  # the takeover bumps the epoch
    await b.append([rec("s", 2, "b's")])
    with pytest.raises(LeaseLostError, match="lost its lease"):
        await a.append([rec("s", 3, "a after the pause")])  # a still believes it owns s
    assert await leases_a.heartbeat() == []  # already dropped by the refused append
    assert [r.data["text"] for r in await b.read("s")] == ["a's first", "b's"]


async def test_heartbeats_keep_a_lease_and_report_the_ones_lost(
    worker_logs: tuple[PostgresLog, PostgresLog],
) -> None:
    a, b = worker_logs
    leases_a, leases_b = Leases(a, ttl=30), Leases(b)
    await leases_a.acquire("kept")
    await leases_a.acquire("lost")
    # Both about to expire (a's heartbeats were late): a heartbeat renews them by ttl from now.
    await query(a.dsn, "UPDATE baf_leases SET expires_at = now() + interval '1 second'")
    assert await leases_a.heartbeat() == []
    left = await query(a.dsn, "SELECT extract(epoch FROM expires_at - now()) FROM baf_leases")
    assert all(row[0] > 20 for row in left), left
    assert await leases_b.acquire("kept") is None  # renewed: still a's
    await query(a.dsn, "UPDATE baf_leases SET expires_at = now() - interval '1 second' WHERE session_id = 'lost'")
    assert await leases_b.acquire("lost") == 2
    assert await leases_a.heartbeat() == ["lost"]
    assert a.fenced() == {"kept": 1}


async def test_a_released_lease_is_taken_with_a_higher_epoch(worker_logs: tuple[PostgresLog, PostgresLog]) -> None:
    a, b = worker_logs
    await Leases(a).acquire("s")
    await Leases(a).release("s")
    with pytest.raises(LeaseLostError):
        await a.append([rec("s", 1)])
    assert await Leases(b).acquire("s") == 2  # epochs only grow: an old owner's epoch never comes back
    assert await Leases(a).acquire("s") is None


async def test_a_release_stops_appends_at_once_and_announces_mail_left_waiting(
    worker_logs: tuple[PostgresLog, PostgresLog],
) -> None:
    a, b = worker_logs
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    stop = await Inbox(b).listen(lambda channel, session: heard.put_nowait((channel, session)), (b.channels.inbox,))
    try:
        leases = Leases(a)
        for session_id in ("with-mail", "without"):
            await leases.acquire(session_id)
        await Inbox(b).post("with-mail", {"text": "posted while a held it"})
        assert await asyncio.wait_for(heard.get(), 5) == (b.channels.inbox, "with-mail")  # the post's own
        releases = [leases.release("with-mail"), leases.release("without")]
        assert a.fenced() == {}  # before the releases have run: a message for them is claimed anew
        await asyncio.gather(*releases)  # asked together: one statement
        assert await asyncio.wait_for(heard.get(), 5) == (b.channels.inbox, "with-mail")  # told again: it is free
        await asyncio.sleep(0.2)
        assert heard.empty()  # nothing waits for the other one
        assert await Leases(b).acquire("with-mail") == 2 and await Leases(b).acquire("without") == 2
    finally:
        await stop()


async def test_a_heartbeat_keeps_a_lease_taken_again_with_a_newer_epoch_while_it_ran(
    worker_logs: tuple[PostgresLog, PostgresLog],
) -> None:
    a, b = worker_logs
    leases_a = Leases(a, ttl=30)
    await leases_a.register()
    await leases_a.acquire("s")
    await query(a.dsn, "UPDATE baf_leases SET expires_at = now() - interval '1 second' WHERE session_id = 's'")
    assert await Leases(b).acquire("s") == 2  # taken over ...
    # a's heartbeat waits for its connection (a's acquire waits for the heartbeat's worker row lock: held
    # back before it), having read its lease (epoch 1) ...
    gate = asyncio.Event()
    connect = a.connection

    @contextlib.asynccontextmanager
    async def held_back() -> AsyncIterator[asyncpg.Connection]:
        await gate.wait()
        async with connect() as connection:
            yield connection

    a.connection = held_back  # type: ignore[method-assign]
    heartbeat = asyncio.ensure_future(leases_a.heartbeat())
    await asyncio.sleep(0.1)
    a.connection = connect  # type: ignore[method-assign]
    await query(a.dsn, "UPDATE baf_leases SET expires_at = now() - interval '1 second' WHERE session_id = 's'")
    assert await leases_a.acquire("s") == 3  # ... and a takes it again before the heartbeat's answer
    gate.set()
    assert await heartbeat == []  # epoch 1 was lost, but a holds the session again: not dropped
    assert a.fenced() == {"s": 3}


async def test_a_worker_paused_past_its_ttl_whose_id_was_taken_meanwhile_is_fenced_off(postgres_dsn: str) -> None:
    """Two processes of one worker id: the first paused (SIGSTOP, GC) longer than ``ttl``, the second started
    with its id meanwhile (the id's holder looked dead), then the first resumes. The stale one never writes
    again, even to a session whose lease it took after its last heartbeat (still live when the other came)."""
    async with PostgresLog(postgres_dsn, worker_id="w") as paused, PostgresLog(postgres_dsn, worker_id="w") as twin:
        leases_paused = Leases(paused, ttl=10)
        await leases_paused.register()
        assert await leases_paused.acquire("early") == 1
        await paused.append([rec("early", 1, "before the pause")])
        # It pauses: its last heartbeat grows older than ttl, while the lease it took on "late" after that
        # heartbeat is still live (each lease runs ttl from when it was taken or renewed).
        await query(postgres_dsn, "UPDATE baf_workers SET heartbeat_at = now() - interval '11 seconds'")
        await query(postgres_dsn, "UPDATE baf_leases SET expires_at = now() - interval '1 second'")
        assert await leases_paused.acquire("late") == 1
        leases_twin = Leases(twin, ttl=10)
        await leases_twin.register()  # the id's holder looks dead: taken over
        # Its sessions are the twin's now, at new epochs: the paused process's are stale.
        assert (await leases_twin.acquire("late") or 0) > 1
        assert (await leases_twin.acquire("early") or 0) > 1
        await twin.append([rec("late", 1, "the twin's")])
        # The paused process resumes, still believing it holds both sessions: the database refuses its
        # append (the epoch moved on), it takes nothing more under the id, and its heartbeat, refused too,
        # says it lost every session.
        with pytest.raises(LeaseLostError, match="lost its lease"):
            await paused.append([rec("late", 2, "after the pause")])
        assert await leases_paused.acquire("new") is None
        assert not leases_paused.replaced
        assert await leases_paused.heartbeat() == ["early"] and leases_paused.replaced
        assert paused.fenced() == {}
        with pytest.raises(LeaseLostError):
            await paused.append([rec("early", 2, "after the pause")])
        assert await leases_paused.acquire("late") is None
        assert (await leases_twin.owner_of("new")) is None
        await leases_paused.release_all(paused.fenced())  # its stop leaves the twin's registration alone
        assert [row[0] for row in await query(postgres_dsn, "SELECT worker_id FROM baf_workers")] == ["w"]
        assert await leases_twin.heartbeat() == [] and sorted(twin.fenced()) == ["early", "late"]
        assert [r.data["text"] for r in await twin.read("late")] == ["the twin's"]
        assert [r.data["text"] for r in await twin.read("early")] == ["before the pause"]
        await twin.append([rec("early", 2, "the twin goes on")])
        # The twin stops cleanly (its row gone): the replaced process stays out, writing no row again.
        await leases_twin.release_all(twin.fenced())
        assert await leases_paused.heartbeat() == [] and leases_paused.replaced
        assert await query(postgres_dsn, "SELECT worker_id FROM baf_workers") == []
        assert await leases_paused.acquire("early") is None and await leases_paused.acquire("fresh") is None
        assert paused.fenced() == {} and (await leases_paused.owner_of("fresh")) is None


async def test_a_lease_a_replaced_incarnation_takes_while_its_id_is_taken_over_is_fenced(postgres_dsn: str) -> None:
    """A paused process of an id takes a lease on a new session (no lease row yet) while a new process
    registers the id: its lease, committed after the registration, is still fenced (its epoch bumped), so
    the two never hold one session at one epoch. Its transaction is held open to interleave the two."""
    async with PostgresLog(postgres_dsn, worker_id="w") as paused, PostgresLog(postgres_dsn, worker_id="w") as twin:
        leases_paused = Leases(paused, ttl=10)
        await leases_paused.register()
        await query(postgres_dsn, "UPDATE baf_workers SET heartbeat_at = now() - interval '11 seconds'")
        taking = await asyncpg.connect(postgres_dsn)  # the paused process's acquire, its commit held back
        try:
            await taking.execute("BEGIN")
            epoch = await taking.fetchval(
                postgres_leases._ACQUIRE,
                "new",
                "w",
                10.0,
                leases_paused._incarnation,
            )
            assert epoch == 1
            leases_twin = Leases(twin, ttl=10)
            registering = asyncio.ensure_future(leases_twin.register())
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            async with asyncio.timeout(30):  # the registration waits for the lease's commit (or is done)
                while True:  # the server's state, read again: no event to wait on
                    if registering.done() or await taking.fetchval(waiting):
                        break
                    await asyncio.sleep(0.01)
            await taking.execute("COMMIT")
            await registering
        finally:
            await taking.close()
        assert (await leases_twin.acquire("new") or 0) > 1  # a new epoch: the paused one's is stale
        paused.fence("new", 1)
        with pytest.raises(LeaseLostError):
            await paused.append([rec("new", 1, "after the pause")])


# -- the inbox --------------------------------------------------------------------------------------------


async def test_inbox_messages_move_into_the_log_exactly_once_in_order(
    worker_logs: tuple[PostgresLog, PostgresLog],
) -> None:
    a, b = worker_logs
    inbox = Inbox(b)  # the client is connected to worker b; a owns the session
    await Leases(a).acquire("s")
    ids = [await inbox.post("s", {"text": f"m{i}"}) for i in range(3)]
    waiting = await Inbox(a).pending("s")
    assert [m.id for m in waiting] == ids and [m.payload for m in waiting] == [{"text": f"m{i}"} for i in range(3)]
    for seq, message in enumerate(waiting, start=1):
        assert message.payload is not None
        await a.append_consuming([rec("s", seq, message.payload["text"])], "s", [message.id])
    assert await Inbox(a).pending("s") == []
    with pytest.raises(LogError, match="consumed already"):  # a second consumer writes nothing
        await a.append_consuming([rec("s", 4, "again")], "s", [ids[0]])
    assert [r.data["text"] for r in await a.read("s")] == ["m0", "m1", "m2"]


async def test_posts_made_together_share_a_statement_keep_their_order_and_a_bad_one_fails_alone(
    postgres_dsn: str,
) -> None:
    async with PostgresLog(postgres_dsn) as log:
        inbox = Inbox(log)
        statements: list[int] = []
        run = inbox._post_many

        async def counted(posts: list[object]) -> object:
            statements.append(len(posts))
            return await run(posts)  # type: ignore[arg-type]

        inbox._posts._run = counted  # type: ignore[assignment]
        sessions = [f"s{i % 5}" for i in range(30)]  # six messages each for five sessions, interleaved
        calls = [inbox.post(name, {"n": n}) for n, name in enumerate(sessions)]
        results = await asyncio.gather(*calls[:10], inbox.post("bad\x00", {}), *calls[10:], return_exceptions=True)
        assert statements == [30]  # one statement for the thirty good posts
        bad = results.pop(10)
        assert isinstance(bad, ValueError) and "cannot be stored" in str(bad)
        assert all(isinstance(row_id, int) for row_id in results) and sorted(results) == results  # type: ignore[type-var]
        for name in sorted(set(sessions)):
            waiting = await inbox.pending(name)
            expected = [n for n, other in enumerate(sessions) if other == name]
            assert [m.payload for m in waiting] == [{"n": n} for n in expected]  # in the order posted
            assert [m.id for m in waiting] == [results[n] for n in expected]  # each post got its own row's id
        cancelled = asyncio.ensure_future(inbox.post("gone", {}))
        await asyncio.sleep(0)  # queued behind nothing: cancelled before its statement runs
        cancelled.cancel()
        assert await inbox.post("kept", {}) > results[-1]  # type: ignore[operator]
        assert [m.session_id for m in await inbox.pending("gone")] == []  # a cancelled post is not written


async def test_a_non_owner_cannot_consume_the_inbox(worker_logs: tuple[PostgresLog, PostgresLog]) -> None:
    a, b = worker_logs
    await Leases(a).acquire("s")
    row_id = await Inbox(b).post("s", {"text": "for a"})
    with pytest.raises(LeaseLostError):
        await b.append_consuming([rec("s", 1)], "s", [row_id])
    assert [m.id for m in await Inbox(a).pending("s")] == [row_id]


async def test_a_malformed_inbox_row_is_reported_not_fatal(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn) as log:
        await Inbox(log).post("s", {"text": "fine"})
        await query(postgres_dsn, "INSERT INTO baf_inbox (session_id, payload) VALUES ('s', 'not json'), ('s', '[1]')")
        fine, broken, listed = await Inbox(log).pending("s")
        assert fine.payload == {"text": "fine"} and fine.error is None
        assert broken.payload is None and broken.error is not None and "not JSON" in broken.error
        assert listed.payload is None and listed.error is not None and "list, not a JSON object" in listed.error


async def test_unowned_sessions_with_mail_are_found_and_notified(
    worker_logs: tuple[PostgresLog, PostgresLog],
) -> None:
    a, b = worker_logs
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    stop = await Inbox(a).listen(lambda channel, session: heard.put_nowait((channel, session)))
    try:
        await Leases(b).acquire("owned")
        await Inbox(b).post("owned", {"text": "x"})
        await Inbox(b).post("orphan", {"text": "y"})
        assert await asyncio.wait_for(heard.get(), 5) == (b.channels.inbox, "owned")
        assert await asyncio.wait_for(heard.get(), 5) == (b.channels.inbox, "orphan")
        assert await Leases(a).unowned_with_mail() == ["orphan"]
    finally:
        await stop()


# -- the server goes away ---------------------------------------------------------------------------------


def _pg_bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return found[-1].parent if found else None


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=120, check=False)


async def _until_a_statement_waits_for_a_lock(dsn: str, within: float = 30.0) -> None:
    """Return once a statement of the server waits for a lock; read from the server's own activity view."""
    connection = await asyncpg.connect(dsn)
    try:
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        async with asyncio.timeout(within):
            while True:  # the server's state, read again: no event to wait on
                if await connection.fetchval(waiting):
                    break
                await asyncio.sleep(0.01)
        # The first append's commit record to disk (the test cluster commits asynchronously): an immediate
        # restart replays the WAL, and the log is read back after it.
        await connection.execute("CHECKPOINT")
    finally:
        await connection.close()


@pytest.mark.slow
async def test_a_server_restart_fails_unacknowledged_appends_loudly_then_recovers() -> None:
    bindir = _pg_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed")
        pytest.skip("PostgreSQL is not installed")
    folder = tempfile.mkdtemp(prefix="baf-pg-restart-")
    cluster = os.path.join(folder, "pg")
    started = await asyncio.to_thread(_run, "bash", str(SCRIPT), "start", cluster)
    assert started.returncode == 0, started.stderr
    dsn = started.stdout.strip()
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    pg_ctl = [*as_owner, str(bindir / "pg_ctl"), "-D", f"{cluster}/data", "-l", f"{cluster}/server.log", "-w"]
    try:
        async with PostgresLog(dsn) as log:
            await log.append([rec("s", 1)])
            # Hold the append in flight: another transaction inserts the same key and does not commit, so
            # the append's statement waits for it ... when the server restarts.
            blocker = await asyncpg.connect(dsn)
            await blocker.execute("BEGIN; INSERT INTO baf_records VALUES ('s', 2, 'note', '{}', 1.5, 1)")
            in_flight = asyncio.create_task(log.append([rec("s", 2)]))
            await _until_a_statement_waits_for_a_lock(dsn)  # sent, and stuck behind the blocker
            # Immediate mode: every backend quits where it is and the blocker's lock dies with the server. In
            # fast mode the blocker may be shut down first, and the append's statement, no longer waiting,
            # commits before its own backend is: a restart the append survives, acknowledged.
            restarted = await asyncio.to_thread(_run, *pg_ctl, "-m", "immediate", "restart")
            assert restarted.returncode == 0, restarted.stderr
            with pytest.raises(LogError, match="not acknowledged"):
                await in_flight  # the writer's connection died with the server, mid-statement
            blocker.terminate()
            await log.append([rec("s", 2)])  # the next group reconnects
            assert [r.seq for r in await log.read("s")] == [1, 2]
    finally:
        await asyncio.to_thread(_run, "bash", str(SCRIPT), "stop", cluster)
        shutil.rmtree(folder, ignore_errors=True)
