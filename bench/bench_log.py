"""Append throughput of ``SQLiteLog`` against plain aiosqlite inserting the same rows.

Run: ``python bench/bench_log.py [RECORDS] [normal|full ...]`` (about a minute and a half at 100,000).

Two workloads of RECORDS records (default 100,000), each appended ``BATCH`` records at a time, the way
a running agent commits the records of one step:

- one session appending batch after batch, each awaited before the next;
- 1,000 sessions doing the same concurrently (``asyncio.gather``), so the store can group their
  commits.

Each is compared with ``raw_insert_cost``: the same rows in the same order, one transaction per
``BATCH`` rows (what a store without group commit would do), and one transaction per 5,000 rows (the
best grouping could do).
"""

from __future__ import annotations

import asyncio
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import aiosqlite

# Runnable as a script from anywhere: the repository root for baf, this folder for raw_append.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_append import raw_insert_cost

from baf.log import Record, RecordKind, SQLiteLog
from baf.log.sqlite import Durability

BATCH = 5
IDEAL_BATCH = 5_000
# Kinds the projection does not fold, so the made-up data need not have their fields.
KINDS = (RecordKind.LLM_REQUEST, RecordKind.LLM_RESPONSE, RecordKind.TOOL_RESULT, RecordKind.REASONING_STEP)


def make_batches(sessions: int, records: int) -> list[list[Record]]:
    """Round-robin over sessions: batch ``r`` of every session, then batch ``r + 1`` of every session."""
    per_session = records // sessions
    batches: list[list[Record]] = []
    for first in range(1, per_session + 1, BATCH):
        for n in range(sessions):
            session_id = f"session-{n:05d}"
            batches.append(
                [
                    Record(
                        session_id,
                        seq,
                        KINDS[seq % len(KINDS)],
                        {"text": f"message {seq} of {session_id}: " + "lorem ipsum " * 12, "seq": seq},
                    )
                    for seq in range(first, min(first + BATCH, per_session + 1))
                ]
            )
    return batches


async def store_cost(
    path: Path, batches: Sequence[list[Record]], sessions: int, durability: Durability
) -> tuple[float, int]:
    """Seconds for ``SQLiteLog`` to append ``batches``, each session awaiting its own appends in order."""
    by_session: dict[str, list[list[Record]]] = {}
    for batch in batches:
        by_session.setdefault(batch[0].session_id, []).append(batch)

    async with SQLiteLog(path, durability=durability) as log:

        async def run_session(own: list[list[Record]]) -> None:
            for batch in own:
                await log.append(batch)

        started = time.perf_counter()
        await asyncio.gather(*(run_session(own) for own in by_session.values()))
        elapsed = time.perf_counter() - started
        commits = log.commits
    assert len(by_session) == sessions
    return elapsed, commits


async def main(records: int, durabilities: Sequence[Durability]) -> None:
    print(
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, aiosqlite {aiosqlite.__version__}, "
        f"{records:,} records of ~{len(make_batches(1, BATCH)[0][0].data['text'])} B text, {BATCH} per append"
    )
    header = (
        f"{'workload':<22} {'durability':<10} {'SQLiteLog rec/s':>15} {'commits':>8} "
        f"{'raw rec/s':>10} {'log/raw':>8} {'raw ideal rec/s':>16} {'log/ideal':>9}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="baf-bench-") as tmp:
        run = 0
        for durability in durabilities:
            for sessions in (1, 1_000):
                batches = make_batches(sessions, records)
                flat = [record for batch in batches for record in batch]
                run += 1
                log_seconds, commits = await store_cost(Path(tmp, f"log{run}.db"), batches, sessions, durability)
                raw_seconds = await raw_insert_cost(Path(tmp, f"raw{run}.db"), flat, durability, BATCH)
                ideal_seconds = await raw_insert_cost(Path(tmp, f"ideal{run}.db"), flat, durability, IDEAL_BATCH)
                n = len(flat)
                label = f"{sessions:,} session{'s' if sessions > 1 else ''}"
                print(
                    f"{label:<22} {durability:<10} {n / log_seconds:>15,.0f} {commits:>8,} "
                    f"{n / raw_seconds:>10,.0f} {raw_seconds / log_seconds:>7.2f}x "
                    f"{n / ideal_seconds:>16,.0f} {ideal_seconds / log_seconds:>8.2f}x"
                )
    print(
        "log/raw and log/ideal: SQLiteLog's speed relative to plain aiosqlite committing every "
        f"{BATCH} rows and every {IDEAL_BATCH:,} rows (above 1x = faster than that raw loop)."
    )


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    modes: list[Durability] = [m for m in sys.argv[2:] if m in ("normal", "full")] or ["normal", "full"]  # type: ignore[misc]
    asyncio.run(main(count, modes))
