"""Session ownership among many workers on one PostgreSQL log: a lease per session, a heartbeat per worker.

A lease row says which worker owns a session, since which **epoch**, and until when (``expires_at``, on the
database's clock, so workers' clocks do not matter). Taking a lease that is free or expired bumps the
epoch; the new owner then ``fence``\\ s its ``PostgresLog`` with it, and every append checks the epoch in its
own transaction. A worker that was paused past its lease (GC, SIGSTOP, a partition) therefore cannot write
once another worker has taken the session over: its append fails with ``LeaseLostError``.

A worker keeps its leases alive with :meth:`Leases.heartbeat` (one statement for all of them), which also
says which sessions it has lost. Releasing a lease expires it but keeps its row, so epochs only grow.

A worker id is held by one process at a time: :meth:`Leases.register` takes an id over only when its
heartbeat is older than ``ttl`` (its process died, or is paused). The registration is the id's
**incarnation** (``baf_workers.started_at``): taking an id over expires every live lease the id holds and
bumps its epoch, and a lease is taken, or a heartbeat renewed, only by the id's current incarnation. A process
paused past ``ttl`` whose id was taken meanwhile therefore finds, when it resumes, every append refused
(``LeaseLostError``), no lease to take and its heartbeat refused (:attr:`Leases.replaced`): never two
writers of one session, not even for a lease it took after its last heartbeat and that was still live.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from baf.errors import ConfigurationError
from baf.log.postgres_batch import Coalescer

if TYPE_CHECKING:
    from baf.log.postgres import PostgresLog

__all__ = ["DEAD_WORKER_ROWS_KEPT", "MAX_LEASE_TTL", "LeaseInfo", "Leases"]

#: The longest lease (seconds): a dead worker's sessions wait that long for another. Longer is a mistake
#: (a day without a heartbeat is a dead worker), and past a point PostgreSQL cannot hold the interval.
MAX_LEASE_TTL: Final = 86400.0

#: How long (seconds) the row of a worker that stopped heartbeating stays in ``baf_workers`` (at least its
#: ``ttl``): long enough to see which workers died lately, short enough that restarts do not pile rows up.
DEAD_WORKER_ROWS_KEPT: Final = 3600.0

# Rows locked now are being renewed or taken over: skipped, never waited for (no lock order to keep).
_FORGET_DEAD_WORKERS = """
DELETE FROM baf_workers WHERE worker_id IN (
    SELECT worker_id FROM baf_workers WHERE heartbeat_at < now() - make_interval(secs => $1) FOR UPDATE SKIP LOCKED
)
"""

# Whether the worker taking a lease is its id's current incarnation ($4: its registration's started_at; NULL
# for a store that never registered, as in tests of leases alone). An id taken over by another process
# (this one was paused past ttl) takes nothing more. FOR SHARE holds the worker row until the lease is
# committed: a takeover of the id (register) waits for it, then fences the lease, and one under way makes
# this check wait and read the new started_at. Read on the statement's snapshot alone, a takeover
# committing meanwhile would not see the new lease row, and both processes would hold it at one epoch.
_CURRENT = (
    "($4::timestamptz IS NULL OR EXISTS (SELECT 1 FROM baf_workers w WHERE w.worker_id = $2 AND w.started_at = $4 "
    "FOR SHARE))"
)

# One statement, one round trip. The worker row is locked first (_CURRENT, FOR SHARE), in the order a
# heartbeat and a registration lock (worker row, then leases): no deadlock with them. Then the lease row is
# locked FOR UPDATE before the insert (the INSERT's source row needs the locking CTE scanned first), so no
# append checking the old epoch (FOR KEY SHARE) can commit after the epoch changed; the upsert alone would not
# do it, as updating no key column takes a lock that does not conflict with KEY SHARE. NOWAIT: a lease row
# locked now is being appended under by its owner, or taken by another worker, and waiting would only hold a
# connection to learn that someone else has the session.
_ACQUIRE = f"""
WITH incarnation AS MATERIALIZED (SELECT 1 AS current WHERE {_CURRENT}),
locked AS MATERIALIZED (
    SELECT session_id FROM baf_leases WHERE session_id = $1 AND EXISTS (SELECT 1 FROM incarnation) FOR UPDATE NOWAIT
)
INSERT INTO baf_leases AS l (session_id, owner, epoch, expires_at)
SELECT $1, $2, 1, now() + make_interval(secs => $3) FROM (SELECT count(*) FROM locked) AS lock_first, incarnation
ON CONFLICT (session_id) DO UPDATE
    SET owner = EXCLUDED.owner,
        epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at >= now() THEN l.epoch ELSE l.epoch + 1 END,
        expires_at = EXCLUDED.expires_at
    WHERE l.owner = EXCLUDED.owner OR l.expires_at < now()
