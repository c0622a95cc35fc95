"""The PostgreSQL log's tables, their version, and the upgrades from older versions.

Version 1 holds the records and the session index. Version 2 adds the unfinished-work index (``baf_work``:
a row per session whose ``baf.log.work`` status is not idle), a partial index that finds a session's latest
snapshot, and what many workers share: a heartbeat row per worker, a lease per session (owner, epoch, expiry
on the database clock) and the durable inbox through which a message reaches the worker that owns its
session. Upgrading a version-1 log folds its records once to fill ``baf_work``. Version 3 changes no table:
its notification channels are named from a secret in ``baf_meta`` (``baf.log.postgres_channels``). Version 4
adds ``baf_writer_marks``, a row per connection holding the writer lock, which only a role that may write
baf's tables can make (``baf.log.postgres_lock``). A baf reading an older version would use the old channel
names or would not see the rows, so it is refused, as for any newer schema.

**Schema changes one at a time.** A store opening the log for writing locks ``baf_meta`` (SHARE ROW
EXCLUSIVE) for the length of its check or upgrade, so two workers starting together do not both upgrade.
This is a table lock, which only a role granted rights on ``baf_meta`` can take, where an advisory lock
would be one any role that can connect could hold forever, and so keep every baf from starting. An empty
database has no table to lock: two stores creating the tables together collide on the catalog, and the
one that loses sees the other's tables when it tries again.

**Nothing changed by a store that is refused.** A writing store prepares the schema in the transaction it
decides its writer lock in (``baf.log.postgres.PostgresLog``): a store refused because an older baf still
writes the log leaves its schema (and its channel secret) as they were, so that older baf can still restart.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Final

from baf.errors import LogError
from baf.log.jsontext import decode_json
from baf.log.postgres_channels import CHANNELS_SECRET
from baf.log.work import IDLE, WORK_KINDS, WorkStatus, work_after
from baf.wording import agreeing

if TYPE_CHECKING:
    import asyncpg

__all__ = ["SCHEMA_VERSION", "created_meanwhile", "prepare_schema"]

#: The schema this baf writes. A database at a higher version was written by a newer baf and is refused.
SCHEMA_VERSION: Final = 4

# SQLSTATEs of a CREATE that collided with another store's creating the same tables (unique_violation on the
# catalog, duplicate_table, duplicate_object): the tables exist now, so the loser tries again.
_CREATED_ALREADY: Final = ("23505", "42P07", "42710")

_RECORDS: Final = """
CREATE TABLE baf_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE baf_sessions (
    session_id text PRIMARY KEY,
    ordinal bigserial UNIQUE
);
CREATE TABLE baf_records (
    session_id text NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 1),
    kind text NOT NULL,
    data text NOT NULL,
    ts double precision NOT NULL,
    version integer NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""

_WORKERS: Final = """
CREATE TABLE baf_work (
    session_id text PRIMARY KEY,
    status text NOT NULL,
    unfinished boolean NOT NULL
);
CREATE INDEX baf_records_snapshots ON baf_records (session_id, seq) WHERE kind = 'snapshot';
CREATE TABLE baf_workers (
    worker_id text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE baf_leases (
    session_id text PRIMARY KEY,
    owner text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX baf_leases_owner ON baf_leases (owner);
CREATE TABLE baf_inbox (
    id bigserial PRIMARY KEY,
    session_id text NOT NULL,
    payload text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX baf_inbox_session ON baf_inbox (session_id, id);
"""

_MARKS: Final = """
CREATE TABLE baf_writer_marks (
    pid integer PRIMARY KEY,
    key integer NOT NULL
);
"""

#: The statements that bring a version-N schema to version N + 1, for each N whose next version adds tables.
#: Version 3 adds only the channel secret (a row of ``baf_meta``), which every writing store makes if missing.
UPGRADES: Final[dict[int, str]] = {1: _WORKERS, 3: _MARKS}

_CREATE: Final = _RECORDS + _WORKERS + _MARKS


async def prepare_schema(connection: asyncpg.Connection, where: str, *, read_only: bool) -> None:
    """Create the tables in an empty database, upgrade an older schema, refuse a newer one or a non-log;
    make the channel secret if the log has none (``baf.log.postgres_channels``). Call it inside a
    transaction, which it does not end: a writing store decides its writer lock in the same one, and commits
    only if it is not refused. Two stores creating the tables of an empty database at once collide: the
    loser's error is one ``created_meanwhile`` recognizes, and it tries again on a new connection.

    Read-only: nothing is created or changed (not the secret either); a database without a baf log is refused.
    """
    if read_only:
        stored = await _stored_version(connection, where)
        if stored is None:
            raise LogError(f"{where}: there is no baf log in this database")
        _refuse_newer(where, stored)
        await _check_tables(connection, where, stored)
        return
    await _prepare(connection, where)


