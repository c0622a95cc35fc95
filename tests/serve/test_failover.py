"""Real worker processes (``python -m baf.serve.process worker``) on one PostgreSQL log: a worker killed
with kill -9 while its sessions are mid-turn; the other takes them over. No message is lost or handled
twice, and no model call whose answer was recorded is made again."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from baf.log.postgres import PostgresLog
from baf.log.postgres_inbox import Inbox
from baf.log.postgres_leases import Leases

from .helpers import FIXTURE, assert_each_question_answered_once, message, ready, stop_processes, wait_for_answers


def start_worker(dsn: str, calls: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "BAF_SERVE_CALLS": str(calls), "BAF_SERVE_DELAY": "0.1"}
    return subprocess.Popen(
        [sys.executable, "-m", "baf.serve.process", "worker", str(FIXTURE), "--log", dsn,
         "--lease-ttl", "3", "--poll-interval", "1"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def callers(calls: Path) -> set[str]:
    """The pids of the workers that made a model call (the fixture agent notes each in ``calls``)."""
    return {line.split()[0] for line in calls.read_text().splitlines()} if calls.exists() else set()


async def busiest_owner_mid_run(dsn: str, calls: Path, pids: dict[str, int], within: float = 60.0) -> str:
    """The worker that owns the most sessions with unfinished work, once it owns at least five such sessions,
    one of them with a model answer recorded, and it has made a model call itself (a worker that took a
    burst of sessions may not have reached their model calls yet: its kill would test nothing)."""
    connection = await asyncpg.connect(dsn)
    try:
        deadline = asyncio.get_running_loop().time() + within
        while asyncio.get_running_loop().time() < deadline:
            row = await connection.fetchrow(
                "SELECT l.owner, count(*) FROM baf_work w JOIN baf_leases l USING (session_id) "
                "WHERE w.unfinished AND l.expires_at > now() GROUP BY l.owner "
                "HAVING bool_or(EXISTS (SELECT 1 FROM baf_records r WHERE r.session_id = w.session_id "
                "AND r.kind = 'llm_response')) ORDER BY count(*) DESC LIMIT 1"
            )
            if row is not None and row[1] >= 5:
                if str(pids[row[0]]) in callers(calls):
                    return str(row[0])
            await asyncio.sleep(0.01)
    finally:
        await connection.close()
    raise AssertionError("no worker was ever in the middle of five sessions")


@pytest.mark.slow
async def test_kill_9_of_a_worker_mid_run_loses_and_repeats_nothing(postgres_dsn: str, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    workers = [start_worker(postgres_dsn, calls) for _ in range(2)]
    try:
        ids = [await ready(worker) for worker in workers]
        expected = {f"s{i}": [f"s{i}-q{j}" for j in range(2)] for i in range(100)}  # 100 sessions in flight
        async with PostgresLog(postgres_dsn, worker_id="forwarder") as log:  # a platform's worker elsewhere
            inbox = Inbox(log)
            for j in range(2):
                for session_id, questions in expected.items():
                    await inbox.post(session_id, message(session_id, questions[j]))
        # Kill the worker holding the most sessions in the middle of a turn (unfinished work, an answer
        # already recorded somewhere), however fast the workers go.
        pids = {worker_id: worker.pid for worker_id, worker in zip(ids, workers, strict=True)}
        victim_index = ids.index(await busiest_owner_mid_run(postgres_dsn, calls, pids))
        victim, survivor_id = workers[victim_index], ids[1 - victim_index]
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait, 10)
        records = await wait_for_answers(postgres_dsn, expected, within=90)
        assert_each_question_answered_once(records, expected)
        # The killed worker had sessions, which the other took over (their epochs went up) ...
        async with PostgresLog(postgres_dsn, worker_id="probe") as probe:
            leases = Leases(probe)
            infos = [await leases.owner_of(session_id) for session_id in expected]
        taken = [info for info in infos if info is not None and info.epoch >= 2]
        assert taken, "no session was taken over"
        assert all(info.owner == survivor_id for info in taken)
        # (a session the victim had finished before the kill keeps its dead lease: nothing needed it)
        lines = [line.split() for line in calls.read_text().splitlines()]
        victim_pid = str(victim.pid)
        assert any(pid == victim_pid for pid, _, _ in lines), "the killed worker handled nothing"
        # ... and no model call whose answer was recorded was made again: a (question, step) was asked
        # twice only when the kill came before its answer was recorded, and then once by each worker.
        asked = collections.Counter((question, step) for _, question, step in lines)
        for (question, step), count in asked.items():
            assert count <= 2, (question, step, count)
            if count == 2:
                pids = {pid for pid, q, s in lines if (q, s) == (question, step)}
                assert victim_pid in pids and len(pids) == 2, (question, step, pids)
        for session_id, rs in records.items():
            responses = [r for r in rs if r.kind == "llm_response"]
            assert len(responses) == 2 * len(expected[session_id]), (session_id, len(responses))
        assert ids[0] != ids[1]
    finally:
        await stop_processes(workers, within=20)
