"""Scale-out benchmark (issue 13): concurrent sessions on one worker over SQLite against workers over
PostgreSQL, and the per-turn cost of the PostgreSQL log.

Part 1. ``--sessions`` sessions (default 200) each get one message, answered after 6 model calls of 50 ms
(5 tool turns, then the answer): ideal wall time 0.30 s. Configurations, one after the other in this run:

- ``sqlite x1``: one process, the agent's own runtime over a SQLite file (durability normal);
- ``postgres x1`` / ``postgres x2``: one or two worker processes (``python -m baf.serve.process worker``)
  over PostgreSQL; the messages are posted to the inbox all at once, as a platform's worker forwards them,
  and the clock stops when every session has answered (its reply and the end of its step committed: the
  unfinished-work index is empty). Each twice:

  - ``taken over``: no worker holds the sessions as the clock starts; the worker the rendezvous hash picks
    for each takes it over (its lease, its load, its inbox read) after the clock;
  - ``live``: each session was answered once before the clock, by the worker that took it then and holds
    it since (loaded, as the SQLite process has its sessions loaded); the timed message is the second,
    and reaches that worker through the inbox.

Beside each wall time: the CPU seconds spent while the clock ran by the processes that do the work (the
SQLite process; the worker processes), by the PostgreSQL server's processes (when it runs on this machine:
the throwaway cluster's do) and by this process posting the messages, and the seconds all of them were
runnable but waited for a CPU (near zero on an idle machine; on a shared one, what the others cost). Wall
time against CPU time says whether a configuration waits (round trips, sessions moving in step) or computes.

In every configuration the sessions exist before the clock starts (created, their initial body run), so
the clock times the messages, not the sessions' creation. And each configuration answers ``WARM_UP`` other
sessions first (a warm process, as a server that has been up a while: its statements prepared, its code
paths run once).

Part 2. Framework time per model turn with a zero-latency model (10 tool turns, then the answer), SQLite
against PostgreSQL in the same run, with 1, 10 and 50 sessions answering at once in one process (median
of ``--reps`` rounds for one session, at least 5 for more). The target (PostgreSQL within 1.5x "with group
commit") is the concurrent rows: there the commits of many sessions share the writer's round trips. One
session alone stays near 3x: each turn has two durable points (the model's answer before the tool runs,
the tool's result before the next model call), each a round trip to the server (~0.1 ms on loopback)
where SQLite commits in-process; no batching can share a round trip that nothing else is waiting for.

PostgreSQL: ``BAF_BENCH_POSTGRES_DSN``, or a throwaway cluster started with ``.ci/postgres``.

    python bench/bench_workers.py              # about a minute
    python bench/bench_workers.py --quick
    python bench/bench_workers.py --timeline   # and where each session's time went (postgres x2, live)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import console, median
from bench_reasoning import BenchLLM, build_agent
from bench_websocket import postgres_pids, scheduled
from rich.table import Table

from baf.core.events import ReceiveTextEvent
from baf.core.runtime import Runtime
from baf.log.postgres import PostgresLog
from baf.log.postgres_inbox import Inbox

HERE = Path(__file__).resolve().parent
AGENT = HERE / "workers_agent.py"
SCRIPT = HERE.parent / ".ci" / "postgres"
#: Sessions answered before the clock starts, in every configuration: the clock times a warm process (its
#: statements prepared, its code paths run once), as a server that has been up for a while is.
WARM_UP = 10
#: Part 2's numbers of sessions answering at once, in one process.
CONCURRENCY = (1, 10, 50)
#: How often the end of a timed run is looked for (seconds), once the model's time has passed.
POLL = 0.002


def with_schema(dsn: str, schema: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}search_path={schema}"


async def fresh_schema(dsn: str) -> str:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(f'CREATE SCHEMA "{name}"')
    finally:
        await connection.close()
    return with_schema(dsn, name)


@dataclass
class Run:
    """One configuration's wall time and the CPU seconds spent while its clock ran (see the docstring)."""

    wall: float
    work: float  # the SQLite process, or the worker processes
    database: float | None  # the PostgreSQL server's processes; None: SQLite, or a server elsewhere
    client: float  # this process, posting the messages (0 for SQLite: it is the work)
    waited: float  # runnable but waiting for a CPU, all of the above
    began: float = 0.0  # the clock's start and stop, wall clock (for --timeline)
    ended: float = 0.0


