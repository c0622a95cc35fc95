"""A/B of the PostgreSQL store's client-side CPU per append, in instructions, between source trees (issue 13).

A worker's sessions run in step: ~100 of them append together and one group statement commits them all.
This script does exactly that through ``PostgresLog`` as a worker's store (a worker id, every session fenced
at its lease's epoch, so the statement checks the fences): ``--sessions`` sessions each append a
model turn's records in its two durable points (the model's answer and the step; the tool's result, the
step and the next request: 5 records), all sessions at once, round after round. Run under
``valgrind --tool=cachegrind --cache-sim=no`` with ``--warmup`` rounds and with ``--warmup + --rounds``,
per tree; it prints

    instructions per turn = (Ir(more rounds) - Ir(fewer rounds)) / (rounds × sessions)

the worker's client-side cost of one session's turn in the store (the records' checks and encoding, the
plan, asyncpg's encoding of the statement, reading its answer, settling the appends), start-up left out.
The PostgreSQL server runs outside valgrind: its work is not counted. Every append of a round is queued
before the writer runs, so each round is exactly two groups of ``--sessions`` appends, whatever the timing.

Before counting, each tree runs the workload once outside valgrind and what it stored (``baf_records``,
``baf_work``, ``baf_sessions``) must be the same as the first tree's, to the bit (``ts`` compared as
floats' bits): a cheaper encoding must not change what is written.

PostgreSQL: ``BAF_BENCH_POSTGRES_DSN``, or a throwaway cluster started with ``.ci/postgres``. Each run
uses a schema of its own, dropped afterwards.

    python bench/ab_pg_append.py ../base .            # ~1 min per tree
    python bench/ab_pg_append.py ../base . --sessions 100 --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg

BENCH = Path(__file__).resolve().parent
SCRIPT = BENCH.parent / ".ci" / "postgres"

# Runs in the child, with the tree's baf: the workload against the DSN in argv[1], nothing printed.
_WORKLOAD = r"""
import asyncio, sys
from baf.log.postgres import PostgresLog
from baf.log.record import Record

DSN, SESSIONS, ROUNDS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
T0 = 1795734534.6810398

STARTED = {"agent": "bench", "platform": "bench", "initial_state": "reasoning_state"}
MESSAGE = {"event": {"type": "text", "message": "Please look everything up."}, "text": "Please look everything up."}


def turn(step):
    call = f"call_{step + 1}"
    arguments = '{"key": %d}' % step
    tool_calls = [{"id": call, "name": "lookup", "arguments": arguments}]
    answer = [
        ("llm_response", {"loop": "reasoning", "run": 0, "turn": step + 1, "step": step + 1, "model": "bench-model",
                          "provider": "unknown", "latency_ms": 0.016, "text": None, "tool_calls": tool_calls,
                          "usage": {"prompt_tokens": 0, "completion_tokens": 0}}),
        ("reasoning_step", {"kind": "llm_tool_calls", "step": step + 1, "summary": "calling lookup",
                            "details": {"tool_calls": tool_calls, "text": None}}),
    ]
    result = f"value of {step} \u2014 \u00e9t\u00e9"
    tool = [
        ("tool_result", {"step": step + 1, "call_id": call, "name": "lookup", "content": result, "is_error": False,
                         "original_size": len(result)}),
        ("reasoning_step", {"kind": "tool_result", "step": step + 1, "summary": "lookup returned",
                            "details": {"call_id": call, "name": "lookup", "arguments": arguments, "result": result,
                                        "is_error": False}}),
        ("llm_request", {"loop": "reasoning", "run": 0, "turn": step + 2, "step": step + 2, "model": "bench-model",
                         "extends": True, "messages": [
                             {"role": "assistant", "content": None, "tool_calls": [
                                 {"id": call, "type": "function",
                                  "function": {"name": "lookup", "arguments": arguments}}]},
                             {"role": "tool", "tool_call_id": call, "content": result}]}),
    ]
    return answer, tool


async def main():
    names = [f"session-{n}" for n in range(SESSIONS)]
    log = PostgresLog(DSN, worker_id="ab")
    await log.start()
    async with log.connection() as connection:
        await connection.execute(
            "INSERT INTO baf_leases (session_id, owner, epoch, expires_at) "
            "SELECT s, 'ab', 1, now() + interval '1 hour' FROM unnest($1::text[]) AS s",
            names,
        )
    for name in names:
        log.fence(name, 1)
    seqs = dict.fromkeys(names, 0)

    def records(name, parts):
        out = []
        for kind, data in parts:
            seqs[name] += 1
            out.append(Record(session_id=name, seq=seqs[name], kind=kind, data=data,
                              ts=T0 + seqs[name] * 1.37e-4, version=2))
        return out

    start = [("session_started", STARTED), ("message_received", MESSAGE), ("step_started", {"event_seq": 2})]
    await asyncio.gather(*(log.append(records(name, start)) for name in names))
    for step in range(ROUNDS):
        answer, tool = turn(step)
        await asyncio.gather(*(log.append(records(name, answer)) for name in names))
        await asyncio.gather(*(log.append(records(name, tool)) for name in names))
    await log.close()

