"""Sessions as a cache over the log (issue 12): start-up, memory kept per finished session, a long session's load.

Three measurements, each on a real SQLite file (``durability=normal``):

1. **Start-up against finished sessions.** A log holding N finished one-message sessions plus 3 with a
   step a crash left open. Timed: ``agent.start()`` (the log opened, the sessions with unfinished work
   found and loaded, their open steps closed) and ``agent.stop()``. Flat in N is the goal: start-up reads
   the store's unfinished-work index, never the list of every session.
2. **Memory kept per finished session.** 1,000 sessions of 10 turns each through ``receive_message``;
   then Python's allocated memory (``tracemalloc``, after a full collection) minus what it was before the
   first session, per session. Run twice: with the cache bounded (``max_sessions=0``: every session is
   dropped once at rest, so what remains is what a finished session costs for ever) and with the default
   bound (every session still held, the cost while they are in use).
3. **A 100,000-record session.** Written through the runtime (each message records 100 records and a
   reply), then a fresh runtime loads it: the first ``get_or_create_session`` timed, with the snapshots
   the runtime wrote (every ``snapshot_every`` = 1,000 records) and, for comparison, the same session
   written without snapshots.

The script uses only ``Agent`` and the log interface, so it also runs against an older tree
(``PYTHONPATH=../base python bench/bench_cache.py --only startup --sizes 10000``): there ``agent.start()``
loads every session in the log, and sessions are never dropped.

    python bench/bench_cache.py                  # all three, N = 10, 10k, 100k (~3 min; building the logs dominates)
    python bench/bench_cache.py --quick          # N = 10, 10k; 300 sessions; a 20k-record session
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from baf import Agent, Session
from baf.log import Record, open_log


def agent_for(url: str, **cache: Any) -> Agent:
    """A counting agent; ``cache`` settings are passed only where this tree's Agent takes them."""
    accepted = inspect.signature(Agent).parameters
    agent = Agent("bench", log=url, **{k: v for k, v in cache.items() if k in accepted})
    idle = agent.new_state("idle", initial=True)

    def count(session: Session) -> None:
        if session.event is not None:
            session["n"] = session.get("n", 0) + 1
            session.reply(f"turn {session['n']}")

    idle.set_body(count)
    idle.when_event().go_to(idle)
    return agent


def finished(session_id: str, ts: float, open_step: bool = False) -> list[Record]:
    """One session's records as the runtime writes them for one message; its last step left open if asked."""
    records = [
        Record(session_id, 1, "session_started", {"agent": "bench", "platform": None, "initial_state": "idle"}, ts),
        Record(session_id, 2, "step_started", {"event_seq": None}, ts),
        Record(session_id, 3, "step_finished", {"event_seq": None}, ts),
        Record(session_id, 4, "message_received", {"event": {"type": "text", "message": "hi"}, "text": "hi"}, ts),
        Record(session_id, 5, "step_started", {"event_seq": 4}, ts),
        Record(session_id, 6, "variable_set", {"name": "n", "value": 1}, ts),
        Record(session_id, 7, "reply", {"text": "turn 1"}, ts),
    ]
    if not open_step:
        records.append(Record(session_id, 8, "step_finished", {"event_seq": 4}, ts))
    return records


async def build_log(path: Path, sessions: int) -> None:
    async with open_log(f"sqlite:///{path}") as log:
        now = time.time()
        batch: list[Record] = []
        for n in range(sessions):
            batch += finished(f"done-{n}", now)
            if len(batch) >= 20_000:
                await log.append(batch)
                batch = []
        for n in range(3):
            batch += finished(f"open-{n}", now, open_step=True)
        await log.append(batch)


async def startup(sizes: list[int], directory: Path, repeats: int) -> None:
    print("\n1. start-up against finished sessions in the log (SQLite, 3 sessions with an open step)")
    print(f"{'finished':>10} {'build s':>8} {'start+stop ms (median)':>23} {'min':>8}")
    for size in sizes:
        path = directory / f"startup-{size}.db"
        began = time.perf_counter()
        await build_log(path, size)
        built = time.perf_counter() - began
        times = []
        for _ in range(repeats):
            agent = agent_for(f"sqlite:///{path}")
            began = time.perf_counter()
            await agent.start()
            await agent.stop()
            times.append((time.perf_counter() - began) * 1000)
        print(f"{size:>10,} {built:>8.1f} {statistics.median(times):>23.1f} {min(times):>8.1f}", flush=True)


async def send(agent: Agent, session_id: str, text: str) -> None:
    """``receive_message`` keeping nothing: the memory counted is the runtime's, not the caller's."""
    await agent.receive_message(session_id, text)


async def retained(sessions: int, turns: int, directory: Path) -> None:
    print(f"\n2. memory kept per finished session ({sessions:,} sessions x {turns} turns, SQLite, tracemalloc)")
    for label, cache in (("dropped when at rest (max_sessions=0)", {"max_sessions": 0}), ("default bound", {})):
        path = directory / f"memory-{label[:7]}.db"
        agent = agent_for(f"sqlite:///{path}", **cache)
        async with agent:
            await agent.receive_message("warm-up", "hi")  # first-use imports and caches, outside the count
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for turn in range(turns):
                await asyncio.gather(*(send(agent, f"s{n}", f"turn {turn}") for n in range(sessions)))
            await agent.wait_idle()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            held = len(agent.sessions)
        per = (after - before) / sessions / 1024
        print(f"  {label:40} {per:8.2f} KiB per session ({held:,} sessions held at the end)", flush=True)


async def long_session(records: int, directory: Path, repeats: int) -> None:
    print(f"\n3. first load of a {records:,}-record session (SQLite)")
    per_message = 100
    for label, every in (("with snapshots (every 1,000)", 1000), ("without snapshots", None)):
        path = directory / f"long-{every}.db"
        agent = Agent("long", log=f"sqlite:///{path}", snapshot_every=every)
        idle = agent.new_state("idle", initial=True)

        def chatty(session: Session) -> None:
            if session.event is not None:
                for i in range(per_message - 4):  # with step_started/finished, the message and the reply
                    session.record("note", {"i": i})
                session.reply("ok")

        idle.set_body(chatty)
        idle.when_event().go_to(idle)
        async with agent:
            for _ in range(records // per_message):
                await agent.receive_message("long", "go")
        times = []
        for _ in range(repeats):
            again = agent_for(f"sqlite:///{path}")
            async with again:
                began = time.perf_counter()
                await again.get_or_create_session("long")
                times.append((time.perf_counter() - began) * 1000)
        async with open_log(f"sqlite:///{path}") as log:
            total = len(await log.read("long"))
        print(f"  {label:30} {total:>8,} records: first load {statistics.median(times):7.1f} ms (median), "
              f"{min(times):7.1f} min", flush=True)  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller logs and runs")
    parser.add_argument("--sizes", type=int, nargs="+", help="finished sessions for start-up (default 10 10000 100000)")
    parser.add_argument("--only", choices=("startup", "memory", "long"), help="run one measurement")
    args = parser.parse_args()
    sizes = args.sizes or ([10, 10_000] if args.quick else [10, 10_000, 100_000])
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="baf-cache-") as tmp:
        directory = Path(tmp)
        if args.only in (None, "startup"):
            await startup(sizes, directory, repeats=3 if args.quick else 5)
        if args.only in (None, "memory"):
            await retained(300 if args.quick else 1000, 10, directory)
        if args.only in (None, "long"):
            await long_session(20_000 if args.quick else 100_000, directory, repeats=3 if args.quick else 5)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
