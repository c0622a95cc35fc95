"""A session log in PostgreSQL, for many worker processes on one or many hosts (``baf[postgres]``, asyncpg).

Tables (created by baf, versioned in ``baf_meta``; an older schema is upgraded in place, a newer one is
refused with a ``LogError``; see ``baf.log.postgres_schema``):

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
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

from baf.errors import (
    ConfigurationError,
    CorruptRecordError,
    LeaseLostError,
    LogClosedError,
    LogConflictError,
    LogError,
    LogReadOnlyError,
)
from baf.log import upcast as upcast_module
from baf.log.jsontext import decode_json, encode_json
from baf.log.postgres_inbox import RECORDS_CHANNEL
from baf.log.postgres_schema import SCHEMA_VERSION, prepare_schema
from baf.log.record import Record
from baf.log.store import SessionLog, check_appendable, missing_record
from baf.log.work import IDLE, WORK_KINDS, WorkStatus, work_after

if TYPE_CHECKING:
    import asyncpg

__all__ = ["SCHEMA_VERSION", "PostgresLog", "decode_row", "encode_row", "redact_dsn"]

# One statement writes a batch: registers new sessions (in order of first appearance), inserts the
# records and notifies RECORDS_CHANNEL per session (delivered at commit). Alone it is its own transaction:
# one round trip for the common append. ``{fence}`` is empty, or (a worker's store) the lease check: the
# rows are written only if every lease ($7 sessions, $8 epochs, owner $9) still has its epoch, read under
# FOR KEY SHARE, which a takeover (SELECT ... FOR UPDATE first, see postgres_leases) waits for and which
# heartbeats (updates of no key column) do not. No row back means no record was written: fenced off.
_WRITE_TEMPLATE: Final = """
WITH {fence_cte}new_sessions AS (
    INSERT INTO baf_sessions (session_id)
    SELECT s FROM unnest($1::text[]) WITH ORDINALITY AS u(s, n) {fence_where}GROUP BY s ORDER BY min(n)
    ON CONFLICT DO NOTHING
), written AS (
    INSERT INTO baf_records (session_id, seq, kind, data, ts, version)
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::float8[], $6::int[])
    {fence_where}RETURNING session_id
)
SELECT pg_notify('{channel}', s) FROM (SELECT DISTINCT session_id AS s FROM written) AS d
"""
_FENCE_CTE: Final = """fence AS (
    SELECT l.session_id FROM baf_leases l JOIN unnest($7::text[], $8::bigint[]) AS f(s, e)
    ON l.session_id = f.s AND l.epoch = f.e WHERE l.owner = $9 FOR KEY SHARE OF l
), """
_FENCE_WHERE: Final = "WHERE (SELECT count(*) FROM fence) = cardinality($7::text[]) "
_WRITE: Final = _WRITE_TEMPLATE.format(fence_cte="", fence_where="", channel=RECORDS_CHANNEL)
_WRITE_FENCED: Final = _WRITE_TEMPLATE.format(fence_cte=_FENCE_CTE, fence_where=_FENCE_WHERE, channel=RECORDS_CHANNEL)
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
    #: (session, epoch) leases the append must still hold when it commits (fencing), if this store is a worker's.
    fences: list[tuple[str, int]] | None = None
    #: Inbox rows (session, ids) this append consumes: deleted in its transaction, exactly once.
    consumes: tuple[str, list[int]] | None = None


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
    ``LogReadOnlyError``.

    With ``worker_id`` the store is one worker's among many: it appends only to sessions whose lease it
    holds (``fence``), and every append checks, inside its transaction and under a key-share lock on the lease
    row, that the lease still has the epoch it was taken with. A takeover (which bumps the epoch) and such
    an append therefore serialise on that row: after a takeover the old owner's appends fail with
    ``LeaseLostError`` and write nothing, however long it was paused.

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
    ) -> None:
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
        self._worker_id = worker_id
        # The sessions this worker holds a lease on, with the lease's epoch (see baf.log.postgres_leases).
        self._fences: dict[str, int] = {}

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
    def pool(self) -> asyncpg.Pool:
        """The reading pool (for the lease and inbox helpers); ``LogClosedError`` when not open."""
        pool = self._check_open()
        if pool is None:
            raise LogClosedError(f"{self!r} is not started")
        return pool

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
                    await prepare_schema(connection, where, read_only=self._read_only)
            except asyncpg.PostgresError as exc:
                await pool.close()
                raise LogError(f"{where}: cannot prepare the log's tables: {exc}") from exc
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
        writer.queue.append(_Batch(rows, future, fences, consumes))
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
                    error = LogError(
                        f"{self!r}: the commit failed and this append was not acknowledged ({exc}); if the "
                        "connection dropped during the commit itself it may still have been written: read the "
                        "session to know"
                    )
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
        """Commit ``group``: one append alone in as few round trips as it needs (one statement for the
        common case); several in one transaction, each in a savepoint so that it fails alone. Each
        append's future is settled after the commit."""
        refusals = _refusals()
        outcomes: list[BaseException | None] = []
        if len(group) == 1:
            batch = group[0]
            try:
                if _needs_transaction(batch):
                    async with connection.transaction():
                        await self._write(connection, batch)
                else:
                    await self._write(connection, batch)  # a single statement is its own transaction
                outcomes.append(None)
            except refusals as exc:
                outcomes.append(await _refusal(connection, batch, exc))
        else:
            async with connection.transaction():
                for batch in group:
                    try:
                        async with connection.transaction():  # a savepoint
                            await self._write(connection, batch)
                        outcomes.append(None)
                    except refusals as exc:
                        outcomes.append(await _refusal(connection, batch, exc))
        for batch, outcome in zip(group, outcomes, strict=True):
            if batch.future.done():
                continue
            if outcome is None:
                batch.future.set_result(None)
            else:
                batch.future.set_exception(outcome)

    async def _write(self, connection: asyncpg.Connection, batch: _Batch) -> None:
        """One append's statements: the lease check, the inbox rows it consumes, the records, the index."""
        fences = batch.fences
        if fences and (batch.consumes or not batch.rows):
            await self._check_fences(connection, fences)  # before the inbox rows are touched
            fences = None
        if batch.consumes:
            await _consume(connection, *batch.consumes)
        if batch.rows:
            columns = [list(column) for column in zip(*batch.rows, strict=True)]
            if fences:
                names, epochs = [name for name, _ in fences], [epoch for _, epoch in fences]
                if not await connection.fetch(_WRITE_FENCED, *columns, names, epochs, self._worker_id):
                    await self._check_fences(connection, fences)  # names the lost session and raises
                    raise LeaseLostError(names[0], "a lease changed while this append was written")
            else:
                await connection.execute(_WRITE, *columns)
            await _update_work(connection, batch.rows)

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
        pool = await self._ready_pool()
        async with pool.acquire() as connection:
            rows = await connection.fetch(_SELECT, session_id, after_seq)
        upcasters = upcast_module.UPCASTERS  # looked up on each call: a test may swap the registry
        for expected, row in enumerate(rows, after_seq + 1):
            if row[0] != expected:  # seqs have no gaps (guarantee 3): a missing record is corruption
                raise missing_record(session_id, expected, row[0])
        return [upcasters.upcast(decode_row(session_id, row)) for row in rows]

    async def sessions(self) -> list[str]:
        pool = await self._ready_pool()
        async with pool.acquire() as connection:
            rows = await connection.fetch("SELECT session_id FROM baf_sessions ORDER BY ordinal")
        return [row[0] for row in rows]

    async def unfinished_sessions(self) -> list[str]:
        """The sessions with unfinished work, from ``baf_work`` (kept by every append's transaction)."""
        pool = await self._ready_pool()
        async with pool.acquire() as connection:
            rows = await connection.fetch(
                "SELECT w.session_id FROM baf_work w JOIN baf_sessions s USING (session_id) "
                "WHERE w.unfinished ORDER BY s.ordinal"
            )
        return [row[0] for row in rows]

    async def read_for_load(self, session_id: str) -> list[Record]:
        """The records from the latest snapshot (found through a partial index) to the end."""
        pool = await self._ready_pool()
        async with pool.acquire() as connection:
            latest = await connection.fetchval(
                "SELECT max(seq) FROM baf_records WHERE session_id = $1 AND kind = 'snapshot'", session_id
            )
        return await self.read(session_id, after_seq=(latest or 1) - 1)

    async def shared_secret(self, name: str) -> bytes | None:
        """The secret ``name`` kept in ``baf_meta`` (32 random bytes, made by the first worker that asks):
        every worker over this database signs and checks with the same key (a resume token issued by one
        worker is good on the others). Whoever can read the database can read it, as they can read the
        conversations. A read-only store only reads it (``None`` if it was never made)."""
        key = f"secret:{name}"
        pool = await self._ready_pool()
        async with pool.acquire() as connection:
            if not self._read_only:
                await connection.execute(
                    "INSERT INTO baf_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                    key,
                    secrets.token_hex(32),
                )
            value = await connection.fetchval("SELECT value FROM baf_meta WHERE key = $1", key)
        return bytes.fromhex(value) if value is not None else None


