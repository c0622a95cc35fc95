"""A session log in PostgreSQL, for many worker processes on one or many hosts (``baf[postgres]``, asyncpg).

Tables (created by baf, versioned in ``baf_meta``; an older schema is upgraded in place, a newer one is
refused with a ``LogError``):

- ``baf_records(session_id, seq, kind, data, ts, version)``, primary key ``(session_id, seq)``. ``data`` is
  the record's JSON text exactly as baf encoded it (``text``, not ``jsonb``: ``jsonb`` reorders keys and
  folds duplicates, and the contract promises records back exactly as appended).
- ``baf_sessions(session_id, ordinal)``: one row per session, ``ordinal`` from a sequence at its first
  append, so ``sessions()`` lists them in order of first record without scanning the records.

**Group commit.** Every ``append`` joins a queue; one writer task takes everything queued and commits it
in one transaction, so appends that arrive together (from many sessions) share one round trip and one WAL
flush. Each append runs inside a savepoint of its own: an append that conflicts (``LogConflictError``) or
that PostgreSQL refuses is rolled back alone and fails alone, while the rest of the group commits. When the
transaction itself fails (the connection dropped, the server restarted) every append of the group fails
with ``LogError``: none is acknowledged, none is dropped silently, and the writer reconnects for the next
group.

Reads use a small pool of other connections, so readers never wait for the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

from baf.errors import (
    ConfigurationError,
    CorruptRecordError,
    LogClosedError,
    LogConflictError,
    LogError,
    LogReadOnlyError,
)
from baf.log import upcast as upcast_module
from baf.log.jsontext import decode_json, encode_json
from baf.log.record import Record
from baf.log.store import SessionLog, check_appendable

if TYPE_CHECKING:
    import asyncpg

__all__ = ["SCHEMA_VERSION", "PostgresLog"]

#: The schema this baf writes. A database at a higher version was written by a newer baf and is refused.
SCHEMA_VERSION: Final = 1

logger = logging.getLogger("baf.log.postgres")

# One lock id for schema changes, so two workers starting together do not both create tables.
_SCHEMA_LOCK: Final = 0x62AF_0001

_CREATE_V1: Final = """
CREATE TABLE IF NOT EXISTS baf_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS baf_sessions (
    session_id text PRIMARY KEY,
    ordinal bigserial UNIQUE
);
CREATE TABLE IF NOT EXISTS baf_records (
    session_id text NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 1),
    kind text NOT NULL,
    data text NOT NULL,
    ts double precision NOT NULL,
    version integer NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""

# Upgrades from each older version to the next, applied in order inside the schema lock.
_UPGRADES: Final[dict[int, str]] = {}

_INSERT_SESSIONS: Final = (
    "INSERT INTO baf_sessions (session_id) SELECT DISTINCT s FROM unnest($1::text[]) AS s ON CONFLICT DO NOTHING"
)
_INSERT_RECORDS: Final = (
    "INSERT INTO baf_records (session_id, seq, kind, data, ts, version) "
    "SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::float8[], $6::int[])"
)
_SELECT: Final = "SELECT seq, kind, data, ts, version FROM baf_records WHERE session_id = $1 AND seq > $2 ORDER BY seq"

_MAX_INT64: Final = 2**63 - 1
_MAX_INT32: Final = 2**31 - 1


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password replaced by ``***``, for messages."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


Row = tuple[str, int, str, str, float, int]


@dataclass(slots=True)
class _Batch:
    """One ``append`` waiting for the writer."""

    rows: list[Row]
    future: asyncio.Future[None]


@dataclass(slots=True)
class _Writer:
    """The writer task's state for one opening of the store."""

    queue: list[_Batch] = field(default_factory=list)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    closing: bool = False


