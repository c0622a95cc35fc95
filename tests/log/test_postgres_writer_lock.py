"""Who may write a PostgreSQL log: workers together, or one plain process alone. A second plain writer,
a plain writer next to workers and a worker next to a plain writer are refused at start, naming what holds
the log; readers never are; the lock goes with the store (closed, killed) and with its writer connection.
Against a real PostgreSQL server (see tests/pg_cluster.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest
from baf_test_helpers import baf
from pg_cluster import drop_schema, fresh_schema
from serve.helpers import eventually, fresh_agent

from baf.core.agent import Agent
from baf.errors import LogError, LogInUseError, LogStorageError
from baf.log import Record
from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases
from baf.log.postgres_lock import take_writer_lock
from baf.serve import Worker


def rec(session_id: str, seq: int, text: str = "hi") -> Record:
    return Record(session_id, seq, "note", {"text": text}, 1.5, 1)


async def lock_holders(dsn: str) -> list[tuple[int, str]]:
    """The server pids holding the writer lock of the log ``dsn`` reaches, with their lock modes."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT pid, mode FROM pg_locks WHERE locktype = 'advisory' AND classid = 'baf_records'::regclass::oid "
            "AND objsubid = 2 AND granted ORDER BY pid"
        )
    finally:
        await connection.close()
    return [(row[0], row[1]) for row in rows]


@pytest.fixture
async def plain(postgres_dsn: str) -> AsyncIterator[PostgresLog]:
    """A plain process's store (no worker id), open for writing."""
    log = PostgresLog(postgres_dsn)
    await log.start()
    try:
        yield log
    finally:
        await log.close()


async def test_a_second_plain_writer_is_refused_naming_the_first(postgres_dsn: str, plain: PostgresLog) -> None:
    await plain.append([rec("s", 1)])
    second = PostgresLog(postgres_dsn)
    with pytest.raises(LogInUseError, match="already open for writing by another process") as refused:
        await second.start()
    assert f"baf pid {os.getpid()} on " in str(refused.value)  # the holder, named
    assert refused.value.holder is not None and "server pid" in refused.value.holder
    with pytest.raises(LogInUseError):  # an append opens the store too: refused the same way
        await second.append([rec("s", 2)])
    assert [mode for _, mode in await lock_holders(postgres_dsn)] == ["ExclusiveLock"]  # the refused one holds none
    await plain.append([rec("s", 2)])  # the first goes on
    assert [r.seq for r in await plain.read("s")] == [1, 2]


async def test_the_lock_is_released_on_close_and_a_new_writer_opens(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn) as first:
        await first.append([rec("s", 1)])
        assert [mode for _, mode in await lock_holders(postgres_dsn)] == ["ExclusiveLock"]
    assert await lock_holders(postgres_dsn) == []
    async with PostgresLog(postgres_dsn) as second:
        await second.append([rec("s", 2)])
    async with PostgresLog(postgres_dsn, worker_id="w") as worker:  # and workers after it
        assert [mode for _, mode in await lock_holders(postgres_dsn)] == ["ShareLock"]
        assert await worker.sessions() == ["s"]


async def test_read_only_opens_take_no_lock_and_are_never_refused(postgres_dsn: str, plain: PostgresLog) -> None:
    await plain.append([rec("s", 1)])
    async with PostgresLog(postgres_dsn, read_only=True) as reader:
        assert [r.seq for r in await reader.read("s")] == [1]
        assert len(await lock_holders(postgres_dsn)) == 1  # the writer's alone
    await plain.close()
    async with PostgresLog(postgres_dsn, worker_id="a"), PostgresLog(postgres_dsn, read_only=True) as reader:
        assert await reader.sessions() == ["s"]