def _refusals() -> tuple[type[BaseException], ...]:
    """What refuses one append (it fails alone, the connection stays usable)."""
    asyncpg = _import_asyncpg()
    return (LogError, asyncpg.UniqueViolationError, asyncpg.DataError)


async def _refusal(connection: asyncpg.Connection, batch: _Batch, exc: BaseException) -> BaseException:
    """The error an append's caller gets for ``exc`` (read after its statements were rolled back)."""
    if isinstance(exc, LogError):  # a lost lease, an inbox row consumed already
        return exc
    if isinstance(exc, _import_asyncpg().UniqueViolationError):
        return await _conflict_of(connection, batch.rows)
    return ValueError(f"PostgreSQL refused the append: {exc}")


def _needs_transaction(batch: _Batch) -> bool:
    """Whether an append needs more than its one write statement (fencing, the inbox, the work index)."""
    return bool(batch.consumes or any(row[2] in WORK_KINDS for row in batch.rows))


async def _update_work(connection: asyncpg.Connection, rows: list[Row]) -> None:
    """Fold the work kinds among ``rows`` into ``baf_work`` (in the append's transaction)."""
    work_rows = [row for row in rows if row[2] in WORK_KINDS]
    if not work_rows:
        return
    sessions = list(dict.fromkeys(row[0] for row in work_rows))
    stored = await connection.fetch(
        "SELECT session_id, status FROM baf_work WHERE session_id = ANY($1::text[]) FOR UPDATE", sessions
    )
    before = {row[0]: WorkStatus.from_text(row[1]) for row in stored}
    after = dict(before)
    for session_id, seq, kind, text, _ts, _version in sorted(work_rows, key=lambda row: (row[0], row[1])):
        after[session_id] = work_after(after.get(session_id, IDLE), kind, seq, decode_json(text))
    idle = [name for name, status in after.items() if status == IDLE and name in before]
    busy = [(name, status) for name, status in after.items() if status != IDLE and status != before.get(name)]
    if idle:
        await connection.execute("DELETE FROM baf_work WHERE session_id = ANY($1::text[])", idle)
    if busy:
        await connection.execute(
            "INSERT INTO baf_work (session_id, status, unfinished) "
            "SELECT * FROM unnest($1::text[], $2::text[], $3::bool[]) "
            "ON CONFLICT (session_id) DO UPDATE SET status = EXCLUDED.status, unfinished = EXCLUDED.unfinished",
            [name for name, _ in busy],
            [status.to_text() for _, status in busy],
            [status.unfinished for _, status in busy],
        )


async def _consume(connection: asyncpg.Connection, session_id: str, ids: list[int]) -> None:
    deleted = await connection.fetch(
        "DELETE FROM baf_inbox WHERE session_id = $1 AND id = ANY($2::bigint[]) RETURNING id", session_id, ids
    )
    if len(deleted) != len(set(ids)):
        missing = sorted(set(ids) - {row[0] for row in deleted})
        raise LogError(f"session {session_id!r}: inbox message(s) {missing} were consumed already")


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
