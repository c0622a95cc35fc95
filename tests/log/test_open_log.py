"""open_log: picking a store by URL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import baf.log
from baf.log import MemoryLog, Record, SQLiteLog, open_log


def test_memory_url() -> None:
    log = open_log("memory://")
    assert isinstance(log, MemoryLog)
    assert open_log("memory://") is not log  # a new, empty store each time


async def test_relative_sqlite_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    log = open_log("sqlite:///data/agent.db")
    assert isinstance(log, SQLiteLog)
    assert log.path == tmp_path / "data" / "agent.db"  # resolved against the directory at open_log time
    async with log:
        await log.append([Record("s", 1, "note", {})])
    assert await asyncio.to_thread((tmp_path / "data" / "agent.db").exists)


def test_absolute_sqlite_path(tmp_path: Path) -> None:
    log = open_log(f"sqlite:///{tmp_path}/agent.db")  # tmp_path starts with "/": four slashes
    assert isinstance(log, SQLiteLog)
    assert log.path == tmp_path / "agent.db"
    assert log.path.is_absolute()


def test_percent_encoded_path(tmp_path: Path) -> None:
    log = open_log(f"sqlite:///{tmp_path}/with%20space%3F.db")
    assert isinstance(log, SQLiteLog)
    assert log.path == tmp_path / "with space?.db"


def test_options_from_the_query_and_from_keywords(tmp_path: Path) -> None:
    log = open_log(f"sqlite:///{tmp_path}/a.db?durability=full&busy_timeout=2.5")
    assert isinstance(log, SQLiteLog)
    assert log.durability == "full"
    assert log._busy_timeout_ms == 2500
    log = open_log(f"sqlite:///{tmp_path}/a.db?durability=full", durability="normal", busy_timeout=1)
    assert isinstance(log, SQLiteLog)
    assert log.durability == "normal"  # the keyword wins
    assert log._busy_timeout_ms == 1000


def test_an_instance_passes_through() -> None:
    log = MemoryLog()
    assert open_log(log) is log
    with pytest.raises(ValueError, match="existing store"):
        open_log(log, durability="full")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "mysql://localhost/db",
            "accepted: sqlite:///relative/path.db, sqlite:////absolute/path.db, memory://, postgresql://",
        ),
        ("postgresql://localhost/db?x=1", None),
        ("agent.db", "accepted:"),
        ("", "accepted:"),
        ("sqlite://host/agent.db", "no host"),
        ("sqlite:///", "no database path"),
        ("sqlite:agent.db", "not a SQLite URL"),
        ("sqlite:///a.db#frag", "not a SQLite URL"),
        ("sqlite:///a.db?durability=sometimes", "durability must be one of"),
        ("sqlite:///a.db?busy_timeout=soon", "busy_timeout must be a number"),
        ("sqlite:///a.db?journal=off", r"unknown option\(s\) \['journal'\]"),
        ("memory://somewhere", "memory:// takes no path"),
        ("memory://?durability=full", "memory:// takes no path"),
    ],
)
def test_bad_urls_are_refused(url: str, message: str | None) -> None:
    if message is None:  # a URL that is fine: only bad options are refused
        with pytest.raises(ValueError, match=r"unknown option\(s\) \['durability'\]"):
            open_log(url, durability="full")
        return
    with pytest.raises(ValueError, match=message):
        open_log(url)


def test_a_postgresql_url_opens_a_postgres_log() -> None:
    from baf.log.postgres import PostgresLog

    for url in ("postgresql://u:secret@db.example:5433/agents", "postgres://u@db/agents"):
        log = open_log(url, pool_size=2)
        assert isinstance(log, PostgresLog)
        assert log.dsn == url
        assert "secret" not in repr(log)  # the password never shows in messages


def test_bad_types_are_refused() -> None:
    with pytest.raises(TypeError):
        open_log(Path("agent.db"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="memory://"):
        open_log("memory://", durability="full")


def test_public_names() -> None:
    for name in baf.log.__all__:
        assert hasattr(baf.log, name), name
    assert {"Record", "RecordKind", "SessionLog", "MemoryLog", "SQLiteLog", "open_log"} <= set(baf.log.__all__)
