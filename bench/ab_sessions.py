"""A/B of the 200-session run (``bench_reasoning.py`` part 2) between source trees, alternating.

These machines change speed by 20-50 % from one minute to the next, so two versions measured one after
the other compare the minutes, not the versions. This runs each tree's ``concurrent_sessions`` in turn,
round after round, in fresh processes (``PYTHONPATH`` set to the tree), and prints per tree the median
and minimum of wall time / ideal and of CPU seconds. The bench code itself always comes from this
checkout, so both trees run the same workload.

    git worktree add ../base main
    python bench/ab_sessions.py ../base .                 # 6 rounds, SQLite normal, planning off and on
    python bench/ab_sessions.py ../base . --rounds 10 --log memory --log normal
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

# Runs in the child: one round of every (planning, log) cell, printed as JSON.
_ROUND = """
import asyncio, json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import bench_reasoning

async def main():
    cells = []
    with tempfile.TemporaryDirectory(prefix="baf-ab-") as tmp:
        for planning in (False, True):
            for log in sys.argv[2].split(","):
                run = bench_reasoning.concurrent_sessions(log, planning, 200, 5, 0.05, Path(tmp))
                wall, cpu, _, commits = await run
                cells.append([planning, log, wall / 0.25, cpu, commits])
    print(json.dumps(cells))

asyncio.run(main())
"""


def run_round(tree: Path, logs: list[str]) -> list[list[object]]:
    """One round in a fresh interpreter that imports baf from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", _ROUND, str(BENCH), ",".join(logs)],
        env=env, capture_output=True, text=True, cwd=tree, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the round failed:\n{done.stderr[-3000:]}")
    cells: list[list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (each holding a baf/ package)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per tree (default 6)")
    parser.add_argument("--log", action="append", choices=("memory", "normal", "full"),
                        help="logs to run (default: normal); repeat for several")  # fmt: skip
    args = parser.parse_args()
    logs = args.log or ["normal"]
    trees = [tree.resolve() for tree in args.trees]
    for tree in trees:
        if not (tree / "baf" / "__init__.py").is_file():
            parser.error(f"{tree} holds no baf package")
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results: dict[tuple[str, bool, str], list[tuple[float, float]]] = {}
    for round_ in range(1, args.rounds + 1):
        for tree in trees:
            for planning, log, ratio, cpu, _ in run_round(tree, logs):
                results.setdefault((str(tree), bool(planning), str(log)), []).append((float(ratio), float(cpu)))
        print(f"round {round_}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'tree':40} {'log':7} {'planning':8} {'x ideal med':>11} {'min':>6} {'CPU s med':>9}")
    for (tree, planning, log), runs in sorted(results.items(), key=lambda item: (item[0][2], item[0][1], item[0][0])):
        ratios, cpus = [r for r, _ in runs], [c for _, c in runs]
        print(f"{tree[-40:]:40} {log:7} {planning!s:8} {statistics.median(ratios):11.2f} {min(ratios):6.2f} "
              f"{statistics.median(cpus):9.3f}")  # fmt: skip
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
