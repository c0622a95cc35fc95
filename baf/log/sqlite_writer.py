"""The SQLite log's write side: group commit, where each commit runs, and checkpoints.

Group commit
    ``append`` hands its encoded batch to ``SQLiteWriter.append``. Unless it may commit the batch itself
    (below), the batch waits on a queue with a future; one writer task takes *everything* queued and
    commits it as one group (``baf.log.sqlite_commit``), then resolves the futures: many sessions'
    appends share one commit, so one WAL append (or one fsync, ``durability="full"``) serves them all.
    A UNIQUE violation fails only the batch that conflicts, with ``LogConflictError``; the other
    batches land. A failure that is not about one batch (disk full, a damaged file, the file locked
    past ``busy_timeout``) fails every append of the group with ``LogStorageError`` naming the file
    and the batch's first record.

Where a commit runs
    With ``durability="normal"`` a commit writes a few pages to the WAL and does not fsync: tens of
    microseconds, less than handing it to a thread costs (the thread needs the GIL back to bind
    parameters and to report, and a busy event loop holds it for up to the 5 ms switch interval each
    time). So commits run on the event loop, with the lock timeout at zero. A group goes to the
    store's worker thread instead when another process holds the write lock (the worker waits up to
    ``busy_timeout`` for it) or when it holds more than 256 K characters of data (which would hold the
    loop for milliseconds). With ``durability="full"`` every commit fsyncs, so every commit runs on
    the worker.

Fast path: an append that commits itself
    With ``durability="normal"``, an ``append`` that finds the store idle commits its batch itself,
    sparing the two trips through the event loop that waking the writer task costs, and above all the
    wait until the loop goes round, which in a busy round lasts as long as every other task's turn in
    it. Idle means: nothing queued, no blocking checkpoint due, and since the loop last went round
    fewer than ``_INLINE_COMMITS_PER_ROUND`` appends committed themselves (this session's, fewer than
    ``_INLINE_COMMITS_PER_SESSION``). Past that, a burst of appends (many sessions in one round)
    queues for one group commit: a commit costs ~50 µs of CPU, so committing each of a thousand
    appends alone would cost more than their wait.

    What these paths buy, measured with ``bench/ab_sessions.py`` (200 sessions × 5 model calls of 50 ms,
    SQLite normal; medians of wall time over the ideal 0.25 s, the trees alternating round by round):
    with this fast path the run takes 1.41× its ideal against 1.57× without it (planning on: 1.39×
    against 1.63×; 8 rounds, 2026-11-25), for about a third more CPU (more, smaller commits). Without
    it, committing the groups on the loop rather than always on the worker takes 1.90× against 2.19×
    (planning on: 1.87× against 2.24×; 5 rounds on a busier machine). Both stay.

Checkpoints
    With ``durability="normal"`` SQLite's automatic checkpoint is off (it would fsync inside a commit
    on the loop). Checkpoints run on the worker with a connection of their own, while commits go on:
    a checkpoint fsyncs the WAL and the database, milliseconds which appends do not wait for.
    The WAL restarts from its beginning only when a writer finds it wholly copied, so a checkpoint
    that commits kept overtaking leaves it growing; when one reports more than ``_WAL_LIMIT_PAGES``
    frames, the next checkpoint runs between two commits instead (appends wait for that one), which
    lets the next commit restart the WAL. So does a background checkpoint that takes so long (a slow
    fsync) that ``_WAL_LIMIT_PAGES`` pages were committed since it began: the commits after that wait
    for it and for the blocking one that follows.

Cancellation
    If the task awaiting ``append`` is cancelled before the writer took its batch, the batch is
    dropped; once taken it is committed anyway. Either way the caller cannot tell, as with any
    cancelled write: read back to know.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from baf.errors import LogClosedError, LogError, LogStorageError
from baf.log.sqlite_codec import Row
from baf.log.sqlite_commit import Mark, commit_group, is_busy
from baf.log.sqlite_schema import Durability, open_writer
from baf.log.work import WorkStatus

__all__ = ["SQLiteWriter"]

logger = logging.getLogger("baf.log.sqlite")

_T = TypeVar("_T")

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


@dataclass(slots=True)
class _Batch:
    """One ``append`` call waiting for the writer."""

    rows: list[Row]
    marks: list[Mark]  # its records that change a work status (baf.log.work)
    future: asyncio.Future[None]


class SQLiteWriter:
    """The writer connection of one opening of a SQLite log, its worker thread and its writer task.

    ``on_lost`` is called (on the event loop) if the writer task ends without ``close()``: the store
    then closes itself.
    """

    def __init__(self, path: Path, durability: Durability, busy_timeout_ms: int, on_lost: Callable[[], None]) -> None:
        self._path = path
        self._durability = durability
        self._busy_timeout_ms = busy_timeout_ms
        self._on_lost = on_lost
        self._worker: ThreadPoolExecutor | None = None
        # The writer connection is used by one party at a time: on the event loop (an append committing
        # its own batch, or the writer task), or by the worker thread while the writer task awaits it.
        # Kept as its one cursor, which every commit uses (``Connection.execute`` makes a new one each time).
        self._cursor: sqlite3.Cursor | None = None
        # Sessions known to be in baf_sessions, kept for the writer connection (see sqlite_commit).
        self._registered: set[str] = set()
        # The work status (baf.log.work) this connection last committed for each session it wrote one of:
        # a commit that changes it starts from here rather than reading baf_work (see sqlite_commit).
        self._statuses: dict[str, WorkStatus] = {}
        self._task: asyncio.Task[None] | None = None
        self._pending: list[_Batch] = []
        self._wakeup: asyncio.Event | None = None
        self._stopping = False
        self.commits = 0
        self._unchecked_pages = 0  # estimated WAL pages written since the last checkpoint
        # The checkpoints' own connection (worker thread only), whether one runs in the background,
        # and how many frames the WAL held at the last one.
        self._checkpointer = _Checkpointer(path)
        self._checkpointing = False
        self._wal_frames = 0
        self._busy = False  # the writer task is in a commit or checkpoint that may use the worker
        # Appends that committed themselves since the loop last went round, per session and in all:
        # past a few, a session's appends wait for the writer task, so a task appending in a tight loop
        # still lets the event loop go round; past more, a burst queues for a group commit.
        self._round_commits: dict[str, int] = {}
        self._round_total = 0

    @property
    def connection(self) -> sqlite3.Connection | None:
        """The writer connection, if open."""
        return None if self._cursor is None else self._cursor.connection

    async def open(self) -> None:
        """Open the file on the worker thread (creating or upgrading it) and start the writer task."""
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="baf-log")
        try:
            # Opening touches the file system (which can block: a network mount) and may wait for
            # locks: done on the worker.
            connection = await self._on_worker(open_writer, self._path, self._durability, self._busy_timeout_ms)
            self._cursor = connection.cursor()
        except BaseException:
            await self._close_connections()
            raise
        # Made here, not in __init__: asyncio primitives belong to the loop that first waits on them.
        self._wakeup = wakeup = asyncio.Event()
        task = asyncio.create_task(self._write_loop(wakeup), name=f"baf-log-writer:{self._path}")
        task.add_done_callback(self._task_done)
        self._task = task

    async def close(self) -> None:
        """Commit every append already queued, stop the writer task and close the connections."""
        self._stopping = True
        if self._wakeup is not None:
            self._wakeup.set()
        try:
            if self._task is not None:
                # wait() rather than await: a writer that died has already failed its appends.
                await asyncio.wait({self._task})
                if not self._task.cancelled():
                    self._task.exception()  # retrieved, so asyncio does not log it again
        finally:
            await self._close_connections()

    async def append(self, rows: list[Row], marks: list[Mark], size: int) -> None:
        """Commit ``rows`` (``size``: their characters of JSON) durably, with the group of their round."""
        task, wakeup = self._task, self._wakeup
        if task is None or wakeup is None or task.done():
            raise LogClosedError(f"{self._path}: the log's writer task has stopped")
        if self._may_commit_now(rows, size) and self._commit_now(rows, marks, size):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Batch(rows, marks, future))
        wakeup.set()
        await future

    # -- the fast path: an append committing itself ---------------------------------------------------

    def _may_commit_now(self, rows: list[Row], size: int) -> bool:
        """Whether ``append`` may commit its batch itself, without the writer task (see the module docstring)."""
        return (
            self._durability == "normal"
            and size <= _LOOP_COMMIT_BYTES
            and not self._pending
            and not self._busy
            and self._round_total < _INLINE_COMMITS_PER_ROUND
            and self._round_commits.get(rows[0][0], 0) < _INLINE_COMMITS_PER_SESSION
            and not self._blocking_checkpoint_due  # else the writer task checkpoints first
            and self._cursor is not None
        )

    def _commit_now(self, rows: list[Row], marks: list[Mark], size: int) -> bool:
        """Commit ``rows`` here and now; False (nothing written) if another process holds the lock."""
        assert self._cursor is not None
        try:
            outcomes = self._commit_on_loop(self._cursor, [rows], [marks])
        except (sqlite3.Error, LogError) as exc:
            raise _storage_error(self._path, exc, rows) from exc
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

    # -- the writer task: group commits and checkpoints ----------------------------------------------

    async def _write_loop(self, wakeup: asyncio.Event) -> None:
        group: list[_Batch] = []
        try:
            while True:
                if self._blocking_checkpoint_due:
                    self._busy = True
                    try:
                        await self._checkpoint()
                    finally:
                        self._busy = False
                elif self._pending:
                    # Everything queued while the previous transaction ran goes into this one.
                    group, self._pending = self._pending, []
                    self._busy = True
                    try:
                        await self._commit_group(group)
                    finally:
                        self._busy = False
                    group = []
                elif self._stopping:
                    return
                else:
                    wakeup.clear()
                    await wakeup.wait()
        except BaseException as exc:
            # Cancelled (asyncio.run ending without close()) or a bug: no append may wait forever on
            # us, and the connections must go, or the threads keep the process from exiting.
            error = LogClosedError(f"{self._path}: the log's writer task stopped: {exc!r}")
            error.__cause__ = exc
            for batch in [*group, *self._pending]:
                _reject(batch.future, error)
            self._pending = []
            self._on_lost()
            await self._close_connections()
            raise

    async def _commit_group(self, group: list[_Batch]) -> None:
        live = [batch for batch in group if not batch.future.cancelled()]
        if not live:
            return
        writer = self._cursor
        if writer is None:
            raise LogClosedError(f"{self._path}: the log has no connection")
        batches = [batch.rows for batch in live]
        marks = [batch.marks for batch in live]
        size = _text_size(batches)
        try:
            if self._durability == "full":
                outcomes = await self._on_worker(commit_group, writer, batches, self._registered, marks, self._statuses)
            else:
                quick = self._commit_on_loop(writer, batches, marks) if size <= _LOOP_COMMIT_BYTES else None
                if quick is None:
                    outcomes = await self._on_worker(self._commit_waiting, writer, batches, marks)
                else:
                    outcomes = quick
        except Exception as exc:
            for batch in live:
                known = isinstance(exc, sqlite3.Error | LogError)
                _reject(batch.future, _storage_error(self._path, exc, batch.rows) if known else exc)
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
            return commit_group(writer, batches, self._registered, marks, self._statuses)
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
            return commit_group(writer, batches, self._registered, marks, self._statuses)
        finally:
            writer.execute("PRAGMA busy_timeout = 0")

    def _note_commit(self, rows: int, size: int) -> None:
        """Count a commit of ``rows`` rows holding ``size`` characters of JSON, and the WAL pages it wrote
        (for ``durability="normal"``, whose checkpoints the store runs itself), estimated: a table and an
        index leaf, plus the text. Also keeps the set of known-registered sessions bounded.

        The estimate only has to keep the WAL from growing without bound, as SQLite's own automatic
        checkpoint would.
        """
        self.commits += 1
        if len(self._registered) > _KNOWN_SESSIONS_LIMIT:
            self._registered.clear()
        if len(self._statuses) > _KNOWN_SESSIONS_LIMIT:
            self._statuses.clear()
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
        if self._checkpointing or self._worker is None:
            return  # one at a time; the pages stay counted, so the next commit starts the next one
        self._unchecked_pages = 0
        self._checkpointing = True
        done = asyncio.get_running_loop().run_in_executor(self._worker, checkpointer.checkpoint)
        done.add_done_callback(functools.partial(self._background_checkpoint_done, checkpointer))

    def _background_checkpoint_done(self, checkpointer: _Checkpointer, done: asyncio.Future[int]) -> None:
        if checkpointer is not self._checkpointer or self._worker is None:
            return  # the store was closed meanwhile
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
        writer = self.connection
        if writer is not None:
            try:
                await self._on_worker(_checkpoint, writer)
            except sqlite3.Error as exc:
                logger.warning("%s: checkpoint failed (%s); retried after the next %d pages", self._path, exc,
                               _CHECKPOINT_PAGES)  # fmt: skip

    # -- threads and connections ----------------------------------------------------------------------

    async def _on_worker(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run ``function(*args)`` on the worker thread; the task waits, the event loop does not."""
        if self._worker is None:
            raise LogClosedError(f"{self._path}: the log has no worker")
        return await asyncio.get_running_loop().run_in_executor(self._worker, function, *args)

    async def _close_connections(self) -> None:
        writer, worker = self.connection, self._worker
        self._cursor = None
        self._worker = None
        if worker is not None:
            # On the worker, after whatever it is still running with the connections.
            if writer is not None:
                await asyncio.get_running_loop().run_in_executor(worker, writer.close)
            await asyncio.get_running_loop().run_in_executor(worker, self._checkpointer.close)
            worker.shutdown(wait=False)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """Release the file if the writer task ended without ``close()`` and could not do it itself.

        That happens when the task is cancelled before its first step (``asyncio.run`` ending right
        after ``start()``): its body never runs. The threads would then keep the process alive.
        """
        if task is not self._task or self._stopping or self._worker is None:
            return
        error = LogClosedError(f"{self._path}: the log's writer task stopped before it started")
        for batch in self._pending:
            _reject(batch.future, error)
        self._pending = []
        worker, writer = self._worker, self.connection
        if writer is not None:
            worker.submit(writer.close)
        worker.submit(self._checkpointer.close)
        worker.shutdown(wait=False)
        self._cursor = None
        self._worker = None
        self._on_lost()


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


def _storage_error(path: Path, error: BaseException, rows: list[Row]) -> LogError:
    """The ``LogStorageError`` for a commit that failed with ``error``, naming the batch's first record."""
    failure = LogStorageError(path, f"writing failed: {error}", rows[0][0], rows[0][1])
    failure.__cause__ = error
    return failure


def _text_size(batches: list[list[Row]]) -> int:
    """Characters of JSON in a group: whether it is small enough to commit on the event loop, and how
    many WAL pages its commit wrote."""
    return sum(len(row[5]) for rows in batches for row in rows)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # the caller may have been cancelled meanwhile
        future.set_result(None)


def _reject(future: asyncio.Future[None], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
