"""Helpers shared by the bench scripts: timing, a no-op platform, and the raw aiosqlite baseline.

The raw baseline inserts already-encoded rows into a fresh file with the same table layout
(``baf.log.sqlite.SCHEMA``), the same statement (``INSERT_SQL``) and the same PRAGMAs as ``SQLiteLog``
(``journal_mode=WAL``, ``synchronous`` from the durability mode), in the same number of transactions
the store committed. It is what the records would cost with nothing around them: no JSON encoding, no
queue, no writer task, no runtime. Two variants: the usual aiosqlite ``executemany`` + ``commit()``
(two round trips to aiosqlite's thread per transaction), and the floor, one multi-row ``INSERT`` per
transaction in autocommit mode (one round trip, the store's own technique).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiosqlite
from rich.console import Console

from baf.log import SessionLog
from baf.log.record import Record
from baf.log.sqlite import DURABILITY_MODES, INSERT_SQL, SCHEMA, SQLiteLog
from baf.platforms.base import Platform

Row = tuple[str, int, float, str, int, str, int]  # as baf_records keeps it, checksum last


def console() -> Console:
    """A console wide enough for the tables even when the output is piped."""
    return Console(width=None if sys.stdout.isatty() else 230)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class TimingPlatform(Platform):
    """Notes when the last reply of each session arrived; streaming methods do nothing."""

    name = "bench"

    def __init__(self) -> None:
        super().__init__()
        self.replied_at: dict[str, float] = {}
        self.replies = 0

    async def reply(self, session: Any, message: str) -> None:
        self.replied_at[session.id] = time.perf_counter()
        self.replies += 1

    async def reply_reasoning_step(self, session: Any, step: Any) -> None:
        pass

    async def reply_task_list_update(self, session: Any, tasks: list[dict[str, Any]]) -> None:
        pass


def commits_of(log: SessionLog) -> int | None:
    """Transactions the store committed so far (``SQLiteLog.commits``), or None if it does not say."""
    value = getattr(log, "commits", None)
    return value if isinstance(value, int) else None


def max_position(db: Path) -> int:
    """The highest ``baf_records.position`` in ``db`` (0 if empty); read with a separate connection."""
    with sqlite3.connect(db) as conn:
        (value,) = conn.execute("SELECT COALESCE(MAX(position), 0) FROM baf_records").fetchone()
    conn.close()
    return int(value)


def rows_after(db: Path, position: int) -> list[Row]:
    """The rows appended after ``position``, in append order, exactly as stored."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT session_id, seq, ts, kind, version, data, checksum FROM baf_records WHERE position > ? "
            "ORDER BY position",
            (position,),
        ).fetchall()
    finally:
        conn.close()
    return [tuple(row) for row in rows]  # type: ignore[misc]


def split(rows: Sequence[Row], parts: int) -> list[list[Row]]:
    """``rows`` in ``parts`` contiguous chunks of near-equal size (order kept)."""
    parts = max(1, min(parts, len(rows)))
    size, extra = divmod(len(rows), parts)
    chunks, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        chunks.append(list(rows[start:end]))
        start = end
    return chunks


#: Rows per multi-row INSERT statement: 6 parameters a row, under SQLite's parameter limit.
_ROWS_PER_STATEMENT = (32766 if sqlite3.sqlite_version_info >= (3, 32) else 999) // 6


async def _raw_connection(path: Path, durability: str, isolation_level: str | None) -> aiosqlite.Connection:
    # The layout and PRAGMAs of SQLiteLog._open / _configure_writer.
    conn = await aiosqlite.connect(path, isolation_level=isolation_level)
    await conn.execute("PRAGMA busy_timeout = 5000")
    async with conn.execute("PRAGMA journal_mode = WAL") as cursor:
        row = await cursor.fetchone()
    assert row is not None and str(row[0]).lower() == "wal", row
    await conn.execute(f"PRAGMA synchronous = {DURABILITY_MODES[durability]}")
    await conn.execute("BEGIN IMMEDIATE")
    for statement in SCHEMA:
        await conn.execute(statement)
    await conn.execute("COMMIT")
    return conn


async def raw_insert_seconds(
    rows: Sequence[Row], commits: int, durability: str, directory: Path, *, one_statement: bool = False
) -> float:
    """Seconds to insert ``rows`` into a fresh file in ``commits`` transactions with plain aiosqlite.

    Default, the usual aiosqlite way: per transaction one ``executemany`` (the connection's
    ``isolation_level="IMMEDIATE"`` opens ``BEGIN IMMEDIATE``) and one ``commit()``: two round trips to
    aiosqlite's thread. ``one_statement=True`` is the floor: per transaction one multi-row ``INSERT`` on
    an autocommit connection, a single round trip (what ``SQLiteLog`` itself does since fb1dabc).
    """
    path = directory / f"raw-{time.monotonic_ns()}.db"
    conn = await _raw_connection(path, durability, None if one_statement else "IMMEDIATE")
    try:
        chunks = split(rows, commits)
        started = time.perf_counter()
        for chunk in chunks:
            if one_statement and len(chunk) <= _ROWS_PER_STATEMENT:
                sql = INSERT_SQL + ", (?, ?, ?, ?, ?, ?, ?)" * (len(chunk) - 1)
                await conn.execute(sql, [value for row in chunk for value in row])
            elif one_statement:
                await conn.execute("BEGIN IMMEDIATE")
                await conn.executemany(INSERT_SQL, chunk)
                await conn.execute("COMMIT")
            else:
                await conn.executemany(INSERT_SQL, chunk)
                await conn.commit()
        return time.perf_counter() - started
    finally:
        await conn.close()
        _remove_db(path)


async def store_replay_seconds(rows: Sequence[Row], commits: int, durability: str, directory: Path) -> float:
    """Seconds for ``SQLiteLog.append`` to store the same records in the same number of commits: each
    chunk's records are split per session and appended concurrently, so the writer groups them. Includes
    the store's JSON encoding and, for chunks of several sessions, one asyncio task per append."""

    path = directory / f"replay-{time.monotonic_ns()}.db"
    log = SQLiteLog(path, durability=durability)  # type: ignore[arg-type]
    await log.start()
    try:
        batches: list[list[list[Record]]] = []
        for chunk in split(rows, commits):
            per_session: dict[str, list[Record]] = {}
            for session_id, seq, ts, kind, version, data, _ in chunk:
                record = Record(session_id, seq, kind, json.loads(data), ts, version)
                per_session.setdefault(session_id, []).append(record)
            batches.append(list(per_session.values()))
        before = log.commits
        started = time.perf_counter()
        for group in batches:
            if len(group) == 1:
                await log.append(group[0])
            else:
                await asyncio.gather(*(log.append(batch) for batch in group))
        elapsed = time.perf_counter() - started
        done = log.commits - before
        if done != len(batches):
            print(f"note: store replay made {done} commits for {len(batches)} groups", file=sys.stderr)
        return elapsed
    finally:
        await log.close()
        _remove_db(path)


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def fmt(value: float | None, digits: int = 0) -> str:
    """A number for a table cell; '-' for None or NaN."""
    if value is None or value != value:  # NaN
        return "-"
    return f"{value:,.{digits}f}"
