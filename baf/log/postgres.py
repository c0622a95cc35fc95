"""A session log in PostgreSQL, for many worker processes on one or many hosts (``baf[postgres]``, asyncpg).

Tables (created by baf, versioned in ``baf_meta``; an older schema is upgraded in place, a newer one is
refused with a ``LogError``; see ``baf.log.postgres_schema``):

- ``baf_records(session_id, seq, kind, data, ts, version)``, primary key ``(session_id, seq)``. ``data`` is
  the record's JSON text exactly as baf encoded it (``text``, not ``jsonb``: ``jsonb`` reorders keys and
  folds duplicates, and the contract promises records back exactly as appended).
- ``baf_sessions(session_id, ordinal)``: one row per session, ``ordinal`` from a sequence at its first
  append, so ``sessions()`` lists them in order of first record without scanning the records.

**Group commit.** Every ``append`` joins a queue; a writer task takes everything queued and commits it in
one statement, so appends that arrive together (from many sessions) share one round trip and one WAL flush.
The writer has a connection of its own (appends never wait for readers). A committed group wakes its
appenders a few at a time (``RESUME_CHUNK``), reading the sockets in between, so that sessions committed
together do not go on in step. The writer computes the unfinished-work index from what it knows of each
session's last append, so the common group needs no read first (see ``Known``). If the statement is
refused as a whole (a conflict, a lost lease, an inbox row gone), nothing of it was written and the group
is committed again append by append, each in a savepoint of its own: the refused append fails alone
(``LogConflictError``, ``LeaseLostError``, ``LogError``) while the rest commits. When the transaction
itself fails (the connection dropped, the server restarted) every append of the group fails with
``LogError``: none is acknowledged, none is dropped silently, and the writer reconnects for the next group.

Reads use a small pool of other connections, so readers never wait for the writer; a pool that stays busy
fails a read with ``LogStorageError`` after ``acquire_timeout`` instead of waiting forever.

**Workers, or one plain writer.** The writer's connection holds the log's writer lock
(``baf.log.postgres_lock``) from ``start()`` to ``close()``: shared in a worker's store, exclusive in a
plain one (no ``worker_id``: no leases, so it must write alone). A store that cannot take it is refused at
start with ``LogInUseError``; a writer whose connection dropped takes it again before its next commit (a
plain one only if no other store took it in between: else it writes no more). Read-only stores take none.
No other role of the database can hold the lock, nor learn the log's notification channels
(``baf.log.postgres_channels``) without the right to read its tables, or to see every connection's queries
(superusers, ``pg_read_all_stats`` and ``pg_monitor``, readers of a server log of every statement).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from baf.errors import (
    CorruptRecordError,
    LeaseLostError,
    LogClosedError,
    LogConflictError,
    LogError,
    LogInUseError,
    LogReadOnlyError,
    LogStorageError,
    MissingExtraError,
)
from baf.log import upcast as upcast_module
from baf.log.jsontext import decode_json
from baf.log.postgres_batch import Coalescer
from baf.log.postgres_channels import Channels, read_channels
from baf.log.postgres_commit import Batch, Known, Plan, Refused, Row, Stored, stored_work
from baf.log.postgres_connect import KEEPALIVE_SECONDS, Keepalive, set_socket_keepalive, settings_in_url
from baf.log.postgres_lock import overtaken, take_writer_lock
from baf.log.postgres_schema import SCHEMA_VERSION, created_meanwhile, prepare_schema
from baf.log.record import MAX_TS, MIN_TS, Record
from baf.log.row_codec import MAX_INT32, encode_fields
from baf.log.store import SessionLog, check_appendable, missing_record

if TYPE_CHECKING:
    import asyncpg

__all__ = ["RESUME_CHUNK", "SCHEMA_VERSION", "PostgresLog", "decode_row", "encode_row", "redact_dsn"]

_SELECT: Final = "SELECT seq, kind, data, ts, version FROM baf_records WHERE session_id = $1 AND seq > $2 ORDER BY seq"
_SELECT_LAST: Final = (
    "SELECT seq, kind, data, ts, version FROM baf_records WHERE session_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3"
)
#: Above every seq a record can have (a bigint): ``read_last`` with no ``before_seq``.
_NO_SEQ_ABOVE: Final = 2**63 - 1
# One statement (one snapshot): the records from each session's latest snapshot on, then its row of the work
# index, if any (seq NULL), so that the writer knows each loaded session's last seq and work status.
_SELECT_FOR_LOAD: Final = """
SELECT r.session_id, r.seq, r.kind, r.data, r.ts, r.version FROM unnest($1::text[]) AS u(s)
JOIN baf_records r ON r.session_id = u.s AND r.seq >= coalesce(
    (SELECT max(x.seq) FROM baf_records x WHERE x.session_id = u.s AND x.kind = 'snapshot'), 1
)
UNION ALL
SELECT w.session_id, NULL, NULL, w.status, NULL, NULL FROM baf_work w WHERE w.session_id = ANY($1::text[])
ORDER BY 1, 2 NULLS LAST
"""


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its passwords replaced by ``***``, for messages: the one in the user part and the
    ``password`` and ``sslpassword`` options. The rest is kept as written (several hosts, IPv6 brackets)."""
    scheme, rest = dsn.split("://", 1) if "://" in dsn else ("", dsn)
    if _password_not_encoded(rest):
        # A URL parser cuts the user part at the first "/", "?" or "#" and takes the rest for the path, but
        # for its writer the password ends at the last "@": hidden up to there (a port followed by an "@" in
        # the options is hidden too: better too much than a piece of a password).
        user_part = rest.rpartition("@")[0]
        rest = f"{user_part.split(':', 1)[0]}:***@{rest[len(user_part) + 1 :]}"
    end = _netloc_end(rest)
    netloc, tail = rest[:end], rest[end:]
    if "@" in netloc:
        user_part, host_part = netloc.rsplit("@", 1)
        if ":" in user_part:
            netloc = f"{user_part.split(':', 1)[0]}:***@{host_part}"
    path, question, query = tail.partition("?")
    if question:
        query, hash_sign, fragment = query.partition("#")
        options = [
            f"{key}=***" if key.lower() in _PASSWORD_OPTIONS else option
            for option in query.split("&")
            for key in [unquote(option.split("=", 1)[0])]
        ]
        tail = f"{path}?{'&'.join(options)}{hash_sign}{fragment}"
    return f"{scheme}{'://' if scheme else ''}{netloc}{tail}"