def created_meanwhile(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``CREATE`` that collided with another store's creating the same tables: they
    exist now, and a new transaction on a new connection (whose view of the catalog is fresh) finds them."""
    return getattr(exc, "sqlstate", None) in _CREATED_ALREADY


async def _prepare(connection: asyncpg.Connection, where: str) -> None:
    if await connection.fetchval("SELECT to_regclass('baf_meta') IS NOT NULL"):
        await connection.execute("LOCK TABLE baf_meta IN SHARE ROW EXCLUSIVE MODE")  # see the module's docstring
    stored = await _stored_version(connection, where)
    if stored is None:
        await connection.execute(_CREATE)
        await connection.execute("INSERT INTO baf_meta (key, value) VALUES ('schema_version', $1)", str(SCHEMA_VERSION))
    else:
        _refuse_newer(where, stored)
        if stored == SCHEMA_VERSION:
            await _check_tables(connection, where, stored)
        for version in range(stored, SCHEMA_VERSION):
            if version in UPGRADES:
                await connection.execute(UPGRADES[version])
            if version == 1:
                await _fill_work_index(connection)
        if stored != SCHEMA_VERSION:
            await connection.execute("UPDATE baf_meta SET value = $1 WHERE key = 'schema_version'", str(SCHEMA_VERSION))
    await connection.execute(
        "INSERT INTO baf_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        CHANNELS_SECRET,
        secrets.token_hex(32),
    )


def _refuse_newer(where: str, stored: int) -> None:
    if stored > SCHEMA_VERSION:
        raise LogError(
            f"{where}: the log's schema is version {stored}, written by a newer baf; "
            f"this baf reads up to version {SCHEMA_VERSION}. Upgrade baf."
        )


async def _fill_work_index(connection: asyncpg.Connection) -> None:
    """Fold the work kinds of every session into ``baf_work`` (upgrading from version 1)."""
    statuses: dict[str, WorkStatus] = {}
    kinds = sorted(WORK_KINDS)
    async for row in connection.cursor(
        "SELECT session_id, seq, kind, data FROM baf_records WHERE kind = ANY($1::text[]) ORDER BY session_id, seq",
        kinds,
    ):
        try:
            data = decode_json(row[3])
        except ValueError:
            data = {}  # a damaged record: the fold reports it when the session loads
        session_id = row[0]
        statuses[session_id] = work_after(
            statuses.get(session_id, IDLE), row[2], row[1], data if isinstance(data, dict) else {}
        )
    await connection.executemany(
        "INSERT INTO baf_work (session_id, status, unfinished) VALUES ($1, $2, $3)",
        [(name, status.to_text(), status.unfinished) for name, status in statuses.items() if status != IDLE],
    )


#: The tables each schema version has (a version's tables and those of the versions before it).
_TABLES: Final = {1: ("baf_meta", "baf_sessions", "baf_records"),
                  2: ("baf_work", "baf_workers", "baf_leases", "baf_inbox"), 4: ("baf_writer_marks",)}  # fmt: skip


async def _check_tables(connection: asyncpg.Connection, where: str, version: int) -> None:
    """Refuse a log whose schema says ``version`` but lacks some of its tables (dropped by hand, or a
    restore of part of the database): every command would otherwise fail later, on a query, with
    PostgreSQL's error and a traceback."""
    expected = [table for at, tables in _TABLES.items() if at <= version for table in tables]
    missing = await connection.fetchval(
        "SELECT array_agg(t ORDER BY n) FROM unnest($1::text[]) WITH ORDINALITY AS u(t, n) "
        "WHERE to_regclass(t) IS NULL",
        expected,
    )
    if missing:
        raise LogError(
            f"{where}: the log's schema is version {version}, but its {agreeing(len(missing), 'table', 'tables')} "
            f"{', '.join(missing)} {agreeing(len(missing), 'is', 'are')} missing; was the database damaged, or "
            "restored in part?"
        )


async def _stored_version(connection: asyncpg.Connection, where: str) -> int | None:
    # One statement: tables another store creates meanwhile appear to it together.
    meta, records = await connection.fetchrow(
        "SELECT to_regclass('baf_meta') IS NOT NULL, to_regclass('baf_records') IS NOT NULL"
    )
    if not meta:
        if records:
            raise LogError(f"{where}: baf_records exists without baf_meta; is this a baf log?")
        return None
    value = await connection.fetchval("SELECT value FROM baf_meta WHERE key = 'schema_version'")
    if value is None or not (str(value).isascii() and str(value).isdigit()):  # "²" is a digit int() refuses
        raise LogError(f"{where}: baf_meta has no valid schema_version; is this a baf log?")
    return int(value)
