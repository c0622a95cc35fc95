"""A/B of the reasoning kernel's per-turn cost in CPU instructions, between source trees (issue 17).

Wall-clock A/Bs (``ab_kernel.py``) on a shared 2-core machine move by ±5 % from one run to the next, more
than the differences they are after. Instructions executed do not depend on the load: this script runs
``ab_kernel.py``'s workload (one message answered after N tool turns, then the answer; the reasoning
state and ``ReAct`` as a pattern state, memory log) under ``valgrind --tool=cachegrind --cache-sim=no``
twice per tree and engine, with ``--warmup`` and with ``--warmup + --messages`` messages, and prints

    instructions per turn = (Ir(more messages) - Ir(fewer messages)) / (messages × (N + 1))

which leaves out start-up and imports. Runs repeat to within ~0.1 % (``PYTHONHASHSEED=0``); each takes
about a minute (valgrind runs Python ~50× slower). Instructions are not time (cache misses, branch
mispredictions), so confirm a large difference with ``ab_kernel.py``.

``--log sqlite`` runs on a SQLite log (a file per run, durability ``normal``) instead of the memory log:
the per-record work of a durable store (row checks, checksums, the writer) is then counted too; its
figures move more between runs than the memory log's (the writer thread's timing).

``--secret`` sets a made-up ``*_API_KEY`` variable for every run: the agent then has a secret to redact,
as any agent started with a model's key in its environment does (nothing in the workload holds it).

Before counting, each tree runs the workload once more, outside valgrind, on a SQLite log, and the stored
records (session, seq, kind, version, data text; ``latency_ms`` masked, it is a clock reading) must be
byte for byte those of the first tree: a change that makes a turn cheaper must not change what it records.

    mkdir ../base && git archive <commit> | tar -x -C ../base
    python bench/ab_instructions.py ../base .              # both engines
    python bench/ab_instructions.py ../base . --engine reasoning --messages 20
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent

# Runs in the child: MESSAGES messages on fresh sessions, nothing printed.
_WORKLOAD = r"""
import asyncio, json, sys
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
        answer = ToolCall(id="final", name="final_answer", arguments=json.dumps({"answer": response.text}))
        return LLMResponse(text=None, tool_calls=[answer])


async def main(engine, turns, messages):
    llm = (BenchLLM if engine == "reasoning" else ReActLLM)(turns)
    agent = Agent("bench", log=sys.argv[5] if len(sys.argv) > 5 else "memory://")
    agent.new_tool(lookup)
    if engine == "reasoning":
        state = new_reasoning_state(agent, llm, max_steps=turns + 5, enable_task_planning=False)
    else:
        state = new_pattern_state(agent, llm, ReAct(max_steps=turns + 5, step_timeout=None))
    state.when_event().go_to(state)
    platform = TimingPlatform()
    agent.add_platform(platform)
    async with agent:
        for number in range(messages):
            await agent.receive_message(f"{engine}-{number}", "Please look everything up.", platform)
    assert llm.calls == messages * (turns + 1), llm.calls

asyncio.run(main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""


def recorded(tree: Path, engine: str, turns: int, messages: int, folder: Path) -> list[tuple[object, ...]]:
    """The records a run of the workload with ``tree``'s baf stores in a SQLite log, as stored."""
    db = folder / f"{engine}-{tree.name}-{abs(hash(tree))}.db"
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _WORKLOAD, str(BENCH), engine, str(turns), str(messages), f"sqlite:///{db}"],
        env=env, capture_output=True, text=True, cwd=tree, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree} ({engine}, SQLite log) failed:\n{done.stderr[-3000:]}")
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT session_id, seq, kind, version, data FROM baf_records ORDER BY session_id, seq"
        ).fetchall()
    return [(*row[:4], _LATENCY.sub(r"\1", row[4])) for row in rows]


_LATENCY = re.compile(r'("latency_ms":)[-+.\deE]+')


def check_logs(trees: list[Path], engines: list[str], turns: int) -> None:
    """Exit unless every tree records the same bytes as the first, for every engine."""
    with tempfile.TemporaryDirectory() as folder:
        for engine in engines:
            first = recorded(trees[0], engine, turns, 2, Path(folder))
            for tree in trees[1:]:
                other = recorded(tree, engine, turns, 2, Path(folder))
                if other != first:
                    diff = next((a, b) for a, b in itertools.zip_longest(first, other) if a != b)
                    raise SystemExit(f"{tree} records other bytes than {trees[0]} ({engine}): first difference\n"
                                     f"  {diff[0]}\n  {diff[1]}")  # fmt: skip
    print(f"logs: the {len(trees)} trees record the same bytes ({', '.join(engines)})")


def instructions(tree: Path, engine: str, turns: int, messages: int, log: str) -> int:
    """Instructions valgrind counts for a whole run of ``messages`` messages with ``tree``'s baf."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as folder:
        url = "memory://" if log == "memory" else f"sqlite:///{Path(folder) / 'ab.db'}"
        done = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
             sys.executable, "-c", _WORKLOAD, str(BENCH), engine, str(turns), str(messages), url],
            env=env, capture_output=True, text=True, cwd=tree, timeout=3600,
        )  # fmt: skip
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{tree} ({engine}, {messages} messages) failed:\n{done.stderr[-3000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (each holding a baf/ package)")
    parser.add_argument("--engine", action="append", choices=("reasoning", "react"),
                        help="engines to run (default both); repeat for several")  # fmt: skip
    parser.add_argument("--turns", type=int, default=10, help="tool turns per message, N (default 10)")
    parser.add_argument("--messages", type=int, default=40, help="measured messages (default 40)")
    parser.add_argument("--warmup", type=int, default=3, help="messages in the run subtracted (default 3)")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at once (default 2)")
    parser.add_argument("--log", choices=("memory", "sqlite"), default="memory", help="the log (default memory)")
    parser.add_argument("--secret", action="store_true", help="run with a secret to redact (see above)")
    args = parser.parse_args()
    if args.secret:
        os.environ["BAF_BENCH_MADE_UP_API_KEY"] = "made-up-bench-value-not-a-key"
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    trees = [tree.resolve() for tree in args.trees]
    for tree in trees:
        if not (tree / "baf" / "__init__.py").is_file():
            parser.error(f"{tree} holds no baf package")
    engines = args.engine or ["reasoning", "react"]
    check_logs(trees, engines, args.turns)
    runs = [(tree, engine, count) for tree in trees for engine in engines
            for count in (args.warmup, args.warmup + args.messages)]  # fmt: skip
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(zip(runs, pool.map(lambda run: instructions(run[0], run[1], args.turns, run[2], args.log), runs),
                          strict=True))  # fmt: skip
    turns = args.messages * (args.turns + 1)
    print(f"N = {args.turns} tool turns + the answer; {args.messages} messages; {args.log} log; "
          f"{'a secret set; ' if args.secret else ''}instructions per model turn")  # fmt: skip
    print(f"{'tree':40} {'engine':9} {'per turn':>10} {'vs first':>8}")
    for engine in engines:
        first = None
        for tree in trees:
            per_turn = (
                counts[(tree, engine, args.warmup + args.messages)] - counts[(tree, engine, args.warmup)]
            ) / turns
            first = first or per_turn
            print(f"{str(tree)[-40:]:40} {engine:9} {per_turn:10,.0f} {per_turn / first:8.3f}")


if __name__ == "__main__":
    main()