class PostgresLog(SessionLog):
    """A ``SessionLog`` in the PostgreSQL database ``dsn`` names (``postgresql://user@host:port/db``).

    ``pool_size`` bounds the reading connections (the writer has one of its own). ``read_only=True`` opens
    an existing log for reading: no table is created or upgraded and ``append`` raises
    ``LogReadOnlyError``. ``start()`` is optional: the first call opens the store. ``close()`` commits
    what is queued, then closes; after it every call raises ``LogClosedError`` until ``start()``.
    """

    def __init__(self, dsn: str, *, pool_size: int = 4, read_only: bool = False, connect_timeout: float = 10.0) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size!r}")
        self._dsn = dsn
        self._pool_size = pool_size
        self._read_only = read_only
        self._connect_timeout = connect_timeout
        self._pool: asyncpg.Pool | None = None
        self._writer: _Writer | None = None
        self._closed = False
        self._opening: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"PostgresLog({redact_dsn(self._dsn)!r})"

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
                    min_size=1,
                    max_size=self._pool_size + 1,
                    timeout=self._connect_timeout,
                    command_timeout=None,
                )
            except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
                raise LogError(f"cannot open the PostgreSQL log at {where}: {exc}") from exc
            try:
                async with pool.acquire() as connection:
                    await self._prepare_schema(connection, where)
            except BaseException:
                await pool.close()
                raise
            self._pool = pool
            self._closed = False
            if not self._read_only:
                writer = _Writer()
                writer.task = asyncio.create_task(self._write_loop(writer), name="baf-postgres-writer")
                self._writer = writer

    async def close(self) -> None:
        """Commit what is queued, stop the writer and close the connections. Idempotent."""
        self._closed = True
        writer, self._writer = self._writer, None
        if writer is not None and writer.task is not None:
            writer.closing = True
            writer.wakeup.set()
            await writer.task
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _prepare_schema(self, connection: asyncpg.Connection, where: str) -> None:
        asyncpg = _import_asyncpg()
        try:
            async with connection.transaction():
                if not self._read_only:
                    await connection.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                exists = await connection.fetchval("SELECT to_regclass('baf_meta') IS NOT NULL")
                stored: int | None = None
                if exists:
                    value = await connection.fetchval("SELECT value FROM baf_meta WHERE key = 'schema_version'")
                    stored = int(value) if value is not None and str(value).isdigit() else None
                    if stored is None:
                        raise LogError(f"{where}: baf_meta has no valid schema_version; is this a baf log?")
                    if stored > SCHEMA_VERSION:
                        raise LogError(
                            f"{where}: the log's schema is version {stored}, written by a newer baf; "
                            f"this baf reads up to version {SCHEMA_VERSION}. Upgrade baf."
                        )
                if self._read_only:
                    if stored is None:
                        raise LogError(f"{where}: there is no baf log in this database")
                    return
                if stored is None:
                    await connection.execute(_CREATE_V1)
                    await connection.execute(
                        "INSERT INTO baf_meta (key, value) VALUES ('schema_version', $1)", str(SCHEMA_VERSION)
                    )
                    return
                for version in range(stored, SCHEMA_VERSION):
                    await connection.execute(_UPGRADES[version])
                    await connection.execute(
                        "UPDATE baf_meta SET value = $1 WHERE key = 'schema_version'", str(version + 1)
                    )
        except asyncpg.PostgresError as exc:
            raise LogError(f"{where}: cannot prepare the log's tables: {exc}") from exc

    def _check_open(self) -> asyncpg.Pool | None:
        if self._closed:
            raise LogClosedError(f"{self!r} is closed")
        return self._pool

    async def _ready_pool(self) -> asyncpg.Pool:
        pool = self._check_open()
        if pool is None:
            await self.start()
            pool = self._pool
            assert pool is not None
        return pool

    # -- writing --------------------------------------------------------------------------------------

    async def append(self, records: Sequence[Record]) -> None:
        if self._read_only:
            raise LogReadOnlyError(f"{self!r} was opened read-only")
        check_appendable(records)
        if not records:
            self._check_open()
            return
        rows = [encode_row(record) for record in records]
        await self._ready_pool()
        writer = self._writer
        if writer is None or writer.closing:
            raise LogClosedError(f"{self!r} is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        writer.queue.append(_Batch(rows, future))
        writer.wakeup.set()
        await future

    async def _write_loop(self, writer: _Writer) -> None:
        """Commit everything queued, group by group, until the store closes and the queue is empty."""
        connection: asyncpg.Connection | None = None
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
                        assert self._pool is not None
                        connection = await self._pool.acquire()
                    await self._commit_group(connection, group)
                except Exception as exc:
                    # The transaction failed as a whole: nothing of the group is durable. Say so to every
                    # appender and start the next group on a fresh connection.
                    error = LogError(f"{self!r}: commit failed, nothing of this append was written: {exc}")
                    error.__cause__ = exc
                    for batch in group:
                        if not batch.future.done():
                            batch.future.set_exception(error)
                    if connection is not None and self._pool is not None:
                        with contextlib.suppress(Exception):
                            await self._pool.release(connection, timeout=1)
                    connection = None
        finally:
            for batch in writer.queue:
                if not batch.future.done():
                    batch.future.set_exception(LogClosedError(f"{self!r} closed before this append was written"))
            if connection is not None and self._pool is not None:
                with contextlib.suppress(Exception):
                    await self._pool.release(connection)

    async def _commit_group(self, connection: asyncpg.Connection, group: list[_Batch]) -> None:
        asyncpg = _import_asyncpg()
        outcomes: list[BaseException | None] = []
        async with connection.transaction():
            for batch in group:
                try:
                    async with connection.transaction():  # a savepoint: this append fails alone
                        await _insert(connection, batch.rows)
                except asyncpg.UniqueViolationError:
                    outcomes.append(await _conflict_of(connection, batch.rows))
                except asyncpg.DataError as exc:
                    outcomes.append(ValueError(f"PostgreSQL refused the append: {exc}"))
                else:
                    outcomes.append(None)
        for batch, outcome in zip(group, outcomes, strict=True):
            if batch.future.done():
                continue
            if outcome is None:
                batch.future.set_result(None)
            else:
                batch.future.set_exception(outcome)

    # -- reading --------------------------------------------------------------------------------------

    async def read(self, session_id: str, after_seq: int = 0) -> list[Record]:
        pool = await self._ready_pool()
        async with pool.acquire() as connection:
            rows = await connection.fetch(_SELECT, session_id, after_seq)
        upcasters = upcast_module.UPCASTERS  # looked up on each call: a test may swap the registry
        return [upcasters.upcast(decode_row(session_id, row)) for row in rows]

    async def sessions(self) -> list[str]:
        pool = await self._ready_pool()
        async with pool.acquire() as connection:
            rows = await connection.fetch("SELECT session_id FROM baf_sessions ORDER BY ordinal")
        return [row[0] for row in rows]


async def _insert(connection: asyncpg.Connection, rows: list[Row]) -> None:
    columns = list(zip(*rows, strict=True))
    await connection.execute(_INSERT_SESSIONS, list(dict.fromkeys(columns[0])))
    await connection.execute(_INSERT_RECORDS, *(list(column) for column in columns))


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
    """``record`` as a ``baf_records`` row, or ``TypeError``/``ValueError`` for what cannot be stored."""
    where = f"session {record.session_id!r} seq {record.seq!r}"
    if not isinstance(record.session_id, str):
        raise TypeError(f"{where}: session_id must be str, not {type(record.session_id).__name__}")
    if not isinstance(record.kind, str):
        raise TypeError(f"{where}: kind must be str, not {type(record.kind).__name__}")
    for name, value, limit in (("seq", record.seq, _MAX_INT64), ("version", record.version, _MAX_INT32)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: {name} must be int, not {type(value).__name__}")
        if value > limit:
            raise ValueError(f"{where}: {name} {value} is too large")
    ts = record.ts
    if isinstance(ts, bool) or not isinstance(ts, int | float) or ts != ts or ts in (float("inf"), float("-inf")):
        raise TypeError(f"{where}: ts must be a finite number, not {ts!r}")
    if not isinstance(record.data, dict):
        raise TypeError(f"{where}: data must be a dict, not {type(record.data).__name__}")
    try:
        encoded = encode_json(record.data)
    except (TypeError, ValueError) as exc:  # ValueError: a circular reference
        raise TypeError(f"{where}: data is not JSON: {exc}") from exc
    text = encoded.decode() if isinstance(encoded, bytes) else encoded
    texts: tuple[tuple[str, str], ...] = (("session_id", record.session_id), ("kind", record.kind), ("data", text))
    for name, field_text in texts:
        if "\x00" in field_text:  # PostgreSQL text cannot hold NUL; JSON escapes it inside strings
            raise ValueError(f"{where}: {name} contains a NUL character")
        if not field_text.isascii():
            try:
                field_text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"{where}: {name} is not valid Unicode: {exc}") from exc
    return (str(record.session_id), int(record.seq), str(record.kind), text, float(ts), int(record.version))


def decode_row(session_id: str, row: Any) -> Record:
    """A ``baf_records`` row as a ``Record``, or ``CorruptRecordError`` naming session and seq."""
    seq, kind, text, ts, version = row[0], row[1], row[2], row[3], row[4]
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
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError("a postgresql:// log needs asyncpg: pip install 'baf[postgres]'") from exc
    return asyncpg
