"""A session log in one SQLite file, with group commit.

Writing
    ``append`` encodes and validates its batch. Unless it may commit the batch itself (below), it puts
    it on a queue with a future and waits; one writer task takes *everything* queued and commits it as
    one group (``baf.log.sqlite_commit``), then resolves the futures: many sessions' appends share one
    commit, so one WAL append (or one fsync, ``durability="full"``) serves them all. A UNIQUE
    violation fails only the batch that conflicts, with ``LogConflictError`` naming its first
    conflicting record; the other batches land. A failure that is not about one batch (disk full, the
    file locked past ``busy_timeout``) fails every append of the group with the ``sqlite3`` error.

    Where a commit runs depends on what it may wait for. With ``durability="normal"`` a commit writes
    a few pages to the WAL and does not fsync: tens of microseconds, less than handing it to a thread
    costs (the thread needs the GIL back to bind parameters and to report, and a busy event loop holds
    it for up to the 5 ms switch interval each time). So commits run on the event loop, with the lock
    timeout at zero. A group goes to the store's worker thread instead when another process holds the
    write lock (the worker waits up to ``busy_timeout`` for it) or when it holds more than 256 K
    characters of data (which would hold the loop for milliseconds). With ``durability="full"`` every
    commit fsyncs, so every commit runs on the worker.

    Checkpoints (``durability="normal"``; SQLite's automatic one is off, it would fsync inside a
    commit on the loop) run on the worker with a connection of their own, while commits go on: a
    checkpoint fsyncs the WAL and the database, milliseconds during which appends used to wait.
    The WAL restarts from its beginning only when a writer finds it wholly copied, so a checkpoint
    that commits kept overtaking leaves it growing; when one reports more than
    ``_WAL_LIMIT_PAGES`` frames, the next checkpoint runs between two commits instead (appends
    wait for that one), which lets the next commit restart the WAL. So does a background checkpoint
    that takes so long (a slow fsync) that ``_WAL_LIMIT_PAGES`` pages were committed since it began:
    the commits after that wait for it and for the blocking one that follows.

    With ``durability="normal"``, an ``append`` that finds the store idle commits its batch itself,
    sparing the two trips through the event loop that waking the writer task costs, and above all
    the wait until the loop goes round, which in a busy round lasts as long as every other task's
    turn in it. Idle means: nothing queued, no blocking checkpoint due, and since the loop last went
    round fewer than ``_INLINE_COMMITS_PER_ROUND`` appends committed themselves (this session's, fewer
    than ``_INLINE_COMMITS_PER_SESSION``). Past that, a burst of appends (many sessions in one round)
    queues for one group commit: a commit costs ~50 µs of CPU, so committing each of a thousand
    appends alone would cost more than their wait.

    If the task awaiting ``append`` is cancelled before the writer took its batch, the batch is
    dropped; once taken it is committed anyway. Either way the caller cannot tell, as with any
    cancelled write: read back to know.

Reading
    Reads use a second connection. In WAL mode a reader sees the last commit and neither waits for
    the writer nor holds it up. Every row is decoded strictly: bad JSON, data that is not an object,
    a column of the wrong type or text that is not UTF-8 raises ``CorruptRecordError`` naming the
    session and seq. Records then pass through ``baf.log.upcast``. ``project`` decodes and folds each
    row on the reader's thread as it is fetched (so upcasters and the fold run there), keeping none.

Layout
    ``baf_records`` keeps one row per record. Its rowid (``position``) is the global append order and
    ``UNIQUE (session_id, seq)`` is the log's key. A ``WITHOUT ROWID`` table keyed on
    ``(session_id, seq)`` was measured and rejected: with records of about 1 KB from many interleaved
    sessions it wrote 4-5x slower and made the file over 3x larger, because each insert splits pages
    of big rows in the middle of the tree, while rowid inserts append to the end of the table and
    only the small index entries land in the middle. ``baf_sessions`` lists sessions in order of first
    record. The writer fills it: a group commit registers, in the same transaction as their rows, the
    sessions its connection has not registered yet (``baf.log.sqlite_commit``), so a session costs
    one ``INSERT OR IGNORE`` per connection rather than work on every row. Schema version 1 filled it
    with a trigger on ``baf_records``, which cost a few microseconds a row.

    ``baf_work`` (version 3) holds one row per session whose work status (``baf.log.work``) is not
    idle: the sessions with unfinished work, flagged ``unfinished``, and the rare fork holding
    messages; the status itself as JSON. The writer updates it in the transaction of every group
    holding a record that can change a status (three per turn: the message, the step's start and its
    end), so ``unfinished_sessions`` reads only those rows however many finished sessions the log holds. The
    partial index ``baf_records_snapshots`` has an entry per snapshot record only; ``read_for_load``
    finds a session's latest snapshot through it.

    Opening a version 1 or 2 file for writing upgrades it to version 3 in one transaction: the new
    index table and index are created and ``baf_work`` filled by one pass over the records. A
    version-1 file keeps its trigger, so an older baf still writing it keeps listing its sessions (but
    does not keep ``baf_work``; an older baf refuses to open the upgraded file). A read-only
    opening never upgrades: on an older file ``unfinished_sessions`` folds every session instead.

Durability
    ``"normal"`` (``synchronous=NORMAL`` in WAL): a commit survives the process crashing or being
    killed; the last commits may be lost if the machine loses power. ``"full"`` (``synchronous=FULL``):
    each commit is fsynced before ``append`` returns and survives power loss.

Several processes may open the same file: SQLite serialises their writers; a writer that finds the
file locked retries for ``busy_timeout`` seconds before failing.

Reading only
    ``SQLiteLog(path, read_only=True)`` (``open_log("sqlite:///path?read_only=true")``) opens only the
    reader, with SQLite's read-only URI mode (``file:...?mode=ro``), for tools that must leave the file
    as they found it (``baf replay``, ``baf export``): it creates no file, runs no schema statement, no
    journal-mode change and no checkpoint, and ``append`` raises ``LogReadOnlyError``. It
    reads every schema version this baf knows (1, 2 and 3) and refuses, with ``LogError``, a missing
    file, a directory, a file that is not a SQLite database or has no baf tables, and a newer schema.
    A WAL-mode file being written by another process reads as usual. SQLite needs the file's
    ``-wal`` and ``-shm`` companions for that: a read-only connection creates them if they are missing
    and leaves them behind (removing them takes a checkpoint, which is a write), so a WAL-mode log in
    a directory this process cannot write is refused unless they already exist. ``immutable=1`` would
    do without them, but would also let SQLite read pages a live writer is changing.

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
import contextlib
import enum
import functools
import gc
import json
import logging
import math
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar
from urllib.parse import quote

import aiosqlite
import orjson

from baf.errors import CorruptRecordError, LogClosedError, LogError, LogReadOnlyError
from baf.log import upcast as upcast_module
from baf.log.jsontext import encode_json
from baf.log.projection import SessionProjection
from baf.log.record import Record, build_record
from baf.log.sqlite_commit import INSERT_SQL, REGISTER_SQL, SET_WORK_SQL, Mark, Row, commit_group, is_busy, marks_of
from baf.log.store import SessionLog, check_appendable
from baf.log.work import IDLE, WORK_KINDS, WorkStatus, work_after

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

logger = logging.getLogger("baf.log.sqlite")

Durability = Literal["normal", "full"]

#: ``durability`` value -> ``PRAGMA synchronous`` value.
DURABILITY_MODES: Final[dict[str, str]] = {"normal": "NORMAL", "full": "FULL"}

#: Version of the table layout below, stored in ``baf_meta``. A file with a newer one is refused; one
#: with an older one this baf knows (``_OLDER_VERSIONS``) is used as it is.
SCHEMA_VERSION: Final = 3

# Added by version 3 (and by the upgrade of an older file): the index of sessions with unfinished work
# (``baf.log.work``; a row per such session, none for the others) and the index of snapshot records
# (partial: only snapshot rows have an entry, so it costs the other appends nothing).
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

#: Older layouts this baf reads (as they are, read-only) and upgrades when it opens them for writing.
#: Version 1 differs from 2 only by a trigger that registers sessions (see "Layout" in the module
#: docstring; kept by the upgrade); 2 from 3 by the indexes of ``_INDEX_SCHEMA``.
_OLDER_VERSIONS: Final = frozenset({"1", "2"})

_SELECT_SQL: Final = (
    "SELECT seq, ts, kind, version, data FROM baf_records WHERE session_id = ? AND seq > ? ORDER BY seq"
)
# Same rows, with text read as bytes: used only to find the row a UTF-8 decoding error came from.
_SELECT_RAW_SQL: Final = (
    "SELECT seq, CAST(kind AS BLOB), CAST(data AS BLOB) FROM baf_records WHERE session_id = ? AND seq > ? ORDER BY seq"
)
_SESSIONS_SQL: Final = "SELECT session_id FROM baf_sessions ORDER BY position"
_UNFINISHED_SQL: Final = (
    "SELECT w.session_id FROM baf_work AS w LEFT JOIN baf_sessions AS s ON s.session_id = w.session_id "
    "WHERE w.unfinished = 1 ORDER BY s.position"
)
# Through the partial index baf_records_snapshots (where it exists): no scan of the session's rows.
_LATEST_SNAPSHOT_SQL: Final = "SELECT max(seq) FROM baf_records WHERE session_id = ? AND kind = 'snapshot'"
_BAF_TABLES: Final = ("baf_records", "baf_sessions", "baf_meta")
_TABLES_SQL: Final = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)"
# The layouts this baf reads and writes.
_KNOWN_VERSIONS: Final = frozenset({str(SCHEMA_VERSION), *_OLDER_VERSIONS})
# Rows per round trip in ``project``: enough that the trips do not show, few enough that other reads
# on the connection are not kept waiting long (a chunk is a few milliseconds of decoding).
_FOLD_CHUNK: Final = 2000
_MAX_INT64: Final = 2**63 - 1
# Sessions the writer remembers as registered; past this many it forgets them all, so a long-lived
# store does not grow without bound. A forgotten session costs one more registration, on its next append.
_KNOWN_SESSIONS_LIMIT: Final = 100_000

# Appends that may commit themselves on the event loop before the loop goes round, in all and per
# session (see _may_commit_now): ~3 ms of commits per round at most.
_INLINE_COMMITS_PER_ROUND: Final = 64
_INLINE_COMMITS_PER_SESSION: Final = 8
# Largest group (characters of JSON) committed on the event loop; SQLite writes ~1 MB in a few ms here.
_LOOP_COMMIT_BYTES: Final = 256 * 1024
# WAL pages a "normal" store lets accumulate before its worker checkpoints them (SQLite's own
# automatic checkpoint, which it turns off, uses 1000).
_CHECKPOINT_PAGES: Final = 1000
# Frames in the WAL, as a background checkpoint reports them, or pages committed since the running
# one began, past which the next checkpoint blocks commits so that the WAL can restart (see the module
# docstring).
_WAL_LIMIT_PAGES: Final = 2 * _CHECKPOINT_PAGES


# Decoding dominates reading a log; orjson parses about four times faster than json.
_fast_loads: Callable[[str], Any] = orjson.loads


def encode_record(record: Record) -> Row:
    """Encode ``record`` as a ``baf_records`` row, or raise ``TypeError``/``ValueError``.

    Done in ``append``, before the batch is queued, so that a record SQLite would refuse fails its own
    call instead of the whole group it would have been committed with.
    """
    session_id, seq, kind, version, ts, data = (
        record.session_id,
        record.seq,
        record.kind,
        record.version,
        record.ts,
        record.data,
    )
    # Exact types are the common case and cheap to test; anything else gets the careful checks.
    if not (
        type(session_id) is str
        and type(kind) is str
        and type(seq) is int
        and type(version) is int
        and type(ts) is float
        and type(data) is dict
        and seq <= _MAX_INT64
        and version <= _MAX_INT64
        and math.isfinite(ts)
    ):
        _check_fields(record)
    try:
        encoded = encode_json(data)
    except (TypeError, ValueError) as exc:  # ValueError: a circular reference
        raise TypeError(f"{_where(record)}: data is not JSON: {exc}") from exc
    if isinstance(encoded, bytes):
        text = encoded.decode()  # orjson's output: valid UTF-8 by construction
    else:
        text = encoded
        _check_unicode(record, "data", text)
    if not (session_id.isascii() and kind.isascii()):
        _check_unicode(record, "session_id", session_id)
        _check_unicode(record, "kind", kind)
    return (session_id, seq, float(ts), kind, version, text)


def _check_unicode(record: Record, name: str, text: str) -> None:
    # A lone surrogate survives json.dumps(ensure_ascii=False) but not SQLite's UTF-8 binding.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{_where(record)}: {name} is not valid Unicode: {exc}") from exc


def _where(record: Record) -> str:
    return f"session {record.session_id!r} seq {record.seq!r}"


def _check_fields(record: Record) -> None:
    """Raise the precise error for a field SQLite cannot store as the schema says; accept subclasses."""
    where = _where(record)
    if not isinstance(record.session_id, str):
        raise TypeError(f"{where}: session_id must be str, not {type(record.session_id).__name__}")
    if not isinstance(record.kind, str):
        raise TypeError(f"{where}: kind must be str, not {type(record.kind).__name__}")
    for name, value in (("seq", record.seq), ("version", record.version)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: {name} must be int, not {type(value).__name__}")
        if value > _MAX_INT64:
            raise ValueError(f"{where}: {name} {value} does not fit in 64 bits")
    ts = record.ts
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise TypeError(f"{where}: ts must be a finite number, not {ts!r}")
    if not isinstance(record.data, dict):
        raise TypeError(f"{where}: data must be a dict, not {type(record.data).__name__}")


_T = TypeVar("_T")


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(slots=True)
class _Batch:
    """One ``append`` call waiting for the writer."""

    rows: list[Row]
    marks: list[Mark]  # its records that change a work status (baf.log.work)
    future: asyncio.Future[None]


class SQLiteLog(SessionLog):
    """A ``SessionLog`` in the SQLite file at ``path`` (created with its parent directory if missing).

    ``durability`` is ``"normal"`` (survives a crash of the process) or ``"full"`` (survives power
    loss); see the module docstring. ``busy_timeout`` is how many seconds a statement waits for a lock
    held by another process before failing.

    Opening for writing refuses, with a one-line ``LogError``, a directory, a file that is not a SQLite
    database, another program's database (tables but no ``baf_meta``: baf never adds its tables to it)
    and a newer schema; a missing or empty file becomes a new log.

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
        # Whether the file has the indexes of schema version 3 (a writer upgrades it; a reader may not).
        self._indexed = False
        self._state = _State.NEW
        self._lifecycle: asyncio.Lock | None = None
        self._lifecycle_loop: asyncio.AbstractEventLoop | None = None
        # The writer connection is used by one party at a time: on the event loop (an append committing
        # its own batch, or the writer task), or by the worker thread while the writer task awaits it.
        # Kept as its one cursor, which every commit uses (``Connection.execute`` makes a new one each time).
        self._cursor: sqlite3.Cursor | None = None
        # Sessions known to be in baf_sessions, kept for the writer connection (see sqlite_commit).
        self._registered: set[str] = set()
        self._worker: ThreadPoolExecutor | None = None
        self._reader: aiosqlite.Connection | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._pending: list[_Batch] = []
        self._wakeup: asyncio.Event | None = None
        self._stopping = False
        self._commits = 0
        self._unchecked_pages = 0  # estimated WAL pages written since the last checkpoint
        # The checkpoints' own connection (worker thread only), whether one runs in the background,
        # and how many frames the WAL held at the last one.
        self._checkpointer: _Checkpointer | None = None
        self._checkpointing = False
        self._wal_frames = 0
        self._writer_busy = False  # the writer task is in a commit or checkpoint that may use the worker
        # Appends that committed themselves since the loop last went round, per session and in all:
        # past a few, a session's appends wait for the writer task, so a task appending in a tight loop
        # still lets the event loop go round; past more, a burst queues for a group commit.
        self._round_commits: dict[str, int] = {}
        self._round_total = 0

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
    def _writer(self) -> sqlite3.Connection | None:
        """The writer connection, if open."""
        return None if self._cursor is None else self._cursor.connection

    @property
    def commits(self) -> int:
        """Transactions committed so far; each holds one or more ``append`` calls."""
        return self._commits

    def __repr__(self) -> str:
        mode = "read_only=True" if self._read_only else f"durability={self._durability!r}"
        return f"SQLiteLog({str(self._path)!r}, {mode}, state={self._state.value})"

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the file, create the tables if needed and start the writer. Idempotent.

        Read-only, only check that the file is a baf log this baf can read and open the reader.
        Also reopens a closed store.
        """
        if self._state is _State.OPEN:
            return
        async with self._lifecycle_lock():
            if self._state is _State.OPEN:
                return
            if self._read_only:
                self._reader = await self._open_read_only()
                self._state = _State.OPEN
                return
            await self._open()
            self._indexed = True
            # Made here, not in __init__: asyncio primitives belong to the loop that first waits on them.
            self._wakeup = wakeup = asyncio.Event()
            self._stopping = False
            task = asyncio.create_task(self._write_loop(wakeup), name=f"baf-log-writer:{self._path}")
            task.add_done_callback(self._writer_done)
            self._writer_task = task
            self._state = _State.OPEN

    async def close(self) -> None:
        """Commit every append already queued, stop the writer and close the file. Idempotent."""
        async with self._lifecycle_lock():
            if self._state is not _State.OPEN:
                self._state = _State.CLOSED
                return
            self._state = _State.CLOSED  # from here on, new calls are refused
            self._stopping = True
            if self._wakeup is not None:
                self._wakeup.set()
            try:
                if self._writer_task is not None:
                    # wait() rather than await: a writer that died has already failed its appends.
                    await asyncio.wait({self._writer_task})
                    if not self._writer_task.cancelled():
                        self._writer_task.exception()  # retrieved, so asyncio does not log it again
            finally:
                await self._close_connections()

    async def _open(self) -> None:
        self._worker = worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="baf-log")
        # What a previous opening counted or left running concerns its own connections.
        self._checkpointer = _Checkpointer(self._path)
        self._checkpointing = False
        self._unchecked_pages = self._wal_frames = 0
        self._round_commits.clear()
        self._round_total = 0
        self._registered = set()  # a new connection, maybe to a file changed meanwhile: learn anew
        try:
            # Opening touches the file system (which can block: a network mount) and may wait for
            # locks: done on the worker.
            self._cursor = (await self._on_worker(self._open_writer)).cursor()
            self._reader = await aiosqlite.connect(self._path, isolation_level=None)
            await self._reader.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            await self._reader.execute("PRAGMA query_only = ON")
        except BaseException:
            await self._close_connections()
            raise
        if worker is not self._worker:  # closed meanwhile
            raise LogClosedError(f"{self!r} was closed while opening")

    def _open_writer(self) -> sqlite3.Connection:
        """Open and configure the writer connection, creating the layout if needed (worker thread).

        Raises ``LogError`` with a one-line message for what cannot be a log: a directory, a file that is
        not a SQLite database, another program's database, a newer schema (and any other SQLite error).
        """
        path = self._path
        why_not = _not_a_file(path, must_exist=False, action="open")
        if why_not is not None:
            raise LogError(why_not)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a parent that is a file, or a folder this process may not create
            raise LogError(f"cannot open {path}: cannot create its folder: {exc.strerror or exc}") from exc
        try:
            # Autocommit: a group commit is one multi-row INSERT statement, its own transaction; larger
            # transactions open "BEGIN IMMEDIATE" themselves. Not bound to a thread: see self._writer.
            writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _open_error(path, exc, action="open") from exc
        try:
            self._configure_writer(writer)
        except BaseException as exc:
            writer.close()  # closing rolls back a transaction left open
            if isinstance(exc, sqlite3.Error):
                raise _open_error(path, exc, action="open") from exc
            raise
        return writer

    def _configure_writer(self, writer: sqlite3.Connection) -> None:
        """Check that the writer's file is a baf log or a new one, switch it to WAL, create the layout if new."""
        # busy_timeout first: switching to WAL and creating tables take locks another process may hold.
        writer.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        # Before the WAL switch, the first change to the file: another program's database is left as it
        # was, not given baf's tables. An empty (or new) file has no tables and becomes a new log.
        tables = [row[0] for row in writer.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        if tables and "baf_meta" not in tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise LogError(
                f"not a baf log: {self._path} is a database with other tables ({shown}) and no baf_meta; "
                "a new log needs a new or empty file"
            )
        row = self._switch_to_wal(writer)
        mode = str(row[0]).lower() if row else "unknown"
        if mode != "wal":
            raise LogError(
                f"{self._path}: SQLite refused WAL journal mode (got {mode!r}); "
                "the file system may not support it (network file systems often do not)"
            )
        writer.execute(f"PRAGMA synchronous = {DURABILITY_MODES[self._durability]}")
        writer.execute("BEGIN IMMEDIATE")
        stored = None
        if writer.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'baf_meta'").fetchone():
            row = writer.execute("SELECT value FROM baf_meta WHERE key = 'schema_version'").fetchone()
            stored = row[0] if row else None
            _check_version(self._path, stored)
        for statement in SCHEMA:
            writer.execute(statement)
        if stored in _OLDER_VERSIONS:
            _upgrade(writer)
        writer.execute("COMMIT")
        if self._durability == "normal":
            # Commits on the loop never wait (see _commit_group), and checkpoints, which fsync, are
            # the worker's (see _write_loop).
            writer.execute("PRAGMA busy_timeout = 0")
            writer.execute("PRAGMA wal_autocheckpoint = 0")

    async def _open_read_only(self) -> aiosqlite.Connection:
        """The reader alone, opened with ``mode=ro`` on a baf log this baf can read; raises ``LogError``."""
        path = self._path
        # On a thread, as the writer opens on its worker: the file system may block (a network mount).
        why_not = await asyncio.to_thread(_not_a_file, path)
        if why_not is not None:
            raise LogError(why_not)
        reader: aiosqlite.Connection | None = None
        try:
            reader = await aiosqlite.connect(_read_only_uri(path), uri=True, isolation_level=None)
            await reader.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            tables = {row[0] for row in await reader.execute_fetchall(_TABLES_SQL, _BAF_TABLES)}
            if not tables:
                raise LogError(f"not a baf log: {path} has no baf tables")
            if missing := [name for name in _BAF_TABLES if name not in tables]:
                raise LogError(f"not a baf log: {path} has no table {', '.join(missing)}")
            rows = await reader.execute_fetchall("SELECT value FROM baf_meta WHERE key = 'schema_version'")
            stored = next((row[0] for row in rows), None)
            _check_version(path, stored)
            self._indexed = stored == str(SCHEMA_VERSION)
        except BaseException as exc:
            if reader is not None:
                await reader.close()
            if isinstance(exc, sqlite3.Error):
                raise await asyncio.to_thread(_open_error, path, exc) from exc
            raise
        return reader

    def _switch_to_wal(self, writer: sqlite3.Connection) -> Any:
        """``PRAGMA journal_mode = WAL``, retried while another connection holds the file.

        Switching needs an exclusive lock, and SQLite reports a conflict on it as busy at once, without
        waiting ``busy_timeout`` (it would risk a deadlock): two processes opening a new file together
        can hit it. So wait here, up to ``busy_timeout``.
        """
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while True:
            try:
                return writer.execute("PRAGMA journal_mode = WAL").fetchone()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)  # on the worker thread: the event loop is not held

    async def _on_worker(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run ``function(*args)`` on the worker thread; the task waits, the event loop does not."""
        if self._worker is None:
            raise LogClosedError(f"{self!r} has no worker")
        return await asyncio.get_running_loop().run_in_executor(self._worker, function, *args)

    async def _close_connections(self) -> None:
        writer, reader, worker = self._writer, self._reader, self._worker
        self._cursor = self._reader = None
        self._worker = None
        try:
            if worker is not None:
                # On the worker, after whatever it is still running with the connections.
                if writer is not None:
                    await asyncio.get_running_loop().run_in_executor(worker, writer.close)
                if self._checkpointer is not None:
                    await asyncio.get_running_loop().run_in_executor(worker, self._checkpointer.close)
                worker.shutdown(wait=False)
        finally:
            if reader is not None:
                await reader.close()

    def _writer_done(self, task: asyncio.Task[None]) -> None:
        """Release the file if the writer ended without ``close()`` and could not do it itself.

        That happens when the task is cancelled before its first step (``asyncio.run`` ending right
        after ``start()``): its body never runs. The threads would then keep the process alive.
        """
        if task is not self._writer_task or self._stopping or (self._writer is None and self._reader is None):
            return
        self._state = _State.CLOSED
        error = LogClosedError(f"{self!r}: the writer task stopped before it started")
        for batch in self._pending:
            _reject(batch.future, error)
        self._pending = []
        if self._worker is not None:
            if self._writer is not None:
                self._worker.submit(self._writer.close)
            if self._checkpointer is not None:
                self._worker.submit(self._checkpointer.close)
            self._worker.shutdown(wait=False)
        if self._reader is not None:
            self._reader.stop()  # closes the connection and ends its thread, without waiting
        self._cursor = self._reader = None
        self._worker = None

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
        """Durably append ``records`` (any sessions), all or nothing; see the module docstring.

        Raises ``LogReadOnlyError`` on a store opened with ``read_only=True``.
        """
        if self._read_only:
            raise LogReadOnlyError(f"{self!r} is read-only: open it without read_only=True to append")
        self._check_not_closed()
        check_appendable(records)
        rows = [encode_record(record) for record in records]
        if not rows:
            return
        marks = marks_of(records)
        if self._state is not _State.OPEN:
            await self.start()
        self._check_not_closed()
        task, wakeup = self._writer_task, self._wakeup
        if task is None or wakeup is None or task.done():
            raise LogClosedError(f"{self!r}: the writer task has stopped")
        size = _text_size([rows])
        if self._may_commit_now(rows, size) and self._commit_now(rows, marks, size):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Batch(rows, marks, future))
        wakeup.set()
        await future

    def _may_commit_now(self, rows: list[Row], size: int) -> bool:
        """Whether ``append`` may commit its batch itself, without the writer task.

        Only a store that commits on the loop (durability normal), for a batch small enough to write
        there (``size``: its characters of JSON), when nothing is queued, the worker is not using the
        connection, and the round's inline commits are under their limits (see the module docstring).
        """
        return (
            self._durability == "normal"
            and size <= _LOOP_COMMIT_BYTES
            and not self._pending
            and not self._writer_busy
            and self._round_total < _INLINE_COMMITS_PER_ROUND
            and self._round_commits.get(rows[0][0], 0) < _INLINE_COMMITS_PER_SESSION
            and not self._blocking_checkpoint_due  # else the writer task checkpoints first
            and self._cursor is not None
        )

    def _commit_now(self, rows: list[Row], marks: list[Mark], size: int) -> bool:
        """Commit ``rows`` here and now; False (nothing written) if another process holds the lock."""
        assert self._cursor is not None
        outcomes = self._commit_on_loop(self._cursor, [rows], [marks])
        if outcomes is None:
            return False
        if not self._round_total:
            asyncio.get_running_loop().call_soon(self._end_round)
        self._round_total += 1
        session_id = rows[0][0]
        self._round_commits[session_id] = self._round_commits.get(session_id, 0) + 1
        self._note_commit(len(rows), size)
        if outcomes[0] is not None:
            raise outcomes[0]
        return True

    def _end_round(self) -> None:
        self._round_commits.clear()
        self._round_total = 0

    async def _write_loop(self, wakeup: asyncio.Event) -> None:
        group: list[_Batch] = []
        try:
            while True:
                if self._blocking_checkpoint_due:
                    self._writer_busy = True
                    try:
                        await self._checkpoint()
                    finally:
                        self._writer_busy = False
                elif self._pending:
                    # Everything queued while the previous transaction ran goes into this one.
                    group, self._pending = self._pending, []
                    self._writer_busy = True
                    try:
                        await self._commit_group(group)
                    finally:
                        self._writer_busy = False
                    group = []
                elif self._stopping:
                    return
                else:
                    wakeup.clear()
                    await wakeup.wait()
        except BaseException as exc:
            # Cancelled (asyncio.run ending without close()) or a bug: no append may wait forever on
            # us, and the connections must go, or the threads keep the process from exiting.
            self._state = _State.CLOSED
            error = LogClosedError(f"{self!r}: the writer task stopped: {exc!r}")
            error.__cause__ = exc
            for batch in [*group, *self._pending]:
                _reject(batch.future, error)
            self._pending = []
            await self._close_connections()
            raise

    async def _commit_group(self, group: list[_Batch]) -> None:
        live = [batch for batch in group if not batch.future.cancelled()]
        if not live:
            return
        writer = self._cursor
        if writer is None:
            raise LogClosedError(f"{self!r} has no connection")
        batches = [batch.rows for batch in live]
        marks = [batch.marks for batch in live]
        size = _text_size(batches)
        try:
            if self._durability == "full":
                outcomes = await self._on_worker(commit_group, writer, batches, self._registered, marks)
            else:
                quick = self._commit_on_loop(writer, batches, marks) if size <= _LOOP_COMMIT_BYTES else None
                if quick is None:
                    outcomes = await self._on_worker(self._commit_waiting, writer, batches, marks)
                else:
                    outcomes = quick
        except Exception as exc:
            for batch in live:
                _reject(batch.future, exc)
            return
        self._note_commit(sum(map(len, batches)), size)
        for batch, outcome in zip(live, outcomes, strict=True):
            if outcome is None:
                _resolve(batch.future)
            else:
                _reject(batch.future, outcome)

    def _commit_on_loop(
        self, writer: sqlite3.Cursor, batches: list[list[Row]], marks: list[list[Mark]]
    ) -> list[BaseException | None] | None:
        """Commit without waiting for any lock; None if another connection holds it."""
        try:
            return commit_group(writer, batches, self._registered, marks)
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return None
            raise

    def _commit_waiting(
        self, writer: sqlite3.Cursor, batches: list[list[Row]], marks: list[list[Mark]]
    ) -> list[BaseException | None]:
        """Commit, waiting up to ``busy_timeout`` for the lock (worker thread)."""
        writer.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        try:
            return commit_group(writer, batches, self._registered, marks)
        finally:
            writer.execute("PRAGMA busy_timeout = 0")

    def _note_commit(self, rows: int, size: int) -> None:
        """Count a commit of ``rows`` rows holding ``size`` characters of JSON, and the WAL pages it wrote
        (for ``durability="normal"``, whose checkpoints the store runs itself), estimated: a table and an
        index leaf, plus the text. Also keeps the set of known-registered sessions bounded.

        The estimate only has to keep the WAL from growing without bound, as SQLite's own automatic
        checkpoint would.
        """
        self._commits += 1
        if len(self._registered) > _KNOWN_SESSIONS_LIMIT:
            self._registered.clear()
        if self._durability != "normal":
            return
        self._unchecked_pages += 2 + (size + 64 * rows) // 4096
        if self._unchecked_pages >= _CHECKPOINT_PAGES and not self._blocking_checkpoint_due:
            self._start_background_checkpoint()

    @property
    def _blocking_checkpoint_due(self) -> bool:
        """Whether the writer task must checkpoint between two commits before the next commit: a
        checkpoint is due and the background ones have not let the WAL restart, or the one running
        has been overtaken by too many pages (it only resets the count when it starts)."""
        return self._unchecked_pages >= _CHECKPOINT_PAGES and (
            self._wal_frames > _WAL_LIMIT_PAGES or self._unchecked_pages >= _WAL_LIMIT_PAGES
        )

    def _start_background_checkpoint(self) -> None:
        """Checkpoint on the worker with the checkpoints' connection, commits going on meanwhile."""
        checkpointer = self._checkpointer
        if self._checkpointing or self._worker is None or checkpointer is None:
            return  # one at a time; the pages stay counted, so the next commit starts the next one
        self._unchecked_pages = 0
        self._checkpointing = True
        done = asyncio.get_running_loop().run_in_executor(self._worker, checkpointer.checkpoint)
        done.add_done_callback(functools.partial(self._background_checkpoint_done, checkpointer))

    def _background_checkpoint_done(self, checkpointer: _Checkpointer, done: asyncio.Future[int]) -> None:
        if checkpointer is not self._checkpointer:
            return  # the store was closed (and maybe reopened) meanwhile
        self._checkpointing = False
        if done.cancelled():
            return
        if (exc := done.exception()) is not None:
            # Nothing is lost (the frames stay in the WAL), but the WAL grows until a checkpoint works:
            # the next one runs between commits, on the writer's connection.
            logger.warning("%s: background checkpoint failed (%s); the next one blocks commits", self._path, exc)
            self._wal_frames = _WAL_LIMIT_PAGES + 1
        else:
            self._wal_frames = done.result()

    async def _checkpoint(self) -> None:
        """Copy the WAL into the database on the worker, between two commits, so that the next commit
        can restart the WAL (see the module docstring). PASSIVE does not wait for readers; what they
        still use is copied next time. A failed checkpoint is retried at the next limit: it loses
        nothing, the frames stay in the WAL.
        """
        self._unchecked_pages = 0
        self._wal_frames = 0
        writer = self._writer
        if writer is not None:
            try:
                await self._on_worker(_checkpoint, writer)
            except sqlite3.Error as exc:
                logger.warning("%s: checkpoint failed (%s); retried after the next %d pages", self._path, exc,
                               _CHECKPOINT_PAGES)  # fmt: skip

    # -- reading -----------------------------------------------------------------------------------

    async def read(self, session_id: str, after_seq: int = 0) -> list[Record]:
        """Return the records of ``session_id`` with ``seq > after_seq``, in seq order, upcast."""
        return await self._read(session_id, after_seq, None)

    async def _read(self, session_id: str, after_seq: int, limit: int | None) -> list[Record]:
        reader = await self._reading()
        try:
            if limit is None:
                rows = await reader.execute_fetchall(_SELECT_SQL, (session_id, after_seq))
            else:
                rows = await reader.execute_fetchall(_SELECT_SQL + " LIMIT ?", (session_id, after_seq, limit))
        except sqlite3.OperationalError as exc:
            raise await _undecodable_or(exc, reader, session_id, after_seq) from exc
        registry = upcast_module.UPCASTERS  # looked up on each call, so a test may swap it
        version = registry.current_version

        def make(seq: int, ts: float, kind: str, data: dict[str, Any]) -> Record:
            return build_record(session_id, seq, kind, data, ts, version)

        decode = _row_decoder(session_id, registry, make)
        with _collector_paused():
            return [decode(None, row) for row in rows]

    async def read_chunks(self, session_id: str, after_seq: int = 0, size: int = 1000) -> AsyncIterator[list[Record]]:
        """``read`` a chunk at a time: each chunk is one query for the next ``size`` records, so a
        caller that stops early never reads the rest."""
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        while True:
            chunk = await self._read(session_id, after_seq, size)
            if chunk:
                yield chunk
            if len(chunk) < size:
                return
            after_seq = chunk[-1].seq

    async def project(self, session_id: str) -> SessionProjection:
        """Fold the session's records into a projection as they are fetched, without keeping them.

        Every record is decoded, checked and upcast as ``read`` does. The rows are decoded and folded
        on the reader's thread, as the cursor fetches them, a chunk per round trip: nothing but the
        projection outlives its row, so a long session costs neither the memory of all its records
        nor the collector's passes over them, and no row is handed from thread to thread (which,
        measured, cost as much as decoding it).
        """
        reader = await self._reading()
        projection = SessionProjection(session_id)
        try:
            # One statement, so the whole fold sees one snapshot even though it takes many round trips.
            async with reader.execute(_SELECT_SQL, (session_id, 0)) as cursor:
                # aiosqlite types the setter as taking a class; sqlite3 takes any callable.
                cursor.row_factory = _row_decoder(  # type: ignore[assignment]
                    session_id, upcast_module.UPCASTERS, projection.apply_fields
                )
                while await cursor.fetchmany(_FOLD_CHUNK):
                    pass  # each fetched row has been folded by the row factory
        except sqlite3.OperationalError as exc:
            raise await _undecodable_or(exc, reader, session_id, 0) from exc
        return projection

    async def unfinished_sessions(self) -> list[str]:
        """The sessions with unfinished work (``baf.log.work``), from the ``baf_work`` index the
        writer keeps in each append's transaction: one row per such session, whatever the log's size.

        A file of schema version 1 or 2 opened read-only has no index: its sessions are folded instead.
        """
        reader = await self._reading()
        if not self._indexed:
            return await super().unfinished_sessions()
        rows = await reader.execute_fetchall(_UNFINISHED_SQL)
        return [session_id for (session_id,) in rows]

    async def read_for_load(self, session_id: str) -> list[Record]:
        """The records from the latest snapshot on, found through the ``baf_records_snapshots`` index."""
        reader = await self._reading()
        rows = await reader.execute_fetchall(_LATEST_SNAPSHOT_SQL, (session_id,))
        latest = next((row[0] for row in rows), None)
        return await self.read(session_id, after_seq=latest - 1 if type(latest) is int else 0)

    async def sessions(self) -> list[str]:
        """Return every session id in the log, in order of its first record."""
        reader = await self._reading()
        rows = await reader.execute_fetchall(_SESSIONS_SQL)
        ids: list[str] = []
        for (session_id,) in rows:
            if not isinstance(session_id, str):
                raise LogError(f"{self._path}: baf_sessions holds a session id that is not text: {session_id!r}")
            ids.append(session_id)
        return ids

    async def _reading(self) -> aiosqlite.Connection:
        self._check_not_closed()
        if self._state is not _State.OPEN:
            await self.start()
        reader = self._reader
        if self._state is not _State.OPEN or reader is None:
            raise LogClosedError(f"{self!r} is closed")
        return reader


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


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # the caller may have been cancelled meanwhile
        future.set_result(None)


def _text_size(batches: list[list[Row]]) -> int:
    """Characters of JSON in a group: whether it is small enough to commit on the event loop (writing a
    few megabytes would hold the loop for a noticeable time, so such a group goes to the worker thread),
    and how many WAL pages its commit wrote."""
    return sum(len(row[5]) for rows in batches for row in rows)


def _reject(future: asyncio.Future[None], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _upgrade(writer: sqlite3.Connection) -> None:
    """Bring a version 1 or 2 file to the current layout, inside the caller's transaction.

    ``SCHEMA`` has created the new indexes; this fills ``baf_work`` by folding, once, every
    record that can change a work status (one pass over the table), and sets the version. A record
    whose data does not decode counts as holding no fields here; reading it reports it as corrupt.
    """
    rows = writer.execute(
        "SELECT session_id, seq, kind, CAST(data AS BLOB) FROM baf_records "
        f"WHERE kind IN ({', '.join('?' * len(WORK_KINDS))}) ORDER BY session_id, seq",
        sorted(WORK_KINDS),
    )
    statuses: dict[str, WorkStatus] = {}
    for session_id, seq, kind, text in rows:
        try:
            data = _fast_loads(text)
        except (ValueError, TypeError):
            data = None
        status = statuses.get(session_id, IDLE)
        statuses[session_id] = work_after(status, kind, seq, data if isinstance(data, dict) else {})
    writer.executemany(
        SET_WORK_SQL,
        ((sid, status.to_text(), int(status.unfinished)) for sid, status in statuses.items() if status != IDLE),
    )
    writer.execute("UPDATE baf_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _check_version(path: Path, stored: object) -> None:
    """Raise ``LogError`` unless ``stored`` (``baf_meta``'s schema_version) is a layout this baf knows."""
    if stored not in _KNOWN_VERSIONS:
        raise LogError(
            f"{path} has log schema version {stored!r}; this baf reads versions "
            f"{', '.join(sorted(_KNOWN_VERSIONS))}: upgrade baf to use this file"
        )


class _Checkpointer:
    """The checkpoints' own connection to the file, opened on first use, for one opening of the store.
    Used on the store's worker thread only."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._connection: sqlite3.Connection | None = None

    def checkpoint(self) -> int:
        """A PASSIVE checkpoint; the WAL's frame count. Raises ``sqlite3.Error``."""
        if self._connection is None:
            connection = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            try:
                connection.execute("PRAGMA synchronous = NORMAL")  # as the writer's: fsync around copying
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return _checkpoint(self._connection)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _checkpoint(connection: sqlite3.Connection) -> int:
    """Copy what the WAL holds into the database; return the WAL's frame count (0 if unknown).

    PASSIVE: copies what it can without waiting for readers or blocking writers. Raises ``sqlite3.Error``.
    """
    row = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(row[1]) if row and isinstance(row[1], int) and row[1] > 0 else 0


async def _undecodable_or(
    error: sqlite3.OperationalError, reader: aiosqlite.Connection, session_id: str, after_seq: int
) -> Exception:
    """What to raise for ``error`` from a read: the ``CorruptRecordError`` of the row it came from, if any.

    sqlite3 fails a whole fetch on text that is not UTF-8, without saying which row.
    """
    corrupt = await _find_undecodable(reader, session_id, after_seq)
    return error if corrupt is None else corrupt


async def _find_undecodable(reader: aiosqlite.Connection, session_id: str, after_seq: int) -> CorruptRecordError | None:
    """The first row of the read whose text is not UTF-8, or None if none is."""
    try:
        rows = await reader.execute_fetchall(_SELECT_RAW_SQL, (session_id, after_seq))
    except sqlite3.Error:
        return None
    for seq, kind, data in rows:
        for name, raw in (("kind", kind), ("data", data)):
            try:
                if isinstance(raw, bytes):
                    raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return CorruptRecordError(session_id, seq, f"{name} is not valid UTF-8: {exc}")
    return None


_SQL_TYPES: Final[dict[type, str]] = {
    type(None): "NULL",
    int: "an integer",
    float: "a real",
    str: "text",
    bytes: "a blob",
}
_JSON_TYPES: Final[dict[type, str]] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _sql_type(value: object) -> str:
    """How SQLite stored ``value``, for error messages."""
    return _SQL_TYPES.get(type(value), type(value).__name__)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector from running while a batch of rows is decoded.

    Decoding allocates a few objects per row and nothing cyclic; on a long session the collector's
    passes over them (each young object is traversed again as it ages) cost more than the decoding.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _row_decoder(
    session_id: str, registry: upcast_module.Upcasters, make: Callable[[int, float, str, dict[str, Any]], _T]
) -> Callable[[object, Any], _T]:
    """``decode(cursor, row)``: a ``_SELECT_SQL`` row decoded, upcast and passed to ``make(seq, ts, kind, data)``.

    Raises ``CorruptRecordError`` for a bad row. It has a sqlite3 ``row_factory``'s signature (the cursor
    is ignored), so a fetch can decode as it goes. The common row (exact column types, JSON that orjson
    reads as an object, the current version) is handled inline, as this is most of the cost of reading
    a log; any other row goes through ``_decode``, which has the last word on what is corrupt, and
    through the upcasters.
    """
    current = registry.current_version
    loads = _fast_loads

    def decode(cursor: object, row: Any) -> _T:
        seq, ts, kind, version, text = row
        if (
            type(text) is str
            and type(seq) is int
            and type(ts) is float
            and type(kind) is str
            and type(version) is int
            and version == current
        ):
            try:
                data = loads(text)
            except ValueError:
                data = None  # JSON that only the standard parser reads, or none at all: _decode decides
            if type(data) is dict:
                return make(seq, ts, kind, data)
        record = registry.upcast(_decode(session_id, row))
        return make(record.seq, record.ts, record.kind, record.data)

    return decode


def _decode(session_id: str, row: Any) -> Record:
    """Turn a ``_SELECT_SQL`` row into a Record, or raise ``CorruptRecordError``."""
    seq, ts, kind, version, text = row
    if type(seq) is not int:
        raise CorruptRecordError(session_id, seq, f"seq is {_sql_type(seq)}, not an integer")
    if type(ts) is int:
        ts = float(ts)
    if type(ts) is not float:
        raise CorruptRecordError(session_id, seq, f"ts is {_sql_type(ts)}, not a number")
    if type(kind) is not str:
        raise CorruptRecordError(session_id, seq, f"kind is {_sql_type(kind)}, not text")
    if type(version) is not int:
        raise CorruptRecordError(session_id, seq, f"version is {_sql_type(version)}, not an integer")
    if type(text) is not str:
        raise CorruptRecordError(session_id, seq, f"data is {_sql_type(text)}, not JSON text")
    try:
        data = _fast_loads(text)
    except ValueError:
        # orjson refuses what json accepts and the encoder may write (NaN, Infinity, very deep
        # nesting): the standard parser has the last word.
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise CorruptRecordError(session_id, seq, f"data is not valid JSON: {exc}") from exc
    if type(data) is not dict:
        kind_of_json = _JSON_TYPES.get(type(data), type(data).__name__)
        raise CorruptRecordError(session_id, seq, f"data is {kind_of_json}, not a JSON object")
    return Record(session_id=session_id, seq=seq, kind=kind, data=data, ts=ts, version=version)