class CPUClock:
    """CPU seconds of groups of processes between ``start()`` and ``stop()`` (``scheduled``: all threads). A
    process that ended meanwhile (a connection closed) is left out: what it spent in the window is unknown."""

    def __init__(self, **groups: list[int]) -> None:
        self.groups = groups
        self._before: dict[int, tuple[float, float]] = {}
        self.spent: dict[str, tuple[float, float]] = {}

    def start(self) -> None:
        self._before = {pid: scheduled([pid]) for pids in self.groups.values() for pid in pids}

    def stop(self) -> None:
        alive = {pid for pid in self._before if os.path.exists(f"/proc/{pid}")}
        for name, pids in self.groups.items():
            running = waiting = 0.0
            for pid in pids:
                if pid in alive:
                    now = scheduled([pid])
                    running += now[0] - self._before[pid][0]
                    waiting += now[1] - self._before[pid][1]
            self.spent[name] = (running, waiting)


async def sqlite_run(sessions: int, tool_turns: int, delay: float, folder: Path) -> Run:
    llm = BenchLLM(tool_turns, delay=delay)
    agent, platform = build_agent(f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}", llm, planning=False)
    async with agent:
        ids, warm = [f"c{i}" for i in range(sessions)], [f"w{i}" for i in range(WARM_UP)]
        await asyncio.gather(*(agent.get_or_create_session(sid, platform) for sid in warm + ids))
        await agent.wait_idle()
        await asyncio.gather(*(agent.receive_message(sid, "Please look everything up.", platform) for sid in warm))
        clock = CPUClock(work=[os.getpid()])
        clock.start()
        started = time.perf_counter()
        await asyncio.gather(*(agent.receive_message(sid, "Please look everything up.", platform) for sid in ids))
        wall = time.perf_counter() - started
        clock.stop()
        return Run(wall, clock.spent["work"][0], None, 0.0, clock.spent["work"][1])


def start_workers(
    dsn: str, count: int, tool_turns: int, delay: float, timeline: str | None = None
) -> list[subprocess.Popen[str]]:
    env = {**os.environ, "BAF_BENCH_TOOL_TURNS": str(tool_turns), "BAF_BENCH_DELAY": str(delay)}
    if timeline is not None:
        env["BAF_BENCH_TIMELINE"] = timeline
    command = [sys.executable, "-m", "baf.serve.process", "worker", str(AGENT), "--log", dsn,
               "--lease-ttl", "10", "--poll-interval", "1"]  # fmt: skip
    return [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in range(count)]


async def postgres_run(
    server: str,
    workers: int,
    sessions: int,
    tool_turns: int,
    delay: float,
    live: bool = False,
    timeline: str | None = None,
) -> Run:
    """One PostgreSQL configuration. ``live``: each session is answered once before the clock (the worker
    the rendezvous hash picks takes it over then and keeps it), so the clock times a second message to
    sessions already loaded on the worker that holds them, as the SQLite process holds its own; otherwise
    the workers take each session over (its lease, its load) after the clock. ``timeline``: a file the
    workers' model writes each call to (see ``workers_agent``)."""
    dsn = await fresh_schema(server)
    ids, warm = [f"c{i}" for i in range(sessions)], [f"w{i}" for i in range(WARM_UP)]
    await create_sessions(dsn, warm + ids)  # the tables too, before the workers start
    processes = start_workers(dsn, workers, tool_turns, delay, timeline)
    try:
        for process in processes:
            assert process.stdout is not None
            line = await asyncio.to_thread(process.stdout.readline)
            assert line.startswith("READY"), line
        async with PostgresLog(dsn, worker_id="bench-forwarder") as log:  # a worker forwarding messages
            inbox = Inbox(log)
            connection = await asyncpg.connect(dsn)
            try:
                before = warm + ids if live else warm
                await asyncio.gather(*(post(inbox, sid) for sid in before))
                await wait_for_replies(connection, len(before))
                # The server's processes as the clock starts: the workers' connections are open by now.
                database = await asyncio.to_thread(postgres_pids, dsn)
                clock = CPUClock(work=[p.pid for p in processes], database=database, client=[os.getpid()])
                clock.start()
                began = time.time()
                started = time.perf_counter()
                # All at once, as 200 clients' messages reach a platform at once (the SQLite run gathers too).
                await asyncio.gather(*(post(inbox, sid) for sid in ids))
                await wait_for_replies(connection, len(before) + len(ids), started + (tool_turns + 1) * delay)
                wall = time.perf_counter() - started
                ended = time.time()
                clock.stop()
                spent = clock.spent
                on_server = spent["database"][0] if database else None
                return Run(wall, spent["work"][0], on_server, spent["client"][0], sum(w for _, w in spent.values()),
                           began, ended)  # fmt: skip
            finally:
                await connection.close()
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            await asyncio.to_thread(process.wait)
            if process.stdout is not None:
                process.stdout.close()


