"""A session log in one SQLite file, with group commit.

``SQLiteLog`` is the store; its code is split by concern:

- ``baf.log.sqlite_schema``: the file's layout, its versions and their upgrade, opening a file as a log;
- ``baf.log.sqlite_codec``: records to rows and back, with every check a row gets (types, JSON,
  checksum, no missing seq);
- ``baf.log.sqlite_commit``: one group commit, as plain ``sqlite3`` calls, with the work index;
- ``baf.log.sqlite_writer``: group commit, where each commit runs (the event loop or a worker
  thread), the one fast path (an append committing itself) and checkpoints;
- ``baf.log.sqlite_reader``: reads on a connection of their own (in WAL mode a reader sees the last
  commit and neither waits for the writer nor holds it up).

Durability
    ``"normal"`` (``synchronous=NORMAL`` in WAL): a commit survives the process crashing or being
    killed; the last commits may be lost if the machine loses power. ``"full"`` (``synchronous=FULL``):
    each commit is fsynced before ``append`` returns and survives power loss.

One process writes a log: a second process opening the same file for writing is refused with
``LogInUseError``, naming the file and the process that holds it (``baf.log.sqlite_lock``). Readers
(``read_only=True``) are never refused and read while the writer runs. Many processes over one log:
PostgreSQL (``baf serve``).

Errors
    Every error the store raises is a ``LogError`` naming the file: ``CorruptRecordError`` for a record
    that fails its checks (session and seq), ``LogStorageError`` for what SQLite reports (a malformed
    file, a disk error, a lock held past ``busy_timeout``), with the session and seq it concerned
    where that is known.

Reading only
    ``SQLiteLog(path, read_only=True)`` (``open_log("sqlite:///path?read_only=true")``) opens only the
    reader, with SQLite's read-only URI mode, for tools that must leave the file as they found it
    (``baf replay``, ``baf export``, ``baf check``): it creates no file, runs no schema statement, no
    upgrade, no journal-mode change and no checkpoint, and ``append`` raises ``LogReadOnlyError``. It
    reads every schema version this baf knows (1 to 4) and refuses, with ``LogError``, a missing file,
    a directory, a file that is not a SQLite database or has no baf tables, and a newer schema. A
    WAL-mode file being written by another process reads as usual (see ``baf.log.sqlite_schema`` for
    its ``-wal`` and ``-shm`` files).

Lifecycle
    The first call opens the store if ``start()`` was not called. ``close()`` commits what is queued
    and closes; until ``start()`` reopens it, calls raise ``LogClosedError``. A store left open when
    its event loop ends (``asyncio.run`` cancels the writer) closes itself, since its threads (the
    worker, and aiosqlite's for the reader) would otherwise keep the process from exiting; do close it
    yourself. Appends still waiting then fail with ``LogClosedError``, including a group the worker
    thread was already committing, which may have landed: read back to know.
"""

from __future__ import annotations

import asyncio
import enum
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiosqlite

from baf.errors import LogClosedError, LogReadOnlyError, LogStorageError
from baf.log.projection import SessionProjection
from baf.log.record import Record
from baf.log.sqlite_check import check_storage
from baf.log.sqlite_codec import Row, encode_record, encode_records
from baf.log.sqlite_commit import INSERT_SQL, REGISTER_SQL, marks_of
from baf.log.sqlite_lock import WriterLock
from baf.log.sqlite_reader import SQLiteReader
from baf.log.sqlite_schema import DURABILITY_MODES, SCHEMA, SCHEMA_VERSION, Durability, open_read_only
from baf.log.sqlite_writer import SQLiteWriter
from baf.log.store import SessionLog, check_appendable

__all__ = [
    "DURABILITY_MODES",
    "INSERT_SQL",
    "REGISTER_SQL",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Durability",
    "Row",
    "SQLiteLog",
    "encode_record",
]


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