async def test_a_plain_writer_is_refused_while_workers_write_naming_them(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn, worker_id="host:1:aa"), PostgresLog(postgres_dsn, worker_id="host:2:bb"):
        assert [mode for _, mode in await lock_holders(postgres_dsn)] == ["ShareLock", "ShareLock"]
        with pytest.raises(LogInUseError, match="baf serve workers write this PostgreSQL log") as refused:
            await PostgresLog(postgres_dsn).start()
        assert "baf worker host:1:aa" in str(refused.value) and "baf worker host:2:bb" in str(refused.value)
        assert "baf serve" in str(refused.value) and "read-only" in str(refused.value)  # what to do instead
    async with PostgresLog(postgres_dsn):  # once they stopped, it opens
        pass


async def test_a_worker_is_refused_while_a_plain_process_writes(postgres_dsn: str, plain: PostgresLog) -> None:
    with pytest.raises(LogInUseError, match="written by a process that is not a worker") as refused:
        await PostgresLog(postgres_dsn, worker_id="w").start()
    assert f"baf pid {os.getpid()} on " in str(refused.value)
    worker = Worker(fresh_agent(), postgres_dsn, worker_id="late")
    with pytest.raises(LogInUseError):
        await worker.start()
    connection = await asyncpg.connect(postgres_dsn)
    try:  # refused before it registered or opened anything
        assert await connection.fetch("SELECT worker_id FROM baf_workers") == []
        assert (
            # This worker's connections only: other tests' workers may share the server.
            await connection.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'baf worker late'"
            )
            == 0
        )
    finally:
        await connection.close()


async def test_an_agent_run_twice_on_one_postgres_log_is_refused(postgres_dsn: str) -> None:
    # What `baf run agent.py` twice (or agent.run() in two processes) does with log="postgresql://...".
    first, second = Agent("a", log=postgres_dsn), Agent("a", log=postgres_dsn)
    for agent in (first, second):
        agent.new_state("start", initial=True)
    async with first:
        with pytest.raises(LogInUseError):
            async with second:
                pass


async def test_the_same_log_is_its_tables_not_its_url(postgres_dsn: str) -> None:
    # Another schema of the database is another log; another URL that finds the same tables is the same log.
    name, elsewhere = await fresh_schema(postgres_dsn)
    try:
        async with PostgresLog(postgres_dsn) as here, PostgresLog(elsewhere) as there:
            await here.append([rec("s", 1)])
            await there.append([rec("s", 1)])
            parts = urlsplit(postgres_dsn)
            query = dict(parse_qsl(parts.query))
            query["search_path"] = f"{query['search_path']},{name}"  # finds this log's tables first
            same_tables = urlunsplit(parts._replace(query=urlencode(query)))
            with pytest.raises(LogInUseError):
                await PostgresLog(same_tables).start()
    finally:
        await drop_schema(postgres_dsn, name)


async def cut_writer(dsn: str, mode: str) -> None:
    """Terminate the connection holding the writer lock in ``mode`` (the one store of the test that does)."""
    [pid] = [pid for pid, held in await lock_holders(dsn) if held == mode]
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", pid)  # its writer connection, and the lock
    finally:
        await admin.close()
    await eventually(lambda: _holders_are(dsn, 0), "the cut connection's lock was released")


async def test_a_writer_whose_connection_dropped_takes_the_lock_again_when_nobody_else_took_it(
    postgres_dsn: str, plain: PostgresLog
) -> None:
    await plain.append([rec("s", 1)])
    await cut_writer(postgres_dsn, "ExclusiveLock")  # as a server restart or a network cut would
    await plain.append([rec("s", 2)])  # reconnects, takes the lock again, writes
    assert [r.seq for r in await plain.read("s")] == [1, 2]
    assert [mode for _, mode in await lock_holders(postgres_dsn)] == ["ExclusiveLock"]


