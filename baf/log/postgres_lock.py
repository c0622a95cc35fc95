"""Who may write a PostgreSQL log: workers together, or one plain process alone (the writer lock).

Workers (``baf serve``, ``baf.serve.Worker``) share a log: each session's writer is fenced by its lease. A
plain process (``baf run``, ``agent.run()``, ``async with agent:`` with ``log="postgresql://..."``) takes
no lease: like a process over a SQLite file, it treats every session it touches as its own, so it must be
the log's only writer. A store opened for writing therefore takes the log's writer lock: exclusive for a
plain store, shared for a worker's. A plain store opening a log that workers or another plain process
write is refused with :class:`~baf.errors.LogInUseError` naming them, and so is a worker opening a log a
plain process writes. Read-only stores (``baf sessions``, ``log``, ``replay``) take no lock.

**A lock other roles cannot hold.** Advisory locks need no privilege, and ``pg_locks``, readable by every
role, shows their keys while they are held: a lock every store takes under one key is a lock any role that
can connect could learn and hold, keeping every baf from opening the log for writing. So the writer lock is
made of two parts:

- a **mark** per store: a session-level advisory lock, held by the connection the store commits on, under
  the key (the oid of the log's ``baf_records``, a random number drawn for this connection): exclusive for a
  plain store, shared for a worker's. It says "this connection writes this log" for as long as the
  connection lives, and no other role can take it away; nobody else holds the same random key (if someone
  does, another number is drawn). With it the store records its connection's server pid and its key in
  ``baf_writer_marks``, a table only a role that may write baf's tables can add rows to;
- the **decision**, made while holding the row lock of ``writer_generation`` in ``baf_meta`` (so stores
  decide one at a time, and no role without rights on ``baf_meta`` can hold that lock): the marks held
  now (``pg_locks``) that have their row in ``baf_writer_marks`` are the log's writers. A mark without one
  (anyone can take an advisory lock of any key) is not, and is ignored, unless an older baf holds it
  (below). The rows of marks no longer held
  (their connections ended) are deleted in the same decision. The row proves the right of the role the
  store acts as, so a store whose login role reaches baf's tables only through ``SET ROLE`` (``NOINHERIT``,
  ``ALTER ROLE ... SET role``) is a writer like any other.

Another role can still see the marks (``pg_locks``), as it can see every connection (``pg_stat_activity``:
its role and ``application_name``, not its queries), but holding a mark of its own changes nothing. A row
names its connection by server pid: should a writer's connection end and a connection of another role get
the same pid and hold the same key before the next decision deletes the row, that mark would count, which
can keep a baf from starting (as holding connections or locks can, see ``docs/security.md``) but never lets
two plain stores write.

**Waits are bounded.** The decision waits for the row lock, and the schema step at start for its table lock
(``baf.log.postgres_schema``), for at most the store's ``connect_timeout`` (``lock_timeout``): a session
left in a transaction on ``baf_meta`` (a ``psql`` forgotten at a prompt) makes the store fail with
``LogStorageError`` naming the connections holding locks on ``baf_meta``, instead of waiting forever.

**The same log** is one set of baf tables: a database, and the schema its tables are found in
(``search_path``). Advisory locks belong to a database and the key holds the oid of that ``baf_records``
table, so logs in two schemas or two databases do not exclude each other, while two URLs that reach the
same tables (another host name for the server, another role) do. A baf before schema version 3 took the
fixed key (``LEGACY_WRITER_LOCK``, the oid), and a baf of schema version 3 a mark without a row: a store
still finds such an older process writing the log during an upgrade (its mark or lock counts when its login
role may write ``baf_records``, as those bafs decided), and is refused as if it held a mark of its own.

**Held by the connection that commits.** The mark is taken on the writer's own connection, the one every
append of the store commits on, and lasts as long as that connection: a commit is only ever made on a
connection holding it, with no check per commit. If the connection drops, the mark goes with it; the
writer takes the lock again on its next connection before writing anything, and while another process
holds it, the appends fail with ``LogInUseError``. Every store that takes the lock bumps its
**generation** (``baf_meta``): a plain store that finds, on its new connection, that another store took
the lock in between (and may have written the sessions it holds in memory) writes no more, for good.
Closing the store closes the connection, which releases the mark. A process that dies releases it when the
server sees its connection end: at once after a crash; when its host is lost, after the keepalive time
(``baf.log.postgres_connect``).
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from baf.errors import LogInUseError, LogStorageError

if TYPE_CHECKING:
    import asyncpg

__all__ = ["LEGACY_WRITER_LOCK", "overtaken", "take_writer_lock", "writer_name"]

#: The first key of the writer lock baf took before schema version 3 (the second was the oid of the log's
#: ``baf_records`` table); a process of that baf holding it is one of the log's writers (see above).
LEGACY_WRITER_LOCK: Final = 0x62AF_0002

# The oid as int4 wraps around above 2**31; pg_locks shows it back as the oid.
_KEY: Final = "'baf_records'::regclass::oid::int4"
# The connection's name, unless the URL gave it one (application_name=...): others' refusals show it.
_NAMED: Final = "CASE WHEN current_setting('application_name') = '' THEN set_config('application_name', $2, false) END"
_MARK_EXCLUSIVE: Final = f"SELECT pg_try_advisory_lock({_KEY}, $1), {_NAMED}"
_MARK_SHARED: Final = f"SELECT pg_try_advisory_lock_shared({_KEY}, $1), {_NAMED}"
_RECORD_MARK: Final = """
INSERT INTO baf_writer_marks (pid, key) VALUES (pg_backend_pid(), $1)
ON CONFLICT (pid) DO UPDATE SET key = excluded.key
"""
# The marks held now, in this database (pg_locks shows the second key as an oid).
_HELD: Final = """
SELECT 1 FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = 'baf_records'::regclass::oid
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
_FORGET_ENDED: Final = f"""
DELETE FROM baf_writer_marks m WHERE NOT EXISTS ({_HELD} AND l.pid = m.pid AND l.objid::int4 = m.key)
"""
# The log's writers other than this connection: the marks with their rows, and what a baf before schema version
# 4 holds (a mark without a row, or the legacy lock), counted when its login role may write the log.
_HOLDERS: Final = """
SELECT l.pid, l.mode = 'ExclusiveLock', a.application_name, host(a.client_addr)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND (l.classid = 'baf_records'::regclass::oid OR (l.classid = $1::oid AND l.objid = 'baf_records'::regclass::oid))
  AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (
    EXISTS (SELECT 1 FROM baf_writer_marks m WHERE m.pid = l.pid AND m.key = l.objid::int4
            AND l.classid = 'baf_records'::regclass::oid)
    OR has_table_privilege(a.usesysid, 'baf_records'::regclass, 'INSERT')
  )
ORDER BY l.pid
"""
# How many random keys to try for a mark before giving up: another connection holds a key drawn only by chance
# (or by holding thousands of them), so a second draw practically always finds a free one.
_DRAWS: Final = 8

