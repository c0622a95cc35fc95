"""``SQLiteLog(path, read_only=True)``: reads every log this baf knows and never changes the file."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from baf_test_helpers import digest, query

from baf.errors import LogError, LogReadOnlyError
from baf.log import Record, SQLiteLog, open_log

GOLDEN_DB = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "golden.db"  # schema version 1


def rec(session_id: str, seq: int) -> Record:
    return Record(session_id, seq, "note", {"seq": seq}, ts=1000.0 + seq)


def execute(path: Path, script: str) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.executescript(script)
    finally:
        connection.close()


async def write_log(path: Path, *keys: tuple[str, int]) -> None:
    async with SQLiteLog(path) as log:
        await log.append([rec(session_id, seq) for session_id, seq in keys])


async def test_reads_a_current_log_without_changing_it(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    await write_log(db, ("b", 1), ("a", 1), ("b", 2))
    execute(db, "PRAGMA journal_mode = DELETE")  # one file to compare, nothing beside it
    before = digest(db)
    async with SQLiteLog(db, read_only=True) as log:
        assert log.read_only
        assert await log.sessions() == ["b", "a"]
        assert await log.read("b") == [rec("b", 1), rec("b", 2)]
        assert [chunk[0].seq for chunk in [c async for c in log.read_chunks("b", size=1)]] == [1, 2]
        assert (await log.project("a")).last_seq == 1
    assert digest(db) == before
    assert sorted(os.listdir(tmp_path)) == ["log.db"]  # no -wal or -shm: the file is not in WAL mode
    assert query(db, "PRAGMA journal_mode") == [("delete",)]


async def test_reads_a_schema_1_log_as_it_is(tmp_path: Path) -> None:
    db = tmp_path / "golden.db"
    shutil.copyfile(GOLDEN_DB, db)
    # An older baf appends a session: its trigger registers it.
    execute(
        db, "INSERT INTO baf_records (session_id, seq, ts, kind, version, data) VALUES ('late', 1, 0, 'k', 1, '{}');"
    )
    before = digest(db)
    async with SQLiteLog(db, read_only=True) as log:
        assert await log.sessions() == ["golden-1", "late"]
        assert len(await log.read("golden-1")) == 60
    assert digest(db) == before
    assert query(db, "SELECT value FROM baf_meta") == [("1",)]
    assert query(db, "SELECT name FROM sqlite_master WHERE type = 'trigger'") == [("baf_records_register_session",)]


async def test_append_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    await write_log(db, ("s", 1))
    before = digest(db)
    async with SQLiteLog(db, read_only=True) as log:
        with pytest.raises(LogReadOnlyError, match="read-only"):
            await log.append([rec("s", 2)])
        assert [r.seq for r in await log.read("s")] == [1]
    assert digest(db) == before
    assert issubclass(LogReadOnlyError, LogError)


async def test_an_empty_file_is_not_a_log_and_stays_empty(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    with pytest.raises(LogError, match=r"not a baf log: .* has no baf tables"):
        await SQLiteLog(db, read_only=True).start()
    assert db.read_bytes() == b""
    assert sorted(os.listdir(tmp_path)) == ["empty.db"]


async def test_a_foreign_database_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    execute(db, "CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ann');")
    before = digest(db)
    log = SQLiteLog(db, read_only=True)
    with pytest.raises(LogError, match=r"not a baf log: .* has no baf tables"):
        await log.sessions()
    assert digest(db) == before
    assert query(db, "SELECT name FROM sqlite_master") == [("users",)]
    assert query(db, "PRAGMA journal_mode") == [("delete",)]


async def test_a_file_with_only_some_baf_tables_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "half.db"
    execute(db, "CREATE TABLE baf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);")
    with pytest.raises(LogError, match=r"not a baf log: .* has no table baf_records, baf_sessions"):
        await SQLiteLog(db, read_only=True).start()


async def test_a_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    await write_log(db, ("s", 1))
    execute(db, "UPDATE baf_meta SET value = '99' WHERE key = 'schema_version'; PRAGMA journal_mode = DELETE;")
    before = digest(db)
    with pytest.raises(LogError, match="schema version '99'; this baf reads versions 1, 2, 3, 4: upgrade baf"):
        await SQLiteLog(db, read_only=True).start()
    assert digest(db) == before


async def test_not_a_database_a_directory_and_a_missing_file(tmp_path: Path) -> None:
    text = tmp_path / "notdb.db"
    text.write_text("hello\n")
    with pytest.raises(LogError, match=r"not a baf log: .* is not a SQLite database"):
        await SQLiteLog(text, read_only=True).start()
    assert text.read_text() == "hello\n"
    with pytest.raises(LogError, match="is a directory"):
        await SQLiteLog(tmp_path, read_only=True).start()
    with pytest.raises(LogError, match="no such log file"):
        await SQLiteLog(tmp_path / "missing.db", read_only=True).start()
    assert not (tmp_path / "missing.db").exists()


async def test_reads_what_another_connection_writes_meanwhile(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    await write_log(db, ("s", 1))  # closed: the -wal file is gone, the reader is the first to open
    async with SQLiteLog(db, read_only=True) as reader:
        assert [r.seq for r in await reader.read("s")] == [1]
        async with SQLiteLog(db) as writer:
            await writer.append([rec("s", 2)])
            assert [r.seq for r in await reader.read("s", after_seq=1)] == [2]
            await writer.append([rec("s", 3), rec("t", 1)])
            assert [r.seq for r in await reader.read("s")] == [1, 2, 3]
            assert await reader.sessions() == ["s", "t"]
        await write_log(db, ("s", 4))  # a writer that opens and closes while the reader is open
        assert [r.seq for r in await reader.read("s", after_seq=3)] == [4]


async def test_a_wal_log_in_a_read_only_folder_without_its_wal_files(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    await write_log(folder / "log.db", ("s", 1))  # closed: its -wal and -shm files are gone
    code = textwrap.dedent(f"""
        import asyncio
        from baf.errors import LogError
        from baf.log.sqlite import SQLiteLog
        async def main():
            try:
                await SQLiteLog({str(folder / "log.db")!r}, read_only=True).start()
            except LogError as exc:
                print("LogError:", exc)
        asyncio.run(main())
    """)
    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:  # root may write anywhere: run without the capabilities that allow it
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *command]
    folder.chmod(0o555)
    try:
        result = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        folder.chmod(0o755)
    assert "LogError: cannot read" in result.stdout, result.stdout + result.stderr
    assert "WAL-mode file needs its -wal and -shm files" in result.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["log.db"]


def test_open_log_read_only_option(tmp_path: Path) -> None:
    for log in (
        open_log(f"sqlite:///{tmp_path}/a.db?read_only=true"),
        open_log(f"sqlite:///{tmp_path}/a.db?read_only=1"),
        open_log(f"sqlite:///{tmp_path}/a.db", read_only=True),
        open_log(f"sqlite:///{tmp_path}/a.db?read_only=true", busy_timeout=1),
    ):
        assert isinstance(log, SQLiteLog) and log.read_only
    assert not open_log(f"sqlite:///{tmp_path}/a.db?read_only=false").read_only  # type: ignore[attr-defined]
    assert not open_log(f"sqlite:///{tmp_path}/a.db?read_only=1", read_only=False).read_only  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="read_only must be true or false"):
        open_log(f"sqlite:///{tmp_path}/a.db?read_only=maybe")
