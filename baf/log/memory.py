"""An in-memory session log: for tests and throwaway sessions. Same contract as SQLite."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from baf.errors import LogConflictError
from baf.log.record import Record
from baf.log.store import SessionLog, check_appendable

__all__ = ["MemoryLog"]


class MemoryLog(SessionLog):
    """Keeps records in per-session lists sorted by seq. Nothing survives the process."""

    def __init__(self) -> None:
        self._records: dict[str, list[Record]] = {}
        self._seqs: dict[str, set[int]] = {}

    async def append(self, records: Sequence[Record]) -> None:
        check_appendable(records)
        # Check every record before touching anything, so a conflict writes nothing.
        for record in records:
            if record.seq in self._seqs.get(record.session_id, ()):
                raise LogConflictError(record.session_id, record.seq)
        for record in records:
            seqs = self._seqs.setdefault(record.session_id, set())
            bucket = self._records.setdefault(record.session_id, [])
            seqs.add(record.seq)
            if not bucket or bucket[-1].seq < record.seq:
                bucket.append(record)
            else:
                bisect.insort(bucket, record, key=lambda r: r.seq)

    async def read(self, session_id: str, after_seq: int = 0) -> list[Record]:
        bucket = self._records.get(session_id, [])
        start = bisect.bisect_right(bucket, after_seq, key=lambda r: r.seq)
        return bucket[start:]

    async def sessions(self) -> list[str]:
        return list(self._records)
