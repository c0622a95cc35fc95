"""The SQLite log's read side: one connection of its own, which neither waits for the writer nor holds it up.

In WAL mode a reader sees the last commit. Every row is decoded and checked by ``baf.log.sqlite_codec``
(types, JSON, checksum, no missing seq), so a damaged record raises ``CorruptRecordError`` naming its
session and seq; anything else SQLite reports (a malformed page, a disk error) is raised as
``LogStorageError`` naming the file, and the session and seq it was reading. Nothing is skipped.

``project`` decodes and folds each row on the connection's thread as it is fetched (upcasters and the
fold run there), keeping none: a long session costs neither the memory of all its records nor the
collector's passes over them, and no row is handed from thread to thread (which, measured, cost as much
as decoding it). That is the one fast path here; ``read`` decodes on the event loop.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Final

import aiosqlite

from baf.errors import CorruptRecordError, LogError, LogStorageError
from baf.log import upcast as upcast_module
from baf.log.projection import SessionProjection
from baf.log.record import Record, build_record
from baf.log.sqlite_codec import SELECT_COLUMNS, collector_paused, row_decoder
from baf.log.sqlite_schema import CHECKSUM_VERSION

__all__ = ["SQLiteReader"]

_SESSIONS_SQL: Final = "SELECT session_id FROM baf_sessions ORDER BY position"
UNFINISHED_SQL: Final = (
    "SELECT w.session_id FROM baf_work AS w LEFT JOIN baf_sessions AS s ON s.session_id = w.session_id "
    "WHERE w.unfinished = 1 ORDER BY s.position"
)
# Through the partial index baf_records_snapshots (where it exists): no scan of the session's rows.
LATEST_SNAPSHOT_SQL: Final = "SELECT max(seq) FROM baf_records WHERE session_id = ? AND kind = 'snapshot'"
# Rows per round trip in ``project``: enough that the trips do not show, few enough that other reads
# on the connection are not kept waiting long (a chunk is a few milliseconds of decoding).
_FOLD_CHUNK: Final = 2000
#: Above every seq a record can have (SQLite's largest integer): ``read_last`` with no ``before_seq``.
_NO_SEQ_ABOVE: Final = 2**63 - 1


class SQLiteReader:
    """Reads a SQLite log through ``connection``, a file of schema ``version``."""

    def __init__(self, connection: aiosqlite.Connection, path: Path, version: int) -> None:
        self._connection = connection
        self._path = path
        #: Whether the file has the indexes of schema version 3 (``baf_work``, the snapshot index).
        self.indexed = version >= 3
        #: Whether the file has the ``checksum`` column (schema version 4).
        self.has_checksums = version >= CHECKSUM_VERSION
        columns = SELECT_COLUMNS if self.has_checksums else SELECT_COLUMNS.replace("checksum", "NULL")
        self._select = f"SELECT {columns} FROM baf_records WHERE session_id = ? AND seq > ? ORDER BY seq"
        self._select_last = (
            f"SELECT {columns} FROM baf_records WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
        )

    async def read(self, session_id: str, after_seq: int, limit: int | None = None) -> list[Record]:
        """The records of ``session_id`` after ``after_seq`` (at most ``limit``), decoded, checked and upcast."""
        try:
            if limit is None:
                rows = await self._connection.execute_fetchall(self._select, (session_id, after_seq))
            else:
                rows = await self._connection.execute_fetchall(
                    self._select + " LIMIT ?", (session_id, after_seq, limit)
                )
        except sqlite3.Error as exc:
            raise await self._failed(exc, session_id, after_seq) from exc
        return self._decoded(session_id, rows, after_seq)

    async def read_last(self, session_id: str, count: int, before_seq: int | None) -> list[Record]:
        """The newest ``count`` records of ``session_id`` before ``before_seq``, in seq order: the primary
        key's index, walked backwards from ``before_seq``, so only those rows are read."""
        below = _NO_SEQ_ABOVE if before_seq is None else before_seq
        try:
            rows = list(await self._connection.execute_fetchall(self._select_last, (session_id, below, count)))
        except sqlite3.Error as exc:
            raise await self._failed(exc, session_id, below) from exc
        rows.reverse()
        return self._decoded(session_id, rows, rows[0][0] - 1 if rows else 0)

    def _decoded(self, session_id: str, rows: Any, after_seq: int) -> list[Record]:
        """Rows of ``SELECT_COLUMNS`` in seq order from ``after_seq + 1``: decoded, checked and upcast."""
        registry = upcast_module.UPCASTERS  # looked up on each call, so a test may swap it
        version = registry.current_version

        def make(seq: int, ts: float, kind: str, data: dict[str, Any]) -> Record:
            return build_record(session_id, seq, kind, data, ts, version)

        decode = row_decoder(session_id, after_seq, registry, make)
        try:
            with collector_paused():
                return [decode(None, row) for row in rows]
        except CorruptRecordError as exc:
            raise exc.located(self._path) from exc.__cause__

    async def project(self, session_id: str) -> SessionProjection:
        """Fold every record of the session as it is fetched (see the module docstring)."""
        projection = SessionProjection(session_id)
        try:
            # One statement, so the whole fold sees one snapshot even though it takes many round trips.
            async with self._connection.execute(self._select, (session_id, 0)) as cursor:
                # aiosqlite types the setter as taking a class; sqlite3 takes any callable.
                cursor.row_factory = row_decoder(  # type: ignore[assignment]
                    session_id, 0, upcast_module.UPCASTERS, projection.apply_fields
                )
                while await cursor.fetchmany(_FOLD_CHUNK):
                    pass  # each fetched row has been folded by the row factory
        except sqlite3.Error as exc:
            raise await self._failed(exc, session_id, projection.last_seq) from exc
        except CorruptRecordError as exc:
            raise exc.located(self._path) from exc.__cause__
        return projection

    async def sessions(self) -> list[str]:
        """Every session id, in order of its first record."""
        rows = await self._fetch(_SESSIONS_SQL, (), "listing the sessions")
        ids: list[str] = []
        for (session_id,) in rows:
            if not isinstance(session_id, str):
                raise LogError(f"{self._path}: baf_sessions holds a session id that is not text: {session_id!r}")
            ids.append(session_id)
        return ids

    async def unfinished_sessions(self) -> list[str]:
        """The sessions flagged unfinished in ``baf_work``, in order of their first record (``indexed`` only)."""
        rows = await self._fetch(UNFINISHED_SQL, (), "listing the sessions with unfinished work")
        return [session_id for (session_id,) in rows]

    async def latest_snapshot(self, session_id: str) -> int | None:
        """The seq of the session's latest snapshot record, if it has one."""
        rows = await self._fetch(LATEST_SNAPSHOT_SQL, (session_id,), "finding the latest snapshot", session_id)
        latest = next((row[0] for row in rows), None)
        return latest if type(latest) is int else None

    async def close(self) -> None:
        """Close the connection (and its thread)."""
        await self._connection.close()

    def stop(self) -> None:
        """Close the connection and end its thread without waiting (no event loop to wait on)."""
        self._connection.stop()

    async def _fetch(self, sql: str, params: tuple[Any, ...], what: str, session_id: str | None = None) -> list[Any]:
        try:
            return list(await self._connection.execute_fetchall(sql, params))
        except sqlite3.Error as exc:
            raise LogStorageError(self._path, f"{what} failed: {exc}", session_id) from exc

    async def _failed(self, error: sqlite3.Error, session_id: str, after_seq: int) -> LogError:
        """What to raise for ``error`` from reading a session after ``after_seq``.

        sqlite3 fails a whole fetch on text that is not UTF-8, without saying which row: that row's
        ``CorruptRecordError`` if one is found, else ``LogStorageError`` naming the file and the first
        seq the read did not get.
        """
        corrupt = await self._find_undecodable(session_id, after_seq)
        if corrupt is not None:
            return corrupt.located(self._path)
        return LogStorageError(self._path, f"reading failed: {error}", session_id, after_seq + 1)

    async def _find_undecodable(self, session_id: str, after_seq: int) -> CorruptRecordError | None:
        """The first row of the read whose text is not UTF-8, or None if none is (or it cannot be told)."""
        try:
            rows = await self._connection.execute_fetchall(
                "SELECT seq, CAST(kind AS BLOB), CAST(data AS BLOB) FROM baf_records "
                "WHERE session_id = ? AND seq > ? ORDER BY seq",
                (session_id, after_seq),
            )
        except sqlite3.Error:
            return None
        for seq, kind, data in rows:
            for name, raw in (("kind", kind), ("data", data)):
                try:
                    if isinstance(raw, bytes):
                        raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return CorruptRecordError(session_id, seq, f"{name} is not valid UTF-8: {exc}")
        return None