RETURNING epoch
"""
# Releases asked for together (a burst of sessions given up), in one statement; mail waiting for them is
# announced again ($4: the inbox channel). Updating no key column, it takes no lock an append's KEY SHARE waits for.
_RELEASE_MANY = """
WITH released AS (
    UPDATE baf_leases l SET expires_at = now() - interval '1 second' FROM unnest($1::text[], $2::bigint[]) AS f(s, e)
    WHERE l.session_id = f.s AND l.epoch = f.e AND l.owner = $3
)
SELECT pg_notify($4::text, s)
FROM (SELECT DISTINCT session_id AS s FROM baf_inbox WHERE session_id = ANY($1)) AS waiting
"""
# Many sessions at once (a burst of them reaching a worker), in one statement: the same locking first, in
# session order, as is the insert (two workers' bursts lock and insert in the same order: no deadlock).
_ACQUIRE_MANY = f"""
WITH incarnation AS MATERIALIZED (SELECT 1 AS current WHERE {_CURRENT}),
wanted AS (SELECT DISTINCT s FROM unnest($1::text[]) AS u(s)),
locked AS MATERIALIZED (
    SELECT session_id FROM baf_leases WHERE session_id IN (SELECT s FROM wanted) AND EXISTS (SELECT 1 FROM incarnation)
    ORDER BY session_id FOR UPDATE NOWAIT
)
INSERT INTO baf_leases AS l (session_id, owner, epoch, expires_at)
SELECT s, $2, 1, now() + make_interval(secs => $3) FROM wanted, (SELECT count(*) FROM locked) AS lock_first, incarnation
ORDER BY s
ON CONFLICT (session_id) DO UPDATE
    SET owner = EXCLUDED.owner,
        epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at >= now() THEN l.epoch ELSE l.epoch + 1 END,
        expires_at = EXCLUDED.expires_at
    WHERE l.owner = EXCLUDED.owner OR l.expires_at < now()