async def test_a_writer_whose_log_another_process_wrote_while_its_connection_was_down_writes_no_more(
    postgres_dsn: str, plain: PostgresLog
) -> None:
    await plain.append([rec("s", 1)])
    await cut_writer(postgres_dsn, "ExclusiveLock")
    async with PostgresLog(postgres_dsn) as second:  # took the lock meanwhile, and wrote what the first holds
        await second.append([rec("s", 2, "second's")])
        with pytest.raises(LogInUseError, match="already open for writing"):
            await plain.append([rec("s", 2, "first's")])
    # The lock is free again, but what the first process holds in memory may be out of date: it stays out.
    for _ in range(2):
        with pytest.raises(LogInUseError, match="while this process's connection to it was lost"):
            await plain.append([rec("s", 3, "first's")])
    assert await lock_holders(postgres_dsn) == []  # and it holds no lock
    async with PostgresLog(postgres_dsn, read_only=True) as reader:
        assert [r.data["text"] for r in await reader.read("s")] == ["hi", "second's"]
    async with PostgresLog(postgres_dsn) as third:  # a new process (or the first, restarted) opens it
        await third.append([rec("s", 3, "third's")])


async def waiting_for_a_lock(dsn: str) -> bool:
    """Whether a connection of the test's server waits for a lock (a writer deciding behind another)."""
    connection = await asyncpg.connect(dsn)
    try:
        return bool(await connection.fetchval("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"))
    finally:
        await connection.close()


async def test_a_writer_overtaken_while_it_waited_to_take_the_lock_again_writes_no_more(
    postgres_dsn: str, plain: PostgresLog
) -> None:
    await plain.append([rec("s", 1)])
    await cut_writer(postgres_dsn, "ExclusiveLock")
    other = await asyncpg.connect(postgres_dsn)
    try:
        # Another store deciding: it bumped the generation and holds the row until it commits. The first
        # store reconnects meanwhile and waits for the row; what it reads once it has it is the other's bump.
        deciding = other.transaction()
        await deciding.start()
        await other.execute("UPDATE baf_meta SET value = (value::bigint + 1)::text WHERE key = 'writer_generation'")
        append = asyncio.create_task(plain.append([rec("s", 2, "first's")]))
        await eventually(lambda: waiting_for_a_lock(postgres_dsn), "the first store waits for the decision's row")
        await deciding.commit()
        with pytest.raises(LogInUseError, match="while this process's connection to it was lost"):
            await append
    finally:
        await other.close()
    async with PostgresLog(postgres_dsn, read_only=True) as reader:
        assert [r.seq for r in await reader.read("s")] == [1]


async def test_stores_deciding_at_once_take_distinct_generations_in_order(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn):
        pass  # the tables
    connections = [await asyncpg.connect(postgres_dsn) for _ in range(3)]
    holder = await asyncpg.connect(postgres_dsn)
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM baf_meta WHERE key = 'writer_generation' FOR UPDATE")
            start = int(await holder.fetchval("SELECT value FROM baf_meta WHERE key = 'writer_generation'"))
            # Three stores taking the lock again at once, all last at this generation (shared marks, so that
            # none is refused for another's): the first goes on, the two after it see its bump.
            taking = [asyncio.create_task(take_and_close(c, f"w{i}", start)) for i, c in enumerate(connections)]
            await eventually(lambda: _lock_waiters(postgres_dsn, 3), "all three wait for the row")
        taken = await asyncio.gather(*taking)
    finally:
        for connection in (*connections, holder):
            await connection.close()
    assert sorted(taken, key=lambda g: g or 0) == [None, None, start + 1]


async def take_and_close(connection: asyncpg.Connection, worker_id: str, since: int) -> int | None:
    """``take_writer_lock`` as a store's writer takes it: the connection is closed after a refusal."""
    try:
        taken = await take_writer_lock(connection, "log", worker_id, since, wait=10)
    except BaseException:
        connection.terminate()
        raise
    if taken is None:
        connection.terminate()
    return taken


async def _lock_waiters(dsn: str, count: int) -> bool:
    connection = await asyncpg.connect(dsn)
    try:
        return (
            await connection.fetchval("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") == count
        )
    finally:
        await connection.close()