class SQLiteLog(SessionLog):
    """A ``SessionLog`` in the SQLite file at ``path`` (created with its parent directory if missing).

    ``durability`` is ``"normal"`` (survives a crash of the process) or ``"full"`` (survives power
    loss); see the module docstring. ``busy_timeout`` is how many seconds a statement waits for a lock
    held by another process before failing.

    Opening for writing refuses, with a one-line ``LogError``, a directory, a file that is not a SQLite
    database, another program's database, a newer schema and a file another process writes
    (``LogInUseError``); a missing or empty file becomes a new log, and an older layout is upgraded
    (``baf.log.sqlite_schema``).

    ``read_only=True`` opens an existing log for reading only and never changes the file (see "Reading
    only" in the module docstring); ``append`` then raises ``LogReadOnlyError`` and ``durability`` does
    not apply.

    ``start()`` is optional: the first call opens the store. ``close()`` commits everything already
    queued, then closes; after it every call raises ``LogClosedError`` until ``start()`` opens the
    file again. The store belongs to the event loop that started it; closed, it may be started again
    from another loop.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        durability: Durability = "normal",
        busy_timeout: float = 5.0,
        *,
        read_only: bool = False,
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {', '.join(map(repr, DURABILITY_MODES))}, got {durability!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float) or busy_timeout < 0:
            raise ValueError(f"busy_timeout must be a number of seconds >= 0, got {busy_timeout!r}")
        text_path = os.fspath(path)
        if text_path in ("", ":memory:") or text_path.startswith("file:"):
            # The writer and the reader are two connections: they would see two different databases.
            raise ValueError(f"SQLiteLog needs a file path, got {text_path!r}; use MemoryLog for memory")
        # Made absolute now: a relative path must not change meaning if the process changes directory
        # before the store opens.
        self._path = Path(text_path).absolute()
        self._durability: Durability = durability
        self._busy_timeout_ms = round(busy_timeout * 1000)
        self._read_only = bool(read_only)
        self._state = _State.NEW
        self._lifecycle: asyncio.Lock | None = None
        self._lifecycle_loop: asyncio.AbstractEventLoop | None = None
        self._writer: SQLiteWriter | None = None
        self._reader: SQLiteReader | None = None
        self._lock = WriterLock(self._path)
        self._commits_before = 0  # commits of earlier openings

    @property
    def path(self) -> Path:
        """The database file, as an absolute path."""
        return self._path

    @property
    def durability(self) -> Durability:
        """``"normal"`` or ``"full"``."""
        return self._durability

    @property
    def read_only(self) -> bool:
        """Whether the store was opened for reading only (``append`` refused, the file never changed)."""
        return self._read_only

    @property
    def commits(self) -> int:
        """Transactions committed so far; each holds one or more ``append`` calls."""
        return self._commits_before + (self._writer.commits if self._writer is not None else 0)

    def __repr__(self) -> str:
        mode = "read_only=True" if self._read_only else f"durability={self._durability!r}"
        return f"SQLiteLog({str(self._path)!r}, {mode}, state={self._state.value})"

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the file, create or upgrade the tables if needed and start the writer. Idempotent.

        Read-only, only check that the file is a baf log this baf can read and open the reader.
        Also reopens a closed store.
        """
        if self._state is _State.OPEN:
            return
        async with self._lifecycle_lock():
            if self._state is _State.OPEN:
                return
            if not self._read_only:
                writer = SQLiteWriter(self._path, self._durability, self._busy_timeout_ms, self._lost)
                await writer.open()
                try:
                    # Taken once the file is known to be a log (a bad path leaves no lock file beside it);
                    # opening created or upgraded it, which SQLite serialises with the holder's commits.
                    self._lock.acquire()
                except BaseException:
                    await writer.close()
                    raise
                self._writer = writer
                try:
                    self._reader = await self._open_reader()
                except BaseException:
                    self._writer = None
                    await writer.close()
                    self._lock.release()
                    raise
            else:
                connection, version = await open_read_only(self._path, self._busy_timeout_ms)
                self._reader = SQLiteReader(connection, self._path, int(version))
            self._state = _State.OPEN

    async def _open_reader(self) -> SQLiteReader:
        """The reader beside a writer, which has made the file current."""
        try:
            connection = await aiosqlite.connect(self._path, isolation_level=None)
        except sqlite3.Error as exc:
            raise LogStorageError(self._path, f"cannot open a reader: {exc}") from exc
        try:
            await connection.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            await connection.execute("PRAGMA query_only = ON")
        except BaseException as exc:
            await connection.close()
            if isinstance(exc, sqlite3.Error):
                raise LogStorageError(self._path, f"cannot open a reader: {exc}") from exc
            raise
        return SQLiteReader(connection, self._path, SCHEMA_VERSION)

    async def close(self) -> None:
        """Commit every append already queued, stop the writer and close the file. Idempotent."""
        async with self._lifecycle_lock():
            if self._state is not _State.OPEN:
                self._state = _State.CLOSED
                return
            self._state = _State.CLOSED  # from here on, new calls are refused
            writer, reader = self._writer, self._reader
            self._reader = None
            try:
                if writer is not None:
                    await writer.close()
                    self._commits_before += writer.commits
                    self._writer = None
            finally:
                self._lock.release()
                if reader is not None:
                    await reader.close()

    def _lost(self) -> None:
        """The writer task ended without ``close()``: close the store too, without waiting."""
        self._state = _State.CLOSED
        if self._writer is not None:
            self._commits_before += self._writer.commits
            self._writer = None
        self._lock.release()
        if self._reader is not None:
            self._reader.stop()  # closes the connection and ends its thread, without waiting
            self._reader = None

    def _lifecycle_lock(self) -> asyncio.Lock:
        """The lock serialising start and close, made for the running loop."""
        loop = asyncio.get_running_loop()
        if self._lifecycle is None or self._lifecycle_loop is not loop:
            self._lifecycle, self._lifecycle_loop = asyncio.Lock(), loop
        return self._lifecycle

    def _check_not_closed(self) -> None:
        if self._state is _State.CLOSED:
            raise LogClosedError(f"{self!r} is closed")

    # -- writing -----------------------------------------------------------------------------------

    async def append(self, records: Sequence[Record]) -> None:
        """Durably append ``records`` (any sessions), all or nothing; see ``baf.log.sqlite_writer``.

        Raises ``LogReadOnlyError`` on a store opened with ``read_only=True``.
        """
        if self._read_only:
            raise LogReadOnlyError(f"{self!r} is read-only: open it without read_only=True to append")
        self._check_not_closed()
        check_appendable(records)
        rows, size = encode_records(records)
        if not rows:
            return
        marks = marks_of(records)
        if self._state is not _State.OPEN:
            await self.start()
        self._check_not_closed()
        writer = self._writer
        if writer is None:
            raise LogClosedError(f"{self!r}: the writer has stopped")
        await writer.append(rows, marks, size)

    # -- reading -----------------------------------------------------------------------------------

    async def read(self, session_id: str, after_seq: int = 0) -> list[Record]:
        """Return the records of ``session_id`` with ``seq > after_seq``, in seq order, upcast."""
        return await (await self._reading()).read(session_id, after_seq)

    async def read_chunks(self, session_id: str, after_seq: int = 0, size: int = 1000) -> AsyncIterator[list[Record]]:
        """``read`` a chunk at a time: each chunk is one query for the next ``size`` records, so a
        caller that stops early never reads the rest."""
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        while True:
            chunk = await (await self._reading()).read(session_id, after_seq, size)
            if chunk:
                yield chunk
            if len(chunk) < size:
                return
            after_seq = chunk[-1].seq

    async def read_last(self, session_id: str, count: int, before_seq: int | None = None) -> list[Record]:
        """The newest ``count`` records before ``before_seq``, in seq order: one query that reads only them."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count!r}")
        return await (await self._reading()).read_last(session_id, count, before_seq)

    async def project(self, session_id: str) -> SessionProjection:
        """Fold the session's records into a projection as they are fetched, without keeping them
        (see ``baf.log.sqlite_reader``); every record is decoded, checked and upcast as ``read`` does."""
        return await (await self._reading()).project(session_id)

    async def sessions(self) -> list[str]:
        """Return every session id in the log, in order of its first record."""
        return await (await self._reading()).sessions()

    async def unfinished_sessions(self) -> list[str]:
        """The sessions with unfinished work (``baf.log.work``), from the ``baf_work`` index the writer
        keeps in each append's transaction: one row per such session, whatever the log's size.

        A file of schema version 1 or 2 opened read-only has no index: its sessions are folded instead.
        """
        reader = await self._reading()
        if not reader.indexed:
            return await super().unfinished_sessions()
        return await reader.unfinished_sessions()

    async def read_for_load(self, session_id: str) -> list[Record]:
        """The records from the latest snapshot on, found through the ``baf_records_snapshots`` index."""
        reader = await self._reading()
        latest = await reader.latest_snapshot(session_id)
        return await reader.read(session_id, latest - 1 if latest is not None else 0)

    async def check_storage(self) -> list[tuple[bool, str]]:
        """SQLite's integrity check and the file's own consistency (``baf.log.sqlite_check``)."""
        reader = await self._reading()
        return await check_storage(self._path, reader.has_checksums)

    async def _reading(self) -> SQLiteReader:
        self._check_not_closed()
        if self._state is not _State.OPEN:
            await self.start()
        reader = self._reader
        if self._state is not _State.OPEN or reader is None:
            raise LogClosedError(f"{self!r} is closed")
        return reader
