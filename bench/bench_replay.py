"""Replay speed: the projection fold over a 1,000,000-record log, and ``baf replay``'s first screen.

Run: ``python bench/bench_replay.py [RECORDS]`` (default 1,000,000; one to two minutes).

The log is written straight into the SQLite layout of ``baf.log.sqlite`` (``SCHEMA``, ``INSERT_SQL``,
one ``executemany``), in sessions of 100,000 records each, cycling through the records of one
realistic reasoning turn (message, step, transition, LLM request/response, tool result, reasoning
steps, task list, reply). Then:

1. **fold**: every session read from the file and folded into a ``SessionProjection`` by
   ``SQLiteLog.project``, which fetches, decodes (strictly), upcasts and folds every record in chunks
   without keeping them; reported as records per second. Target: at least 200,000 records/s.
   Then the same log the materialising way, ``SQLiteLog.read`` (a list of every ``Record``) and then
   ``baf.log.projection.project`` over it, with the read and the fold timed apart: the fold's time
   includes the garbage collector's passes over the records the read left alive, since it pays them.
2. **first screen**: ``baf replay LOG SESSION`` on one 100,000-record session, in a fresh process
   (what a user waits for, interpreter start included) and in process. Target: under 1 s.

With ``--profile`` the fold is run under cProfile and the top functions are printed.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import json
import pstats
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console

from baf.log.checksum import record_checksum
from baf.log.projection import project
from baf.log.sqlite import INSERT_SQL, SCHEMA, SQLiteLog
from baf.replay.commands import ReplayOptions, replay

SESSION_SIZE = 100_000
FOLD_TARGET = 200_000
SCREEN_TARGET = 1.0


def _turn() -> list[tuple[str, dict[str, Any]]]:
    """The records of one reasoning turn, as (kind, data)."""
    tool_call = {"id": "call_1", "name": "csv_summary", "arguments": '{"path": "sales.csv"}'}
    step = {"kind": "llm_tool_calls", "step": 0, "summary": "calling csv_summary",
            "details": {"tool_calls": [tool_call], "text": None}}  # fmt: skip
    return [
        ("message_received", {"event": {"type": "text", "session_id": "s", "message": "What were sales in Q3?"},
                              "text": "What were sales in Q3?"}),
        ("step_started", {"event_seq": 1}),
        ("transition", {"source": "reasoning", "dest": "reasoning", "label": "on any event"}),
        ("reasoning_step", {"kind": "reasoning_started", "step": 0, "summary": "reasoning about: sales",
                            "details": {"request": "What were sales in Q3?", "planning": True}}),
        ("llm_request", {"step": 0, "model": "gpt-4o-mini",
                         "messages": [{"role": "user", "content": "What were sales in Q3?"}]}),
        ("llm_response", {"step": 0, "model": "gpt-4o-mini", "latency_ms": 812.4, "text": None,
                          "tool_calls": [tool_call], "usage": {"prompt_tokens": 1450, "completion_tokens": 31}}),
        ("reasoning_step", step),
        ("tool_result", {"step": 0, "call_id": "call_1", "name": "csv_summary", "is_error": False,
                         "content": "region,q3\nnorth,1200\nsouth,980\n" * 4, "original_size": 120}),
        ("task_list", {"tasks": [{"id": 1, "description": "sum Q3", "status": "completed", "result": "2180"}]}),
        ("llm_request", {"step": 1, "model": "gpt-4o-mini", "messages": [{"role": "tool", "content": "..."}]}),
        ("llm_response", {"step": 1, "model": "gpt-4o-mini", "latency_ms": 640.0, "text": "Q3 sales were 2,180.",
                          "tool_calls": [], "usage": {"prompt_tokens": 1520, "completion_tokens": 12}}),
        ("reasoning_step", {"kind": "llm_text", "step": 1, "summary": "Q3 sales were 2,180.",
                            "details": {"text": "Q3 sales were 2,180.", "final": True}}),
        ("reply", {"text": "Q3 sales were 2,180."}),
        ("reasoning_step", {"kind": "reasoning_finished", "step": 1, "summary": "finished: answered",
                            "details": {"outcome": "answered", "steps": 2}}),
        ("variable_set", {"name": "last_answer", "value": "Q3 sales were 2,180."}),
        ("step_finished", {"event_seq": 1}),
    ]  # fmt: skip


def build_log(path: Path, records: int) -> list[str]:
    """Write ``records`` records in sessions of ``SESSION_SIZE``; return the session ids."""
    turn = [(kind, json.dumps(data, separators=(",", ":"))) for kind, data in _turn()]
    start = ("session_started", json.dumps({"agent": "bench", "platform": None, "initial_state": "reasoning"}))
    sessions = [f"s{i}" for i in range((records + SESSION_SIZE - 1) // SESSION_SIZE)]
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    with db:
        for statement in SCHEMA:
            db.execute(statement)
    now = time.time()
    written = 0
    for session in sessions:
        size = min(SESSION_SIZE, records - written)

        def rows(session: str = session, size: int = size) -> Any:
            yield (session, 1, now, *start[:1], 1, start[1])
            for seq in range(2, size + 1):
                kind, data = turn[(seq - 2) % len(turn)]
                yield (session, seq, now + seq * 1e-4, kind, 1, data)

        with db:
            db.executemany(INSERT_SQL, ((*row, record_checksum(*row)) for row in rows()))
        written += size
    db.close()
    return sessions


@dataclass
class FoldTimes:
    """Seconds spent on the whole log, each way of folding it."""

    records: int = 0
    project_s: float = 0.0  # SQLiteLog.project: read and fold in one pass
    read_s: float = 0.0  # SQLiteLog.read: every Record in a list
    fold_s: float = 0.0  # project() over that list, then dropping it


async def fold(path: Path, sessions: list[str]) -> FoldTimes:
    """Fold every session both ways (see the module docstring); return the times."""
    times = FoldTimes()
    async with SQLiteLog(path) as log:
        for session in sessions:
            started = time.perf_counter()
            projection = await log.project(session)
            times.project_s += time.perf_counter() - started
            times.records += projection.last_seq  # seqs run 1..N without gaps
        for session in sessions:
            started = time.perf_counter()
            records = await log.read(session)
            read_done = time.perf_counter()
            folded = project(session, records)
            del records  # freeing them is part of the work
            times.fold_s += time.perf_counter() - read_done
            times.read_s += read_done - started
    if folded != projection:  # the last session, folded both ways
        raise AssertionError("SQLiteLog.project and project(read) disagree")
    return times


def fold_projected_kinds_only(path: Path, sessions: list[str]) -> tuple[int, float]:
    """What-if for a proposed store option: decode ``data`` only for the kinds the fold reads.

    Same rows, same ``Record``s, same ``upcast`` and ``project``; the JSON of the other kinds (the
    reasoning loop's records: most of the bytes) is never parsed. Not how ``SQLiteLog.read`` works
    today: it measures what such an option would give.
    """
    from baf.log import projection
    from baf.log.record import Record
    from baf.log.upcast import upcast

    kinds = sorted(projection._HANDLERS)
    marks = ",".join("?" * len(kinds))
    sql = (f"SELECT seq, ts, kind, version, CASE WHEN kind IN ({marks}) THEN data ELSE '{{}}' END "
           "FROM baf_records WHERE session_id = ? ORDER BY seq")  # fmt: skip
    db = sqlite3.connect(path)
    total, started = 0, time.perf_counter()
    loads = json.loads
    for session in sessions:
        rows = db.execute(sql, (*kinds, session)).fetchall()
        records = [upcast(Record(session, seq, kind, loads(data), ts, version))
                   for seq, ts, kind, version, data in rows]  # fmt: skip
        project(session, records)
        total += len(records)
    db.close()
    return total, time.perf_counter() - started


async def first_screen_in_process(path: Path, session: str) -> float:
    out = Console(file=io.StringIO(), width=160)
    started = time.perf_counter()
    async with SQLiteLog(path) as log:
        await replay(log, ReplayOptions(session=session), out)
    return time.perf_counter() - started


def first_screen_subprocess(path: Path, session: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "baf.cli", "replay", str(path), session], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    records = int(args[0]) if args else 1_000_000
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        started = time.perf_counter()
        sessions = build_log(path, records)
        print(f"built {records:,} records in {len(sessions)} sessions in {time.perf_counter() - started:.1f} s "
              f"({path.stat().st_size / 1e6:.0f} MB)")  # fmt: skip
        if "--profile" in sys.argv:
            profiler = cProfile.Profile()
            profiler.enable()
            asyncio.run(fold(path, sessions[:2]))
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
        times = asyncio.run(fold(path, sessions))
        total = times.records
        rate = total / times.project_s
        print(f"read + fold (SQLiteLog.project): {total:,} records in {times.project_s:.2f} s = {rate:,.0f} records/s "
              f"(target {FOLD_TARGET:,}: {'met' if rate >= FOLD_TARGET else 'MISSED'})")  # fmt: skip
        both_s = times.read_s + times.fold_s
        print(f"  read, then fold the list: {total / both_s:,.0f} records/s = read (SQLite, JSON decode, upcast) "
              f"{total / times.read_s:,.0f} records/s + fold {total / times.fold_s:,.0f} records/s")  # fmt: skip
        what_if, what_if_s = fold_projected_kinds_only(path, sessions)
        print(f"  what-if (proposal: decode data only for the kinds the fold reads): {what_if / what_if_s:,.0f} "
              "records/s")  # fmt: skip
        in_process = min(asyncio.run(first_screen_in_process(path, sessions[0])) for _ in range(3))
        fresh = min(first_screen_subprocess(path, sessions[0]) for _ in range(3))
        size = min(SESSION_SIZE, records)
        print(f"first screen of a {size:,}-record session: {fresh:.2f} s in a fresh `baf replay` process "
              f"({in_process:.2f} s in process; target {SCREEN_TARGET} s: "
              f"{'met' if fresh < SCREEN_TARGET else 'MISSED'})")  # fmt: skip


if __name__ == "__main__":
    main()
