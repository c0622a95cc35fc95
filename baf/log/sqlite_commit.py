"""One group commit of the SQLite log, as plain synchronous ``sqlite3`` calls.

``SQLiteLog`` decides *where* a group commit runs (on the event loop, or on its worker thread when it
must wait for a lock or an fsync); this module is *what* it runs. Every function leaves the connection
outside any transaction when it returns or raises, so the next group starts clean.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sqlite3
from collections.abc import Sequence
from typing import Final

from baf.errors import LogConflictError

__all__ = ["INSERT_SQL", "ROWS_PER_STATEMENT", "Row", "commit_group", "is_busy"]

#: One encoded row of ``baf_records``: (session_id, seq, ts, kind, version, data as JSON text).
Row = tuple[str, int, float, str, int, str]

INSERT_SQL: Final = "INSERT INTO baf_records (session_id, seq, ts, kind, version, data) VALUES (?, ?, ?, ?, ?, ?)"

#: Rows per single-statement group commit: 6 parameters each, under the parameter limit of the SQLite
#: in use (32766 since 3.32, 999 before).
ROWS_PER_STATEMENT: Final = (32766 if sqlite3.sqlite_version_info >= (3, 32) else 999) // 6

# Keys per conflict lookup: 2 parameters each, under SQLite's oldest default limit of 999.
_LOOKUP_CHUNK: Final = 400
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6


@functools.lru_cache(maxsize=64)
def _insert_many_sql(rows: int) -> str:
    """``INSERT`` of ``rows`` rows in one statement (cached: the common sizes repeat)."""
    return INSERT_SQL + ", (?, ?, ?, ?, ?, ?)" * (rows - 1)


def is_busy(error: BaseException) -> bool:
    """Whether ``error`` is SQLite saying another connection holds the lock (worth waiting for)."""
    code = getattr(error, "sqlite_errorcode", None)
    return (
        isinstance(error, sqlite3.OperationalError)
        and code is not None
        and code & 0xFF
        in (
            _SQLITE_BUSY,
            _SQLITE_LOCKED,
        )
    )


def commit_group(connection: sqlite3.Connection, batches: Sequence[list[Row]]) -> list[BaseException | None]:
    """Commit ``batches`` (each one ``append`` call) together; return each batch's outcome.

    The happy path is one multi-row ``INSERT`` in autocommit mode: SQLite runs a single statement as
    its own transaction, taking the write lock before it reads anything (as ``BEGIN IMMEDIATE``
    would). A group over one statement's parameter limit runs as ``BEGIN IMMEDIATE`` + ``executemany``.
    On a UNIQUE violation the group is replayed batch by batch, each under a savepoint: only a batch
    that conflicts fails (with ``LogConflictError``), the others land. Any other error (a lock held
    past ``busy_timeout``, disk full) is raised after rolling back: it concerns the whole group.
    """
    rows = batches[0] if len(batches) == 1 else list(itertools.chain.from_iterable(batches))
    try:
        if len(rows) <= ROWS_PER_STATEMENT:
            connection.execute(_insert_many_sql(len(rows)), list(itertools.chain.from_iterable(rows)))
        else:
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(INSERT_SQL, rows)
            connection.execute("COMMIT")
    except sqlite3.IntegrityError:
        _rollback(connection)
        return _commit_one_by_one(connection, batches)
    except BaseException:
        _rollback(connection)
        raise
    return [None] * len(batches)


def _commit_one_by_one(connection: sqlite3.Connection, batches: Sequence[list[Row]]) -> list[BaseException | None]:
    """Replay a group that hit a UNIQUE violation, each batch under its own savepoint."""
    outcomes: list[BaseException | None] = []
    try:
        connection.execute("BEGIN IMMEDIATE")
        for rows in batches:
            connection.execute("SAVEPOINT baf_batch")
            try:
                connection.executemany(INSERT_SQL, rows)
            except sqlite3.IntegrityError as exc:
                connection.execute("ROLLBACK TO baf_batch")
                connection.execute("RELEASE baf_batch")
                outcomes.append(_name_conflict(connection, rows, exc))
            else:
                connection.execute("RELEASE baf_batch")
                outcomes.append(None)
        connection.execute("COMMIT")
    except BaseException:
        _rollback(connection)
        raise
    return outcomes


def _name_conflict(connection: sqlite3.Connection, rows: list[Row], error: sqlite3.IntegrityError) -> BaseException:
    """The ``LogConflictError`` for the first row of ``rows`` whose key is already stored.

    Runs inside the replay transaction, after the batch's savepoint was rolled back, so "stored"
    includes the batches of the same group that were accepted before this one.
    """
    existing: set[tuple[str, int]] = set()
    for start in range(0, len(rows), _LOOKUP_CHUNK):
        chunk = rows[start : start + _LOOKUP_CHUNK]
        values = ", ".join("(?, ?)" for _ in chunk)
        params = [part for row in chunk for part in (row[0], row[1])]
        found = connection.execute(
            f"SELECT session_id, seq FROM baf_records WHERE (session_id, seq) IN (VALUES {values})", params
        ).fetchall()
        existing.update((session_id, seq) for session_id, seq in found)
    for row in rows:
        if (row[0], row[1]) in existing:
            conflict = LogConflictError(row[0], row[1])
            conflict.__cause__ = error
            return conflict
    return error  # a violation of some other constraint: report SQLite's own words


def _rollback(connection: sqlite3.Connection) -> None:
    # The error being handled is the one worth reporting; a rollback failing too adds nothing.
    if connection.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            connection.execute("ROLLBACK")
