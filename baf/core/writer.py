"""The per-session record writer: assigns seqs, keeps the projection current, and commits in order."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from baf.errors import LogClosedError, LogError
from baf.log.projection import SessionProjection
from baf.log.record import CURRENT_VERSION, Record, RecordKind, build_record
from baf.log.redaction import Redactor
from baf.log.snapshot import snapshot_data
from baf.log.store import SessionLog

__all__ = ["SessionWriter"]


class SessionWriter:
    """Turns ``(kind, data)`` into records of one session.

    ``record`` is synchronous and cheap: it assigns the next seq, folds the record into the projection
    and buffers it. ``flush`` makes every buffered record durable. The runtime flushes before every
    effect (a reply leaving, a tool running, a model being called), so many records share one commit.
    Appends are chained: a flush returns only when it and every earlier flush of the session are durable.
    """

    def __init__(self, log: SessionLog, projection: SessionProjection, redactor: Redactor | None = None) -> None:
        self.log = log
        self.projection = projection
        self._redactor = redactor
        self._pending: list[Record] = []
        # Inbox rows (a worker's store, see baf.log.postgres_inbox) the next flush consumes atomically.
        self._consumes: list[int] = []
        # Those rows, and the ones an append under way consumes (taken, not gone from the inbox yet), each
        # with a future resolved once that append is over (see consumed).
        self._consuming: dict[int, asyncio.Future[None]] = {}
        # Sync bodies run in worker threads and record from there, racing the event loop.
        self._lock = threading.Lock()
        self._tail: asyncio.Future[None] | None = None
        self._closed = False
        #: Called with each record as it is built, in seq order (the hooks' ``on_record``), if set.
        self.observer: Callable[[Record], None] | None = None
        self._closed_because = "the agent stopped"

    def record(self, kind: str, data: dict[str, Any]) -> Record:
        """Buffer a new record and fold it into the projection. Not durable until :meth:`flush`.
        ``LogClosedError`` once :meth:`close` was called."""
        if self._redactor is not None:
            data = self._redactor.redact(data)  # secrets never reach the log, nor the projection
        # acquire/release rather than ``with``: half the cost (~1,100 instructions a record less).
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise LogClosedError(
                    f"session {self.projection.session_id!r} is closed: {self._closed_because}, so this "
                    f"{kind} record was not written"
                )
            projection = self.projection
            seq = projection.last_seq + 1
            ts = time.time()
            record = build_record(projection.session_id, seq, kind, data, ts, CURRENT_VERSION)
            projection.apply_fields(seq, ts, kind, data)  # what apply(record) does, one call less
            self._pending.append(record)
            if self.observer is not None:  # under the lock: observers see records in seq order
                self.observer(record)
        finally:
            lock.release()
        return record

    def record_snapshot(self) -> Record:
        """Buffer a ``snapshot`` record of the projection as it is now (see ``baf.log.snapshot``).

        Made under the lock, so no record from a body thread can slip between the state it holds and
        its seq. Not redacted again: the state is made of records that were.
        """
        with self._lock:
            projection = self.projection
            data = snapshot_data(projection)
            seq = projection.last_seq + 1
            ts = time.time()
            record = build_record(projection.session_id, seq, RecordKind.SNAPSHOT, data, ts, CURRENT_VERSION)
            projection.apply_fields(seq, ts, RecordKind.SNAPSHOT, data)
            self._pending.append(record)
        return record

    def close(self, because: str = "the agent stopped") -> None:
        """Refuse new records from now on (``because`` says why, in the error); :meth:`flush` still
        writes those recorded before."""
        with self._lock:
            self._closed = True
            self._closed_because = because
        self._consumes_over([*self._consuming])  # whoever waits for them: the session takes no more

    def drop_unflushed(self) -> int:
        """Forget the records not handed to a flush yet, as a crash would: for a session that is not used
        again (its projection still holds them), whose step a stop left open (``baf.core.engine``). Their
        inbox rows, if any, stay in the inbox. Returns the last seq handed to a flush (kept)."""
        with self._lock:
            kept = self.projection.last_seq - len(self._pending)
            self._pending = []
            self._consumes = []
        return kept

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def consume_inbox(self, inbox_id: int) -> None:
        """Delete inbox row ``inbox_id`` in the same transaction as the next flush's records (the
        message that row carried, recorded just before): it moves into the log exactly once. Only for a
        store with an inbox (``PostgresLog.append_consuming``)."""
        if not hasattr(self.log, "append_consuming"):
            raise TypeError(f"{type(self.log).__name__} has no inbox to consume from")
        with self._lock:
            self._consumes.append(inbox_id)
            self._consuming[inbox_id] = asyncio.get_running_loop().create_future()

    def consuming(self, inbox_id: int) -> bool:
        """Whether inbox row ``inbox_id`` was taken into this session and its deletion is not committed yet
        (it waits for the next flush, or an append under way carries it): a read of the inbox meanwhile
        still finds the row, and must not take its message a second time."""
        return inbox_id in self._consuming

    async def consumed(self, inbox_id: int) -> None:
        """Return once the append deleting inbox row ``inbox_id`` (taken with :meth:`consume_inbox`) is over:
        committed, or failed (the row then stays in the inbox; the runtime drops the session), or never to
        come (the writer closed first). Whoever reads the inbox again after this sees the row gone, or
        takes it anew."""
        waiter = self._consuming.get(inbox_id)
        if waiter is not None and not self._closed:
            await asyncio.shield(waiter)

    def _consumes_over(self, inbox_ids: Iterable[int]) -> None:
        for inbox_id in inbox_ids:
            waiter = self._consuming.pop(inbox_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    @property
    def settled(self) -> bool:
        """Whether every record is durable: none waiting for a flush, no append under way."""
        return not self._pending and (self._tail is None or self._tail.done())

    @property
    def has_pending(self) -> bool:
        """Whether records are waiting for a flush."""
        return bool(self._pending)

    def flushed_upto(self) -> int:
        """The last seq handed to a flush (the records after it are waiting for the next one)."""
        with self._lock:
            return self.projection.last_seq - len(self._pending)

    async def flush(self) -> None:
        """Make every record recorded so far durable."""
        lock = self._lock  # acquire/release rather than ``with``, as in record()
        lock.acquire()
        try:
            batch, self._pending = self._pending, []
            consumes, self._consumes = self._consumes, []
        finally:
            lock.release()
        if consumes:
            # Rare (a worker taking a message from its inbox): the plain chained path, with the row ids.
            await self._chain(self._append_consuming(self._tail, batch, consumes))
            return
        previous = self._tail
        if batch and (previous is None or previous.done()):
            await self._append_inline(previous, batch)
            return
        if batch:
            self._tail = asyncio.ensure_future(self._append_after(previous, batch))
        tail = self._tail
        if tail is not None:
            # Shielded: a cancelled caller must not cancel an append other callers wait on.
            await asyncio.shield(tail)

    async def _chain(self, append: Any) -> None:
        self._tail = asyncio.ensure_future(append)
        await asyncio.shield(self._tail)

    async def _append_consuming(
        self, previous: asyncio.Future[None] | None, batch: list[Record], consumes: list[int]
    ) -> None:
        if previous is not None:
            await asyncio.shield(previous)  # never leave a gap behind a failed append
        try:
            await self.log.append_consuming(batch, self.projection.session_id, consumes)  # type: ignore[attr-defined]
        except Exception as exc:
            if not batch:
                raise
            _raise_log_error(batch, exc)
        finally:
            self._consumes_over(consumes)  # gone from the inbox, or left there and the session is dropped

    async def _append_inline(self, previous: asyncio.Future[None] | None, batch: list[Record]) -> None:
        """Nothing in flight: append in the caller's task, publishing a plain future that concurrent flushes
        chain behind. A task and a shield per flush instead make a SQLite reasoning turn cost 1.25 times
        the instructions (``bench/ab_instructions.py``: 1,048k against 839k)."""
        if previous is not None:
            previous.result()  # an earlier append failed: never leave a gap behind it
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tail = done
        try:
            await self.log.append(batch)  # not through _append: one coroutine less on the hot path
        except BaseException as exc:
            # Cancelled mid-append (the agent stopping), the batch may or may not be in the log: later
            # flushes must fail rather than append after a possible gap.
            failure = _log_error(batch, exc)
            if not done.done():
                done.set_exception(failure)
                done.exception()  # retrieved: whoever chains behind it re-raises it
            if failure is exc or not isinstance(exc, Exception):
                raise
            raise failure from exc
        if not done.done():
            done.set_result(None)

    async def _append_after(self, previous: asyncio.Future[None] | None, batch: list[Record]) -> None:
        if previous is not None:
            # Shielded: this task being cancelled must not cancel an inline append's future.
            await asyncio.shield(previous)  # re-raises if an earlier append failed: never leave a gap
        try:
            await self.log.append(batch)
        except Exception as exc:
            _raise_log_error(batch, exc)


def _raise_log_error(batch: list[Record], exc: Exception) -> NoReturn:
    """Raise ``exc`` as :func:`_log_error` words it (``exc`` itself when it is a ``LogError``)."""
    failure = _log_error(batch, exc)
    if failure is exc:
        raise exc
    raise failure from exc


def _log_error(batch: list[Record], exc: BaseException) -> LogError:
    """``exc`` as the ``LogError`` the runtime acts on: whatever the store raised (unencodable data, a
    locked file, a cancellation mid-append), the log may now lag this session's projection, so the
    runtime drops the session. A ``LogError`` is returned as it is."""
    if isinstance(exc, LogError):
        return exc
    first, last = batch[0], batch[-1]
    if isinstance(exc, Exception):
        return LogError(
            f"session {first.session_id!r}: appending seq {first.seq}..{last.seq} failed: {type(exc).__name__}: {exc}"
        )
    return LogError(
        f"session {first.session_id!r}: the append of seq {first.seq}..{last.seq} was "
        f"interrupted ({type(exc).__name__}); the log may lag this session"
    )
