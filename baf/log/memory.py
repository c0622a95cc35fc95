"""An in-memory session log: for tests and throwaway sessions. Same contract as SQLite."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from baf.errors import LogClosedError, LogConflictError
from baf.log.jsontext import decode_json, encode_json
from baf.log.record import MAX_TS, MIN_TS, Record, RecordKind, ts_problem
from baf.log.store import SessionLog, check_appendable, missing_record
from baf.log.upcast import upcast
from baf.log.work import IDLE, WORK_KINDS, WorkStatus, work_after

__all__ = ["MemoryLog"]

# What the log keeps of a record: (seq, kind, ts, version, data as JSON text).
_Entry = tuple[int, str, float, int, bytes | str]


class MemoryLog(SessionLog):
    """Keeps records in per-session lists sorted by seq. Nothing survives the process.

    Data is kept as JSON text, as a durable store keeps it: data that is not JSON-serialisable is
    rejected here too, and neither the appender mutating its dict afterwards nor a reader mutating
    what it read can change the log. Usable without ``start()``; after ``close()`` every call raises
    ``LogClosedError`` until ``start()`` opens it again, with its records.
    """

    def __init__(self) -> None:
        # Per session, sorted by seq. Plain tuples: a Record copy per append costs as much as encoding
        # its data.
        self._records: dict[str, list[_Entry]] = {}
        self._seqs: dict[str, set[int]] = {}
        # The indexes: each session's place in first-record order, the status of each session with
        # a status other than idle (baf.log.work; absent means idle), and each session's latest snapshot seq.
        self._positions: dict[str, int] = {}
        self._work: dict[str, WorkStatus] = {}
        self._snapshots: dict[str, int] = {}
        self._closed = False

    async def append(self, records: Sequence[Record]) -> None:
        self._check_open()
        check_appendable(records)
        # Check every record before touching anything, so a conflict writes nothing.
        for record in records:
            if record.seq in self._seqs.get(record.session_id, ()):
                raise LogConflictError(record.session_id, record.seq)
        # Encode (and so validate) every record before storing any, for the same reason.
        encoded = [(r.session_id, (r.seq, r.kind, r.ts, r.version, _encode(r))) for r in records]
        # The work statuses after the batch, worked out before anything is stored.
        work: dict[str, WorkStatus] = {}
        for record in records:
            if record.kind in WORK_KINDS:
                session_id = record.session_id
                before = work.get(session_id, self._work.get(session_id, IDLE))
                work[session_id] = work_after(before, record.kind, record.seq, record.data)
        for session_id, entry in encoded:
            self._positions.setdefault(session_id, len(self._positions))
            if entry[1] == RecordKind.SNAPSHOT and entry[0] > self._snapshots.get(session_id, 0):
                self._snapshots[session_id] = entry[0]
            seqs = self._seqs.setdefault(session_id, set())
            bucket = self._records.setdefault(session_id, [])
            seqs.add(entry[0])
            if not bucket or bucket[-1][0] < entry[0]:
                bucket.append(entry)
            else:
                bisect.insort(bucket, entry, key=lambda e: e[0])
        for session_id, status in work.items():
            if status != IDLE:
                self._work[session_id] = status
            else:
                self._work.pop(session_id, None)

    async def read(self, session_id: str, after_seq: int = 0) -> list[Record]:
        self._check_open()
        bucket = self._records.get(session_id, [])
        start = bisect.bisect_right(bucket, after_seq, key=lambda e: e[0])
        return self._decoded(session_id, bucket[start:], after_seq)

    async def read_last(self, session_id: str, count: int, before_seq: int | None = None) -> list[Record]:
        """The newest ``count`` records before ``before_seq``, sliced from the session's sorted list."""
        self._check_open()
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count!r}")
        bucket = self._records.get(session_id, [])
        end = len(bucket) if before_seq is None else bisect.bisect_left(bucket, before_seq, key=lambda e: e[0])
        entries = bucket[max(0, end - count) : end]
        return self._decoded(session_id, entries, entries[0][0] - 1 if entries else 0)

    @staticmethod
    def _decoded(session_id: str, entries: Sequence[Any], after_seq: int) -> list[Record]:
        """``entries`` as records, checked to go on one by one from ``after_seq + 1`` (guarantee 3)."""
        records = []
        for expected, (seq, kind, ts, version, text) in enumerate(entries, after_seq + 1):
            if seq != expected:
                raise missing_record(session_id, expected, seq)
            records.append(upcast(Record(session_id, seq, kind, decode_json(text), ts, version)))
        return records

    async def sessions(self) -> list[str]:
        self._check_open()
        return list(self._records)

    async def unfinished_sessions(self) -> list[str]:
        """The sessions with unfinished work, from the index ``append`` keeps: as many steps as there
        are such sessions, whatever the number of finished ones."""
        self._check_open()
        unfinished = [session_id for session_id, status in self._work.items() if status.unfinished]
        return sorted(unfinished, key=self._positions.__getitem__)

    async def read_for_load(self, session_id: str) -> list[Record]:
        """The records from the latest snapshot (found in the index ``append`` keeps) to the end."""
        self._check_open()
        return await self.read(session_id, after_seq=self._snapshots.get(session_id, 1) - 1)

    async def start(self) -> None:
        """Nothing to open: (re)opens a closed log, records kept. Idempotent."""
        self._closed = False

    async def close(self) -> None:
        """Refuse every call until the next ``start()``. Idempotent. The records stay with the object."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("this MemoryLog is closed")


def _encode(record: Record) -> bytes | str:
    """The record's data as JSON text; TypeError if it cannot be stored."""
    data, ts = record.data, record.ts
    if not isinstance(data, dict):
        raise TypeError(
            f"session {record.session_id!r} seq {record.seq}: data must be a dict, not {type(data).__name__}"
        )
    # The common case inline: ~1 % of a reasoning turn on this log (bench/README.md, "Plain versions").
    problem = None if type(ts) is float and MIN_TS <= ts <= MAX_TS else ts_problem(ts)
    if problem is not None:  # as the other stores refuse it: no reader could show it
        raise TypeError(f"session {record.session_id!r} seq {record.seq}: {problem}")
    try:
        return encode_json(record.data)
    except (TypeError, ValueError) as exc:  # ValueError: a circular reference
        raise TypeError(f"session {record.session_id!r} seq {record.seq}: data is not JSON: {exc}") from exc
