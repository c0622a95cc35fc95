"""What another role of the database can do to a PostgreSQL log it has no rights on: a role that may connect
(as every role may, by default) and use the log's schema, but was granted nothing on baf's tables. It cannot
learn the notification channels, hear a session id, wake or flood a worker, nor keep baf from opening the
log for writing (the writer lock, the schema lock). Against a real PostgreSQL server (see tests/pg_cluster.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
from baf_test_helpers import baf
from pg_cluster import drop_schema, fresh_schema, role_through_set_role
from serve.helpers import eventually

from baf.errors import LogClosedError, LogError, LogInUseError
from baf.log import Record
from baf.log.postgres import SCHEMA_VERSION, PostgresLog
from baf.log.postgres_channels import CHANNELS_SECRET
from baf.log.postgres_inbox import Inbox
from baf.log.postgres_leases import Leases
from baf.log.postgres_lock import LEGACY_WRITER_LOCK

# The fixed names and keys baf used before schema version 3: what an intruder would try first.
OLD_CHANNELS = ("baf_inbox", "baf_records", "baf_workers")
OLD_SCHEMA_LOCK = 0x62AF_0001


def rec(session_id: str, seq: int) -> Record:
    return Record(session_id, seq, "note", {"text": "hi"}, 1.5, 1)


@pytest.fixture
def intruder(other_role_dsn: str) -> str:
    """Another role that may connect and use the log's schema, with no grant on baf's tables."""
    return other_role_dsn


async def test_another_role_cannot_read_the_channel_secret_nor_see_the_names_in_use(
    postgres_dsn: str, intruder: str
) -> None:
    async with PostgresLog(postgres_dsn, worker_id="w") as log:
        channels = log.channels
        stop = await Inbox(log).listen(lambda channel, session: None, (channels.inbox, channels.records))
        other = await asyncpg.connect(intruder)
        try:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await other.fetchval("SELECT value FROM baf_meta WHERE key = $1", CHANNELS_SECRET)
            await Leases(log).acquire("s")
            await log.append([rec("s", 1)])
            # What every role can read about the others' connections: their queries are hidden.
            seen = await other.fetch("SELECT query FROM pg_stat_activity WHERE usename <> current_user")
            assert seen and {row[0] for row in seen} <= {"<insufficient privilege>", None}
            assert await other.fetch("SELECT pg_listening_channels()") == []
        finally:
            await other.close()
            await stop()
    for name in (channels.inbox, channels.records, channels.workers):
        assert name.startswith("baf_") and len(name.encode()) <= 63 and name not in OLD_CHANNELS


async def test_another_role_reads_no_password_in_the_name_of_a_writing_connection(
    postgres_dsn: str, intruder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command line names the writing process in pg_stat_activity, which every role reads: a URL typed
    # on it (baf replay URL --fork-at writes) is shown without its password.
    monkeypatch.setattr(sys, "argv", ["baf", "replay", "postgresql://u:hunter2-pw@h/db", "s", "--fork-at", "3"])
    async with PostgresLog(postgres_dsn):
        other = await asyncpg.connect(intruder)
        try:
            names = [row[0] for row in await other.fetch("SELECT application_name FROM pg_stat_activity")]
        finally:
            await other.close()
    [shown] = [name for name in names if name.startswith("baf pid ")]
    assert "hunter2" not in shown and "baf replay postgresql://u:***@h/db s" in shown


async def test_another_role_hears_no_session_id_on_any_name_it_can_guess(postgres_dsn: str, intruder: str) -> None:
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    other = await asyncpg.connect(intruder)
    try:
        for name in OLD_CHANNELS:
            await other.add_listener(name, lambda _c, _pid, channel, payload: heard.put_nowait((channel, payload)))
        async with PostgresLog(postgres_dsn, worker_id="w") as log:
            await Leases(log).acquire("secret-session")
            await log.append([rec("secret-session", 1)])  # notifies the records channel
            await Inbox(log).post("secret-session", {"text": "hello"})  # notifies the inbox channel
            await Leases(log).register()  # notifies the workers channel
            await other.execute("NOTIFY baf_records, 'own'")  # sent after baf's: heard once those would be
            assert await asyncio.wait_for(heard.get(), 5) == ("baf_records", "own")
    finally:
        await other.close()
    assert heard.empty()


async def test_another_role_cannot_wake_or_flood_a_worker(postgres_dsn: str, intruder: str) -> None:
    async with PostgresLog(postgres_dsn, worker_id="w") as log:
        heard: list[tuple[str, str]] = []
        channels = (log.channels.inbox, log.channels.records, log.channels.workers)
        stop = await Inbox(log).listen(lambda channel, session: heard.append((channel, session)), channels)
        other = await asyncpg.connect(intruder)
        try:  # a flood on every name it can think of: the old fixed ones, and guesses in the new form
            guesses = [*OLD_CHANNELS, *(f"baf_{kind}_{'0' * 32}" for kind in ("inbox", "records", "workers"))]
            await other.execute(
                "SELECT pg_notify(c, 'flood-' || i) FROM unnest($1::text[]) AS c, generate_series(1, 5000) AS i",
                guesses,
            )
            await Inbox(log).post("real", {"text": "hello"})  # delivered after the flood, in commit order
            await eventually(lambda: heard != [], "the worker heard the real message")
            await asyncio.sleep(0.2)
        finally:
            await other.close()
            await stop()
    assert heard == [(log.channels.inbox, "real")]


async def test_another_role_cannot_keep_baf_from_opening_the_log_for_writing(postgres_dsn: str, intruder: str) -> None:
    async with PostgresLog(postgres_dsn) as log:
        await log.append([rec("s", 1)])
    other = await asyncpg.connect(intruder)
    waiting: asyncio.Task[object] | None = None
    try:
        # The keys baf took before schema version 3, all held: the schema lock and the writer lock.
        oid = await other.fetchval("SELECT 'baf_records'::regclass::oid::int4")
        await other.execute("SELECT pg_advisory_lock($1::bigint)", OLD_SCHEMA_LOCK)
        await other.execute("SELECT pg_advisory_lock($1, $2)", LEGACY_WRITER_LOCK, oid)
        async with PostgresLog(postgres_dsn) as plain:  # neither waits nor is refused
            await plain.append([rec("s", 2)])
            # The mark of the writing store is in pg_locks, which every role reads: held too, by the intruder,
            # and an exclusive request queued behind it (a shared one drawn on it would be refused then).
            (mark,) = await other.fetch(
                "SELECT classid::bigint, objid::bigint, mode FROM pg_locks "
                "WHERE locktype = 'advisory' AND classid = 'baf_records'::regclass::oid AND objsubid = 2 AND granted"
            )
            assert mark[2] == "ExclusiveLock"
            keys = [key - 2**32 if key >= 2**31 else key for key in mark[:2]]  # pg_locks shows int4 keys as oids
            waiting = asyncio.create_task(other.execute("SELECT pg_advisory_lock($1, $2)", *keys))
            with pytest.raises(LogInUseError):  # baf's own exclusion still holds
                await PostgresLog(postgres_dsn).start()
        await asyncio.wait_for(waiting, 10)  # the intruder holds the plain store's mark now: it is not baf's
        await other.execute("SELECT pg_advisory_lock($1, 12345)", oid)  # and a mark of its own, exclusive
        async with PostgresLog(postgres_dsn, worker_id="a") as a, PostgresLog(postgres_dsn, worker_id="b") as b:
            for store, session in ((a, "x"), (b, "y")):
                await Leases(store).acquire(session)
                await store.append([rec(session, 1)])
        async with PostgresLog(postgres_dsn) as plain:
            await plain.append([rec("s", 3)])
        # What the locks are decided under is a row and a table of baf's: the intruder can lock neither.
        async with other.transaction():
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await other.execute("SELECT * FROM baf_meta WHERE key = 'writer_generation' FOR UPDATE")
        async with other.transaction():
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await other.execute("LOCK TABLE baf_meta IN SHARE ROW EXCLUSIVE MODE")
    finally:
        if waiting is not None and not waiting.done():
            waiting.cancel()
            with contextlib.suppress(BaseException):
                await waiting
        await other.close()
    async with PostgresLog(postgres_dsn, read_only=True) as reader:
        assert [r.seq for r in await reader.read("s")] == [1, 2, 3]


async def test_a_process_of_an_older_baf_still_writing_the_log_is_one_of_its_writers(postgres_dsn: str) -> None:
    # During an upgrade, a process started by a baf before schema version 3 holds the old fixed key.
    async with PostgresLog(postgres_dsn):
        pass
    old = await asyncpg.connect(postgres_dsn)  # baf's own role: it may write the log
    try:
        oid = await old.fetchval("SELECT 'baf_records'::regclass::oid::int4")
        await old.execute("SELECT pg_advisory_lock_shared($1, $2)", LEGACY_WRITER_LOCK, oid)  # an old worker
        with pytest.raises(LogInUseError, match="baf serve workers write this PostgreSQL log"):
            await PostgresLog(postgres_dsn).start()
        async with PostgresLog(postgres_dsn, worker_id="new"):  # workers write side by side
            pass
        await old.execute("SELECT pg_advisory_unlock_all()")
        await old.execute("SELECT pg_advisory_lock($1, $2)", LEGACY_WRITER_LOCK, oid)  # an old plain process
        with pytest.raises(LogInUseError, match="written by a process that is not a worker"):
            await PostgresLog(postgres_dsn, worker_id="new").start()
    finally:
        await old.close()


@pytest.fixture
async def through_set_role(postgres_dsn: str) -> AsyncIterator[str]:
    """A role that writes baf's tables only as their owner, through ``SET ROLE`` (``role_through_set_role``)."""
    async with role_through_set_role(postgres_dsn) as dsn:
        yield dsn


