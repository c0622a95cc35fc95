"""The floor for the SQLite store: the same rows inserted with plain aiosqlite, no store around them."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import aiosqlite

from baf.log.record import Record
from baf.log.sqlite import DURABILITY_MODES, INSERT_SQL, SCHEMA, encode_record

__all__ = ["raw_insert_cost"]


async def raw_insert_cost(
    path: str | os.PathLike[str], records: Sequence[Record], durability: str, batch_size: int
) -> float:
    """Seconds to insert ``records`` into a new file at ``path``, ``batch_size`` rows per transaction.

    Same schema and PRAGMAs as ``SQLiteLog``, and the same encoding (timed too, since the store pays
    it in every ``append``), but no queue, no writer task, no futures: ``BEGIN IMMEDIATE``, one
    ``executemany``, ``COMMIT`` per batch, awaited one after the other.
    """
    if durability not in DURABILITY_MODES:
        raise ValueError(f"durability must be one of {sorted(DURABILITY_MODES)}, got {durability!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    connection = await aiosqlite.connect(os.fspath(path), isolation_level=None)
    try:
        await connection.execute("PRAGMA busy_timeout = 5000")
        await connection.execute("PRAGMA journal_mode = WAL")
        await connection.execute(f"PRAGMA synchronous = {DURABILITY_MODES[durability]}")
        await connection.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA:
            await connection.execute(statement)
        await connection.execute("COMMIT")
        started = time.perf_counter()
        for start in range(0, len(records), batch_size):
            rows = [encode_record(record) for record in records[start : start + batch_size]]
            await connection.execute("BEGIN IMMEDIATE")
            await connection.executemany(INSERT_SQL, rows)
            await connection.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        await connection.close()
