"""How the SQLite store registers sessions in ``baf_sessions``: once per session and connection, in
order of first record, never for a batch that failed; and how a schema-1 file (a trigger did it) is
migrated."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from baf.errors import LogConflictError, LogStorageError
from baf.log import Record, RecordKind, SQLiteLog
from baf.log.sqlite import SCHEMA, SCHEMA_VERSION, encode_record
from baf.log.sqlite_commit import Row, commit_group
from baf.testing.store_contract import message, started, turn
from baf.testing.store_contract import rec as record


def rec(session_id: str, seq: int) -> Record:
    return Record(session_id, seq, "note", {"seq": seq}, ts=1000.0 + seq)


def rows(*keys: tuple[str, int]) -> list[Row]:
    return [encode_record(rec(session_id, seq)) for session_id, seq in keys]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "log.db"


@pytest.fixture
def connection(db: Path) -> Iterator[sqlite3.Connection]:
    """An autocommit connection to a new log file, as the store's writer is."""
    connection = sqlite3.connect(db, isolation_level=None)
    try:
        for statement in SCHEMA:
            connection.execute(statement)
        yield connection
    finally:
        connection.close()


def listed(connection: sqlite3.Connection) -> list[str]:
    return [session_id for (session_id,) in connection.execute("SELECT session_id FROM baf_sessions ORDER BY position")]


def statements_of(log: SQLiteLog) -> list[str]:
    """Start recording the SQL the store's writer connection runs; the list fills as it runs."""
    assert log._writer is not None and log._writer.connection is not None
    seen: list[str] = []
    log._writer.connection.set_trace_callback(lambda sql: seen.append(sql.split(" (", 1)[0]))
    return seen


# -- the cost: once per session ---------------------------------------------------------------------


async def test_a_known_session_commits_as_one_insert_and_a_new_one_registers_once(db: Path) -> None:
    async with SQLiteLog(db) as log:
        seen = statements_of(log)
        await log.append([rec("s", 1), rec("s", 2)])
        assert seen == [
            "BEGIN IMMEDIATE",
            "INSERT OR IGNORE INTO baf_sessions",
            "INSERT INTO baf_records",
            "COMMIT",
        ]
        seen.clear()
        await log.append([rec("s", 3)])
        await asyncio.gather(*(log.append([rec("s", seq)]) for seq in range(4, 10)))
        # The session is known: no transaction statements, no registration, one INSERT per commit.
        assert seen and all(sql == "INSERT INTO baf_records" for sql in seen), seen
        assert await log.sessions() == ["s"]


async def test_a_session_s_work_status_is_read_once_and_then_kept_by_the_writer(db: Path) -> None:
    # Every message changes its session's status three times (received, step started, step finished): the
    # writer starts each change from the status it committed last instead of reading baf_work again.
    async with SQLiteLog(db) as log:
        seen = statements_of(log)
        await log.append([started("s", 1), *turn("s", 2)])
        for seq in (5, 8, 11):
            await log.append([message("s", seq)])
            await log.append([record("s", seq + 1, RecordKind.STEP_STARTED, {"event_seq": seq})])
            await log.append([record("s", seq + 2, RecordKind.STEP_FINISHED, {"event_seq": seq})])
        assert sum(sql.startswith("SELECT status FROM baf_work") for sql in seen) == 1
        assert await log.unfinished_sessions() == []
        await log.append([message("s", 14)])
    async with SQLiteLog(db) as reopened:  # a new writer reads it again, as the last one left it
        assert await reopened.unfinished_sessions() == ["s"]
        await reopened.append([record("s", 15, RecordKind.STEP_STARTED, {"event_seq": 14})])
        await reopened.append([record("s", 16, RecordKind.STEP_FINISHED, {"event_seq": 14})])
        assert await reopened.unfinished_sessions() == []


