"""One group commit of the SQLite log, as plain synchronous ``sqlite3`` calls.

``SQLiteLog`` decides *where* a group commit runs (on the event loop, or on its worker thread when it
must wait for a lock or an fsync); this module is *what* it runs. Every function leaves the connection
outside any transaction when it returns or raises, so the next group starts clean.

A group also registers its sessions in ``baf_sessions`` (the list ``sessions()`` reads, in order of
first record). The caller keeps the set of sessions its connection knows to be registered there, so
that a session costs one ``INSERT OR IGNORE`` the first time this connection writes it and nothing
after. A group of known sessions only (the common case) is one multi-row ``INSERT`` in autocommit
mode; a group with a new session wraps the registration and the ``INSERT`` in ``BEGIN IMMEDIATE`` ...
``COMMIT``. The set is updated only once the transaction committed: a session whose rows were rolled
back must be registered again by its next group.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from baf.errors import LogConflictError, LogError
from baf.log.sqlite_codec import Row
from baf.log.work import IDLE, WORK_KINDS, WorkStatus, work_after

__all__ = [
    "INSERT_SQL",
    "REGISTER_SQL",
    "ROWS_PER_STATEMENT",
    "SET_WORK_SQL",
    "Mark",
    "Row",
    "commit_group",
    "is_busy",
    "marks_of",
    "update_work",
]

#: A record that may change its session's work status (``baf.log.work``): (session_id, kind, seq, data).
Mark = tuple[str, str, int, dict[str, Any]]

_WORK_SQL: Final = "SELECT status FROM baf_work WHERE session_id = ?"
#: Keeps a session's status in ``baf_work`` (a row per session whose status is not idle).
SET_WORK_SQL: Final = "INSERT OR REPLACE INTO baf_work (session_id, status, unfinished) VALUES (?, ?, ?)"
_CLEAR_WORK_SQL: Final = "DELETE FROM baf_work WHERE session_id = ?"

INSERT_SQL: Final = (
    "INSERT INTO baf_records (session_id, seq, ts, kind, version, data, checksum) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
#: Registers a session in ``baf_sessions``; a no-op for a session already there (another writer's).
REGISTER_SQL: Final = "INSERT OR IGNORE INTO baf_sessions (session_id) VALUES (?)"

#: Rows per multi-row ``INSERT``: a larger group is inserted in statements of at most this many rows.
#: Compiling a statement costs about as much as running it, and SQLite compiles each distinct row count
#: once per connection, so the counts are kept few (each stays in the connection's statement cache);
#: 64 rows take 448 parameters, under the limit of any SQLite (999 before 3.32).
ROWS_PER_STATEMENT: Final = 64

# Keys per conflict lookup: 2 parameters each, under SQLite's oldest default limit of 999.
_LOOKUP_CHUNK: Final = 400
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6


@functools.lru_cache(maxsize=ROWS_PER_STATEMENT)
def _insert_many_sql(rows: int) -> str:
    """``INSERT`` of ``rows`` rows in one statement (cached: the common sizes repeat)."""
    return INSERT_SQL + ", (?, ?, ?, ?, ?, ?, ?)" * (rows - 1)


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


def marks_of(records: Iterable[Any]) -> list[Mark]:
    """The marks of the records (``Record``s) whose kind can change a work status, taken at ``append``
    time: a shallow copy of their data, so the caller changing its dict afterwards cannot change them."""
    return [(r.session_id, r.kind, r.seq, dict(r.data)) for r in records if r.kind in WORK_KINDS]


def update_work(
    cursor: sqlite3.Cursor, marks: Sequence[Mark], known: dict[str, WorkStatus] | None = None
) -> dict[str, WorkStatus]:
    """Fold ``marks`` into the ``baf_work`` index, inside the caller's transaction; return the statuses
    written, by session.

    A session's status is taken from ``known`` (what this connection committed last, see ``commit_group``)
    or else read from the index (absent: idle), folded with ``baf.log.work.work_after`` and written back:
    a row while it is not idle, none once it is. Raises ``LogError`` for a damaged index row.
    """
    statuses: dict[str, WorkStatus] = {}
    for session_id, kind, seq, data in marks:
        status = statuses.get(session_id)
        if status is None and known is not None:
            status = known.get(session_id)
        if status is None:
            row = cursor.execute(_WORK_SQL, (session_id,)).fetchone()
            try:
                status = IDLE if row is None else WorkStatus.from_text(row[0])
            except ValueError as exc:
                raise LogError(f"session {session_id!r}: its row in baf_work is damaged: {exc}") from exc
        statuses[session_id] = work_after(status, kind, seq, data)
    for session_id, status in statuses.items():
        if status != IDLE:
            cursor.execute(SET_WORK_SQL, (session_id, status.to_text(), int(status.unfinished)))
        else:
            cursor.execute(_CLEAR_WORK_SQL, (session_id,))
    return statuses


def commit_group(
    cursor: sqlite3.Cursor,
    batches: Sequence[list[Row]],
    registered: set[str],
    marks: Sequence[list[Mark]] = (),
    known: dict[str, WorkStatus] | None = None,
) -> list[BaseException | None]:
    """Commit ``batches`` (each one ``append`` call) together with the writer's ``cursor``; return each
    batch's outcome. (One cursor kept for all commits: ``Connection.execute`` makes a new one each time,
    which costs more than a small statement.)

    ``registered`` holds the sessions known to be in ``baf_sessions``; the group registers the others
    (in order of their first row) and, once committed, adds them to it. ``marks`` (one list per batch,
    or none at all) are the records that change work statuses: the group updates the
    ``baf_work`` index with them in its transaction. ``known``, if given, holds the statuses this
    connection last committed, by session: the group starts from them instead of reading the index, and
    adds its own once committed (the one writer of a file, ``baf.log.sqlite_lock``, is the only one
    changing them). A group that fails leaves it as it was; one replayed batch by batch forgets its sessions.

    The happy path is one multi-row ``INSERT`` in autocommit mode: SQLite runs a single statement as
    its own transaction, taking the write lock before it reads anything (as ``BEGIN IMMEDIATE``
    would). A group registering a session, or of more rows than one statement takes, runs inside
    ``BEGIN IMMEDIATE``. On a UNIQUE violation the group is replayed batch by batch, each under a
    savepoint: only a batch that conflicts fails (with ``LogConflictError``), the others land. Any
    other error (a lock held past ``busy_timeout``, disk full) is raised after rolling back: it
    concerns the whole group.
    """
    if len(batches) == 1:  # the common case (an append committing itself), without copying
        rows = batches[0]
        work = marks[0] if marks else []
    else:
        rows = list(itertools.chain.from_iterable(batches))
        work = [mark for batch_marks in marks for mark in batch_marks]
    new = _unregistered(rows, registered)
    try:
        if new or work or len(rows) > ROWS_PER_STATEMENT:
            cursor.execute("BEGIN IMMEDIATE")
            cursor.executemany(REGISTER_SQL, ((session_id,) for session_id in new))
            _insert(cursor, rows)
            statuses = update_work(cursor, work, known) if work else None
            cursor.execute("COMMIT")
        else:
            statuses = None
            _insert(cursor, rows)
    except sqlite3.IntegrityError:
        _rollback(cursor)
        if known is not None:
            for session_id, _, _, _ in work:
                known.pop(session_id, None)
        return _commit_one_by_one(cursor, batches, registered, marks)
    except BaseException:
        _rollback(cursor)
        raise
    registered.update(new)
    if statuses and known is not None:
        known.update(statuses)
    return [None] * len(batches)


def _unregistered(rows: Sequence[Row], registered: set[str]) -> list[str]:
    """The sessions of ``rows`` not in ``registered``, in order of their first row."""
    if registered.issuperset(map(_session_of, rows)):  # the common case, in C
        return []
    return list(dict.fromkeys(row[0] for row in rows if row[0] not in registered))


_session_of = operator.itemgetter(0)


def _insert(cursor: sqlite3.Cursor, rows: Sequence[Row]) -> None:
    """Insert ``rows`` in multi-row statements of at most ``ROWS_PER_STATEMENT`` rows (one round trip
    into SQLite each); more than one only inside a transaction."""
    if len(rows) <= ROWS_PER_STATEMENT:  # the common case, without copying
        cursor.execute(_insert_many_sql(len(rows)), list(itertools.chain.from_iterable(rows)))
        return
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        chunk = rows[start : start + ROWS_PER_STATEMENT]
        cursor.execute(_insert_many_sql(len(chunk)), list(itertools.chain.from_iterable(chunk)))


def _commit_one_by_one(
    cursor: sqlite3.Cursor, batches: Sequence[list[Row]], registered: set[str], marks: Sequence[list[Mark]]
) -> list[BaseException | None]:
    """Replay a group that hit a UNIQUE violation, each batch under its own savepoint.

    A batch registers its new sessions under its savepoint, so a batch that fails registers nothing:
    its session is listed only if a batch of it landed (then in the order that batch landed). A
    session registered by an earlier batch of the group is registered again, a no-op: this path is rare.
    """
    outcomes: list[BaseException | None] = []
    landed: set[str] = set()  # sessions of the batches that landed, registered by this transaction
    try:
        cursor.execute("BEGIN IMMEDIATE")
        for index, rows in enumerate(batches):
            new = _unregistered(rows, registered)
            cursor.execute("SAVEPOINT baf_batch")
            try:
                cursor.executemany(REGISTER_SQL, ((session_id,) for session_id in new))
                cursor.executemany(INSERT_SQL, rows)
                if marks and marks[index]:
                    update_work(cursor, marks[index])
            except sqlite3.IntegrityError as exc:
                cursor.execute("ROLLBACK TO baf_batch")
                cursor.execute("RELEASE baf_batch")
                outcomes.append(_name_conflict(cursor, rows, exc))
            else:
                cursor.execute("RELEASE baf_batch")
                landed.update(new)
                outcomes.append(None)
        cursor.execute("COMMIT")
    except BaseException:
        _rollback(cursor)
        raise
    registered.update(landed)
    return outcomes


def _name_conflict(cursor: sqlite3.Cursor, rows: list[Row], error: sqlite3.IntegrityError) -> BaseException:
    """The ``LogConflictError`` for the first row of ``rows`` whose key is already stored.

    Runs inside the replay transaction, after the batch's savepoint was rolled back, so "stored"
    includes the batches of the same group that were accepted before this one.
    """
    existing: set[tuple[str, int]] = set()
    for start in range(0, len(rows), _LOOKUP_CHUNK):
        chunk = rows[start : start + _LOOKUP_CHUNK]
        values = ", ".join("(?, ?)" for _ in chunk)
        params = [part for row in chunk for part in (row[0], row[1])]
        found = cursor.execute(
            f"SELECT session_id, seq FROM baf_records WHERE (session_id, seq) IN (VALUES {values})", params
        ).fetchall()
        existing.update((session_id, seq) for session_id, seq in found)
    for row in rows:
        if (row[0], row[1]) in existing:
            conflict = LogConflictError(row[0], row[1])
            conflict.__cause__ = error
            return conflict
    return error  # a violation of some other constraint: report SQLite's own words


def _rollback(cursor: sqlite3.Cursor) -> None:
    # The error being handled is the one worth reporting; a rollback failing too adds nothing.
    if cursor.connection.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            cursor.execute("ROLLBACK")