# The generation after this store's bump. The row is locked first and its latest value read after the wait
# (an UPDATE reads the row again once it holds it), so the one before is this less one.
_BUMP: Final = """
INSERT INTO baf_meta (key, value) VALUES ('writer_generation', '1')
ON CONFLICT (key) DO UPDATE SET value = (baf_meta.value::bigint + 1)::text RETURNING value::bigint
"""

# The connections holding a lock on baf_meta that a store's decision or schema step may wait for (anything but
# a plain read's), for the error of a wait that lasted too long.
_BLOCKING: Final = """
SELECT DISTINCT l.pid, a.application_name, host(a.client_addr) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.relation = to_regclass('baf_meta') AND l.granted
  AND l.mode <> 'AccessShareLock' AND l.pid <> pg_backend_pid()
ORDER BY l.pid
"""
_LOCK_NOT_AVAILABLE: Final = "55P03"  # lock_timeout ran out

# PostgreSQL keeps the first 63 bytes of a connection's name.
_NAME_BYTES: Final = 63


def writer_name(worker_id: str | None) -> str:
    """The name (``application_name``) of a store's writer connection: a worker's id, or the process, its
    command line with the passwords of URLs in it shown as ``***`` (every role of the database can read a
    connection's name in ``pg_stat_activity``, and ``baf replay URL --fork-at`` writes)."""
    if worker_id is not None:
        name = f"baf worker {worker_id}"
    else:
        from baf.log.postgres import redact_dsn  # that module imports this one

        words = [redact_dsn(word) if "://" in word else word for word in sys.argv[1:]]
        command = " ".join([os.path.basename(sys.argv[0]), *words]) if sys.argv and sys.argv[0] else "python"
        name = f"baf pid {os.getpid()} on {socket.gethostname()}: {command}"
    # A command line of bytes that are not UTF-8 (a Latin-1 file name) reaches Python as lone surrogates,
    # which no text sent to the server may hold: shown as "?".
    return name.encode(errors="replace")[:_NAME_BYTES].decode(errors="ignore")