async def test_a_role_that_writes_the_log_through_set_role_is_one_of_its_writers(
    postgres_dsn: str, through_set_role: str
) -> None:
    async with PostgresLog(through_set_role) as first:
        await first.append([rec("s", 1)])
        async with first.connection() as connection:  # the login role may not write the tables itself
            assert not await connection.fetchval("SELECT has_table_privilege(session_user, 'baf_records', 'INSERT')")
        for dsn in (through_set_role, postgres_dsn):  # another process, of the same role or of another
            with pytest.raises(LogInUseError, match="already open for writing by another process"):
                await PostgresLog(dsn).start()
            with pytest.raises(LogInUseError, match="written by a process that is not a worker"):
                await PostgresLog(dsn, worker_id="w").start()
        await first.append([rec("s", 2)])
    async with PostgresLog(through_set_role, worker_id="a") as a, PostgresLog(postgres_dsn, worker_id="b"):
        await Leases(a).acquire("s")
        await a.append([rec("s", 3)])
        with pytest.raises(LogInUseError, match="baf serve workers write this PostgreSQL log"):
            await PostgresLog(through_set_role).start()


async def test_a_start_refused_for_an_older_baf_writing_the_log_leaves_the_log_as_it_was(postgres_dsn: str) -> None:
    await make_version_2_log(postgres_dsn)
    before = await meta(postgres_dsn)
    old = await asyncpg.connect(postgres_dsn)  # a plain process of the version-2 baf, writing the log
    try:
        oid = await old.fetchval("SELECT 'baf_records'::regclass::oid::int4")
        await old.execute("SELECT pg_advisory_lock($1, $2)", LEGACY_WRITER_LOCK, oid)
        for worker_id in ("new", None):
            with pytest.raises(LogInUseError, match=r"already open for writing|written by a process that is not"):
                await PostgresLog(postgres_dsn, worker_id=worker_id).start()
        # Still version 2, without a secret: that baf can still open it (and restart).
        assert await meta(postgres_dsn) == before
        assert await old.fetchval("SELECT to_regclass('baf_writer_marks')") is None
    finally:
        await old.close()
    async with PostgresLog(postgres_dsn, worker_id="new"):  # once it stopped, the log is upgraded
        pass
    assert (await meta(postgres_dsn))["schema_version"] == str(SCHEMA_VERSION)


