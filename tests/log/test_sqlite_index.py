"""SQLite's indexes for start-up and loading: ``baf_work`` and ``baf_records_snapshots`` (schema 3),
kept in the append's transaction, used by the queries, and built by the upgrade of an older file."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from baf_test_helpers import digest, query

from baf.errors import CorruptRecordError, LogConflictError
from baf.log import Record, RecordKind, SQLiteLog
from baf.log.projection import project
from baf.log.snapshot import snapshot_data
from baf.log.sqlite import SCHEMA, SCHEMA_VERSION, encode_record
from baf.log.sqlite_commit import commit_group, marks_of
from baf.log.sqlite_reader import LATEST_SNAPSHOT_SQL, UNFINISHED_SQL
from baf.log.store import SessionLog
from baf.log.work import IDLE, WorkStatus, work_of
from baf.testing.store_contract import message, started, turn

GOLDEN_DB = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "golden.db"  # schema version 1

# The layout of schema version 2, verbatim: no baf_work, no snapshot index.
_SCHEMA_2 = """
CREATE TABLE baf_records (
    position INTEGER PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL,
    kind TEXT NOT NULL, version INTEGER NOT NULL, data TEXT NOT NULL, UNIQUE (session_id, seq));
CREATE TABLE baf_sessions (position INTEGER PRIMARY KEY, session_id TEXT NOT NULL UNIQUE);
CREATE TABLE baf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO baf_meta (key, value) VALUES ('schema_version', '2');
"""


def write_schema_2_file(path: Path, records: list[Record]) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.executescript(_SCHEMA_2)
        with connection:
            for r in records:
                connection.execute("INSERT OR IGNORE INTO baf_sessions (session_id) VALUES (?)", (r.session_id,))
                connection.execute(
                    "INSERT INTO baf_records (session_id, seq, ts, kind, version, data) VALUES (?, ?, ?, ?, ?, ?)",
                    (r.session_id, r.seq, r.ts, r.kind, r.version, json.dumps(r.data)),
                )
        connection.execute("PRAGMA journal_mode = DELETE")
    finally:
        connection.close()


def mixed_sessions() -> list[Record]:
    """Sessions "done" (finished), "waiting" (a message not handled), "open" (a step open) and "new"
    (its initial body not run)."""
    records = [started("done", 1), *turn("done", 2)]
    records += [started("waiting", 1), *turn("waiting", 2), message("waiting", 5)]
    records += [started("open", 1), *turn("open", 2)[:2]]
    records += [started("new", 1)]
    return records


async def test_upgrading_a_schema_2_file_builds_the_index(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    write_schema_2_file(db, mixed_sessions())
    async with SQLiteLog(db, read_only=True) as log:  # read-only: folded, and the file left as it is
        before = digest(db)
        assert await log.unfinished_sessions() == ["waiting", "open", "new"]
    assert digest(db) == before
    async with SQLiteLog(db) as log:
        assert await log.unfinished_sessions() == ["waiting", "open", "new"]
        await log.append([rec_step("new", 2, RecordKind.STEP_STARTED), rec_step("new", 3, RecordKind.STEP_FINISHED)])
        assert await log.unfinished_sessions() == ["waiting", "open"]
    assert query(db, "SELECT value FROM baf_meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert sorted(row[0] for row in query(db, "SELECT session_id FROM baf_work")) == ["open", "waiting"]


async def test_the_golden_schema_1_log_is_upgraded_and_still_replays(tmp_path: Path) -> None:
    db = tmp_path / "golden.db"
    shutil.copyfile(GOLDEN_DB, db)
    async with SQLiteLog(db, read_only=True) as log:
        expected_unfinished = await SessionLog.unfinished_sessions(log)
        expected = await log.project("golden-1")
        records = await log.read("golden-1")
    async with SQLiteLog(db) as log:
        assert await log.unfinished_sessions() == expected_unfinished
        assert await log.project("golden-1") == expected
        assert await log.read("golden-1") == records
    assert query(db, "SELECT value FROM baf_meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]


def rec_step(session_id: str, seq: int, kind: str) -> Record:
    return Record(session_id, seq, kind, {"event_seq": None}, 1.0)


async def test_the_queries_use_the_indexes(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    async with SQLiteLog(db) as log:
        await log.append(mixed_sessions())
        records = [started("s", 1), *turn("s", 2)]
        await log.append([*records, Record("s", 5, RecordKind.SNAPSHOT, snapshot_data(project("s", records)))])
        assert [r.seq for r in await log.read_for_load("s")] == [5]

    def plan(sql: str, *params: object) -> str:
        connection = sqlite3.connect(db)
        try:
            return " | ".join(row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + sql, params))
        finally:
            connection.close()

    snapshot_plan = plan(LATEST_SNAPSHOT_SQL, "s")
    assert "baf_records_snapshots" in snapshot_plan, snapshot_plan
    unfinished_plan = plan(UNFINISHED_SQL)
    # One pass over the index table; each session's position found by its key, never a scan of it.
    assert "SCAN w" in unfinished_plan and "SCAN s" not in unfinished_plan, unfinished_plan
    assert "baf_records" not in unfinished_plan


async def test_a_schema_3_file_gets_checksums_for_new_records_and_reads_old_ones_unchecked(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    async with SQLiteLog(db) as log:
        await log.append([started("s", 1), *turn("s", 2)])
    # Make it the file a version-3 baf wrote: no checksum column.
    connection = sqlite3.connect(db)
    try:
        connection.execute("ALTER TABLE baf_records DROP COLUMN checksum")
        connection.execute("UPDATE baf_meta SET value = '3' WHERE key = 'schema_version'")
        connection.execute('UPDATE baf_records SET data = \'{"initial_state": "edited"}\' WHERE seq = 1')
        connection.commit()
    finally:
        connection.close()
    async with SQLiteLog(db, read_only=True) as log:  # read as it is, unchecked, and left as it is
        assert (await log.project("s")).current_state == "idle"  # the transition of the turn moved it on
    assert query(db, "SELECT value FROM baf_meta WHERE key = 'schema_version'") == [("3",)]
    async with SQLiteLog(db) as log:
        await log.append([message("s", 5)])
        assert [r.seq for r in await log.read("s")] == [1, 2, 3, 4, 5]
        assert (await log.read("s"))[0].data == {"initial_state": "edited"}  # no checksum to say otherwise
        notes = await log.check_storage()
    assert query(db, "SELECT seq FROM baf_records WHERE checksum IS NOT NULL") == [(5,)]
    assert notes == [(False, "4 records have no checksum (written before schema version 4, or by a tool): "
                             "they are read without that check")]  # fmt: skip
    connection = sqlite3.connect(db)
    try:
        connection.execute('UPDATE baf_records SET data = \'{"event": {}, "text": "forged"}\' WHERE seq = 5')
        connection.commit()
    finally:
        connection.close()
    async with SQLiteLog(db, read_only=True) as log:
        with pytest.raises(CorruptRecordError, match="checksum") as caught:
            await log.read("s")
        assert (caught.value.session_id, caught.value.seq) == ("s", 5)


@pytest.mark.parametrize(
    # (A changed seq is a gap or a conflict, which the reader reports before any checksum.)
    "assignment",
    ["kind = 'reply'", "ts = ts + 1", "version = version - 1", "session_id = 't'", "data = '{}'"],
)
async def test_the_checksum_covers_every_field(tmp_path: Path, assignment: str) -> None:
    db = tmp_path / "log.db"
    async with SQLiteLog(db) as log:
        await log.append([started("s", 1), Record("s", 2, "note", {"n": 1}, 5.0), Record("t", 1, "note", {}, 1.0)])
    connection = sqlite3.connect(db)
    try:
        connection.execute(f"UPDATE baf_records SET {assignment} WHERE session_id = 's' AND seq = 2")
        connection.commit()
    finally:
        connection.close()
    async with SQLiteLog(db, read_only=True) as log:
        moved_to = "t" if assignment.startswith("session_id") else "s"
        with pytest.raises(CorruptRecordError, match="checksum") as caught:
            await log.read(moved_to, after_seq=1)
        assert caught.value.session_id == moved_to


def test_statuses_kept_between_commits_follow_a_group_replayed_batch_by_batch(tmp_path: Path) -> None:
    # The writer keeps the statuses it committed, to spare reading baf_work. A group with a conflicting
    # batch is replayed batch by batch and some of it lands: the statuses kept must not outlive it.
    connection = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    try:
        for statement in SCHEMA:
            connection.execute(statement)
        registered: set[str] = set()
        known: dict[str, WorkStatus] = {}
        written: list[Record] = []

        def commit(*batches: list[Record]) -> list[BaseException | None]:
            outcomes = commit_group(connection.cursor(), [[encode_record(r) for r in batch] for batch in batches],
                                    registered, [marks_of(batch) for batch in batches], known)  # fmt: skip
            written.extend(
                r for batch, outcome in zip(batches, outcomes, strict=True) if outcome is None for r in batch
            )
            return outcomes

        assert commit([started("s", 1)]) == [None]
        step_started, transition, step_finished = turn("s", 2)
        outcomes = commit([step_started, transition], [started("s", 1)])  # the second batch conflicts
        assert outcomes[0] is None and isinstance(outcomes[1], LogConflictError)
        assert commit([step_finished]) == [None]
        index = dict(connection.execute("SELECT session_id, status FROM baf_work").fetchall())
        expected = work_of((r.kind, r.seq, r.data) for r in written)
        assert {s: WorkStatus.from_text(text) for s, text in index.items()} == (
            {} if expected == IDLE else {"s": expected}
        )
    finally:
        connection.close()
