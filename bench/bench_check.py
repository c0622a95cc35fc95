"""The per-record checksum's cost, and ``baf check`` on a 1,000,000-record log.

Run: ``python bench/bench_check.py [RECORDS]`` (default 1,000,000; about two minutes).

1. **append**: ``SQLiteLog.append`` of one reasoning turn (16 records, ``bench_replay``'s turn) at a
   time into one session, with the checksum (as shipped) and without it (``record_checksum`` replaced
   by a function returning ``None``, so the column stays empty and nothing is computed), alternating
   round by round in this one process; medians of µs per append and the ratio.
2. **read**: ``SQLiteLog.read`` of a 100,000-record session from a file whose rows carry checksums and
   from the same rows without (checked on read, or skipped), alternating; medians and the ratio.
3. **check**: ``baf check``'s work (``check_log`` on the log opened read-only: every record read,
   checked and folded, the work index compared, SQLite's integrity check) on a log of ``RECORDS``
   records in sessions of 100,000, written straight into the file (``SCHEMA``, ``INSERT_SQL``,
   ``REGISTER_SQL``); the integrity check is also timed alone.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replay import _turn

from baf.log import Record, SQLiteLog, sqlite_codec
from baf.log.check import check_log
from baf.log.checksum import record_checksum
from baf.log.sqlite import INSERT_SQL, REGISTER_SQL, SCHEMA

SESSION_SIZE = 100_000
ROUNDS = 5
TURNS_PER_ROUND = 300


def turn_records(session_id: str, first_seq: int, ts: float) -> list[tuple[str, int, float, str, int, str]]:
    """One turn as rows before their checksum: its step names its message's seq, as the runtime writes."""
    rows = []
    for offset, (kind, data) in enumerate(_turn()):
        if kind in ("step_started", "step_finished"):
            data = {"event_seq": first_seq}
        rows.append((session_id, first_seq + offset, ts + offset * 1e-4, kind, 1, json.dumps(data)))
    return rows


def session_rows(session_id: str, size: int, now: float) -> Iterator[tuple[str, int, float, str, int, str]]:
    """``session_started``, then as many whole turns as fit in ``size`` rows: a finished session, as
    the unfinished-work index (left empty by these direct inserts) says."""
    yield (session_id, 1, now, "session_started", 1, '{"agent":"bench","platform":null,"initial_state":"r"}')
    turn = len(_turn())
    for seq in range(2, size - turn + 2, turn):
        yield from turn_records(session_id, seq, now + seq * 1e-3)


def build(path: Path, records: int, checksums: bool = True) -> list[str]:
    """A log of ``records`` records in sessions of ``SESSION_SIZE``, written straight into the file."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    with db:
        for statement in SCHEMA:
            db.execute(statement)
    sessions = [f"s{i}" for i in range((records + SESSION_SIZE - 1) // SESSION_SIZE)]
    written = 0
    for session in sessions:
        size = min(SESSION_SIZE, records - written)
        rows = session_rows(session, size, time.time())
        with db:
            db.execute(REGISTER_SQL, (session,))
            db.executemany(INSERT_SQL, ((*row, record_checksum(*row) if checksums else None) for row in rows))
        written += size
    db.close()
    return sessions


async def append_round(path: Path, turns: int) -> float:
    """Seconds per append of one turn, ``turns`` turns into one session of a new file."""
    async with SQLiteLog(path) as log:
        template = [Record("s", 1, "session_started", {"agent": "b", "platform": None, "initial_state": "r"})]
        await log.append(template)
        seq = 2
        started = time.perf_counter()
        for _ in range(turns):
            rows = turn_records("s", seq, time.time())
            await log.append([Record(s, q, k, json.loads(d), t, v) for s, q, t, k, v, d in rows])
            seq += len(rows)
        return (time.perf_counter() - started) / turns


def without_checksum(*_: Any) -> None:
    return None


async def compare_appends(tmp: Path) -> tuple[float, float]:
    """Median seconds per append with and without the checksum, alternating."""
    shipped: Callable[..., Any] = sqlite_codec.record_checksum
    with_times, without_times = [], []
    for n in range(ROUNDS):
        for use in (True, False) if n % 2 == 0 else (False, True):
            sqlite_codec.record_checksum = shipped if use else without_checksum  # type: ignore[assignment]
            try:
                seconds = await append_round(tmp / f"append-{n}-{use}.db", TURNS_PER_ROUND)
            finally:
                sqlite_codec.record_checksum = shipped  # type: ignore[assignment]
            (with_times if use else without_times).append(seconds)
    return statistics.median(with_times), statistics.median(without_times)


async def compare_reads(tmp: Path) -> tuple[float, float]:
    """Median seconds to read a 100,000-record session with and without checksums, alternating."""
    checked, unchecked = tmp / "read-checked.db", tmp / "read-unchecked.db"
    build(checked, SESSION_SIZE, checksums=True)
    build(unchecked, SESSION_SIZE, checksums=False)
    times: dict[Path, list[float]] = {checked: [], unchecked: []}
    for n in range(ROUNDS):
        for path in (checked, unchecked) if n % 2 == 0 else (unchecked, checked):
            async with SQLiteLog(path, read_only=True) as log:
                started = time.perf_counter()
                records = await log.read("s0")
                times[path].append(time.perf_counter() - started)
                assert len(records) > SESSION_SIZE - len(_turn())
    return statistics.median(times[checked]), statistics.median(times[unchecked])


async def time_check(path: Path) -> tuple[float, int, int, bool]:
    async with SQLiteLog(path, read_only=True) as log:
        started = time.perf_counter()
        report = await check_log(log)
        return time.perf_counter() - started, report.sessions, report.records, report.damaged


def time_integrity(path: Path) -> float:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        started = time.perf_counter()
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return time.perf_counter() - started
    finally:
        connection.close()


async def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    print(f"load average before: {', '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="baf-bench-check-") as name:
        tmp = Path(name)
        with_s, without_s = await compare_appends(tmp)
        print(f"append of one turn (16 records), {TURNS_PER_ROUND} per round, {ROUNDS} rounds: "
              f"{with_s * 1e6:.0f} µs with the checksum, {without_s * 1e6:.0f} µs without: "
              f"ratio {with_s / without_s:.3f}")  # fmt: skip
        one = turn_records("s", 1, 1.0)[5]
        started = time.perf_counter()
        for _ in range(100_000):
            record_checksum(*one)
        print(f"  record_checksum alone on an llm_response record ({len(one[5])} characters): "
              f"{(time.perf_counter() - started) * 10:.2f} µs")  # fmt: skip
        with_s, without_s = await compare_reads(tmp)
        print(f"read of a {SESSION_SIZE:,}-record session, {ROUNDS} rounds: {with_s:.3f} s with checksums, "
              f"{without_s:.3f} s without: ratio {with_s / without_s:.3f}")  # fmt: skip
        path = tmp / "check.db"
        started = time.perf_counter()
        build(path, records)
        print(f"built {records:,} records in {time.perf_counter() - started:.1f} s "
              f"({path.stat().st_size / 1e6:.0f} MB)")  # fmt: skip
        seconds, sessions, read, damaged = await time_check(path)
        print(f"baf check: {sessions} sessions, {read:,} records in {seconds:.1f} s "
              f"({read / seconds:,.0f} records/s), damaged: {damaged}")  # fmt: skip
        print(f"  of which SQLite's integrity check alone: {time_integrity(path):.1f} s")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