async def test_a_process_of_baf_at_schema_version_3_still_writing_is_one_of_the_writers(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn):
        pass
    old = await asyncpg.connect(postgres_dsn)  # baf's own role; that baf recorded no row for its mark
    try:
        await old.execute("SELECT pg_advisory_lock('baf_records'::regclass::oid::int4, 4242)")
        with pytest.raises(LogInUseError, match="already open for writing by another process"):
            await PostgresLog(postgres_dsn).start()
    finally:
        await old.close()


async def test_stores_creating_the_tables_together_all_open(postgres_dsn: str) -> None:
    stores = [PostgresLog(postgres_dsn, worker_id=f"w{i}") for i in range(4)]
    try:
        await asyncio.gather(*(store.start() for store in stores))
        assert len({store.channels for store in stores}) == 1  # one secret, made once
    finally:
        for store in stores:
            await store.close()


async def make_version_2_log(dsn: str) -> None:
    """A log as a baf of schema version 2 left it: the tables of that version, no channel secret."""
    async with PostgresLog(dsn) as log:
        await log.append([rec("s", 1)])
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute("DROP TABLE baf_writer_marks")
        await connection.execute("DELETE FROM baf_meta WHERE key = $1", CHANNELS_SECRET)
        await connection.execute("UPDATE baf_meta SET value = '2' WHERE key = 'schema_version'")
    finally:
        await connection.close()


async def meta(dsn: str) -> dict[str, str]:
    connection = await asyncpg.connect(dsn)
    try:
        return {row[0]: row[1] for row in await connection.fetch("SELECT key, value FROM baf_meta")}
    finally:
        await connection.close()


