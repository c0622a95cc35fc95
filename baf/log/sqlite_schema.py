"""The SQLite log's file: its layout, its versions, their upgrade, and opening a file as a log.

Layout
    ``baf_records`` keeps one row per record. Its rowid (``position``) is the global append order and
    ``UNIQUE (session_id, seq)`` is the log's key. A ``WITHOUT ROWID`` table keyed on
    ``(session_id, seq)`` would write 4-5x slower and make the file over 3x larger with records of
    about 1 KB from many interleaved sessions: each insert would split pages of big rows in the middle
    of the tree, while rowid inserts append to the end of the table and only the small index entries
    land in the middle. ``baf_sessions`` lists sessions in order of first
    record. The writer fills it: a group commit registers, in the same transaction as their rows, the
    sessions its connection has not registered yet (``baf.log.sqlite_commit``), so a session costs
    one ``INSERT OR IGNORE`` per connection rather than work on every row.

    ``baf_work`` (version 3) holds one row per session whose work status (``baf.log.work``) is not
    idle: the sessions with unfinished work, flagged ``unfinished``, and the rare fork holding
    messages; the status itself as JSON. The writer updates it in the transaction of every group
    holding a record that can change a status (three per turn: the message, the step's start and its
    end), so ``unfinished_sessions`` reads only those rows however many finished sessions the log
    holds. The partial index ``baf_records_snapshots`` has an entry per snapshot record only;
    ``read_for_load`` finds a session's latest snapshot through it.

    ``checksum`` (version 4) holds each record's CRC-32 (``baf.log.checksum``), checked on every read.

Versions
    A file records its layout's version in ``baf_meta``. A newer version than this baf knows is
    refused. Opening a version 1, 2 or 3 file for writing upgrades it to the current version in one
    transaction: the new table and index are created, ``baf_work`` is filled by one pass over the
    records, and the ``checksum`` column is added, empty for the records already there (they are read
    without that check; new ones get it). A version-1 file keeps its trigger, so an older baf still
    writing it keeps listing its sessions (but does not keep ``baf_work``; an older baf refuses to
    open the upgraded file). A read-only opening never upgrades (nor changes anything): on an older
    file ``unfinished_sessions`` folds every session instead, and records are read without checksums.

Opening
    A writer refuses, with a one-line ``LogError`` naming the path, a directory, a file that is not a
    SQLite database, another program's database (tables but no ``baf_meta``: baf never adds its
    tables to it) and a newer layout; a missing or empty file becomes a new log, in WAL mode. A
    read-only opening uses SQLite's read-only URI mode (``file:...?mode=ro``) and also refuses a
    missing file and a file without baf's tables. SQLite needs a WAL-mode file's ``-wal`` and ``-shm``
    companions even to read it: a read-only connection creates them if they are missing and leaves
    them behind (removing them takes a checkpoint, which is a write), so a WAL-mode log in a directory
    this process cannot write is refused unless they already exist. ``immutable=1`` would do without
    them, but would also let SQLite read pages a live writer is changing.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import quote

import aiosqlite
import orjson

from baf.errors import LogError
from baf.log.sqlite_commit import SET_WORK_SQL, is_busy
from baf.log.work import IDLE, WORK_KINDS, WorkStatus, work_after

__all__ = [
    "CHECKSUM_VERSION",
    "DURABILITY_MODES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Durability",
    "open_read_only",
    "open_writer",
]

Durability = Literal["normal", "full"]

#: ``durability`` value -> ``PRAGMA synchronous`` value.
DURABILITY_MODES: Final[dict[str, str]] = {"normal": "NORMAL", "full": "FULL"}

#: Version of the table layout below, stored in ``baf_meta``. A file with a newer one is refused; one
#: with an older one this baf knows (``_OLDER_VERSIONS``) is upgraded when opened for writing.
SCHEMA_VERSION: Final = 4

# Added by version 3 (and by the upgrade of an older file): the index of sessions whose work status is
# not idle, and the index of snapshot records (partial: only snapshot rows have an entry, so it costs
# the other appends nothing).
_INDEX_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS baf_work (
        session_id TEXT PRIMARY KEY,
        status     TEXT NOT NULL,
        unfinished INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS baf_records_snapshots ON baf_records (session_id, seq) WHERE kind = 'snapshot'",
)

#: The statements that create the layout, run in one transaction. Public so tools can reuse them; a tool
#: inserting rows itself (``INSERT_SQL``) registers their sessions too (``REGISTER_SQL``), or
#: ``sessions()`` will not list them.
SCHEMA: Final[tuple[str, ...]] = (
    """CREATE TABLE IF NOT EXISTS baf_records (
        position   INTEGER PRIMARY KEY,
        session_id TEXT    NOT NULL,
        seq        INTEGER NOT NULL,
        ts         REAL    NOT NULL,
        kind       TEXT    NOT NULL,
        version    INTEGER NOT NULL,
        data       TEXT    NOT NULL,
        checksum   INTEGER,
        UNIQUE (session_id, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS baf_sessions (
        position   INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL UNIQUE
    )""",
    "CREATE TABLE IF NOT EXISTS baf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"INSERT OR IGNORE INTO baf_meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}')",
    *_INDEX_SCHEMA,
)

# Older layouts this baf reads (as they are, read-only) and upgrades when it opens them for writing.
# Version 1 differs from 2 only by a trigger that registers sessions (kept by the upgrade); 2 from 3
# by the indexes of ``_INDEX_SCHEMA``; 3 from 4 by the ``checksum`` column.
_OLDER_VERSIONS: Final = frozenset({"1", "2", "3"})
#: The first version whose records carry a checksum.
CHECKSUM_VERSION: Final = 4
_KNOWN_VERSIONS: Final = frozenset({str(SCHEMA_VERSION), *_OLDER_VERSIONS})
_BAF_TABLES: Final = ("baf_records", "baf_sessions", "baf_meta")
_TABLES_SQL: Final = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)"


def open_writer(path: Path, durability: Durability, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open and configure a writer connection on ``path``, creating or upgrading the layout if needed.

    Blocking (run it on a worker thread). Raises ``LogError`` with a one-line message naming the path
    for what cannot be a log: a directory, a file that is not a SQLite database, another program's
    database, a newer schema (and any other SQLite error).
    """
    why_not = _not_a_file(path, must_exist=False, action="open")
    if why_not is not None:
        raise LogError(why_not)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent that is a file, or a folder this process may not create
        raise LogError(f"cannot open {path}: cannot create its folder: {exc.strerror or exc}") from exc
    try:
        # Autocommit: a group commit is one multi-row INSERT statement, its own transaction; larger
        # transactions open "BEGIN IMMEDIATE" themselves. Not bound to a thread: the store hands it
        # between the event loop and its worker thread, one at a time.
        writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise _open_error(path, exc, action="open") from exc
    try:
        _configure_writer(writer, path, durability, busy_timeout_ms)
    except BaseException as exc:
        writer.close()  # closing rolls back a transaction left open
        if isinstance(exc, sqlite3.Error):
            raise _open_error(path, exc, action="open") from exc
        raise
    return writer


def _configure_writer(writer: sqlite3.Connection, path: Path, durability: Durability, busy_timeout_ms: int) -> None:
    """Check that the writer's file is a baf log or a new one, switch it to WAL, create or upgrade the layout."""
    # busy_timeout first: switching to WAL and creating tables take locks another process may hold.
    writer.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    # Before the WAL switch, the first change to the file: another program's database is left as it
    # was, not given baf's tables. An empty (or new) file has no tables and becomes a new log.
    tables = [row[0] for row in writer.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if tables and "baf_meta" not in tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise LogError(
            f"not a baf log: {path} is a database with other tables ({shown}) and no baf_meta; "
            "a new log needs a new or empty file"
        )
    row = _switch_to_wal(writer, busy_timeout_ms)
    mode = str(row[0]).lower() if row else "unknown"
    if mode != "wal":
        raise LogError(
            f"{path}: SQLite refused WAL journal mode (got {mode!r}); "
            "the file system may not support it (network file systems often do not)"
        )
    writer.execute(f"PRAGMA synchronous = {DURABILITY_MODES[durability]}")
    writer.execute("BEGIN IMMEDIATE")
    stored = None
    if writer.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'baf_meta'").fetchone():
        row = writer.execute("SELECT value FROM baf_meta WHERE key = 'schema_version'").fetchone()
        stored = row[0] if row else None
        _check_version(path, stored)
    for statement in SCHEMA:
        writer.execute(statement)
    if stored in _OLDER_VERSIONS:
        _upgrade(writer, int(str(stored)))
    writer.execute("COMMIT")
    if durability == "normal":
        # Commits on the loop never wait (see baf.log.sqlite_writer), and checkpoints, which fsync,
        # are the worker's.
        writer.execute("PRAGMA busy_timeout = 0")
        writer.execute("PRAGMA wal_autocheckpoint = 0")


def _switch_to_wal(writer: sqlite3.Connection, busy_timeout_ms: int) -> Any:
    """``PRAGMA journal_mode = WAL``, retried while another connection holds the file.

    Switching needs an exclusive lock, and SQLite reports a conflict on it as busy at once, without
    waiting ``busy_timeout`` (it would risk a deadlock): two processes opening a new file together
    can hit it. So wait here, up to ``busy_timeout``.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            return writer.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)  # on the worker thread: the event loop is not held


def _upgrade(writer: sqlite3.Connection, stored: int) -> None:
    """Bring a file of version ``stored`` (1 to 3) to the current layout, inside the caller's transaction.

    ``SCHEMA`` has created the version-3 indexes. From before 3, this fills ``baf_work`` by folding,
    once, every record that can change a work status (one pass over the table); a record whose data
    does not decode counts as holding no fields here (reading it reports it as corrupt). From before
    4, it adds the ``checksum`` column: the records already there keep none, and are read without that
    check (computing one now would vouch for rows nobody checked). Then it sets the version.
    """
    if stored < 3:
        _fill_work_index(writer)
    if stored < CHECKSUM_VERSION:
        writer.execute("ALTER TABLE baf_records ADD COLUMN checksum INTEGER")
    writer.execute("UPDATE baf_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _fill_work_index(writer: sqlite3.Connection) -> None:
    rows = writer.execute(
        "SELECT session_id, seq, kind, CAST(data AS BLOB) FROM baf_records "
        f"WHERE kind IN ({', '.join('?' * len(WORK_KINDS))}) ORDER BY session_id, seq",
        sorted(WORK_KINDS),
    )
    statuses: dict[str, WorkStatus] = {}
    for session_id, seq, kind, text in rows:
        try:
            data = orjson.loads(text)
        except (ValueError, TypeError):
            data = None
        status = statuses.get(session_id, IDLE)
        statuses[session_id] = work_after(status, kind, seq, data if isinstance(data, dict) else {})
    writer.executemany(
        SET_WORK_SQL,
        ((sid, status.to_text(), int(status.unfinished)) for sid, status in statuses.items() if status != IDLE),
    )


async def open_read_only(path: Path, busy_timeout_ms: int) -> tuple[aiosqlite.Connection, str]:
    """A reader opened with ``mode=ro`` on a baf log this baf can read, and the file's schema version.

    Changes nothing in the file. Raises ``LogError`` naming the path.
    """
    # On a thread, as the writer opens on its worker: the file system may block (a network mount).
    why_not = await asyncio.to_thread(_not_a_file, path)
    if why_not is not None:
        raise LogError(why_not)
    reader: aiosqlite.Connection | None = None
    try:
        reader = await aiosqlite.connect(_read_only_uri(path), uri=True, isolation_level=None)
        await reader.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        tables = {row[0] for row in await reader.execute_fetchall(_TABLES_SQL, _BAF_TABLES)}
        if not tables:
            raise LogError(f"not a baf log: {path} has no baf tables")
        if missing := [name for name in _BAF_TABLES if name not in tables]:
            raise LogError(f"not a baf log: {path} has no table {', '.join(missing)}")
        rows = await reader.execute_fetchall("SELECT value FROM baf_meta WHERE key = 'schema_version'")
        stored = next((row[0] for row in rows), None)
        _check_version(path, stored)
    except BaseException as exc:
        if reader is not None:
            await reader.close()
        if isinstance(exc, sqlite3.Error):
            raise await asyncio.to_thread(_open_error, path, exc) from exc
        raise
    return reader, str(stored)


def _check_version(path: Path, stored: object) -> None:
    """Raise ``LogError`` unless ``stored`` (``baf_meta``'s schema_version) is a layout this baf knows."""
    if stored not in _KNOWN_VERSIONS:
        raise LogError(
            f"{path} has log schema version {stored!r}; this baf reads versions "
            f"{', '.join(sorted(_KNOWN_VERSIONS))}: upgrade baf to use this file"
        )


def _read_only_uri(path: Path) -> str:
    """The SQLite URI opening ``path`` read-only; quoted, since ``?``, ``#`` and ``%`` mean something in a URI."""
    return f"file:{quote(str(path))}?mode=ro"


def _not_a_file(path: Path, *, must_exist: bool = True, action: str = "read") -> str | None:
    """Why ``path`` cannot be a log file, if so: a directory, or (``must_exist``) nothing at all.

    Asked before SQLite opens it, since SQLite says "unable to open database file" for both.
    ``action`` names what failed in the message ("read", or "open" for a writer).
    """
    if path.is_dir():
        return f"cannot {action} {path}: it is a directory, not a log file"
    if must_exist and not path.exists():
        return f"cannot {action} {path}: no such log file"
    return None


def _open_error(path: Path, error: sqlite3.Error, *, action: str = "read") -> LogError:
    """A one-line ``LogError`` for what SQLite said while a store opened ``path`` (``action``: as in
    :func:`_not_a_file`)."""
    name = getattr(error, "sqlite_errorname", "")
    if name == "SQLITE_NOTADB":
        return LogError(f"not a baf log: {path} is not a SQLite database")
    if name in ("SQLITE_CANTOPEN", "SQLITE_READONLY_DIRECTORY") and _needs_wal_files(path):
        # SQLite cannot create them in a directory it may not write to (a read-only mount or folder),
        # and reading without them (immutable=1) would be unsafe should a writer come along.
        return LogError(
            f"cannot read {path}: a WAL-mode file needs its -wal and -shm files, which cannot be "
            "created in its folder; copy it to a folder you can write to"
        )
    return LogError(f"cannot {action} {path}: {error}")


def _needs_wal_files(path: Path) -> bool:
    """Whether ``path`` is a WAL-mode SQLite file whose ``-shm`` file is missing.

    Read from the header: bytes 18 and 19 (the read and write format versions) are 2 in WAL mode.
    """
    try:
        with path.open("rb") as file:
            header = file.read(20)
    except OSError:
        return False
    wal = header.startswith(b"SQLite format 3\0") and header[18:20] == b"\x02\x02"
    return wal and not path.with_name(path.name + "-shm").exists()