async def test_a_transaction_left_open_on_baf_meta_fails_start_and_appends_in_time_naming_it(
    postgres_dsn: str,
) -> None:
    async with PostgresLog(postgres_dsn) as log:
        await log.append([rec("s", 1)])
    forgotten = await asyncpg.connect(postgres_dsn, server_settings={"application_name": "psql"})
    try:
        pid = await forgotten.fetchval("SELECT pg_backend_pid()")
        # A session at a prompt, in a transaction: the writer lock's row, then the schema step's table.
        for statement in (
            "SELECT 1 FROM baf_meta WHERE key = 'writer_generation' FOR UPDATE",
            "LOCK TABLE baf_meta IN ROW EXCLUSIVE MODE",
        ):
            async with forgotten.transaction():
                await forgotten.execute(statement)
                for worker_id in (None, "w"):
                    store = PostgresLog(postgres_dsn, worker_id=worker_id, connect_timeout=0.5)
                    with pytest.raises(
                        LogStorageError, match=rf"psql \(server pid {pid}\b[^)]*\) held a lock on baf_meta"
                    ):
                        await asyncio.wait_for(store.start(), 30)
        # A writer whose connection dropped meets it as it takes the lock again: its appends fail in time.
        async with PostgresLog(postgres_dsn, connect_timeout=0.5) as log:
            await cut_writer(postgres_dsn, "ExclusiveLock")
            async with forgotten.transaction():
                await forgotten.execute("SELECT 1 FROM baf_meta WHERE key = 'writer_generation' FOR UPDATE")
                with pytest.raises(LogError, match=rf"psql \(server pid {pid}\b[^)]*\) held a lock on baf_meta"):
                    await asyncio.wait_for(log.append([rec("s", 2)]), 30)
            await log.append([rec("s", 2)])  # the session ended its transaction: nobody took the lock meanwhile
    finally:
        await forgotten.close()


async def test_a_workers_store_whose_connection_dropped_goes_on_whoever_took_the_lock_meanwhile(
    postgres_dsn: str,
) -> None:
    # Workers are fenced by their leases: a worker that took the lock in between changes nothing for another.
    async with PostgresLog(postgres_dsn, worker_id="a") as a:
        assert await Leases(a).acquire("s") is not None
        await a.append([rec("s", 1)])
        await cut_writer(postgres_dsn, "ShareLock")
        async with PostgresLog(postgres_dsn, worker_id="b"):
            await a.append([rec("s", 2)])
        assert [r.seq for r in await a.read("s")] == [1, 2]


async def _holders_are(dsn: str, count: int) -> bool:
    return len(await lock_holders(dsn)) == count


# A plain process over the log: appends a record, says so, and writes until stdin closes.
HOLDER = """
import asyncio, sys
from baf.log import Record
from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases
from baf.log.postgres_lock import take_writer_lock

async def main():
    async with PostgresLog(sys.argv[1]) as log:
        await log.append([Record("held", 1, "note", {"text": "hi"}, 1.5, 1)])
        print("HOLDING", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def start_holder(dsn: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "HOLDING\n"
    return holder


@pytest.mark.slow
async def test_another_process_is_refused_naming_it_the_reading_commands_work_and_kill_9_frees_the_log(
    postgres_dsn: str, tmp_path: Path
) -> None:
    holder = await asyncio.to_thread(start_holder, postgres_dsn)
    try:
        with pytest.raises(LogInUseError) as refused:
            await PostgresLog(postgres_dsn).start()
        assert f"baf pid {holder.pid} on " in str(refused.value)
        listed = await asyncio.to_thread(baf, "sessions", postgres_dsn, cwd=tmp_path)  # reading is never refused
        assert listed.returncode == 0 and "held" in listed.stdout, listed.stderr
        holder.send_signal(signal.SIGKILL)
        await asyncio.to_thread(holder.wait, 20)
        await eventually(lambda: _holders_are(postgres_dsn, 0), "the killed process's lock was released")
        async with PostgresLog(postgres_dsn) as log:
            await log.append([rec("held", 2)])
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(20)
        for stream in (holder.stdin, holder.stdout):
            if stream is not None:
                stream.close()