async def test_a_version_2_log_is_read_as_it_is_and_upgraded_by_the_first_writer(
    postgres_dsn: str, tmp_path: Path
) -> None:
    await make_version_2_log(postgres_dsn)
    async with PostgresLog(postgres_dsn, read_only=True) as reader:
        assert [r.seq for r in await reader.read("s")] == [1]
        with pytest.raises(LogError, match="no channel secret yet"):
            reader.channels  # noqa: B018
    for command in (["sessions", postgres_dsn], ["log", postgres_dsn, "s"]):  # the reading commands
        shown = await asyncio.to_thread(baf, *command, cwd=tmp_path)
        assert shown.returncode == 0 and "s" in shown.stdout, shown.stderr
    stored = await meta(postgres_dsn)
    assert stored["schema_version"] == "2" and CHANNELS_SECRET not in stored  # reading made nothing
    async with PostgresLog(postgres_dsn, worker_id="w") as log:
        channels = log.channels
        await Leases(log).acquire("s")
        await log.append([rec("s", 2)])
    stored = await meta(postgres_dsn)
    assert stored["schema_version"] == str(SCHEMA_VERSION) and len(bytes.fromhex(stored[CHANNELS_SECRET])) == 32
    async with PostgresLog(postgres_dsn, read_only=True) as reader:
        assert reader.channels == channels  # the same names for every store, from now on


async def test_two_logs_in_one_database_have_channels_of_their_own(postgres_dsn: str) -> None:
    name, elsewhere = await fresh_schema(postgres_dsn)
    try:
        async with PostgresLog(postgres_dsn) as here, PostgresLog(elsewhere) as there:
            assert here.channels != there.channels
    finally:
        await drop_schema(postgres_dsn, name)


async def test_a_monitoring_role_sees_no_channel_name_in_an_idle_listeners_query(
    postgres_dsn: str, other_role_dsn: str
) -> None:
    # pg_monitor (through pg_read_all_stats) sees every connection's last statement; baf's listeners end theirs
    # with one that names nothing.
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'GRANT pg_monitor TO "{urlsplit(other_role_dsn).username}"')
    finally:
        await admin.close()
    async with PostgresLog(postgres_dsn, worker_id="w") as log:
        names = (log.channels.inbox, log.channels.records, log.channels.workers)
        stop = await Inbox(log).listen(lambda channel, session: None, names)
        monitor = await asyncpg.connect(other_role_dsn)
        try:
            rows = await monitor.fetch("SELECT query FROM pg_stat_activity WHERE usename <> current_user")
            seen = [row[0] for row in rows]
        finally:
            await monitor.close()
            await stop()
    assert not [query for query in seen if any(name in (query or "") for name in names)]
    assert "SELECT 1" in seen and "<insufficient privilege>" not in seen  # it sees the queries


async def test_a_channel_secret_changed_by_hand_is_refused_saying_how_to_make_another(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn):
        pass
    for damaged in ("not hex", "ab" * 16, "AB" * 32, "0" * 63):  # not hex, 16 bytes, upper case, odd digits
        connection = await asyncpg.connect(postgres_dsn)
        try:
            await connection.execute("UPDATE baf_meta SET value = $2 WHERE key = $1", CHANNELS_SECRET, damaged)
        finally:
            await connection.close()
        for read_only in (False, True):
            with pytest.raises(LogError, match=r"secret in baf_meta \(key 'secret:channels'\).*Delete that row"):
                await PostgresLog(postgres_dsn, read_only=read_only).start()
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await connection.execute("DELETE FROM baf_meta WHERE key = $1", CHANNELS_SECRET)
    finally:
        await connection.close()
    async with PostgresLog(postgres_dsn) as log:  # a new secret, made by the next writer
        assert log.channels.inbox.startswith("baf_inbox_")
    assert len(bytes.fromhex((await meta(postgres_dsn))[CHANNELS_SECRET])) == 32


async def test_listening_on_a_store_never_started_starts_it(postgres_dsn: str) -> None:
    log = PostgresLog(postgres_dsn, worker_id="w")
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    try:
        stop = await Inbox(log).listen(lambda channel, session: heard.put_nowait((channel, session)))
        await Inbox(log).post("s", {"text": "hello"})
        assert await asyncio.wait_for(heard.get(), 10) == (log.channels.inbox, "s")
        await stop()
    finally:
        await log.close()
    with pytest.raises(LogClosedError):
        await Inbox(log).listen(lambda channel, session: None)
