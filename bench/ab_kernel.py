"""A/B of the reasoning kernel (issue 17): framework µs per model turn of the reasoning state and of
``ReAct`` as a pattern state, between source trees, alternating round by round in fresh processes.

The workload is ``bench_reasoning.py`` part 1's: one message answered after N tool turns (a zero-latency
model asks for one call of a trivial async tool per turn), then the answer (text for the reasoning
state, the ``final_answer`` tool for ReAct): N + 1 model turns. Per message::

    µs per turn = (wall time of receive_message - time inside the model) / (N + 1)

median over ``--reps`` messages (fresh sessions) after ``--warmup``. Each round runs every cell for every
tree, each tree in its own interpreter importing baf from that tree (``PYTHONPATH``); the bench code
itself comes from this checkout, so the trees run the same workload. Printed per tree and cell: the
median and the minimum over rounds, and the ratio of the medians to the first tree.

    mkdir ../base && git archive <commit> | tar -x -C ../base
    python bench/ab_kernel.py ../base .                    # 5 rounds, memory and SQLite (normal) logs
    python bench/ab_kernel.py ../base . --rounds 9 --turns 10 --log memory
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent

# Runs in the child: one round of every (engine, log) cell, printed as JSON.
_ROUND = r"""
import asyncio, gc, json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from _common import TimingPlatform
from bench_reasoning import BenchLLM, lookup
from baf import Agent
from baf.library.state.pattern_state import new_pattern_state
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse, ToolCall
from baf.reasoning.patterns import ReAct


class ReActLLM(BenchLLM):
    # The same turns; the answer is ReAct's final_answer call.
    async def predict_with_tools(self, messages, tools, parameters=None, system_message=None):
        response = await super().predict_with_tools(messages, tools, parameters, system_message)
        if response.tool_calls:
            return response
        started = time.perf_counter()
        answer = ToolCall(id="final", name="final_answer", arguments=json.dumps({"answer": response.text}))
        self.model_seconds += time.perf_counter() - started
        return LLMResponse(text=None, tool_calls=[answer])


async def cell(engine, log, turns, reps, warmup, directory):
    llm = (BenchLLM if engine == "reasoning" else ReActLLM)(turns)
    url = "memory://" if log == "memory" else f"sqlite:///{directory}/{engine}-{log}.db?durability={log}"
    agent = Agent("bench", log=url)
    agent.new_tool(lookup)
    if engine == "reasoning":
        state = new_reasoning_state(agent, llm, max_steps=turns + 5, enable_task_planning=False)
    else:
        state = new_pattern_state(agent, llm, ReAct(max_steps=turns + 5, step_timeout=None))
    state.when_event().go_to(state)
    platform = TimingPlatform()
    agent.add_platform(platform)
    per_turn = []
    async with agent:
        for rep in range(warmup + reps):
            sid = f"{engine}-{rep}"
            await agent.get_or_create_session(sid, platform)
            await agent.wait_idle(sid)
            model_before, calls_before = llm.model_seconds, llm.calls
            gc.collect()
            started = time.perf_counter()
            await agent.receive_message(sid, "Please look everything up.", platform)
            wall = time.perf_counter() - started
            calls = llm.calls - calls_before
            assert calls == turns + 1 and platform.replied_at.get(sid), (engine, calls)
            if rep >= warmup:
                per_turn.append((wall - (llm.model_seconds - model_before)) / calls * 1e6)
    per_turn.sort()
    return per_turn[len(per_turn) // 2]


async def main():
    turns, reps, warmup = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    cells = []
    with tempfile.TemporaryDirectory(prefix="baf-ab-kernel-") as tmp:
        for engine in ("reasoning", "react"):
            for log in sys.argv[2].split(","):
                cells.append([engine, log, await cell(engine, log, turns, reps, warmup, tmp)])
    print(json.dumps(cells))

asyncio.run(main())
"""


def run_round(tree: Path, logs: list[str], turns: int, reps: int, warmup: int) -> list[list[object]]:
    """One round in a fresh interpreter that imports baf from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", _ROUND, str(BENCH), ",".join(logs), str(turns), str(reps), str(warmup)],
        env=env, capture_output=True, text=True, cwd=tree, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the round failed:\n{done.stderr[-3000:]}")
    cells: list[list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (each holding a baf/ package)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per tree (default 5)")
    parser.add_argument("--turns", type=int, default=10, help="tool turns per message, N (default 10)")
    parser.add_argument("--reps", type=int, default=30, help="measured messages per cell and round (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured messages first (default 5)")
    parser.add_argument("--log", action="append", choices=("memory", "normal", "full"),
                        help="logs to run (default: memory and normal); repeat for several")  # fmt: skip
    args = parser.parse_args()
    logs = args.log or ["memory", "normal"]
    trees = [tree.resolve() for tree in args.trees]
    for tree in trees:
        if not (tree / "baf" / "__init__.py").is_file():
            parser.error(f"{tree} holds no baf package")
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results: dict[tuple[str, str, str], list[float]] = {}
    for round_ in range(1, args.rounds + 1):
        for tree in trees:
            for engine, log, micros in run_round(tree, logs, args.turns, args.reps, args.warmup):
                results.setdefault((str(tree), str(engine), str(log)), []).append(float(micros))  # type: ignore[arg-type]
        print(f"round {round_}/{args.rounds} done", file=sys.stderr, flush=True)
    first = str(trees[0])
    print(f"N = {args.turns} tool turns + the answer; µs of framework time per model turn")
    print(f"{'tree':40} {'engine':9} {'log':7} {'median':>8} {'min':>8} {'vs first':>8}")
    for (tree, engine, log), values in sorted(results.items(), key=lambda item: (item[0][1], item[0][2])):
        base = statistics.median(results[(first, engine, log)])
        med = statistics.median(values)
        print(f"{tree[-40:]:40} {engine:9} {log:7} {med:8.1f} {min(values):8.1f} {med / base:8.2f}")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
