"""Reasoning-loop benchmark (issue 3): framework time per LLM turn, and 200 concurrent sessions.

Part 1, overhead per turn. A reasoning state (``new_reasoning_state``, self-loop on every event,
steps streamed to a platform that drops them) answers one message with a loop of N tool-call turns,
N = 1, 10, 50: a zero-latency model asks for one call of a trivial async tool N times, then answers.
That is N + 1 model calls; a *turn* here is one model call. For each message:

    overhead per turn = (wall time of receive_message - time inside the model) / (N + 1)

measured on a fresh session, median over ``--reps`` messages, with ``enable_task_planning`` False and
True, on the in-memory log and on the SQLite log (durability ``normal``; ``--full`` adds ``full``).
Beside it:

- persistence = SQLite overhead - memory overhead, per turn (what the log adds);
- raw = plain aiosqlite inserting that message's very rows (read back from the file) in as many
  transactions as the store committed for it, same durability, per turn, the usual way
  (``executemany`` + ``commit``); floor = the same with one multi-row ``INSERT`` per transaction;
- ratio = persistence / raw (and / floor), paired message by message, median. Targets of issue 3:
  SQLite overhead < 400 µs per turn, ratio <= 1.5.

Part 2: 200 sessions at once, each one message answered after 5 model calls (4 tool turns, then the
answer) that each sleep 50 ms. Ideal wall time 0.25 s; target within 1.3x. Sessions are created before
the clock starts.

    python bench/bench_reasoning.py            # about 15 s
    python bench/bench_reasoning.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Row,
    TimingPlatform,
    commits_of,
    console,
    fmt,
    max_position,
    median,
    percentile,
    raw_insert_seconds,
    rows_after,
)

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLM, LLMResponse, ToolCall


class BenchLLM(LLM):
    """A model that asks for ``tool_turns`` tool calls (one per turn), then answers. Stateless per
    conversation (it counts the tool results after the last user message), so sessions can share it.
    Keeps no copies of what it is sent; ``model_seconds`` sums the time spent inside it."""

    name = "bench-model"

    def __init__(self, tool_turns: int, delay: float = 0.0) -> None:
        self.tool_turns = tool_turns
        self.delay = delay
        self.model_seconds = 0.0
        self.calls = 0

    async def predict_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        started = time.perf_counter()
        self.calls += 1
        done = 0
        for message in reversed(messages):
            role = message.get("role")
            if role == "user":
                break
            if role == "tool":
                done += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if done < self.tool_turns:
            call = ToolCall(id=f"call_{done + 1}", name="lookup", arguments=f'{{"key": {done}}}')
            response = LLMResponse(text=None, tool_calls=[call])
        else:
            response = LLMResponse(text=f"The answer, after {done} lookups.")
        self.model_seconds += time.perf_counter() - started
        return response


async def lookup(key: int) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


def build_agent(log: str, llm: LLM, planning: bool) -> tuple[Agent, TimingPlatform]:
    agent = Agent("bench", log=log)
    agent.new_tool(lookup)
    state = new_reasoning_state(agent, llm, max_steps=100, enable_task_planning=planning)
    state.when_event().go_to(state)
    platform = TimingPlatform()
    agent.add_platform(platform)
    return agent, platform


@dataclass
class TurnRun:
    turns: int
    overhead_s: float  # wall - model time
    records: int
    commits: int | None
    rows: list[Row] | None = None
    raw_s: float | None = None
    floor_s: float | None = None


async def _one_message(agent: Agent, platform: TimingPlatform, llm: BenchLLM, sid: str, db: Path | None) -> TurnRun:
    """Answer one message on a fresh session; for SQLite, also read back the rows it appended."""
    await agent.get_or_create_session(sid, platform)
    await agent.wait_idle(sid)
    before = len(await agent.log.read(sid))
    commits_before = commits_of(agent.log)
    position = max_position(db) if db is not None else 0
    model_before, calls_before = llm.model_seconds, llm.calls
    gc.collect()
    started = time.perf_counter()
    await agent.receive_message(sid, "Please look everything up.", platform)
    wall = time.perf_counter() - started
    turns = llm.calls - calls_before
    assert turns == llm.tool_turns + 1, (turns, llm.tool_turns)
    assert platform.replied_at.get(sid), "no answer reached the platform"
    commits_after = commits_of(agent.log)
    records = len(await agent.log.read(sid)) - before
    commits = None if commits_before is None or commits_after is None else commits_after - commits_before
    run = TurnRun(turns, wall - (llm.model_seconds - model_before), records, commits)
    if db is not None:
        run.rows = rows_after(db, position)
        assert len(run.rows) == records, (len(run.rows), records)
    return run


async def measure_turns(
    logs: list[str], planning: bool, n: int, reps: int, warmup: int, directory: Path
) -> dict[str, list[TurnRun]]:
    """Per log kind, ``reps`` measured messages. The logs take turns message by message, and each SQLite
    message's raw insert runs right after it, so a drift in machine load hits all three alike."""
    runs: dict[str, list[TurnRun]] = {log_kind: [] for log_kind in logs}
    async with contextlib.AsyncExitStack() as stack:
        agents: dict[str, tuple[Agent, TimingPlatform, BenchLLM, Path | None]] = {}
        for log_kind in logs:
            db = None if log_kind == "memory" else directory / f"turns-{log_kind}-{time.monotonic_ns()}.db"
            url = "memory://" if db is None else f"sqlite:///{db}?durability={log_kind}"
            llm = BenchLLM(n)
            agent, platform = build_agent(url, llm, planning)
            await stack.enter_async_context(agent)
            agents[log_kind] = (agent, platform, llm, db)
        kinds = list(agents)
        for rep in range(warmup + reps):
            # Rotate the order each repetition, so no log always runs first.
            for log_kind in kinds[rep % len(kinds) :] + kinds[: rep % len(kinds)]:
                agent, platform, llm, db = agents[log_kind]
                run = await _one_message(agent, platform, llm, f"n{n}-r{rep}", db)
                if rep < warmup:
                    continue
                if run.rows is not None and run.commits:
                    run.raw_s = await raw_insert_seconds(run.rows, run.commits, log_kind, directory)
                    run.floor_s = await raw_insert_seconds(
                        run.rows, run.commits, log_kind, directory, one_statement=True
                    )
                    run.rows = None
                runs[log_kind].append(run)
    return runs


