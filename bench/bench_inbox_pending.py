"""The inbox backlog read (``Inbox.pending``): a session with a long backlog, before and after (issue 13).

A worker reads each session's waiting messages 100 at a time, several sessions in one statement. Before,
that statement numbered every waiting row of the sessions with a window function and kept the first 100
(``WINDOW`` below, kept here for the comparison): its cost grew with the backlog. Now it reads each
session's first rows through the ``(session_id, id)`` index and stops at the limit (``LATERAL ... LIMIT``,
``baf.log.postgres_inbox``). Both statements run here in one run, alternating, over the same table:

- ``backlog alone``: the one session with ``--backlog`` rows waiting (default 200,000);
- ``backlog + 19``: that session and 19 others with 10 rows each, in one statement (a burst);
- ``20 light``: the 19 light sessions and one with no mail (the common case: no backlog anywhere).

Each figure is the median (and minimum) ms of ``--reps`` executions on one connection, the two statements
taking turns; ``Inbox.pending`` of the backlog session is timed too (the store's own path, coalesced).

    python bench/bench_inbox_pending.py                # ~20 s with a throwaway cluster
    python bench/bench_inbox_pending.py --backlog 50000 --reps 50

PostgreSQL: ``BAF_BENCH_POSTGRES_DSN``, or a throwaway cluster started with ``.ci/postgres``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg

from baf.log.postgres import PostgresLog
from baf.log.postgres_inbox import _PENDING_LIMIT, _PENDING_MANY, Inbox

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "postgres"

# The statement before: every waiting row of the sessions numbered, the first _PENDING_LIMIT kept.
WINDOW = """
SELECT session_id, id, payload FROM (
    SELECT session_id, id, payload, row_number() OVER (PARTITION BY session_id ORDER BY id) AS n
    FROM baf_inbox WHERE session_id = ANY($1::text[])
) AS waiting WHERE n <= $2 ORDER BY session_id, id
"""

PAYLOAD = '{"event": {"type": "text", "message": "hello"}, "text": "hello"}'


async def fill(dsn: str, backlog: int) -> None:
    """The backlog session's rows, then 19 light sessions' 10 rows each, all waiting."""
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            "INSERT INTO baf_inbox (session_id, payload) SELECT 'backlog', $1 FROM generate_series(1, $2)",
            PAYLOAD,
            backlog,
        )
        await connection.execute(
            "INSERT INTO baf_inbox (session_id, payload) "
            "SELECT 'light-' || s, $1 FROM generate_series(1, 19) AS s, generate_series(1, 10)",
            PAYLOAD,
        )
        await connection.execute("ANALYZE baf_inbox")
    finally:
        await connection.close()


def by_session(rows: list[tuple[str, int, str]]) -> dict[str, list[tuple[int, str]]]:
    """Each session's rows in the order read (the sessions' order differs between the two statements)."""
    found: dict[str, list[tuple[int, str]]] = {}
    for session_id, row_id, payload in rows:
        found.setdefault(session_id, []).append((row_id, payload))
    return found


async def timed(
    connection: asyncpg.Connection, statement: str, sessions: list[str]
) -> tuple[float, list[tuple[str, int, str]]]:
    started = time.perf_counter()
    rows = await connection.fetch(statement, sessions, _PENDING_LIMIT)
    return (time.perf_counter() - started) * 1000, [(row[0], row[1], row[2]) for row in rows]


async def run(server: str, backlog: int, reps: int) -> None:
    schema = f"bench_inbox_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(server)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    dsn = f"{server}{'&' if '?' in server else '?'}search_path={schema}"
    light = [f"light-{i}" for i in range(1, 20)]
    cases = {"backlog alone": ["backlog"], "backlog + 19": ["backlog", *light], "20 light": [*light, "no-mail"]}
    try:
        async with PostgresLog(dsn, worker_id="bench") as log:
            await fill(dsn, backlog)
            print(f"load average before: {os.getloadavg()[0]:.2f}; backlog {backlog:,} rows; {reps} reps each")
            print(f"{'case':<16} {'window ms (min)':>18} {'lateral ms (min)':>18} {'window / lateral':>17}")
            async with log.connection() as connection:
                for name, sessions in cases.items():
                    before: list[float] = []
                    after: list[float] = []
                    for rep in range(reps + 2):
                        order = (WINDOW, _PENDING_MANY) if rep % 2 == 0 else (_PENDING_MANY, WINDOW)
                        results = {}
                        for statement in order:
                            ms, rows = await timed(connection, statement, sessions)
                            results[statement] = rows
                            if rep >= 2:  # the first two warm the plans and the cache
                                (before if statement is WINDOW else after).append(ms)
                        assert by_session(results[WINDOW]) == by_session(results[_PENDING_MANY]), "they disagree"
                    b, a = statistics.median(before), statistics.median(after)
                    print(f"{name:<16} {b:>10.2f} ({min(before):6.2f}) {a:>10.2f} ({min(after):6.2f}) {b / a:>16.1f}×")
            inbox = Inbox(log)
            spent = []
            for _ in range(reps):
                started = time.perf_counter()
                waiting = await inbox.pending("backlog")
                spent.append((time.perf_counter() - started) * 1000)
            assert len(waiting) == _PENDING_LIMIT
            print(f"Inbox.pending('backlog'): median {statistics.median(spent):.2f} ms (min {min(spent):.2f})")
            print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backlog", type=int, default=200_000, help="rows waiting for the backlog session")
    parser.add_argument("--reps", type=int, default=30, help="executions of each statement per case")
    args = parser.parse_args()
    server = os.environ.get("BAF_BENCH_POSTGRES_DSN")
    folder = None
    if not server:
        folder = Path(tempfile.mkdtemp(prefix="baf-bench-inbox-"))
        started = subprocess.run(["bash", str(SCRIPT), "start", str(folder / "pg")], capture_output=True, text=True)
        if started.returncode != 0:
            sys.exit(f"could not start PostgreSQL: {started.stderr[-2000:]}")
        server = started.stdout.strip().splitlines()[-1]
    try:
        asyncio.run(run(server, args.backlog, args.reps))
    finally:
        if folder is not None:
            subprocess.run(["bash", str(SCRIPT), "stop", str(folder / "pg")], capture_output=True, check=False)


if __name__ == "__main__":
    main()