RETURNING session_id, epoch
"""


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """Who owns a session: ``owner``, ``epoch``, and whether the lease is still ``live``."""

    owner: str
    epoch: int
    live: bool


class Leases:
    """The leases of the worker a ``PostgresLog`` was opened for (``PostgresLog(dsn, worker_id=...)``).

    ``ttl`` is how many seconds a lease lasts without a heartbeat; heartbeat well within it (a third).
    """

    def __init__(self, log: PostgresLog, ttl: float = 10.0) -> None:
        if log.worker_id is None:
            raise ValueError("Leases need a worker's store: PostgresLog(dsn, worker_id=...)")
        if not 0 < ttl <= MAX_LEASE_TTL:  # nan too: PostgreSQL takes no nan interval, nor an infinite one
            raise ValueError(f"ttl must be > 0 and at most {MAX_LEASE_TTL:g} seconds, got {ttl!r}")
        self._log = log
        self.worker_id: str = log.worker_id
        self.ttl = ttl
        self._acquiring: Coalescer[str, int | None] = Coalescer(self._acquire_many)
        self._expiring: Coalescer[tuple[str, int], None] = Coalescer(self._expire_many)
        # A heartbeat and the expiry of a released lease never overlap: the expiry comes after a heartbeat
        # that read the lease as held (and renewed it: its epoch still matches), never before.
        self._renewing = asyncio.Lock()
        # This process's registration of the id (its started_at), once registered; see the module's docstring.
        self._incarnation: datetime | None = None
        self._replaced = False

    @property
    def replaced(self) -> bool:
        """Whether another process took this worker's id over (this one missed its heartbeats for longer
        than ``ttl``: it was paused, or cut from the database): it then holds no lease and takes none."""
        return self._replaced

    async def register(self) -> None:
        """Write this worker's heartbeat row, and tell the other workers. ``ConfigurationError`` if a live
        worker (its heartbeat younger than ``ttl``) has this id: two workers of one id would both count as
        the owner of its sessions, at one epoch, and write to them side by side. The row of a worker of
        this id that died (or stopped) is taken over, and so are its leases: those still live are expired
        and their epochs bumped, so that a process of this id that was only paused can never append again."""
        async with self._log.connection() as connection:
            async with connection.transaction():
                registered = await connection.fetchval(
                    "WITH registered AS (INSERT INTO baf_workers (worker_id) VALUES ($1) "
                    "ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now(), started_at = now() "
                    "WHERE baf_workers.heartbeat_at <= now() - make_interval(secs => $2) "
                    "RETURNING worker_id, started_at) "
                    "SELECT started_at FROM registered, pg_notify($3::text, worker_id)",
                    self.worker_id,
                    self.ttl,
                    self._log.channels.workers,
                )
                if registered is not None:
                    # A statement of its own, on a snapshot taken after the registration: a lease the old
                    # incarnation took while holding the worker row (FOR SHARE, see _CURRENT) is committed
                    # and seen now. Updating no key column, this waits for no append: one under way (it
                    # checked the old epoch) still holds the lease row, so no takeover (FOR UPDATE) happens
                    # before it commits. A lease that expired already needs no bump: taking it bumps its epoch.
                    await connection.execute(
                        "UPDATE baf_leases SET epoch = epoch + 1, expires_at = now() - interval '1 second' "
                        "WHERE owner = $1 AND expires_at >= now()",
                        self.worker_id,
                    )
            if registered is not None:
                self._incarnation = registered
                self._replaced = False
                return
            age = await connection.fetchval(
                "SELECT extract(epoch FROM now() - heartbeat_at) FROM baf_workers WHERE worker_id = $1",
                self.worker_id,
            )
        raise ConfigurationError(
            f"worker id {self.worker_id!r} is in use by a live worker (its last heartbeat was {float(age or 0):.1f} s "
            "ago): give each worker its own id (the default is unique), or, if that worker died, start this one "
            "again once its lease_ttl has passed"
        )

    async def acquire(self, session_id: str) -> int | None:
        """Take ``session_id``'s lease if it is free, expired or already ours; return its epoch, or ``None``
        when another worker holds it or its lease row is busy (an append or a takeover under way: the session
        is someone's). On success the store is fenced with the epoch. Leases asked for together share one
        statement."""
        if self._replaced:
            return None
        epoch = await self._acquiring.get(session_id)
        if epoch is None:
            return None
        self._log.fence(session_id, epoch)
        return epoch

    async def _acquire_many(self, session_ids: list[str]) -> dict[str, int | BaseException | None]:
        import asyncpg

        if len(session_ids) > 1:
            try:
                async with self._log.connection() as connection:
                    rows = await connection.fetch(
                        _ACQUIRE_MANY, sorted(session_ids), self.worker_id, self.ttl, self._incarnation
                    )
            except (
                asyncpg.LockNotAvailableError,
                asyncpg.DeadlockDetectedError,
                asyncpg.DataError,
                asyncpg.ProgramLimitExceededError,
            ):
                pass  # one of them is busy, or a value PostgreSQL refuses: each on its own, so only it fails
            else:
                taken = {row[0]: int(row[1]) for row in rows}
                return {session_id: taken.get(session_id) for session_id in session_ids}
        results = await asyncio.gather(
            *(self._acquire_one(session_id) for session_id in session_ids), return_exceptions=True
        )
        return dict(zip(session_ids, results, strict=True))

    async def _acquire_one(self, session_id: str) -> int | None:
        import asyncpg

        try:
            async with self._log.connection() as connection:
                epoch = await connection.fetchval(_ACQUIRE, session_id, self.worker_id, self.ttl, self._incarnation)
        except asyncpg.LockNotAvailableError:
            return None
        return None if epoch is None else int(epoch)

    def release(self, session_id: str) -> Coroutine[Any, Any, None]:
        """Give ``session_id`` up: appends to it are refused at once (before the coroutine returned runs),
        and once it has run any worker may take it. Mail waiting for it (posted while this worker held it,
        by a worker that could not take it then) is announced again on the inbox channel, so that a worker
        takes it now rather than at its next poll."""
        epoch = self._log.fenced().get(session_id)
        self._log.unfence(session_id)
        return self._expire(session_id, epoch)

    async def _expire(self, session_id: str, epoch: int | None) -> None:
        if epoch is not None:
            await self._expiring.get((session_id, epoch))

    async def _expire_many(self, leases: list[tuple[str, int]]) -> dict[tuple[str, int], BaseException | None]:
        async with self._renewing, self._log.connection() as connection:
            await connection.execute(
                _RELEASE_MANY,
                [lease[0] for lease in leases],
                [lease[1] for lease in leases],
                self.worker_id,
                self._log.channels.inbox,
            )
        return dict.fromkeys(leases)

    async def release_all(self, held: dict[str, int]) -> None:
        """Give up every lease in ``held`` (session -> epoch) and remove this worker's row, on a connection
        of its own: the store may be closed already (a worker stopping after its runtime). The row of
        another process that took this worker's id over (:attr:`replaced`) is left alone."""

        for session_id in held:
            self._log.unfence(session_id)
        connection = await self._log.open_connection()
        try:
            await connection.execute(
                "UPDATE baf_leases l SET expires_at = now() - interval '1 second' "
                "FROM unnest($1::text[], $2::bigint[]) AS f(s, e) "
                "WHERE l.session_id = f.s AND l.epoch = f.e AND l.owner = $3",
                list(held),
                list(held.values()),
                self.worker_id,
            )
            await connection.execute(
                "WITH gone AS (DELETE FROM baf_workers WHERE worker_id = $1 "
                "AND ($2::timestamptz IS NULL OR started_at = $2) RETURNING worker_id) "
                "SELECT pg_notify($3::text, worker_id) FROM gone",
                self.worker_id,
                self._incarnation,
                self._log.channels.workers,
            )
        finally:
            await connection.close()

    async def heartbeat(self) -> list[str]:
        """Renew this worker's row and every lease it still holds; return (and unfence) the sessions lost.

        A lease counts as held only at the epoch the store is fenced with: a session another worker took
        over meanwhile is lost even if it has expired again since. If another process took this worker's
        id over (:attr:`replaced`), every session is lost and the heartbeat renews nothing.

        The rows of workers silent for :data:`DEAD_WORKER_ROWS_KEPT` are deleted too (their leases stay:
        epochs only grow). A paused one that wakes later writes its row again at its next heartbeat.
        """
        async with self._renewing:
            fenced = self._log.fenced()
            if self._replaced:
                # Out for good, even once the id's holder stopped (its row gone): writing a row again would
                # make this process the id's holder and let it take sessions, while it told its operator
                # to restart it (see Worker._heartbeats).
                for session_id in fenced:
                    self._log.unfence(session_id)
                return list(fenced)
            async with self._log.connection() as connection, connection.transaction():
                # Renewed only by the id's current incarnation. A row gone (deleted by hand) is written
                # again: no other process holds the id then, and this one goes on as its incarnation.
                incarnation = await connection.fetchval(
                    "INSERT INTO baf_workers (worker_id) VALUES ($1) ON CONFLICT (worker_id) DO UPDATE SET "
                    "heartbeat_at = now() WHERE $2::timestamptz IS NULL OR baf_workers.started_at = $2 "
                    "RETURNING started_at",
                    self.worker_id,
                    self._incarnation,
                )
                if incarnation is None:
                    self._replaced = True
                    fenced_now = self._log.fenced()
                    for session_id in fenced_now:
                        self._log.unfence(session_id)
                    return list(fenced_now)
                if self._incarnation is not None:
                    self._incarnation = incarnation
                renewed = await connection.fetch(
                    "UPDATE baf_leases l SET expires_at = now() + make_interval(secs => $4) "
                    "FROM unnest($1::text[], $2::bigint[]) AS f(s, e) "
                    "WHERE l.session_id = f.s AND l.epoch = f.e AND l.owner = $3 RETURNING l.session_id",
                    list(fenced),
                    list(fenced.values()),
                    self.worker_id,
                    self.ttl,
                )
                await connection.execute(_FORGET_DEAD_WORKERS, max(DEAD_WORKER_ROWS_KEPT, self.ttl))
        kept = {row[0] for row in renewed}
        # Lost: not renewed, and still held with the epoch read (a session taken again meanwhile, with a
        # newer epoch, is this worker's).
        lost = [s for s, epoch in fenced.items() if s not in kept and self._log.fenced().get(s) == epoch]
        for session_id in lost:
            self._log.unfence(session_id)
        return lost

    async def owner_of(self, session_id: str) -> LeaseInfo | None:
        """The lease on ``session_id``, or ``None`` if no worker ever took it."""
        async with self._log.connection() as connection:
            row = await connection.fetchrow(
                "SELECT owner, epoch, expires_at >= now() FROM baf_leases WHERE session_id = $1", session_id
            )
        return None if row is None else LeaseInfo(row[0], int(row[1]), bool(row[2]))

    async def live_workers(self) -> list[str]:
        """The workers whose heartbeat is younger than ``ttl`` (this one included once registered)."""
        async with self._log.connection() as connection:
            rows = await connection.fetch(
                "SELECT worker_id FROM baf_workers WHERE heartbeat_at > now() - make_interval(secs => $1) "
                "ORDER BY worker_id",
                self.ttl,
            )
        return [row[0] for row in rows]

    async def unowned_unfinished(self, limit: int = 1000) -> list[str]:
        """Sessions with unfinished work (``baf_work``) and no live lease: their owner died (or never was)."""
        async with self._log.connection() as connection:
            rows = await connection.fetch(
                "SELECT w.session_id FROM baf_work w JOIN baf_sessions s USING (session_id) "
                "LEFT JOIN baf_leases l USING (session_id) "
                "WHERE w.unfinished AND (l.session_id IS NULL OR l.expires_at < now()) ORDER BY s.ordinal LIMIT $1",
                limit,
            )
        return [row[0] for row in rows]

    async def unowned_with_mail(self, limit: int = 100) -> list[str]:
        """Sessions with inbox messages waiting and no live lease: any live worker may take them."""
        async with self._log.connection() as connection:
            rows = await connection.fetch(
                "SELECT i.session_id FROM baf_inbox i LEFT JOIN baf_leases l ON l.session_id = i.session_id "
                "WHERE l.session_id IS NULL OR l.expires_at < now() "
                "GROUP BY i.session_id ORDER BY min(i.id) LIMIT $1",
                limit,
            )
        return [row[0] for row in rows]