asyncio.run(main())
"""


class Schema:
    """A schema of its own on the server for one run (``dsn`` points at it), dropped on exit."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.name = f"ab_pg_{uuid.uuid4().hex[:10]}"
        self.dsn = f"{server}{'&' if '?' in server else '?'}search_path={self.name}"

    def __enter__(self) -> Schema:
        asyncio.run(_execute(self.server, f'CREATE SCHEMA "{self.name}"'))
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run(_execute(self.server, f'DROP SCHEMA "{self.name}" CASCADE'))


async def _execute(server: str, sql: str) -> None:
    connection = await asyncpg.connect(server)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _stored(dsn: str) -> list[object]:
    connection = await asyncpg.connect(dsn)
    try:
        records = await connection.fetch(
            "SELECT session_id, seq, kind, data, ts, version FROM baf_records ORDER BY session_id, seq"
        )
        work = await connection.fetch("SELECT session_id, status, unfinished FROM baf_work ORDER BY session_id")
        sessions = await connection.fetch("SELECT session_id FROM baf_sessions ORDER BY session_id")
    finally:
        await connection.close()
    return [
        [(*row[:4], struct.pack("<d", row[4]), row[5]) for row in records],
        [tuple(row) for row in work],
        [row[0] for row in sessions],
    ]


def _run(tree: Path, dsn: str, sessions: int, rounds: int, valgrind: bool) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    prefix = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"] if valgrind else []
    done = subprocess.run(
        [*prefix, sys.executable, "-c", _WORKLOAD, dsn, str(sessions), str(rounds)],
        env=env, capture_output=True, text=True, cwd=tree, timeout=3600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree} ({rounds} rounds) failed:\n{done.stderr[-3000:]}")
    return done.stderr


def check_stored(server: str, trees: list[Path], sessions: int) -> None:
    """Exit unless every tree stores what the first one does."""
    first: list[object] | None = None
    for tree in trees:
        with Schema(server) as schema:
            _run(tree, schema.dsn, sessions, 3, valgrind=False)
            stored = asyncio.run(_stored(schema.dsn))
        if first is None:
            first = stored
        elif stored != first:
            raise SystemExit(f"{tree} stores other rows than {trees[0]}")
    print(f"stored: the {len(trees)} trees write the same rows ({sessions} sessions, 3 rounds)")


def instructions(server: str, tree: Path, sessions: int, rounds: int) -> int:
    with Schema(server) as schema:
        found = re.search(r"I\s+refs:\s+([\d,]+)", _run(tree, schema.dsn, sessions, rounds, valgrind=True))
    if found is None:
        raise SystemExit(f"{tree}: no instruction count from valgrind")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (each holding a baf/ package)")
    parser.add_argument("--sessions", type=int, default=100, help="sessions appending together (default 100)")
    parser.add_argument("--rounds", type=int, default=10, help="measured model turns (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="turns in the run subtracted (default 2)")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at once (default 2)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    trees = [tree.resolve() for tree in args.trees]
    for tree in trees:
        if not (tree / "baf" / "__init__.py").is_file():
            parser.error(f"{tree} holds no baf package")
    server = os.environ.get("BAF_BENCH_POSTGRES_DSN")
    folder = None
    if not server:
        folder = Path(tempfile.mkdtemp(prefix="baf-bench-pgappend-"))
        started = subprocess.run(["bash", str(SCRIPT), "start", str(folder / "pg")], capture_output=True, text=True)
        if started.returncode != 0:
            sys.exit(f"could not start PostgreSQL: {started.stderr[-2000:]}")
        server = started.stdout.strip().splitlines()[-1]
    try:
        check_stored(server, trees, args.sessions)
        runs = [(tree, count) for tree in trees for count in (args.warmup, args.warmup + args.rounds)]
        with ThreadPoolExecutor(args.jobs) as pool:
            counts = dict(
                zip(runs, pool.map(lambda run: instructions(server, run[0], args.sessions, run[1]), runs), strict=True)
            )
        print(f"{args.sessions} sessions appending together; {args.rounds} model turns (2 appends, 5 records each); "
              "client instructions per session and turn")  # fmt: skip
        print(f"{'tree':40} {'per turn':>10} {'vs first':>8}")
        first = None
        for tree in trees:
            per_turn = (counts[(tree, args.warmup + args.rounds)] - counts[(tree, args.warmup)]) / (
                args.rounds * args.sessions
            )
            first = first or per_turn
            print(f"{str(tree)[-40:]:40} {per_turn:10,.0f} {per_turn / first:8.3f}")
    finally:
        if folder is not None:
            subprocess.run(["bash", str(SCRIPT), "stop", str(folder / "pg")], capture_output=True, check=False)


if __name__ == "__main__":
    main()
