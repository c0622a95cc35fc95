"""Real worker processes with the WebSocket platform: a client connected to the worker that does not run
its session gets the session's replies from that worker; ``baf serve --workers 2`` shares one port."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases

from .helpers import FIXTURE
from .test_delivery import seqs_and_types, shown_records
from .ws_client import Client

WS_FIXTURE = FIXTURE.with_name("serve_ws_agent.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(command: Sequence[str], port: int, **extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "BAF_SERVE_PORT": str(port), "BAF_SERVE_DELAY": "0.01", **extra}
    return subprocess.Popen(list(command), stdout=subprocess.PIPE, text=True, env=env)


def worker_command(dsn: str) -> list[str]:
    return [sys.executable, "-m", "baf.serve.process", "worker", str(WS_FIXTURE), "--log", dsn,
            "--lease-ttl", "10", "--poll-interval", "1"]  # fmt: skip


async def ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30)
    assert line.startswith("READY "), line
    return line.split()[1]


async def stop(processes: Sequence[subprocess.Popen[str]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            await asyncio.to_thread(process.wait, 30)
        except subprocess.TimeoutExpired:
            process.kill()
        if process.stdout is not None:
            process.stdout.close()


async def owner_of(dsn: str, session_id: str) -> str | None:
    async with PostgresLog(dsn, worker_id="probe") as probe:
        info = await Leases(probe).owner_of(session_id)
    return None if info is None else info.owner


@pytest.mark.slow
async def test_a_client_on_the_worker_that_does_not_run_its_session_gets_it_all(postgres_dsn: str) -> None:
    port_a, port_b = free_port(), free_port()
    a, b = start(worker_command(postgres_dsn), port_a), start(worker_command(postgres_dsn), port_b)
    try:
        id_a, id_b = await ready(a), await ready(b)
        on_b = await Client.open(port_b)
        welcome = await on_b.hello()
        session_id = welcome["session_id"]
        await on_b.ask("q1")
        assert await owner_of(postgres_dsn, session_id) == id_b
        on_a = await Client.open(port_a)  # the same user, on the other worker
        assert (await on_a.hello(welcome["resume_token"]))["resumed"] is True
        history = await on_a.until("history")
        assert any(item.get("text") == "answer to q1" for item in history["items"])
        for question in ("q2", "q3"):
            await on_a.ask(question)
        await on_b.until("reply", text="answer to q3")
        expected: list[dict[str, object]] = []
        for _ in range(50):  # the turn's last records (its reasoning_finished step) follow the reply
            expected = await shown_records(postgres_dsn, session_id, after=history["last_seq"])
            if expected and expected[-1]["type"] == "reasoning_step" and len(expected) > 2:
                break
            await asyncio.sleep(0.1)
        await on_a.until_seq(int(str(expected[-1]["seq"])))
        await asyncio.sleep(0.3)  # anything delivered twice would arrive now
        await on_a.ws.close()
        assert {item["type"] for item in expected} >= {"reasoning_step", "task_list", "reply"}
        assert seqs_and_types(on_a.live()) == [(item["seq"], item["type"]) for item in expected]
        assert await owner_of(postgres_dsn, session_id) == id_b  # b ran it throughout; a only delivered
        assert id_a != id_b
        await on_b.close()
    finally:
        await stop([a, b])


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
        on_b = await Client.open(port_b)
        welcome = await on_b.hello()
        session_id = welcome["session_id"]
        await on_b.ask("q1")
        on_a = await Client.open(port_a)
        await on_a.hello(welcome["resume_token"])
        history = await on_a.until("history")
        assert [item["type"] for item in history["items"]] == ["user", "reply"]  # no step, no task list
        for question in ("q2", "q3"):
            await on_a.ask(question)  # b runs them; a delivers them from the log
        records = await shown_records(postgres_dsn, session_id, after=history["last_seq"])
        async with PostgresLog(postgres_dsn, read_only=True) as log:
            kinds = {r.kind for r in await log.read(session_id, history["last_seq"])}
        assert {"reasoning_step", "task_list"} <= kinds  # recorded ...
        await on_b.until("reply", text="answer to q3")
        await asyncio.sleep(1.5)  # past a poll: a step shown late would arrive now
        await on_a.ws.close()
        # ... and shown by neither worker: only the replies, each once, in order
        assert seqs_and_types(on_a.live()) == [(item["seq"], item["type"]) for item in records]
        assert [item["type"] for item in records] == ["reply", "reply"]
        assert {frame["type"] for frame in on_b.live()} == {"reply"}
        assert await owner_of(postgres_dsn, session_id) == id_b and id_a != id_b
        await on_b.close()
    finally:
        await stop([a, b])


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
        await stop([serve])
    assert serve.returncode == 0