_PASSWORD_OPTIONS: Final = ("password", "sslpassword")


def _netloc_end(rest: str) -> int:
    return min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))


def _password_not_encoded(rest: str) -> bool:
    """Whether ``rest`` (a URL after ``scheme://``) looks like ``user:pass/word@host...``: a password holding
    "/", "?" or "#" that was not percent-encoded."""
    netloc = rest[: _netloc_end(rest)]
    return "@" not in netloc and ":" in netloc and "@" in rest


def _unreadable_url(dsn: str, exc: Exception) -> str:
    """What to say of a URL the driver could not parse, without quoting a piece of a password (the
    driver's message quotes the part it choked on, which for a password holding "/" is the password)."""
    if _password_not_encoded(dsn.split("://", 1)[-1]):
        return "the URL cannot be read: percent-encode '/', '?', '#' and '@' in the password (%2F, %3F, %23, %40)"
    return f"the URL cannot be read: {exc}"


#: How many appenders a committed group wakes per turn of the event loop. Between two such turns the loop
#: reads its sockets, so the next commits of the sessions woken first go out (and come back) while later
#: ones still run: a hundred sessions committed together do not all go on together, in step, to wake
#: together at their next model answer and queue for the loop and the writer again at every turn.
RESUME_CHUNK: Final = 8


@dataclass(slots=True)
class _Writer:
    """The writer task's state for one opening of the store."""

    queue: list[Batch] = field(default_factory=list)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    #: The connection opened (and locked) at start, handed to the writer task.
    connection: asyncpg.Connection | None = None
    #: The writer lock's generation when this store last took it (``baf.log.postgres_lock``).
    generation: int | None = None
    #: Set when another store took the lock while this plain store's connection was down: it writes no more.
    overtaken: bool = False
    task: asyncio.Task[None] | None = None
    closing: bool = False


