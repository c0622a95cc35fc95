"""A/B of ``bench_workers.py`` part 1 on PostgreSQL (worker processes) between source trees, alternating.

These machines change speed by 20-50 % from one minute to the next, so two versions measured one after
the other compare the minutes, not the versions. This runs ``postgres_run`` (200 sessions × 6 model calls
of 50 ms, posted at once to the inbox of ``--workers`` worker processes) for each tree in turn, round
after round (the order reversed every other round), in fresh processes whose ``PYTHONPATH`` is the tree,
so that both the poster and the workers import baf from it; the bench code always comes from this
checkout, so every tree runs the same workload. Per tree: each round's wall time / ideal, and the median
and minimum of it, of the workers' and the server's CPU seconds, and of the seconds waiting for a CPU
(what the machine's other work cost the round).

    git worktree add ../base main
    python bench/ab_workers.py ../base .                  # 5 rounds, two workers, 200 sessions
    python bench/ab_workers.py ../base . --rounds 8 --workers 1 --sessions 1000
    python bench/ab_workers.py ../base . --live           # the sessions live on the workers (see bench_workers)

PostgreSQL: ``BAF_BENCH_POSTGRES_DSN``, or a throwaway cluster started with ``.ci/postgres``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SCRIPT = BENCH.parent / ".ci" / "postgres"
IDEAL = 0.30

# Runs in the child: one postgres_run, printed as JSON.
_ROUND = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import bench_workers

run = asyncio.run(bench_workers.postgres_run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), 5, 0.05,
                                             live=sys.argv[5] == "live"))
print(json.dumps([run.wall, run.work, run.database, run.waited]))
"""


def run_round(tree: Path, server: str, workers: int, sessions: int, live: bool) -> list[float | None]:
    """One run in a fresh interpreter (and fresh workers) that import baf from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", _ROUND, str(BENCH), server, str(workers), str(sessions), "live" if live else "cold"],
        env=env, capture_output=True, text=True, cwd=tree, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the round failed:\n{done.stderr[-3000:]}")
    result: list[float | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (each holds a baf/ package)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--live", action="store_true", help="time a second message to sessions the workers hold")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.trees]
    server = os.environ.get("BAF_BENCH_POSTGRES_DSN")
    cluster: Path | None = None  # a throwaway cluster of this run's own (none with BAF_BENCH_POSTGRES_DSN)
    if not server:
        cluster = Path(tempfile.mkdtemp(prefix="baf-ab-workers-")) / "pg"
        started = subprocess.run(["bash", str(SCRIPT), "start", str(cluster)], capture_output=True, text=True)
        if started.returncode != 0:
            shutil.rmtree(cluster.parent, ignore_errors=True)
            sys.exit(f"could not start PostgreSQL: {started.stderr}")
        server = started.stdout.strip()
    results: dict[Path, list[list[float | None]]] = {tree: [] for tree in trees}
    try:
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for round_number in range(args.rounds):
            for tree in trees if round_number % 2 == 0 else list(reversed(trees)):
                result = run_round(tree, server, args.workers, args.sessions, args.live)
                results[tree].append(result)
                wall, work, database, waited = result
                print(f"round {round_number} {tree}: {wall / IDEAL:.2f}x ideal, CPU s workers {work:.3f} "
                      f"server {database if database is None else round(database, 3)} "
                      f"waited {waited:.3f}", flush=True)  # fmt: skip
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if cluster is not None:
            subprocess.run(["bash", str(SCRIPT), "stop", str(cluster)], capture_output=True, check=False)
            shutil.rmtree(cluster.parent, ignore_errors=True)
    first = statistics.median(r[0] or 0.0 for r in results[trees[0]])
    how = "live on" if args.live else "taken over by"
    print(f"\n{args.sessions} sessions {how} {args.workers} worker(s), {args.rounds} rounds: median (minimum)")
    for tree in trees:
        rows = results[tree]
        walls = [r[0] or 0.0 for r in rows]

        def cell(index: int, rows: list[list[float | None]] = rows) -> str:
            values = [r[index] for r in rows if r[index] is not None]
            return f"{statistics.median(values):.3f}" if values else "-"

        print(f"  {tree}: {statistics.median(walls) / IDEAL:.2f}x ({min(walls) / IDEAL:.2f}x) ideal, "
              f"ratio to the first {statistics.median(walls) / first:.3f}; CPU s workers {cell(1)}, "
              f"server {cell(2)}; waited {cell(3)}")  # fmt: skip


if __name__ == "__main__":
    main()
