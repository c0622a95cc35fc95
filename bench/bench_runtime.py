"""Runtime benchmark (issue 2): the engine step alone, no LLM.

An agent with two states: ``start`` (initial, no body) and ``echo``, whose body replies ``"ok"``; every
message takes ``echo -> echo``. Each message therefore writes ``message_received``, ``step_started``,
``transition``, ``reply`` and ``step_finished``.

Workloads: one session sending messages one after another (each ``receive_message`` awaited), and
1,000 sessions each sending a few messages, all sessions at once (``asyncio.gather``). Each runs on the
in-memory log and on the SQLite log (durability ``normal`` and ``full``), with an async body and with a
sync body (which runs in the agent's thread pool).

Per run the script reports messages/s, p50/p99 latency (``receive_message`` called -> the reply reaches
the platform), records per message and per second, the store's commits, and for SQLite:

- log cost: (SQLite wall time - memory wall time) / messages, what persistence adds per message;
- raw: plain aiosqlite inserting the very rows of the run (read back from the file) in as many
  transactions as the store committed, same durability, the usual way (``executemany`` + ``commit``);
  floor: the same, one multi-row ``INSERT`` per transaction (one round trip to aiosqlite's thread);
- ratio = log cost / raw (and / floor), per repetition (each SQLite run paired with the memory run
  of the same repetition), median (target of issue 2: <= 2);
- store replay: ``SQLiteLog.append`` alone storing the same records with the same number of commits.

Every figure is the median of ``--reps`` repetitions (memory and SQLite runs interleaved, in an order
rotated each repetition).

    python bench/bench_runtime.py            # full run, about 90 s
    python bench/bench_runtime.py --quick    # smaller, for a smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    TimingPlatform,
    commits_of,
    console,
    fmt,
    max_position,
    median,
    percentile,
    raw_insert_seconds,
    rows_after,
    store_replay_seconds,
)

from baf import Agent


@dataclass
class Run:
    """One measured run of one workload on one log."""

    seconds: float
    cpu_seconds: float
    messages: int
    latencies: list[float]
    records: int
    commits: int | None
    raw_seconds: float | None = None
    floor_seconds: float | None = None
    replay_seconds: float | None = None


@dataclass
class Cell:
    """The repetitions of one (workload, log) pair."""

    workload: str
    log: str
    runs: list[Run] = field(default_factory=list)

    def med(self, attr: str) -> float:
        values = [getattr(run, attr) for run in self.runs if getattr(run, attr) is not None]
        return median(values)


def build_agent(log: str, sync_body: bool) -> tuple[Agent, TimingPlatform]:
    agent = Agent("bench", log=log)
    start = agent.new_state("start", initial=True)
    echo = agent.new_state("echo")
    if sync_body:

        def body(session):  # type: ignore[no-untyped-def]
            session.reply("ok")

        echo.set_body(body)
    else:

        async def abody(session):  # type: ignore[no-untyped-def]
            session.reply("ok")

        echo.set_body(abody)
    start.when_event().go_to(echo)
    echo.when_event().go_to(echo)
    platform = TimingPlatform()
    agent.add_platform(platform)
    return agent, platform


async def count_records(agent: Agent, ids: list[str]) -> int:
    return sum([len(await agent.log.read(sid)) for sid in ids])


async def run_once(log_kind: str, sync_body: bool, sessions: int, per_session: int, directory: Path, raw: bool) -> Run:
    db = directory / f"run-{time.monotonic_ns()}.db"
    url = "memory://" if log_kind == "memory" else f"sqlite:///{db}?durability={log_kind}"
    agent, platform = build_agent(url, sync_body)
    ids = [f"s{i}" for i in range(sessions)]
    latencies: list[float] = []
    async with agent:
        await asyncio.gather(*(agent.get_or_create_session(sid, platform) for sid in ids))
        # Warm-up: the first message takes start -> echo and warms the caches; not measured.
        await asyncio.gather(*(agent.receive_message(sid, "warm-up", platform) for sid in ids))
        await agent.wait_idle()
        records_before = await count_records(agent, ids) if log_kind == "memory" else 0
        commits_before = commits_of(agent.log)
        position = max_position(db) if log_kind != "memory" else 0

        async def converse(sid: str) -> None:
            for _ in range(per_session):
                sent = time.perf_counter()
                await agent.receive_message(sid, "hello", platform)
                latencies.append(platform.replied_at[sid] - sent)

        gc.collect()
        cpu_started = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(converse(sid) for sid in ids))
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
        commits_after = commits_of(agent.log)
        records = await count_records(agent, ids) - records_before if log_kind == "memory" else 0
    commits = None if commits_before is None or commits_after is None else commits_after - commits_before
    result = Run(seconds, cpu_seconds, sessions * per_session, latencies, records, commits)
    if log_kind != "memory":
        rows = rows_after(db, position)
        result.records = len(rows)
        if raw and commits is not None:
            result.raw_seconds = await raw_insert_seconds(rows, commits, log_kind, directory)
            result.floor_seconds = await raw_insert_seconds(rows, commits, log_kind, directory, one_statement=True)
            result.replay_seconds = await store_replay_seconds(rows, commits, log_kind, directory)
    return result


def paired_ratio(runs: list[Run], memory: list[Run], raw_attr: str) -> tuple[float, str]:
    """Median over repetitions of (SQLite - memory) / raw per message, run i paired with memory run i;
    and the min-max range as text."""
    ratios = []
    for run, mem in zip(runs, memory, strict=True):
        raw = getattr(run, raw_attr)
        if raw:
            ratios.append((run.seconds / run.messages - mem.seconds / mem.messages) / (raw / run.messages))
    spread = f" ({min(ratios):.1f}–{max(ratios):.1f})" if len(ratios) > 1 else ""
    return median(ratios), spread


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer messages and repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per cell (default 3, quick 1)")
    parser.add_argument("--no-full", action="store_true", help="skip durability=full")
    args = parser.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    seq_messages = 300 if args.quick else 1000
    full_seq_messages = 100 if args.quick else 300  # every message pays two fsyncs
    many_sessions, per_session = (200, 3) if args.quick else (1000, 3)

    out = console()
    logs = ["memory", "normal"] + ([] if args.no_full else ["full"])
    workloads: list[tuple[str, bool, int, int]] = []
    for sync_body in (False, True):
        label = "sync body" if sync_body else "async body"
        workloads.append((f"{label}, 1 session, sequential", sync_body, 1, seq_messages))
        workloads.append((f"{label}, {many_sessions} sessions x {per_session}, gather", sync_body, many_sessions,
                          per_session))  # fmt: skip

    cells: dict[tuple[str, str], Cell] = {}
    out.print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    total = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="baf-bench-") as tmp:
        directory = Path(tmp)
        for workload, sync_body, sessions, per in workloads:
            for rep in range(reps):
                # durability=full adds little to a sync body with many sessions (group commit) and
                # costs ~20 s: measured for the async body only.
                kinds = [k for k in logs if not (k == "full" and sync_body and sessions > 1)]
                # Rotate the order each repetition, so no log always runs first (warm or cold).
                for log_kind in kinds[rep % len(kinds) :] + kinds[: rep % len(kinds)]:
                    messages = full_seq_messages if (log_kind == "full" and sessions == 1) else per
                    cell = cells.setdefault((workload, log_kind), Cell(workload, log_kind))
                    with out.status(f"{workload} / {log_kind} ..."):
                        cell.runs.append(await run_once(log_kind, sync_body, sessions, messages, directory, raw=True))

    table = Table(title=f"baf runtime: a body that replies, no LLM (median of {reps} runs)", show_lines=False)
    columns = ("workload", "log", "msgs", "msg/s", "CPU µs/msg", "p50 ms", "p99 ms", "rec/msg", "records/s",
               "commits", "log cost µs/msg", "raw µs/msg", "ratio", "floor µs/msg", "ratio/floor",
               "replay µs/msg")  # fmt: skip
    for name in columns:
        table.add_column(name, justify="left" if name in ("workload", "log") else "right")
    for workload, _, _, _ in workloads:
        memory = cells[(workload, "memory")]
        mem_us_per_msg = memory.med("seconds") / memory.runs[0].messages * 1e6
        for log_kind in logs:
            if (workload, log_kind) not in cells:
                continue
            cell = cells[(workload, log_kind)]
            messages = cell.runs[0].messages
            seconds = cell.med("seconds")
            lat = [x for run in cell.runs for x in run.latencies]
            log_label = "memory" if log_kind == "memory" else f"sqlite {log_kind}"
            cost = raw = ratio = floor = ratio_floor = replay = None
            spread = spread_floor = ""
            if log_kind != "memory":
                cost = seconds / messages * 1e6 - mem_us_per_msg
                raw = cell.med("raw_seconds") / messages * 1e6
                replay = cell.med("replay_seconds") / messages * 1e6
                floor = cell.med("floor_seconds") / messages * 1e6
                ratio, spread = paired_ratio(cell.runs, memory.runs, "raw_seconds")
                ratio_floor, spread_floor = paired_ratio(cell.runs, memory.runs, "floor_seconds")
            commits = cell.med("commits")
            table.add_row(
                workload if log_kind == "memory" else "",
                log_label,
                str(messages),
                fmt(messages / seconds),
                fmt(cell.med("cpu_seconds") / messages * 1e6),
                fmt(percentile(lat, 50) * 1e3, 2),
                fmt(percentile(lat, 99) * 1e3, 2),
                fmt(cell.med("records") / messages, 1),
                fmt(cell.med("records") / seconds),
                fmt(commits) if log_kind != "memory" else "-",
                fmt(cost),
                fmt(raw),
                fmt(ratio, 2) + ("x" + spread if ratio is not None else ""),
                fmt(floor),
                fmt(ratio_floor, 2) + ("x" + spread_floor if ratio_floor is not None else ""),
                fmt(replay),
            )
        table.add_section()
    out.print(table)
    out.print(
        "CPU = process CPU time (event loop, worker and SQLite threads) per message. "
        "log cost = (SQLite wall - memory wall) / messages. raw = plain aiosqlite inserting the same rows "
        "in as many transactions as the store committed (executemany + commit), same durability, measured right "
        "after the run; floor = the same with one multi-row INSERT per transaction (one round trip). ratio = "
        "median over repetitions of (SQLite - memory) / raw, per message, each SQLite run paired with the memory "
        "run of the same repetition, in brackets min-max (issue 2 target: <= 2x). With many sessions the writer works "
        "while the event loop does, so the log cost can be far below raw, even negative. replay = SQLiteLog.append "
        "alone, same records, same commits (includes JSON encoding)."
    )
    out.print(
        f"total bench time {time.perf_counter() - total:.1f} s; load average after: "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; Python {sys.version.split()[0]}"
    )


if __name__ == "__main__":
    asyncio.run(main())