async def take_writer_lock(
    connection: asyncpg.Connection,
    where: str,
    worker_id: str | None,
    since: int | None = None,
    *,
    wait: float,
    prepare: Callable[[], Awaitable[None]] | None = None,
) -> int | None:
    """Take the writer lock on ``connection`` (shared for a worker's store, exclusive otherwise), or raise
    ``LogInUseError`` naming the connections that hold it. ``prepare``, if given, runs first in the same
    transaction (the schema's check or upgrade at start: a store refused changes nothing); otherwise the
    log's tables must exist. A lock waited for longer than ``wait`` seconds raises ``LogStorageError``.

    Returns the lock's generation, which every store taking the lock bumps. ``since``: the generation this
    store took the lock at on its previous connection (a plain store reconnecting); ``None`` is returned
    (and nothing taken) when another store took the lock in between, and may have written what this one
    holds in memory.

    The transaction is committed only when the lock is taken. Otherwise (refused, overtaken, failed or
    cancelled) it is left open, and the caller closes the connection, which ends it and frees the mark: a
    rollback sent over a broken connection would fail too, and hide the first error."""
    transaction = connection.transaction()
    await transaction.start()
    try:
        await connection.execute("SELECT set_config('lock_timeout', $1, true)", f"{max(1, round(wait * 1000))}ms")
        if prepare is not None:
            await prepare()
        taken = await _decide(connection, where, worker_id, since)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
            raise
        raise await _waited_too_long(connection, transaction, where, wait) from exc
    if taken is not None:
        await transaction.commit()
    return taken


async def _decide(connection: asyncpg.Connection, where: str, worker_id: str | None, since: int | None) -> int | None:
    """``take_writer_lock`` inside its transaction: the new generation once the mark is held, ``None`` when
    overtaken (see there), or ``LogInUseError``."""
    # The row lock of writer_generation, until the transaction ends: stores decide one at a time.
    now = await connection.fetchval(_BUMP)
    await connection.execute(_FORGET_ENDED)
    rows = await connection.fetch(_HOLDERS, LEGACY_WRITER_LOCK)
    holders = [(row[0], bool(row[1]), row[2], row[3]) for row in rows]
    if any(worker_id is None or exclusive for _, exclusive, _, _ in holders):
        raise _refusal(where, worker_id, holders)
    if since is not None and now - 1 != since:
        return None
    statement = _MARK_EXCLUSIVE if worker_id is None else _MARK_SHARED
    for _ in range(_DRAWS):
        key = _draw()
        if (await connection.fetchrow(statement, key, writer_name(worker_id)))[0]:
            await connection.execute(_RECORD_MARK, key)
            return int(now)
    raise LogInUseError(
        where, reason=f"every key drawn for this store's writer lock ({_DRAWS}) was held by another connection"
    )


async def _waited_too_long(
    connection: asyncpg.Connection, transaction: asyncpg.transaction.Transaction, where: str, wait: float
) -> LogStorageError:
    """The error of a lock on ``baf_meta`` waited for longer than ``wait``, naming who holds such locks."""
    try:
        # The server ran the wait out and answered: the connection is sound, and the query needs it out of
        # the failed transaction.
        await transaction.rollback()
        rows = await connection.fetch(_BLOCKING)
    except Exception:
        rows = []
    named = ", ".join(_holder(row[0], row[1], row[2]) for row in rows) or "another connection"
    return LogStorageError(
        where,
        f"cannot take the log's writer lock: {named} held a lock on baf_meta for longer than {wait:g} s "
        "(connect_timeout), and this store waited no longer; end that connection's transaction (setting "
        "idle_in_transaction_session_timeout on the server ends forgotten ones); nothing was written",
    )


def _draw() -> int:
    """A random int4, the second key of a mark."""
    return secrets.randbits(32) - 2**31


def overtaken(where: str) -> LogInUseError:
    """The error of a plain store whose connection dropped and whose log another store wrote meanwhile."""
    return LogInUseError(
        where,
        reason="another process opened this PostgreSQL log for writing while this process's connection to it "
        "was lost: the sessions this process holds in memory may be out of date, so it writes no more "
        "(nothing was written); restart it",
    )


def _refusal(
    where: str, worker_id: str | None, holders: list[tuple[int, bool, str | None, str | None]]
) -> LogInUseError:
    """The error for a store refused the lock, naming ``holders`` (pid, exclusive, name, client address)."""
    named = ", ".join(_holder(pid, name, address) for pid, _, name, address in holders)
    plain = any(exclusive for _, exclusive, _, _ in holders)
    if worker_id is not None:
        reason = (
            f"this PostgreSQL log is written by a process that is not a worker ({named}); a worker next to it "
            "would write the sessions it writes. Stop that process (or give it a database or schema of its "
            "own), then start the workers"
        )
    elif plain:
        reason = (
            f"this PostgreSQL log is already open for writing by another process ({named}); a PostgreSQL log "
            "has one writing process unless baf serve workers write it (stop that one, open the log "
            "read-only, or run the agent with baf serve for many processes)"
        )
    else:
        reason = (
            f"baf serve workers write this PostgreSQL log ({named}); a process that is not one of them would "
            "write their sessions without a lease. Run the agent with baf serve (--workers 1 runs one), stop "
            "the workers first, or open the log read-only"
        )
    return LogInUseError(where, named, reason=f"{reason}; nothing was written")


def _holder(pid: int, name: str | None, address: str | None) -> str:
    origin = f"server pid {pid}" + (f", from {address}" if address else "")
    return f"{name} ({origin})" if name else origin
