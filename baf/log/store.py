"""The interface every session-log store implements.

A store keeps these guarantees (the contract suite in ``baf.testing.store_contract`` checks each):

1. ``append`` is atomic: all of its records are durable when it returns, or none are.
2. ``(session_id, seq)`` is unique. An append that reuses one (also twice within one call) raises
   ``LogConflictError`` and writes nothing; an existing record is never overwritten. ``seq`` is >= 1.
3. ``read`` returns a session's records in ``seq`` order, exactly as appended (kind, data, ts, version).
   A session's seqs have no gaps: a read that finds one (``read(s, after_seq=k)`` must start at
   ``k + 1``, and go on one by one) raises ``CorruptRecordError`` naming the session and the missing seq.
4. A record that cannot be decoded, or (in a store that keeps checksums) no longer matches its
   checksum, raises ``CorruptRecordError`` naming its session and seq; nothing is skipped silently. A
   failure of the storage itself (a damaged file, a disk error) raises a ``LogError`` naming the
   store's file or database, and the session and seq where known (``LogStorageError``).
5. ``sessions`` lists every session id that has at least one record, in order of first append.
6. ``unfinished_sessions`` lists exactly the sessions with unfinished work by the rule of
   ``baf.log.work`` (one pure function every store uses), as of the last append; a store keeps it as
   an index updated in the append's own transaction, so an append that fails changes nothing in it
   and listing it costs the same whatever the number of finished sessions.
7. ``read_for_load`` returns a session's records from its latest ``snapshot`` record (inclusive) to the
   end, or all of them if it has none; folded, they give the state the fold of all records gives.
8. ``read_last(session_id, count, before_seq)`` returns the newest ``count`` records of the session with
   ``seq < before_seq`` (any seq when ``None``), in seq order, as ``read`` returns them (upcast, checked).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Self

from baf.errors import CorruptRecordError, CorruptSnapshotError, LogConflictError
from baf.log.projection import SessionProjection, project
from baf.log.record import Record, RecordKind
from baf.log.work import IDLE, WORK_KINDS, work_after

__all__ = ["SessionLog", "check_appendable", "load_projection", "missing_record"]

logger = logging.getLogger("baf.log")


def check_appendable(records: Sequence[Record]) -> None:
    """Reject a batch that cannot be appended whatever the store holds: seq < 1 or a repeated key."""
    seen: set[tuple[str, int]] = set()
    for record in records:
        if record.seq < 1:
            raise ValueError(f"session {record.session_id!r}: seq must be >= 1, got {record.seq}")
        key = (record.session_id, record.seq)
        if key in seen:
            raise LogConflictError(record.session_id, record.seq)
        seen.add(key)


def missing_record(session_id: str, expected: int, found: int) -> CorruptRecordError:
    """The error for a read that expected seq ``expected`` next and found ``found``: a record is missing
    from the middle of the session (seqs have no gaps, guarantee 3)."""
    return CorruptRecordError(
        session_id, expected, f"the record is missing: the session's records go from seq {expected - 1} to {found}"
    )


class SessionLog(abc.ABC):
    """An append-only store of session records. Three methods, plus a lifecycle.

    ``project`` and ``read_chunks`` have defaults built on ``read``.
    """

    @abc.abstractmethod
    async def append(self, records: Sequence[Record]) -> None:
        """Durably append ``records`` (any sessions), all or nothing."""

    @abc.abstractmethod
    async def read(self, session_id: str, after_seq: int = 0) -> list[Record]:
        """Return the records of ``session_id`` with ``seq > after_seq``, in seq order."""

    @abc.abstractmethod
    async def sessions(self) -> list[str]:
        """Return the ids of all sessions in the log, in order of their first record."""

    async def unfinished_sessions(self) -> list[str]:
        """The sessions with unfinished work (``baf.log.work``), in order of their first record.

        This default folds every record of every session: fine for a small store; MemoryLog and
        SQLiteLog override it with an index kept by ``append``.
        """
        unfinished = []
        for session_id in await self.sessions():
            status = IDLE
            for record in await self.read(session_id):
                if record.kind in WORK_KINDS:
                    status = work_after(status, record.kind, record.seq, record.data)
            if status.unfinished:
                unfinished.append(session_id)
        return unfinished

    async def read_for_load(self, session_id: str) -> list[Record]:
        """The records of ``session_id`` from its latest ``snapshot`` record (inclusive) to the end; all
        of them if it has none. Fold them (``project``) to load the session.

        This default reads every record and drops those before the snapshot; a store overrides it to
        find the snapshot through an index and read only from there.
        """
        records = await self.read(session_id)
        for index in range(len(records) - 1, -1, -1):
            if records[index].kind == RecordKind.SNAPSHOT:
                return records[index:]
        return records

    async def read_last(self, session_id: str, count: int, before_seq: int | None = None) -> list[Record]:
        """The newest ``count`` records of ``session_id`` with ``seq < before_seq`` (any seq when ``None``),
        in seq order: the end of a long session (the history a client is shown) without reading it all.

        This default reads what ``read`` returns from ``before_seq - count`` on (seqs have no gaps), and the
        whole session when that finds fewer (the session ends before ``before_seq``) or ``before_seq`` is
        ``None``; a store overrides it to fetch only those records.
        """
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count!r}")
        after = 0 if before_seq is None else max(0, before_seq - 1 - count)
        records = [r for r in await self.read(session_id, after) if before_seq is None or r.seq < before_seq]
        if len(records) < count and after > 0:
            records = [r for r in await self.read(session_id) if before_seq is None or r.seq < before_seq]
        return records[-count:]

    async def project(self, session_id: str) -> SessionProjection:
        """Fold every record of ``session_id`` into a ``SessionProjection`` (empty if it has none).

        The same as ``project(session_id, await log.read(session_id))``; a store may override it to fold
        as it reads, without holding every record at once.
        """
        return SessionProjection(session_id).apply_all(await self.read(session_id))

    async def read_chunks(self, session_id: str, after_seq: int = 0, size: int = 1000) -> AsyncIterator[list[Record]]:
        """The records ``read`` returns, in chunks of at most ``size`` (none if there are none).

        For a caller that may stop early (the first screen of a long session). The default reads
        everything at once; a store may override it to fetch only what is asked for. Records appended
        while the chunks are read may or may not be included.
        """
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        records = await self.read(session_id, after_seq)
        for start in range(0, len(records), size):
            yield records[start : start + size]

    async def check_storage(self) -> list[tuple[bool, str]]:
        """The store's own checks of its storage, for ``baf check`` (``baf.log.check``): a list of
        ``(is_damage, text)``, damage found or notes worth knowing. The default has none to make."""
        return []

    async def shared_secret(self, name: str) -> bytes | None:
        """A secret kept in the log itself for ``name`` (e.g. ``"websocket"``: the key signing resume
        tokens), the same for every process that opens this log; made on first use. ``None`` when the
        store keeps none (the default): a store with a file keeps such secrets beside it instead
        (``baf.platforms.secret_file``), and a memory log needs none beyond its process."""
        return None

    async def start(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Open the store. Idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Flush and close the store. Idempotent."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def load_projection(log: SessionLog, session_id: str) -> SessionProjection:
    """The projection of ``session_id`` as a runtime loads it: its latest snapshot plus the records after.

    A snapshot refused by its checks (``CorruptSnapshotError``) is logged as an error, naming session
    and seq, and the session is rebuilt from all its records with snapshots ignored. Any other
    ``LogError`` propagates.
    """
    try:
        return project(session_id, await log.read_for_load(session_id))
    except CorruptSnapshotError as exc:
        logger.error("%s; rebuilding session %r from all its records", exc, session_id)
        return project(session_id, await log.read(session_id), snapshots=False)