async def test_a_large_group_is_inserted_in_statements_of_bounded_size_in_one_transaction(db: Path) -> None:
    # SQLite compiles each distinct row count once per connection, and compiling a statement of
    # hundreds of rows takes about a millisecond on the event loop: a burst of appends grouped into
    # one commit must reuse the few cached sizes, not compile a statement of its own size.
    from baf.log.sqlite_commit import ROWS_PER_STATEMENT

    async with SQLiteLog(db) as log:
        await log.append([rec("s", 1)])
        full: list[str] = []
        assert log._writer is not None and log._writer.connection is not None
        log._writer.connection.set_trace_callback(full.append)
        count = 2 * ROWS_PER_STATEMENT + 5
        await log.append([rec("s", seq) for seq in range(2, count + 2)])
        inserts = [sql for sql in full if sql.startswith("INSERT INTO baf_records")]
        assert [sql.count("), (") + 1 for sql in inserts] == [ROWS_PER_STATEMENT, ROWS_PER_STATEMENT, 5]
        assert full[0] == "BEGIN IMMEDIATE" and full[-1] == "COMMIT"
        assert [r.seq for r in await log.read("s")] == list(range(1, count + 2))


# -- order --------------------------------------------------------------------------------------------


def test_new_sessions_of_a_group_are_registered_in_order_of_first_row(connection: sqlite3.Connection) -> None:
    registered: set[str] = set()
    assert commit_group(connection.cursor(), [rows(("z", 1))], registered) == [None]
    batches = [rows(("z", 2)), rows(("b", 1), ("a", 1), ("b", 2)), rows(("c", 1), ("a", 2), ("z", 3))]
    assert commit_group(connection.cursor(), batches, registered) == [None, None, None]
    assert listed(connection) == ["z", "b", "a", "c"]
    assert registered == {"z", "b", "a", "c"}


async def test_sessions_of_other_connections_are_listed_in_order_of_first_append(db: Path) -> None:
    async with SQLiteLog(db) as first, SQLiteLog(db) as second:
        await first.append([rec("a", 1)])
        await second.append([rec("b", 1)])
        await first.append([rec("c", 1)])
        # A session another connection registered: registered again (a no-op), not moved.
        await second.append([rec("a", 2)])
        await first.append([rec("b", 2)])
        assert await first.sessions() == await second.sessions() == ["a", "b", "c"]
    async with SQLiteLog(db) as reopened:
        await reopened.append([rec("d", 1), rec("a", 3)])
        assert await reopened.sessions() == ["a", "b", "c", "d"]


# -- failures register nothing ------------------------------------------------------------------------


def test_a_conflicting_batch_does_not_register_its_new_session(connection: sqlite3.Connection) -> None:
    registered: set[str] = set()
    commit_group(connection.cursor(), [rows(("old", 1))], registered)
    batches = [rows(("a", 1)), rows(("new", 1), ("old", 1)), rows(("b", 1))]
    outcomes = commit_group(connection.cursor(), batches, registered)
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], LogConflictError) and outcomes[1].session_id == "old"
    assert listed(connection) == ["old", "a", "b"]
    assert registered == {"old", "a", "b"}


def test_a_session_is_registered_when_a_later_batch_of_it_lands(connection: sqlite3.Connection) -> None:
    registered: set[str] = set()
    commit_group(connection.cursor(), [rows(("old", 1))], registered)
    batches = [rows(("new", 1), ("old", 1)), rows(("b", 1)), rows(("new", 2))]
    outcomes = commit_group(connection.cursor(), batches, registered)
    assert [outcome is None for outcome in outcomes] == [False, True, True]
    # "new"'s first record is the one of the third batch: it comes after "b".
    assert listed(connection) == ["old", "b", "new"]
    assert connection.execute("SELECT seq FROM baf_records WHERE session_id = 'new'").fetchall() == [(2,)]