def paired_ratio(runs: list[TurnRun], memory: list[TurnRun], raw_attr: str) -> str:
    """Median over messages of (SQLite - memory) / raw, message i paired with memory message i, with the
    quartiles in brackets."""
    ratios = []
    for run, mem in zip(runs, memory, strict=True):
        raw = getattr(run, raw_attr)
        if raw:
            ratios.append((run.overhead_s - mem.overhead_s) / raw)
    if not ratios:
        return ""
    spread = f" ({percentile(ratios, 25):.1f}–{percentile(ratios, 75):.1f})" if len(ratios) > 2 else ""
    return f"{median(ratios):.2f}x{spread}"


async def concurrent_sessions(
    log_kind: str, planning: bool, sessions: int, calls: int, delay: float, directory: Path
) -> tuple[float, float, int, int | None]:
    db = directory / f"conc-{time.monotonic_ns()}.db"
    url = "memory://" if log_kind == "memory" else f"sqlite:///{db}?durability={log_kind}"
    llm = BenchLLM(calls - 1, delay=delay)
    agent, platform = build_agent(url, llm, planning)
    async with agent:
        ids = [f"c{i}" for i in range(sessions)]
        await asyncio.gather(*(agent.get_or_create_session(sid, platform) for sid in ids))
        await agent.wait_idle()
        commits_before = commits_of(agent.log)
        calls_before = llm.calls
        gc.collect()
        cpu_started = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(agent.receive_message(sid, "Please look everything up.", platform) for sid in ids))
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        assert llm.calls - calls_before == sessions * calls
        assert len(platform.replied_at) == sessions
        commits_after = commits_of(agent.log)
    commits = None if commits_before is None or commits_after is None else commits_after - commits_before
    return wall, cpu, llm.calls - calls_before, commits


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--reps", type=int, default=None, help="measured messages per cell (default 21, quick 3)")
    parser.add_argument("--full", action="store_true", help="also measure SQLite durability=full")
    args = parser.parse_args()
    reps = args.reps or (3 if args.quick else 21)
    warmup = 1 if args.quick else 2
    logs = ["memory", "normal"] + (["full"] if args.full else [])
    sizes = (1, 10, 50)
    out = console()
    out.print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    total = time.perf_counter()

    results: dict[tuple[bool, int, str], list[TurnRun]] = {}
    conc: dict[tuple[bool, str], list[tuple[float, float, int, int | None]]] = {}
    with tempfile.TemporaryDirectory(prefix="baf-bench-") as tmp:
        directory = Path(tmp)
        with out.status("measuring turns ..."):
            for planning in (False, True):
                for n in sizes:
                    cell_reps = max(3, reps // 2) if n == 50 else reps
                    measured = await measure_turns(logs, planning, n, cell_reps, warmup, directory)
                    for log_kind, runs in measured.items():
                        results[(planning, n, log_kind)] = runs
        with out.status("200 concurrent sessions ..."):
            for _ in range(1 if args.quick else 5):
                for planning in (False, True):
                    for log_kind in logs:
                        conc.setdefault((planning, log_kind), []).append(
                            await concurrent_sessions(log_kind, planning, 200, 5, 0.05, directory)
                        )

    table = Table(title="baf reasoning loop: framework time per LLM turn (zero-latency model, median)")
    for name in ("planning", "N tool turns", "model calls", "log", "µs/turn", "rec/turn", "commits/turn",
                 "persistence µs/turn", "raw µs/turn", "ratio", "floor µs/turn", "ratio/floor",
                 "< 400 µs"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("planning", "log") else "right")
    for planning in (False, True):
        for n in sizes:
            memory_runs = results[(planning, n, "memory")]
            memory = median([r.overhead_s / r.turns for r in memory_runs]) * 1e6
            for log_kind in logs:
                runs = results[(planning, n, log_kind)]
                turns = runs[0].turns
                per_turn = median([r.overhead_s / r.turns for r in runs]) * 1e6
                persist = raw = floor = None
                ratio = ratio_floor = ""
                if log_kind != "memory":
                    persist = per_turn - memory
                    raw = median([r.raw_s / r.turns for r in runs if r.raw_s is not None]) * 1e6
                    floor = median([r.floor_s / r.turns for r in runs if r.floor_s is not None]) * 1e6
                    ratio = paired_ratio(runs, memory_runs, "raw_s")
                    ratio_floor = paired_ratio(runs, memory_runs, "floor_s")
                commits = [r.commits / r.turns for r in runs if r.commits is not None]
                table.add_row(
                    str(planning) if n == sizes[0] and log_kind == "memory" else "",
                    str(n) if log_kind == "memory" else "",
                    str(turns) if log_kind == "memory" else "",
                    "memory" if log_kind == "memory" else f"sqlite {log_kind}",
                    fmt(per_turn),
                    fmt(median([r.records / r.turns for r in runs]), 1),
                    fmt(median(commits), 2) if log_kind != "memory" and commits else "-",
                    fmt(persist),
                    fmt(raw),
                    ratio or "-",
                    fmt(floor),
                    ratio_floor or "-",
                    ("yes" if per_turn < 400 else "NO") if log_kind != "memory" else "",
                )
            table.add_section()
    out.print(table)
    out.print(
        "µs/turn = (wall - model time) / model calls. persistence = SQLite µs/turn - memory µs/turn. raw = plain "
        "aiosqlite inserting the same rows in as many transactions as the store committed (executemany + commit), "
        "same durability; floor = the same with one multi-row INSERT per transaction (one round trip). ratio = "
        "median over messages of (SQLite - memory) / raw, each SQLite message paired with the memory message and "
        "the raw insert measured next to it; in brackets the quartiles (issue 3 target <= 1.5x)."
    )

    ideal = 5 * 0.05
    table2 = Table(title="200 concurrent sessions x 5 model calls of 50 ms (ideal 0.25 s; median of runs)")
    for name in ("planning", "log", "runs", "wall s", "x ideal", "CPU s", "model calls", "commits", "within 1.3x"):
        table2.add_column(name, justify="left" if name in ("planning", "log") else "right")
    for planning in (False, True):
        for log_kind in logs:
            runs2 = conc[(planning, log_kind)]
            wall = median([w for w, _, _, _ in runs2])
            commits2 = [c for _, _, _, c in runs2 if c is not None]
            table2.add_row(
                str(planning),
                "memory" if log_kind == "memory" else f"sqlite {log_kind}",
                str(len(runs2)),
                fmt(wall, 3),
                fmt(wall / ideal, 2) + "x",
                fmt(median([c for _, c, _, _ in runs2]), 3),
                str(runs2[0][2]),
                fmt(median(commits2)) if commits2 else "-",
                "yes" if wall / ideal <= 1.3 else "NO",
            )
    out.print(table2)
    out.print(
        "CPU s = process CPU time during the run (event loop plus SQLite threads): when it is close to the wall "
        "time, the run is CPU-bound, not waiting on the model."
    )
    out.print(
        f"total bench time {time.perf_counter() - total:.1f} s; load average after: "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; Python {sys.version.split()[0]}"
    )


if __name__ == "__main__":
    asyncio.run(main())
