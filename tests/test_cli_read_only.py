"""The reading commands (``baf replay``, ``log``, ``export``, ``sessions``) never change the file they read."""

from __future__ import annotations

import asyncio
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from baf_test_helpers import baf as run_baf
from baf_test_helpers import digest, query

from baf.cli import main
from baf.log import Record, SQLiteLog

GOLDEN_DB = Path(__file__).resolve().parent / "fixtures" / "golden" / "golden.db"  # schema version 1, WAL


def reading_commands(db: Path, session: str, tmp_path: Path) -> list[list[str]]:
    """Every way the CLI reads a log."""
    return [
        ["sessions", str(db)],
        ["log", str(db), session],
        ["log", str(db), session, "--json"],
        ["replay", str(db)],
        ["replay", str(db), session],
        ["replay", str(db), session, "--at", "2"],
        ["replay", str(db), session, "--json"],
        ["replay", f"sqlite:///{db}", session, "--limit", "0"],
        ["export", str(db), session],
        ["export", str(db), session, "--format", "otel", "-o", str(tmp_path / "trace.json")],
    ]


def baf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_baf(*args, cwd=cwd, columns=500)  # so that a long error message is one line


def test_reading_a_schema_1_log_leaves_it_schema_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "golden.db"
    shutil.copyfile(GOLDEN_DB, db)
    before = digest(db)
    for argv in reading_commands(db, "golden-1", tmp_path):
        assert main(argv) == 0, argv
        assert digest(db) == before, argv
    assert "golden-1" in capsys.readouterr().out
    assert query(db, "SELECT value FROM baf_meta WHERE key = 'schema_version'") == [("1",)]


def test_reading_a_current_log_leaves_it_byte_identical(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "log.db"

    async def write() -> None:
        async with SQLiteLog(db) as log:
            await log.append([Record("s", 1, "message_received", {"event": {}, "text": "hi"}, ts=1000.0),
                              Record("s", 2, "reply", {"text": "hello"}, ts=1001.0)])  # fmt: skip

    asyncio.run(write())
    connection = sqlite3.connect(db)
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.close()
    before = digest(db)
    for argv in reading_commands(db, "s", tmp_path):
        assert main(argv) == 0, argv
        assert digest(db) == before, argv
    assert "hello" in capsys.readouterr().out
    assert not (tmp_path / "log.db-wal").exists() and not (tmp_path / "log.db-shm").exists()
    assert query(db, "PRAGMA journal_mode") == [("delete",)]


def test_an_empty_file_stays_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "Y.db"
    db.touch()
    for argv in (["replay", str(db)], ["sessions", str(db)], ["log", str(db), "s"], ["export", str(db), "s"]):
        assert main(argv) == 2, argv
        assert "not a baf log" in capsys.readouterr().err
    assert db.read_bytes() == b""


def test_a_foreign_database_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "other.db"
    connection = sqlite3.connect(db)
    connection.executescript("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ann');")
    connection.close()
    before = digest(db)
    assert main(["sessions", str(db)]) == 2
    assert "not a baf log" in capsys.readouterr().err
    assert digest(db) == before
    assert query(db, "SELECT name FROM sqlite_master") == [("users",)]
    assert query(db, "PRAGMA journal_mode") == [("delete",)]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.write_text("hello\n"), "not a baf log: .*notdb.db is not a SQLite database"),
        (lambda path: path.mkdir(), "cannot read .*notdb.db: it is a directory"),
        (lambda path: path.touch(), "not a baf log: .*notdb.db has no baf tables"),
    ],
    ids=["text", "directory", "empty"],
)
def test_what_is_not_a_log_is_a_one_line_error(tmp_path: Path, make: Callable[[Path], object], message: str) -> None:
    make(tmp_path / "notdb.db")
    result = baf("sessions", "notdb.db", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("baf sessions: ")
    assert re.search(message, line), line


def test_a_newer_schema_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "golden.db"
    shutil.copyfile(GOLDEN_DB, db)
    connection = sqlite3.connect(db)
    connection.execute("UPDATE baf_meta SET value = '99' WHERE key = 'schema_version'")
    connection.commit()
    connection.close()
    before = digest(db)
    assert main(["replay", str(db), "golden-1"]) == 2
    assert "schema version '99'" in capsys.readouterr().err
    assert digest(db) == before