async def test_a_rolled_back_commit_leaves_its_sessions_to_be_registered_later(db: Path) -> None:
    async with SQLiteLog(db) as log:
        await log.append([rec("before", 1)])
        # A record of kind "boom" now fails its INSERT with an error SQLite raises as it runs, after the
        # registration of its session ran in the same transaction: the whole commit is rolled back.
        raw_script(
            db,
            """CREATE TRIGGER boom AFTER INSERT ON baf_records WHEN NEW.kind = 'boom'
            BEGIN SELECT abs(-9223372036854775807 - 1); END""",
        )
        with pytest.raises(LogStorageError, match="integer overflow"):
            await log.append([rec("s", 1), Record("s", 2, "boom", {})])
        assert await log.sessions() == ["before"]
        assert await log.read("s") == []
        await log.append([rec("s", 1)])  # so "s" is still new to the store: it registers it now
        assert await log.sessions() == ["before", "s"]
        assert await log.read("s") == [rec("s", 1)]


# -- schema 1 ------------------------------------------------------------------------------------------

# The layout of schema version 1, verbatim (its SCHEMA, with SCHEMA_VERSION 1).
_SCHEMA_1 = (
    """CREATE TABLE IF NOT EXISTS baf_records (
        position   INTEGER PRIMARY KEY,
        session_id TEXT    NOT NULL,
        seq        INTEGER NOT NULL,
        ts         REAL    NOT NULL,
        kind       TEXT    NOT NULL,
        version    INTEGER NOT NULL,
        data       TEXT    NOT NULL,
        UNIQUE (session_id, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS baf_sessions (
        position   INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL UNIQUE
    )""",
    """CREATE TRIGGER IF NOT EXISTS baf_records_register_session AFTER INSERT ON baf_records
    BEGIN
        INSERT OR IGNORE INTO baf_sessions (session_id) VALUES (NEW.session_id);
    END""",
    "CREATE TABLE IF NOT EXISTS baf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "INSERT OR IGNORE INTO baf_meta (key, value) VALUES ('schema_version', '1')",
)
_INSERT = "INSERT INTO baf_records (session_id, seq, ts, kind, version, data) VALUES (?, ?, ?, ?, ?, ?)"


def write_schema_1_file(path: Path, keys: list[tuple[str, int]]) -> None:
    """A log file as baf with schema version 1 wrote it: the trigger registers the sessions."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        with connection:
            for statement in _SCHEMA_1:
                connection.execute(statement)
            connection.executemany(_INSERT, [row[:6] for row in rows(*keys)])  # version 1 kept no checksum
    finally:
        connection.close()


def raw_script(path: Path, script: str) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.executescript(script)
    finally:
        connection.close()


def raw_query(path: Path, sql: str) -> list[Any]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


async def test_a_schema_1_file_is_upgraded_and_an_older_writer_still_lists_its_sessions(db: Path) -> None:
    # Version 1 registered sessions with a trigger. An older baf may still be writing the file and
    # relies on it, so the upgrade keeps the trigger; this baf registers its own sessions too.
    write_schema_1_file(db, [("b", 1), ("a", 1), ("b", 2)])
    async with SQLiteLog(db) as log:
        assert await log.sessions() == ["b", "a"]
        await log.append([rec("c", 1), rec("a", 2)])
        # An older baf appends a new session meanwhile (plain inserts, as it does): the trigger lists it.
        await asyncio.to_thread(raw_script, db, "INSERT INTO baf_records (session_id, seq, ts, kind, version, data) "
                                "VALUES ('old', 1, 0, 'k', 1, '{}');")  # fmt: skip
        await log.append([rec("b", 3), rec("d", 1)])
        assert await log.sessions() == ["b", "a", "c", "old", "d"]
        assert [r.seq for r in await log.read("b")] == [1, 2, 3]
    assert raw_query(db, "SELECT name FROM sqlite_master WHERE type = 'trigger'") == [("baf_records_register_session",)]
    assert raw_query(db, "SELECT value FROM baf_meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    async with SQLiteLog(db) as log:
        assert await log.sessions() == ["b", "a", "c", "old", "d"]


async def test_a_new_file_has_the_current_version_and_no_trigger(db: Path) -> None:
    async with SQLiteLog(db) as log:
        await log.append([rec("a", 1)])
    assert raw_query(db, "SELECT name FROM sqlite_master WHERE type = 'trigger'") == []
    assert raw_query(db, "SELECT value FROM baf_meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert SCHEMA_VERSION == 4