class PostgresLog(SessionLog):
    """A ``SessionLog`` in the PostgreSQL database ``dsn`` names (``postgresql://user@host:port/db``).

    ``pool_size`` bounds the reading connections (the writer has one of its own). More reads (and lease and
    inbox calls) at once than that wait in line for a connection, each for at most ``acquire_timeout``
    seconds, then fail with ``LogStorageError``: never forever. Appends do not take reading connections:
    they queue for the writer, however many there are. ``read_only=True`` opens
    an existing log for reading: no table is created or upgraded and ``append`` raises
    ``LogReadOnlyError``.

    With ``worker_id`` the store is one worker's among many: it appends only to sessions whose lease it
    holds (``fence``), and every append checks, inside its transaction and under a key-share lock on the lease
    row, that the lease still has the epoch it was taken with. A takeover (which bumps the epoch) and such
    an append therefore serialise on that row: after a takeover the old owner's appends fail with
    ``LeaseLostError`` and write nothing, however long it was paused.

    Without ``worker_id`` the store is a plain process's (``baf run``, ``agent.run()``): it takes no lease, so
    it writes only alone. ``start()`` raises ``LogInUseError``, naming the holders, when workers or another
    plain store write the log; a worker's store is refused the same way while a plain store writes it
    (``baf.log.postgres_lock``).

    ``keepalive`` (seconds, default 30; ``None``: the operating system's settings) is how long a connection
    whose other end went silent (a host lost, a network cut without a reset) lasts before it is given up, on
    both ends: the store then reconnects, and the server releases what the dead connection held
    (``baf.log.postgres_connect``).

    ``idle_in_transaction`` (seconds; ``None``, the default: the server's setting) ends a connection of the
    store that stays idle inside a transaction that long (``idle_in_transaction_session_timeout``): a worker's
    store sets it to its lease, so that a worker stopped between two statements of a transaction (SIGSTOP,
    a debugger) does not keep the row locks of its leases, and with them its sessions, for long past its
    lease. A URL that sets it itself keeps its value.

    ``start()`` is optional: the first call opens the store. ``close()`` commits what is queued, then
    closes; after it every call raises ``LogClosedError`` until ``start()``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 4,
        read_only: bool = False,
        connect_timeout: float = 10.0,
        worker_id: str | None = None,
        acquire_timeout: float = 30.0,
        keepalive: float | None = KEEPALIVE_SECONDS,
        idle_in_transaction: float | None = None,
    ) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size!r}")
        if acquire_timeout <= 0:
            raise ValueError(f"acquire_timeout must be > 0 seconds, got {acquire_timeout!r}")
        self._acquire_timeout = acquire_timeout
        self._keepalive = None if keepalive is None else Keepalive(keepalive)
        if idle_in_transaction is not None and not 0 < idle_in_transaction < math.inf:
            raise ValueError(f"idle_in_transaction must be a positive number of seconds, got {idle_in_transaction!r}")
        self._idle_in_transaction = idle_in_transaction
        self._dsn = dsn
        self._pool_size = pool_size
        self._read_only = read_only
        self._connect_timeout = connect_timeout
        self._pool: asyncpg.Pool | None = None
        self._channels: Channels | None = None
        self._started = False  # once started: whether the log had channels is known
        self._writer: _Writer | None = None
        self._closed = False
        self._opening: asyncio.Lock | None = None
        self._worker_id = worker_id
        # The sessions this worker holds a lease on, with the lease's epoch (see baf.log.postgres_leases).
        self._fences: dict[str, int] = {}
        self._known = Known()
        self._loads: Coalescer[str, list[Record]] = Coalescer(self._read_for_load_many)
        self._reads: Coalescer[tuple[str, int], list[Record]] = Coalescer(self._read_many)

    def __repr__(self) -> str:
        return f"PostgresLog({redact_dsn(self._dsn)!r})"

    @property
    def worker_id(self) -> str | None:
        """The worker this store appends for, or ``None`` (one process, no leases)."""
        return self._worker_id

    def fence(self, session_id: str, epoch: int) -> None:
        """Append to ``session_id`` only while its lease has ``epoch`` (set when the lease is taken)."""
        self._fences[session_id] = epoch

    def unfence(self, session_id: str) -> None:
        """Forget ``session_id``'s lease: appends to it are refused from now on (worker stores only)."""
        self._fences.pop(session_id, None)

    def fenced(self) -> dict[str, int]:
        """The sessions this worker appends to, with their lease epochs (a copy)."""
        return dict(self._fences)

    @property
    def channels(self) -> Channels:
        """The log's notification channels (``baf.log.postgres_channels``), read when the store last started
        (they stay known once it is closed: a worker stopping tells the others after closing its log).
        ``LogClosedError`` when never started; ``LogError`` when the log has none (a read-only store over a
        log that no baf of schema version 3 or later opened for writing)."""
        if self._channels is None:
            if not self._started:
                raise LogClosedError(f"{self!r} is not started")
            raise LogError(
                f"{self!r}: the log has no channel secret yet: open it for writing once (a worker does) "
                "before listening to it"
            )
        return self._channels

    @property
    def pool(self) -> asyncpg.Pool:
        """The reading pool (for the lease and inbox helpers); ``LogClosedError`` when not open."""
        pool = self._check_open()
        if pool is None:
            raise LogClosedError(f"{self!r} is not started")
        return pool

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A reading connection for one use (the lease and inbox helpers use this too). When all
        ``pool_size`` are busy, waits in line for up to ``acquire_timeout`` seconds, then raises
        ``LogStorageError``; a server that refuses a new connection is a ``LogStorageError`` too."""
        pool = await self._ready_pool()
        connection = await self._acquire(pool)
        try:
            yield connection
        finally:
            await pool.release(connection)

    async def open_connection(self) -> asyncpg.Connection:
        """A connection of its own, outside the pool (a listener's, the writer's), with the store's connect
        timeout and keepalive (``baf.log.postgres_connect``); the caller closes it. ``LogStorageError`` when
        the server cannot be reached or refuses it."""
        driver = _import_asyncpg()
        try:
            connection: asyncpg.Connection = await driver.connect(
                self._dsn, timeout=self._connect_timeout, command_timeout=None, server_settings=self._server_settings()
            )
        except (TimeoutError, OSError, driver.PostgresError) as exc:
            raise LogStorageError(
                redact_dsn(self._dsn), f"cannot open a database connection: {self._why(exc)}"
            ) from exc
        self._set_keepalive(connection)
        return connection

    def _server_settings(self) -> dict[str, str] | None:
        settings = {} if self._keepalive is None else self._keepalive.server_settings(self._dsn)
        if self._idle_in_transaction is not None and "idle_in_transaction_session_timeout" not in settings_in_url(
            self._dsn
        ):
            settings["idle_in_transaction_session_timeout"] = str(max(1, round(self._idle_in_transaction * 1000)))
        return settings or None

    async def _on_new_connection(self, connection: asyncpg.Connection) -> None:
        """Each new connection of the pool: its socket's keepalive."""
        self._set_keepalive(connection)

    def _set_keepalive(self, connection: asyncpg.Connection) -> None:
        if self._keepalive is not None:
            set_socket_keepalive(connection, self._keepalive)

    async def _connect(self, writer: _Writer, *, starting: bool = False) -> asyncpg.Connection:
        """A writer's connection: its own, outside the pool (appends never wait for readers), holding the
        writer lock for as long as it is open (``baf.log.postgres_lock``): every commit is made under it.
        ``starting``: the schema is prepared first, in the transaction the lock is decided in, so a store
        refused changes nothing. ``LogInUseError`` if another process holds the lock, or, for a plain store,
        took it since this store's previous connection (then for good); ``LogStorageError`` if the server
        cannot be reached or the lock cannot be taken (nothing is left open then)."""
        where = redact_dsn(self._dsn)
        if writer.overtaken:
            raise overtaken(where)
        for attempt in range(3):
            connection = await self.open_connection()
            try:
                since = writer.generation if self._worker_id is None else None  # workers are fenced by leases
                generation = await take_writer_lock(
                    connection,
                    where,
                    self._worker_id,
                    since,
                    wait=self._connect_timeout,
                    prepare=self._preparing(connection, where) if starting else None,
                )
            except BaseException as exc:
                connection.terminate()
                if starting and attempt < 2 and created_meanwhile(exc):
                    continue  # another store created the tables at the same time: they are there now
                if isinstance(exc, LogError) or not isinstance(exc, Exception):  # refused, or cancelled: as it is
                    raise
                # What the server refused, or the connection lost on the way (the driver's InterfaceError, an
                # OSError, a timeout): the store's error either way, as when the connection cannot be opened.
                what = f"cannot take the log's writer lock: {self._why(exc) or type(exc).__name__}"
                raise LogStorageError(where, what) from exc
            break
        if generation is None:
            connection.terminate()
            writer.overtaken = True
            raise overtaken(where)
        writer.generation = generation
        return connection

    @staticmethod
    def _preparing(connection: asyncpg.Connection, where: str) -> Callable[[], Awaitable[None]]:
        """The schema's preparation on the writer's connection at start (``prepare_schema``), whose errors are
        the store's, but for a lock waited for too long and a collision with another store creating the tables
        (``_connect`` says or retries those)."""

        async def prepare() -> None:
            asyncpg = _import_asyncpg()
            try:
                await prepare_schema(connection, where, read_only=False)
            except asyncpg.PostgresError as exc:
                if isinstance(exc, asyncpg.LockNotAvailableError) or created_meanwhile(exc):
                    raise
                raise LogError(f"{where}: cannot prepare the log's tables: {exc}") from exc

        return prepare

    async def _acquire(self, pool: asyncpg.Pool) -> asyncpg.Connection:
        asyncpg = _import_asyncpg()
        where = redact_dsn(self._dsn)
        try:
            return await pool.acquire(timeout=self._acquire_timeout)
        except TimeoutError as exc:
            raise LogStorageError(
                where,
                f"no database connection came free within {self._acquire_timeout:g} s: all {self._pool_size} "
                "of the pool were busy (raise pool_size or acquire_timeout); nothing was read or written",
            ) from exc
        except (OSError, asyncpg.PostgresError) as exc:
            raise LogStorageError(where, f"cannot open a database connection: {self._why(exc)}") from exc

    def _why(self, exc: BaseException) -> str:
        """Why a connection could not be opened (a timeout says nothing by itself)."""
        if isinstance(exc, TimeoutError) and not str(exc):
            return f"the server did not answer within {self._connect_timeout:g} s (connect_timeout)"
        # Refused at the port, or no socket file at the path: nothing listens there. The driver's words
        # alone ("Connect call failed", "No such file or directory") do not say what to check.
        if isinstance(exc, (ConnectionRefusedError, FileNotFoundError)):
            return f"{exc} (is the PostgreSQL server running and listening there?)"
        return str(exc)

    @property
    def dsn(self) -> str:
        """The database URL, password included (``repr`` hides it)."""
        return self._dsn

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, create or upgrade the schema (unless read-only), start the writer. Idempotent."""
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is not None:
                return
            asyncpg = _import_asyncpg()
            where = redact_dsn(self._dsn)
            try:
                pool = await asyncpg.create_pool(
                    self._dsn,
                    # A worker's store opens its connections at once: opening one (and asyncpg's type
                    # lookups on it) when a burst of sessions arrives would cost that burst several ms.
                    min_size=self._pool_size if self._worker_id is not None else 1,
                    max_size=self._pool_size,
                    timeout=self._connect_timeout,
                    command_timeout=None,
                    reset=_no_reset,
                    server_settings=self._server_settings(),
                    init=self._on_new_connection,
                )
            except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
                raise LogError(f"cannot open the PostgreSQL log at {where}: {self._why(exc)}") from exc
            except ValueError as exc:  # the URL: a port that is not a number, an unknown sslmode ...
                raise LogError(
                    f"cannot open the PostgreSQL log at {where}: {_unreadable_url(self._dsn, exc)}"
                ) from None
            writer: _Writer | None = None
            try:
                if self._read_only:
                    async with pool.acquire() as connection, connection.transaction():
                        await prepare_schema(connection, where, read_only=True)
                        channels = await read_channels(connection, where)
                else:
                    # The schema, then the writer lock, on the connection the writer commits on and in one
                    # transaction: refused here, at start, when another process holds the lock, with nothing
                    # changed (see baf.log.postgres_lock).
                    writer = _Writer()
                    writer.connection = await self._connect(writer, starting=True)
                    channels = await read_channels(writer.connection, where)
            except asyncpg.PostgresError as exc:
                await self._abandon(pool, writer)
                raise LogError(f"{where}: cannot prepare the log's tables: {exc}") from exc
            except BaseException:
                await self._abandon(pool, writer)
                raise
            self._channels = channels
            self._started = True
            self._pool = pool
            self._closed = False
            if writer is not None:
                writer.task = asyncio.create_task(self._write_loop(writer), name="baf-postgres-writer")
                self._writer = writer

    @staticmethod
    async def _abandon(pool: asyncpg.Pool, writer: _Writer | None) -> None:
        """Close what a start that failed opened."""
        if writer is not None and writer.connection is not None:
            writer.connection.terminate()
        await pool.close()

    async def close(self) -> None:
        """Commit what is queued, stop the writer and close the connections. Idempotent."""
        self._closed = True
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.closing = True
            writer.wakeup.set()
            if writer.task is not None:
                await writer.task
        pool, self._pool = self._pool, None
        self._known = Known()  # the database may change before the next start
        if pool is not None:
            await pool.close()

    def _check_open(self) -> asyncpg.Pool | None:
        if self._closed:
            raise LogClosedError(f"{self!r} is closed")
        return self._pool

    async def ready(self) -> None:
        """Start the store if it was never started, as every read, append and helper call does;
        ``LogClosedError`` once it is closed (until ``start()``)."""
        await self._ready_pool()

    async def _ready_pool(self) -> asyncpg.Pool:
        pool = self._check_open()
        if pool is None:
            await self.start()
            pool = self._pool
            assert pool is not None
        return pool

    # -- writing --------------------------------------------------------------------------------------

    async def append(self, records: Sequence[Record]) -> None:
        await self.append_consuming(records)

    async def append_consuming(
        self, records: Sequence[Record], session_id: str | None = None, inbox_ids: Sequence[int] = ()
    ) -> None:
        """``append(records)``, deleting the inbox rows ``inbox_ids`` of ``session_id`` in the same
        transaction: the message moves from the inbox into the log exactly once. If one of the rows is
        gone already (consumed by another append), nothing is written and ``LogError`` says so."""
        if self._read_only:
            raise LogReadOnlyError(f"{self!r} was opened read-only")
        check_appendable(records)
        if not records and not inbox_ids:
            self._check_open()
            return
        rows = [encode_row(record) for record in records]
        fences: list[tuple[str, int]] | None = None
        if self._worker_id is not None:
            fences = []
            for name in dict.fromkeys([row[0] for row in rows] + ([session_id] if session_id else [])):
                epoch = self._fences.get(name)
                if epoch is None:
                    raise LeaseLostError(name, f"worker {self._worker_id!r} holds no lease on it")
                fences.append((name, epoch))
        consumes = (session_id, list(inbox_ids)) if inbox_ids and session_id is not None else None
        if inbox_ids and session_id is None:
            raise ValueError("inbox_ids need the session_id they belong to")
        await self._ready_pool()
        writer = self._writer
        if writer is None or writer.closing:
            raise LogClosedError(f"{self!r} is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        writer.queue.append(Batch(rows, future, fences, consumes))
        writer.wakeup.set()
        await future

    async def _write_loop(self, writer: _Writer) -> None:
        """Commit what is queued, group by group, until the store closes and the queue is empty."""
        connection, writer.connection = writer.connection, None
        try:
            while True:
                if not writer.queue:
                    if writer.closing:
                        return
                    writer.wakeup.clear()
                    await writer.wakeup.wait()
                    continue
                group, writer.queue = writer.queue, []
                try:
                    if connection is None or connection.is_closed():
                        connection = None
                        connection = await self._connect(writer)
                except LogInUseError as exc:  # the connection was lost, and another process took the lock
                    _fail(group, exc)
                    continue
                except Exception as exc:
                    # Nothing of the group reached the server: unlike a commit cut short, no doubt to leave.
                    error = LogError(
                        f"{self!r}: this append was not written: the connection to the database was lost and "
                        f"a new one cannot be made ({exc}); nothing of it was sent"
                    )
                    error.__cause__ = exc
                    _fail(group, error)
                    continue
                try:
                    _settle_in_chunks(group, await self._commit_group(connection, group))
                except Exception as exc:
                    # The transaction failed as a whole: no append of the group is acknowledged. Say so to
                    # every appender and start the next group on a fresh connection.
                    error = LogError(
                        f"{self!r}: the commit failed and this append was not acknowledged ({exc}); if the "
                        "connection dropped during the commit itself it may still have been written: read the "
                        "session to know"
                    )
                    error.__cause__ = exc
                    _fail(group, error)
                    if connection is not None:
                        connection.terminate()
                    connection = None
        finally:
            for batch in writer.queue:
                if not batch.future.done():
                    batch.future.set_exception(LogClosedError(f"{self!r} closed before this append was written"))
            if connection is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(connection.close(), 5)

    async def _commit_group(self, connection: asyncpg.Connection, group: list[Batch]) -> list[BaseException | None]:
        """Commit ``group``; return each append's outcome (``None``: committed, else its error).

        First all of it at once: one statement (one round trip) when the writer knows the work statuses of
        the sessions it touches, else a read of them and that statement in a transaction. If that
        is refused (a conflict, a lost lease, an inbox row gone, a value PostgreSQL rejects) nothing of it
        was written, and the group is committed again append by append, each in a savepoint of its own, so
        that only the refused ones fail."""
        refused: tuple[type[BaseException], ...] = (Refused, *_refusals())
        try:
            await self._commit_together(connection, group)
        except refused:
            pass
        else:
            return [None] * len(group)
        outcomes: list[BaseException | None] = []
        async with connection.transaction():
            for batch in group:
                try:
                    async with connection.transaction():  # a savepoint
                        await self._write_alone(connection, batch)
                    outcomes.append(None)
                except _refusals() as exc:
                    outcomes.append(await _refusal(connection, batch, exc))
        return outcomes

    async def _commit_together(self, connection: asyncpg.Connection, group: list[Batch]) -> None:
        """Commit every append of ``group`` in one transaction, or raise (``Refused`` or what PostgreSQL
        refused) having written nothing."""
        plan = Plan(group, self._known)
        if not plan.unknown:
            ok, _ = await self._execute(connection, plan, {})  # a single statement is its own transaction
            if not ok:
                raise Refused
        else:
            async with connection.transaction():
                stored = await stored_work(connection, plan.unknown)
                ok, _ = await self._execute(connection, plan, stored)
                if not ok:
                    raise Refused  # rolls the transaction back (the read's row locks)
        self._known.learn(plan)

    async def _write_alone(self, connection: asyncpg.Connection, batch: Batch) -> None:
        """One append, inside the caller's savepoint: raise ``LeaseLostError``, ``LogError`` (an inbox row
        consumed already) or what PostgreSQL refused, so that it fails alone."""
        plan = Plan([batch], Known())  # statuses read from the table, whatever the writer knows
        stored = await stored_work(connection, plan.unknown)
        if batch.fences:
            await self._check_fences(connection, batch.fences)  # names a lost session and raises
        if batch.consumes is not None:
            session_id, ids = batch.consumes
            batch = Batch(batch.rows, batch.future, batch.fences, (session_id, sorted(set(ids))))
            plan = Plan([batch], Known())
        ok, _ = await self._execute(connection, plan, stored)
        if not ok and batch.consumes is not None:
            session_id, ids = batch.consumes
            present = await connection.fetch(
                "SELECT id FROM baf_inbox WHERE session_id = $1 AND id = ANY($2::bigint[])", session_id, ids
            )
            missing = sorted(set(ids) - {row[0] for row in present})
            raise LogError(f"session {session_id!r}: inbox message(s) {missing or ids} were consumed already")
        if not ok:  # the fences held a moment ago, under a lock this transaction keeps: should not happen
            raise LeaseLostError(plan.sessions[0] if plan.sessions else "?", "a lease changed during the append")
        self._known.forget(plan.sessions)

    async def _execute(
        self, connection: asyncpg.Connection, plan: Plan, stored: Stored
    ) -> tuple[bool, list[int] | None]:
        """Run the group statement for ``plan``; ``stored`` holds the work statuses the plan did not know.
        Returns whether the fences held (else nothing was written) and the inbox ids deleted."""
        assert self._channels is not None  # made by every store that opens the log for writing
        sql, arguments = plan.statement(self._worker_id, stored, self._channels.records)
        row = await connection.fetchrow(sql, *arguments)
        assert row is not None
        return bool(row[0]), row[1]

    async def _check_fences(self, connection: asyncpg.Connection, fences: list[tuple[str, int]]) -> None:
        """Raise ``LeaseLostError`` unless this worker still holds every lease at its epoch. The key-share
        lock on the lease rows holds off a takeover (which locks them FOR UPDATE) until this transaction
        ends, and does not wait for heartbeats."""
        held = await connection.fetch(
            "SELECT l.session_id FROM baf_leases l JOIN unnest($1::text[], $2::bigint[]) AS f(s, e) "
            "ON l.session_id = f.s AND l.epoch = f.e WHERE l.owner = $3 FOR KEY SHARE OF l",
            [name for name, _ in fences],
            [epoch for _, epoch in fences],
            self._worker_id,
        )
        still = {row[0] for row in held}
        for name, epoch in fences:
            if name not in still:
                self._fences.pop(name, None)
                raise LeaseLostError(name, f"worker {self._worker_id!r} lost its lease (epoch {epoch}) to another")

    # -- reading --------------------------------------------------------------------------------------

    async def read(self, session_id: str, after_seq: int = 0) -> list[Record]:
        """The records of ``session_id`` after ``after_seq``. Reads asked for together (a worker catching up
        the sessions it follows after a commit notified many of them) share one query."""
        self._check_open()
        return await self._reads.get((session_id, after_seq))

    async def read_last(self, session_id: str, count: int, before_seq: int | None = None) -> list[Record]:
        """The newest ``count`` records before ``before_seq``, in seq order: the primary key's index walked
        backwards, so only those rows are read."""
        self._check_open()
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count!r}")
        below = _NO_SEQ_ABOVE if before_seq is None else before_seq
        async with self.connection() as connection:
            rows = list(reversed(await connection.fetch(_SELECT_LAST, session_id, below, count)))
        upcasters = upcast_module.UPCASTERS  # looked up on each call: a test may swap the registry
        for expected, row in enumerate(rows, rows[0][0] if rows else 1):
            if row[0] != expected:  # seqs have no gaps (guarantee 3): a missing record is corruption
                raise missing_record(session_id, expected, row[0])
        return [upcasters.upcast(decode_row(session_id, row)) for row in rows]

    async def _read_many(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], list[Record] | BaseException]:
        async with self.connection() as connection:
            if len(wanted) == 1:
                session_id, after_seq = wanted[0]
                rows = [(session_id, after_seq, *row) for row in await connection.fetch(_SELECT, session_id, after_seq)]
            else:
                rows = await connection.fetch(_SELECT_AFTER_MANY, [w[0] for w in wanted], [w[1] for w in wanted])
        found: dict[tuple[str, int], list[Any]] = {key: [] for key in wanted}
        for row in rows:
            found[(row[0], row[1])].append(row[2:])
        upcasters = upcast_module.UPCASTERS  # looked up on each call: a test may swap the registry
        read: dict[tuple[str, int], list[Record] | BaseException] = {}
        for (session_id, after_seq), session_rows in found.items():
            try:
                for expected, row in enumerate(session_rows, after_seq + 1):
                    if row[0] != expected:  # seqs have no gaps (guarantee 3): a missing record is corruption
                        raise missing_record(session_id, expected, row[0])
                read[(session_id, after_seq)] = [upcasters.upcast(decode_row(session_id, row)) for row in session_rows]
            except LogError as exc:
                read[(session_id, after_seq)] = exc
        return read

    async def sessions(self) -> list[str]:
        async with self.connection() as connection:
            rows = await connection.fetch("SELECT session_id FROM baf_sessions ORDER BY ordinal")
        return [row[0] for row in rows]

    async def unfinished_sessions(self) -> list[str]:
        """The sessions with unfinished work, from ``baf_work`` (kept by every append's transaction)."""
        async with self.connection() as connection:
            rows = await connection.fetch(
                "SELECT w.session_id FROM baf_work w JOIN baf_sessions s USING (session_id) "
                "WHERE w.unfinished ORDER BY s.ordinal"
            )
        return [row[0] for row in rows]

    async def read_for_load(self, session_id: str) -> list[Record]:
        """The records from the latest snapshot (found through a partial index) to the end. Loads asked for
        together (a burst of sessions reaching a worker) share one query."""
        self._check_open()
        return await self._loads.get(session_id)

    async def _read_for_load_many(self, session_ids: list[str]) -> dict[str, list[Record] | BaseException]:
        async with self.connection() as connection:
            rows = await connection.fetch(_SELECT_FOR_LOAD, session_ids)
        by_session: dict[str, list[Any]] = {session_id: [] for session_id in session_ids}
        work: dict[str, str] = {}
        for row in rows:
            if row[1] is None:
                work[row[0]] = row[3]
            else:
                by_session[row[0]].append(row[1:])
        upcasters = upcast_module.UPCASTERS  # looked up on each call: a test may swap the registry
        loaded: dict[str, list[Record] | BaseException] = {}
        for session_id, session_rows in by_session.items():
            try:
                expected = session_rows[0][0] if session_rows and session_rows[0][1] == "snapshot" else 1
                for row in session_rows:
                    if row[0] != expected:  # seqs have no gaps (guarantee 3): a missing record is corruption
                        raise missing_record(session_id, expected, row[0])
                    expected += 1
                loaded[session_id] = [upcasters.upcast(decode_row(session_id, row)) for row in session_rows]
            except LogError as exc:
                loaded[session_id] = exc
                continue
            if session_rows and not self._read_only:
                # What the work index held with these records: the session's next append needs no read.
                self._known.loaded(session_id, session_rows[-1][0], work.get(session_id))
        return loaded

    async def shared_secret(self, name: str) -> bytes | None:
        """The secret ``name`` kept in ``baf_meta`` (32 random bytes, made by the first worker that asks):
        every worker over this database signs and checks with the same key (a resume token issued by one
        worker is good on the others). Whoever can read the database can read it, as they can read the
        conversations. A read-only store only reads it (``None`` if it was never made)."""
        key = f"secret:{name}"
        async with self.connection() as connection:
            if not self._read_only:
                await connection.execute(
                    "INSERT INTO baf_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                    key,
                    secrets.token_hex(32),
                )
            value = await connection.fetchval("SELECT value FROM baf_meta WHERE key = $1", key)
        return bytes.fromhex(value) if value is not None else None


# Many sessions' records after a seq each, in one statement (see PostgresLog.read).
_SELECT_AFTER_MANY: Final = """
SELECT u.s, u.a, r.seq, r.kind, r.data, r.ts, r.version FROM unnest($1::text[], $2::bigint[]) AS u(s, a)
JOIN baf_records r ON r.session_id = u.s AND r.seq > u.a ORDER BY u.s, u.a, r.seq
"""


def _fail(group: list[Batch], error: BaseException) -> None:
    """Fail every append of ``group`` still waiting with ``error``."""
    for batch in group:
        if not batch.future.done():
            batch.future.set_exception(error)


def _settle_in_chunks(group: list[Batch], outcomes: list[BaseException | None], start: int = 0) -> None:
    """Give the appends of a committed group their outcomes (``None``: committed), ``RESUME_CHUNK`` now and
    the next ones at the next turn of the loop, and so on (the writer goes on with the next group meanwhile)."""
    end = start + RESUME_CHUNK
    for batch, outcome in zip(group[start:end], outcomes[start:end], strict=True):
        if batch.future.done():
            continue
        if outcome is None:
            batch.future.set_result(None)
        else:
            batch.future.set_exception(outcome)
    if end < len(group):
        asyncio.get_running_loop().call_soon(_settle_in_chunks, group, outcomes, end)


async def _no_reset(_connection: asyncpg.Connection) -> None:
    """What a connection needs when it goes back to the pool, beyond the rollback asyncpg always does: nothing.

    asyncpg's default reset (``RESET ALL``, ``UNLISTEN *``, ``CLOSE ALL``, unlocking advisory locks) costs a
    round trip per use; the store's connections change no setting, listen on nothing (listeners have
    connections of their own), keep no cursor outside a transaction and take only transaction-scoped locks.
    """


def _refusals() -> tuple[type[BaseException], ...]:
    """What refuses one append (it fails alone, the connection stays usable): a value past one of
    PostgreSQL's limits (a session id too long for an index entry) is one, not the whole group's failure."""
    asyncpg = _import_asyncpg()
    return (LogError, asyncpg.UniqueViolationError, asyncpg.DataError, asyncpg.ProgramLimitExceededError)


async def _refusal(connection: asyncpg.Connection, batch: Batch, exc: BaseException) -> BaseException:
    """The error an append's caller gets for ``exc`` (read after its statements were rolled back)."""
    if isinstance(exc, LogError):  # a lost lease, an inbox row consumed already
        return exc
    if isinstance(exc, _import_asyncpg().UniqueViolationError):
        return await _conflict_of(connection, batch.rows)
    return ValueError(f"PostgreSQL refused the append: {exc}")


async def _conflict_of(connection: asyncpg.Connection, rows: list[Row]) -> LogConflictError:
    """The conflict error naming the first record of ``rows`` that the log holds already."""
    found = await connection.fetchrow(
        "SELECT r.session_id, r.seq FROM baf_records r JOIN unnest($1::text[], $2::bigint[]) AS k(s, q) "
        "ON r.session_id = k.s AND r.seq = k.q ORDER BY r.session_id, r.seq LIMIT 1",
        [row[0] for row in rows],
        [row[1] for row in rows],
    )
    if found is None:  # another writer's row, gone by now? report the first key of the batch
        return LogConflictError(rows[0][0], rows[0][1])
    return LogConflictError(found[0], found[1])


def encode_row(record: Record) -> Row:
    """``record`` as a ``baf_records`` row, or ``TypeError``/``ValueError`` for what cannot be stored (the
    checks of ``baf.log.row_codec``, with a 32-bit ``version`` and no NUL in any text)."""
    session_id, seq, kind, version, ts, text, _ = encode_fields(record, MAX_INT32, True)
    return (session_id, seq, kind, text, ts, version)


def decode_row(session_id: str, row: Any) -> Record:
    """A ``baf_records`` row as a ``Record``, or ``CorruptRecordError`` naming session and seq."""
    seq, kind, text, ts, version = row[0], row[1], row[2], row[3], row[4]
    if not MIN_TS <= ts <= MAX_TS:  # written by hand, or by something other than a baf store
        raise CorruptRecordError(session_id, seq, f"ts {ts!r} is not a time (years 1 to 9999)")
    try:
        data = decode_json(text)
    except (ValueError, RecursionError) as exc:
        raise CorruptRecordError(session_id, seq, f"data is not valid JSON: {exc}") from exc
    if type(data) is not dict:
        raise CorruptRecordError(session_id, seq, f"data is {json.dumps(type(data).__name__)}, not a JSON object")
    return Record(session_id=session_id, seq=seq, kind=kind, data=data, ts=ts, version=version)


def _import_asyncpg() -> Any:
    try:
        import asyncpg
    except ImportError as exc:
        raise MissingExtraError("a postgresql:// log (asyncpg)", "postgres") from exc
    return asyncpg
