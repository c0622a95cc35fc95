"""Real worker processes with the WebSocket platform: a client connected to the worker that does not run
its session gets the session's replies from that worker; ``baf serve --workers 2`` shares one port."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from baf.log.postgres import PostgresLog

from .helpers import (
    FIXTURE,
    free_port,
    owner_of,
    ready,
    resumed_on_another_worker,
    seqs_and_types,
    shown_records,
    stop_processes,
    turn_done,
)
from .ws_client import Client

WS_FIXTURE = FIXTURE.with_name("serve_ws_agent.py")


def start(command: Sequence[str], port: int, **extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "BAF_SERVE_PORT": str(port), "BAF_SERVE_DELAY": "0.01", **extra}
    return subprocess.Popen(list(command), stdout=subprocess.PIPE, text=True, env=env)


def worker_command(dsn: str) -> list[str]:
    return [sys.executable, "-m", "baf.serve.process", "worker", str(WS_FIXTURE), "--log", dsn,
            "--lease-ttl", "10", "--poll-interval", "1"]  # fmt: skip


@pytest.mark.slow
async def test_a_client_on_the_worker_that_does_not_run_its_session_gets_it_all(postgres_dsn: str) -> None:
    port_a, port_b = free_port(), free_port()
    a, b = start(worker_command(postgres_dsn), port_a), start(worker_command(postgres_dsn), port_b)
    try:
        id_a, id_b = await ready(a), await ready(b)
        # the same user on the other worker
        tabs = await resumed_on_another_worker(port_b, port_a)
        on_a, session_id, history = tabs.other, tabs.session_id, tabs.history
        assert await owner_of(postgres_dsn, session_id) == id_b
        assert any(item.get("text") == "answer to q1" for item in history["items"])
        # Delivery keeps log order: a record of q2 or q3 shown twice would come before q4's, waited for here
        for question in ("q2", "q3", "q4"):
            await on_a.ask(question)
        await tabs.owner.until("reply", text="answer to q4")
        await turn_done(postgres_dsn, session_id, "q4")
        expected = await shown_records(postgres_dsn, session_id, after=history["last_seq"])
        await on_a.until_seq(expected[-1]["seq"])
        assert {item["type"] for item in expected} >= {"reasoning_step", "task_list", "reply"}
        assert seqs_and_types(on_a.live()) == [(item["seq"], item["type"]) for item in expected]
        assert await owner_of(postgres_dsn, session_id) == id_b  # b ran it throughout; a only delivered
        assert id_a != id_b
        await tabs.close()
    finally:
        await stop_processes([a, b])


@pytest.mark.slow
async def test_a_follower_shows_only_what_the_owner_shows_for_steps_not_streamed(postgres_dsn: str) -> None:
    """The agent's reasoning state is built with ``stream_steps=False``: its steps and task lists are
    recorded but never shown, on the worker that runs it or on the one that follows it."""
    port_a, port_b = free_port(), free_port()
    quiet = {"BAF_SERVE_STREAM_STEPS": "0"}
    a = start(worker_command(postgres_dsn), port_a, **quiet)
    b = start(worker_command(postgres_dsn), port_b, **quiet)
    try:
        id_a, id_b = await ready(a), await ready(b)
        tabs = await resumed_on_another_worker(port_b, port_a)
        on_b, on_a, session_id, history = tabs.owner, tabs.other, tabs.session_id, tabs.history
        assert [item["type"] for item in history["items"]] == ["user", "reply"]  # no step, no task list
        for question in ("q2", "q3"):
            await on_a.ask(question)  # b runs them; a delivers them from the log
        async with PostgresLog(postgres_dsn, read_only=True) as log:
            kinds = {r.kind for r in await log.read(session_id, history["last_seq"])}
        assert {"reasoning_step", "task_list"} <= kinds  # recorded ...
        # Delivery keeps log order: a step of q2 or q3 shown late would come before q4's reply
        await on_a.ask("q4")
        await on_b.until("reply", text="answer to q4")
        records = await shown_records(postgres_dsn, session_id, after=history["last_seq"])
        # ... and shown by neither worker: only the replies, each once, in order
        assert seqs_and_types(on_a.live()) == [(item["seq"], item["type"]) for item in records]
        assert [item["type"] for item in records] == ["reply", "reply", "reply"]
        assert {frame["type"] for frame in on_b.live()} == {"reply"}
        assert await owner_of(postgres_dsn, session_id) == id_b and id_a != id_b
        await tabs.close()
    finally:
        await stop_processes([a, b])


@pytest.mark.slow
async def test_baf_serve_workers_share_one_port_and_each_session_works(postgres_dsn: str, tmp_path: Path) -> None:
    port = free_port()
    serve = start([sys.executable, "-m", "baf.cli", "serve", str(WS_FIXTURE), "--log", postgres_dsn,
                   "--workers", "2", "--lease-ttl", "10", "--poll-interval", "1"], port)  # fmt: skip
    try:
        ids = {await ready(serve), await ready(serve)}
        assert len(ids) == 2

        async def converse(i: int) -> str:
            client = await Client.open(port)
            session_id = str((await client.hello())["session_id"])
            for j in range(2):
                await client.ask(f"c{i}-q{j}", within=60)
            await client.close()
            return session_id

        sessions = await asyncio.gather(*(converse(i) for i in range(24)))
        owners = {await owner_of(postgres_dsn, session_id) for session_id in sessions}
        assert owners == ids  # the kernel spread the connections over both workers, on one port
    finally:
        await stop_processes([serve])
    assert serve.returncode == 0
