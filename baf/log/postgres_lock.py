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
  does, another number is drawn);
- the **decision**, made while holding the row lock of ``writer_generation`` in ``baf_meta`` (so stores
  decide one at a time, and no role without rights on ``baf_meta`` can hold that lock): the marks held
  now (``pg_locks``) by connections whose role may write ``baf_records`` are the log's writers. A mark held
  by a role that may not (anyone can take an advisory lock of any key) is not one of them, and is ignored.

Another role can still see the marks (``pg_locks``), as it can see every connection (``pg_stat_activity``:
its role and ``application_name``, not its queries), but holding a mark of its own changes nothing.

**The same log** is one set of baf tables: a database, and the schema its tables are found in
(``search_path``). Advisory locks belong to a database and the key holds the oid of that ``baf_records``
table, so logs in two schemas or two databases do not exclude each other, while two URLs that reach the
same tables (another host name for the server, another role) do. A baf before schema version 3 took the
fixed key (``LEGACY_WRITER_LOCK``, the oid): a store still finds such an older process writing the log
during an upgrade, and is refused as if it held a mark.

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
from typing import TYPE_CHECKING, Final

from baf.errors import LogInUseError

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
# The log's writers: the marks (and the legacy locks) held by other connections whose role may write it.
_HOLDERS: Final = """
SELECT l.pid, l.mode = 'ExclusiveLock', a.application_name, host(a.client_addr)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND (l.classid = 'baf_records'::regclass::oid OR (l.classid = $1::oid AND l.objid = 'baf_records'::regclass::oid))
  AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND has_table_privilege(a.usesysid, 'baf_records'::regclass, 'INSERT')
ORDER BY l.pid
"""
# How many random keys to try for a mark before giving up: another connection holds a key drawn only by chance
# (or by holding thousands of them), so a second draw practically always finds a free one.
_DRAWS: Final = 8

# The generation before and after this store's bump, in one statement (one snapshot: "before" is the old value).
_BUMP: Final = """
WITH before AS (SELECT value FROM baf_meta WHERE key = 'writer_generation'),
bumped AS (
    INSERT INTO baf_meta (key, value) VALUES ('writer_generation', '1')
    ON CONFLICT (key) DO UPDATE SET value = (baf_meta.value::bigint + 1)::text RETURNING value
)
SELECT (SELECT value FROM before), (SELECT value FROM bumped)
"""

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
    connection: asyncpg.Connection, where: str, worker_id: str | None, since: int | None = None
) -> int | None:
    """Take the writer lock on ``connection`` (shared for a worker's store, exclusive otherwise), or raise
    ``LogInUseError`` naming the connections that hold it. The log's tables must exist.

    Returns the lock's generation, which every store taking the lock bumps. ``since``: the generation this
    store took the lock at on its previous connection (a plain store reconnecting); ``None`` is returned
    (and nothing taken) when another store took the lock in between, and may have written what this one
    holds in memory."""
    transaction = connection.transaction()
    await transaction.start()
    try:
        taken = await _decide(connection, where, worker_id, since)
    except BaseException:
        await transaction.rollback()
        raise
    if taken is None:
        await transaction.rollback()  # no bump: the caller closes the connection and writes no more
        return None
    await transaction.commit()
    return taken


async def _decide(connection: asyncpg.Connection, where: str, worker_id: str | None, since: int | None) -> int | None:
    """``take_writer_lock`` inside its transaction: the new generation once the mark is held, ``None`` when
    overtaken (see there), or ``LogInUseError``."""
    # The row lock of writer_generation, until the transaction ends: stores decide one at a time.
    before, now = await connection.fetchrow(_BUMP)
    rows = await connection.fetch(_HOLDERS, LEGACY_WRITER_LOCK)
    holders = [(row[0], bool(row[1]), row[2], row[3]) for row in rows]
    if any(worker_id is None or exclusive for _, exclusive, _, _ in holders):
        raise _refusal(where, worker_id, holders)
    if since is not None and before != str(since):
        return None
    statement = _MARK_EXCLUSIVE if worker_id is None else _MARK_SHARED
    for _ in range(_DRAWS):
        if (await connection.fetchrow(statement, _draw(), writer_name(worker_id)))[0]:
            return int(now)
    raise LogInUseError(
        where, reason=f"every key drawn for this store's writer lock ({_DRAWS}) was held by another connection"
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