async def create_sessions(dsn: str, session_ids: list[str]) -> None:
    """Start the sessions (each records its start and runs the initial state's body) before the clock, as
    the SQLite run does: what is timed is the messages, not the sessions' creation. The workers' agent, in
    this process, over the same log; the workers then take each session over from the log."""
    spec = importlib.util.spec_from_file_location("bench_workers_agent", AGENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    agent = module.agent
    await agent.start(Runtime(agent, PostgresLog(dsn)))
    try:
        await asyncio.gather(*(agent.get_or_create_session(session_id) for session_id in session_ids))
        await agent.wait_idle()
    finally:
        await agent.stop()


async def post(inbox: Inbox, session_id: str) -> None:
    event = ReceiveTextEvent(session_id, message="Please look everything up.")
    await inbox.post(session_id, {"event": event.to_data(), "text": event.text})


async def wait_for_replies(connection: asyncpg.Connection, replies: int, not_before: float = 0.0) -> None:
    """Wait until every message posted has been answered: no inbox row waits and no session has work left
    (the ``baf_work`` index, kept by every commit, is empty: each reply and its step's end are committed).
    Checked every 2 ms with two index-only reads, from ``not_before`` (``time.perf_counter``) on: none can
    have been answered before the model's time has passed, and a poll before then only takes CPU from the
    run it times."""
    await asyncio.sleep(max(0.0, not_before - time.perf_counter()))
    while True:
        await asyncio.sleep(POLL)
        done = await connection.fetchval(
            "SELECT NOT EXISTS (SELECT 1 FROM baf_work) AND NOT EXISTS (SELECT 1 FROM baf_inbox)"
        )
        if done:
            found = await connection.fetchval("SELECT count(*) FROM baf_records WHERE kind = 'reply'")
            assert found == replies, f"{found} replies for {replies} messages"
            return


def timeline_table(path: str, run: Run, turns: int, delay: float) -> Table:
    """Where each session's time went in ``run``, from the model calls its workers wrote to ``path``: the
    first call's start after the clock began, each gap between a call's return and the next call (the
    commits and the CPU between them, and the wait for the loop), each call's time beyond ``delay`` (its
    wake-up late: the loop was busy), and the last return to the clock's stop (the reply's commit, then
    the poll seeing it). p10 / p50 / p90 / max over the sessions, ms."""
    calls: dict[str, list[tuple[float, float]]] = {}
    with open(path, encoding="ascii") as lines:
        for line in lines:
            key, began, returned = line.split()
            if float(began) >= run.began:
                calls.setdefault(key, []).append((float(began), float(returned)))
    sessions = [sorted(c) for c in calls.values() if len(c) == turns]
    rows: list[tuple[str, list[float]]] = [("first model call begins", [c[0][0] - run.began for c in sessions])]
    rows += [(f"gap after call {i + 1}", [c[i + 1][0] - c[i][1] for c in sessions]) for i in range(turns - 1)]
    rows.append(("a call's time beyond the model's", [b - a - delay for c in sessions for a, b in c]))
    rows.append(("last return to the clock's stop", [run.ended - c[-1][1] for c in sessions]))
    table = Table(title=f"where the time went, {len(sessions)} sessions (ms; postgres x2, live)")
    for column in ("", "p10", "p50", "p90", "max"):
        table.add_column(column)
    for label, values in rows:
        ordered = sorted(values)
        table.add_row(label, *(f"{1e3 * ordered[int(q * (len(ordered) - 1))]:.1f}" for q in (0.1, 0.5, 0.9, 1.0)))
    return table


async def per_turn(url: str, sessions: int, rounds: int, tool_turns: int = 10) -> float:
    """Median framework µs per model turn (wall minus model time, over every turn of the round) when
    ``sessions`` sessions get a message at once (zero-latency model), over ``rounds`` rounds after one of
    warm-up. One process, one log: concurrent sessions' commits share the writer's round trips."""
    llm = BenchLLM(tool_turns)
    agent, platform = build_agent(url, llm, planning=False)
    results = []
    async with agent:
        for rep in range(rounds + 1):
            ids = [f"t{rep}-{i}" for i in range(sessions)]
            await asyncio.gather(*(agent.get_or_create_session(sid, platform) for sid in ids))
            await agent.wait_idle()
            llm.model_seconds = 0.0
            started = time.perf_counter()
            await asyncio.gather(*(agent.receive_message(sid, "Please look everything up.", platform) for sid in ids))
            if rep:  # the first warms up
                wall = time.perf_counter() - started
                results.append((wall - llm.model_seconds) / (sessions * (tool_turns + 1)))
    return median(results) * 1e6


async def run(server: str, sessions: int, reps: int, folder: Path, timeline: bool = False) -> None:
    tool_turns, delay = 5, 0.05
    ideal = (tool_turns + 1) * delay
    out = console()
    out.print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    table = Table(title=f"{sessions} sessions x {tool_turns + 1} model calls of 50 ms (ideal {ideal:.2f} s)")
    for column in ("configuration", "wall s", "x ideal", "CPU s: process(es)", "CPU s: PostgreSQL", "CPU s: poster",
                   "waited for a CPU s"):  # fmt: skip
        table.add_column(column)

    def add(label: str, run: Run) -> None:
        database = "-" if run.database is None else f"{run.database:.3f}"
        client = f"{run.client:.3f}" if run.client else "-"
        table.add_row(label, f"{run.wall:.3f}", f"{run.wall / ideal:.2f}", f"{run.work:.3f}", database, client,
                      f"{run.waited:.3f}")  # fmt: skip

    add("sqlite x1 (one process)", await sqlite_run(sessions, tool_turns, delay, folder))
    for count in (1, 2):
        add(f"postgres x{count} (taken over)", await postgres_run(server, count, sessions, tool_turns, delay))
        add(f"postgres x{count} (live)", await postgres_run(server, count, sessions, tool_turns, delay, live=True))
    out.print(table)
    if timeline:
        path = str(folder / "timeline.txt")
        traced = await postgres_run(server, 2, sessions, tool_turns, delay, live=True, timeline=path)
        out.print(f"postgres x2 (live) with the timeline: {traced.wall / ideal:.2f}x ideal")
        out.print(timeline_table(path, traced, tool_turns + 1, delay))
    turns = Table(title="framework µs per model turn (zero-latency model, 10 tool turns, median)")
    for column in ("concurrent sessions", "sqlite (normal)", "postgres", "postgres / sqlite"):
        turns.add_column(column)
    for sessions in CONCURRENCY:
        rounds = max(5, reps // sessions)
        sqlite_us = await per_turn(f"sqlite:///{folder / f'turns-{sessions}.db'}", sessions, rounds)
        postgres_us = await per_turn(await fresh_schema(server), sessions, rounds)
        label = f"{sessions}" + (" (one commit round trip per durable point)" if sessions == 1 else " (group commit)")
        turns.add_row(label, f"{sqlite_us:.0f}", f"{postgres_us:.0f}", f"{postgres_us / sqlite_us:.2f}x")
    out.print(turns)
    out.print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--timeline", action="store_true", help="one more postgres x2 live run: where the time went")
    args = parser.parse_args()
    sessions, reps = (20, 3) if args.quick else (args.sessions, args.reps)
    folder = Path(tempfile.mkdtemp(prefix="baf-bench-workers-"))
    cluster = folder / "pg"
    server = os.environ.get("BAF_BENCH_POSTGRES_DSN")
    if not server:
        started = subprocess.run(["bash", str(SCRIPT), "start", str(cluster)], capture_output=True, text=True)
        if started.returncode != 0:
            sys.exit(f"could not start PostgreSQL: {started.stderr}")
        server = started.stdout.strip()
    try:
        asyncio.run(run(server, sessions, reps, folder, args.timeline))
    finally:
        if cluster.exists():
            subprocess.run(["bash", str(SCRIPT), "stop", str(cluster)], capture_output=True, check=False)


if __name__ == "__main__":
    main()
