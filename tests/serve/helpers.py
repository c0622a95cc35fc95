"""Shared by the multi-worker tests: the fixture agent, two workers, worker processes, sending messages,
waiting for answers, and one user's session on two workers over WebSocket."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baf.core.agent import Agent
from baf.core.events import ReceiveTextEvent
from baf.log import Record
from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases
from baf.platforms.websocket import WebSocketPlatform, history_items
from baf.serve import Worker

from .ws_client import Client

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "serve_agent.py"


def fresh_agent() -> Agent:
    """A new instance of the fixture agent (one per worker in one process)."""
    return load_agent(FIXTURE.name)


def load_agent(name: str) -> Agent:
    """A new instance of the agent in ``tests/fixtures/<name>``."""
    spec = importlib.util.spec_from_file_location(f"serve_agent_{id(object())}", FIXTURE.with_name(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    agent: Agent = module.agent
    return agent


async def eventually(condition: Callable[[], Awaitable[bool] | bool], what: str, within: float = 60.0) -> None:
    """Wait until ``condition()`` holds, checking every 20 ms: the tests wait for the state they mean, not
    for a time. ``within`` only bounds a hung run (it is no measure): it fails saying ``what`` never came."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {within} s: {what}")
        await asyncio.sleep(0.02)


def message(session_id: str, text: str) -> dict[str, Any]:
    """``message_received`` data, as a platform's worker forwards it."""
    return {"event": ReceiveTextEvent(session_id, message=text).to_data(), "text": text}


async def wait_for_answers(dsn: str, expected: dict[str, list[str]], within: float = 60.0) -> dict[str, list[Record]]:
    """Poll the log until every session has a reply per question (for at most ``within`` seconds);
    return each session's records."""
    reader = PostgresLog(dsn, read_only=True)
    await reader.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            records = {session_id: await reader.read(session_id) for session_id in expected}
            answered = {
                session_id: [r.data.get("text") for r in rs if r.kind == "reply"] for session_id, rs in records.items()
            }
            if all(len(answered[s]) >= len(questions) for s, questions in expected.items()):
                return records
            if loop.time() > deadline:
                missing = {s: (q, answered[s]) for s, q in expected.items() if len(answered[s]) < len(q)}
                raise AssertionError(f"not answered in {within} s: {missing}")
            await asyncio.sleep(0.2)
    finally:
        await reader.close()


def assert_each_question_answered_once(records: dict[str, list[Record]], expected: dict[str, list[str]]) -> None:
    """Every question recorded once, handled in one step, answered once, in the order it was sent."""
    for session_id, questions in expected.items():
        rs = records[session_id]
        received = [r.data["text"] for r in rs if r.kind == "message_received"]
        assert received == questions, (session_id, received)
        replies = [r.data["text"] for r in rs if r.kind == "reply"]
        assert replies == [f"answer to {q}" for q in questions], (session_id, replies)
        seqs = [r.seq for r in rs]
        assert seqs == list(range(1, len(rs) + 1)), f"{session_id}: seqs have gaps or repeats"


@asynccontextmanager
async def two_workers(
    dsn: str, agents: tuple[Agent, Agent] | None = None, poll_interval: float = 1.0
) -> AsyncIterator[tuple[Worker, Worker]]:
    """Workers ``a`` and ``b`` in this process (of ``agents``, by default two of the fixture agent), started,
    stopped on the way out."""
    agent_a, agent_b = agents or (fresh_agent(), fresh_agent())
    a = Worker(agent_a, dsn, worker_id="a", lease_ttl=10, poll_interval=poll_interval)
    b = Worker(agent_b, dsn, worker_id="b", lease_ttl=10, poll_interval=poll_interval)
    await a.start()
    try:
        await b.start()
    except BaseException:
        await a.stop()
        raise
    try:
        yield a, b
    finally:
        await a.stop()
        await b.stop()


def ws_agent() -> tuple[Agent, WebSocketPlatform]:
    """A new instance of the fixture agent with the WebSocket platform, and that platform (on a port of its
    own once started: each in-process worker needs one)."""
    before = os.environ.get("BAF_SERVE_PORT")
    os.environ["BAF_SERVE_PORT"] = "0"  # read as the agent file loads; the tests after this one keep theirs
    try:
        agent = load_agent("serve_ws_agent.py")
    finally:
        if before is None:
            del os.environ["BAF_SERVE_PORT"]
        else:
            os.environ["BAF_SERVE_PORT"] = before
    platform = agent.platforms[0]
    assert isinstance(platform, WebSocketPlatform)
    return agent, platform


@asynccontextmanager
async def two_ws_workers(dsn: str) -> AsyncIterator[tuple[tuple[Worker, int], tuple[Worker, int]]]:
    """:func:`two_workers` of the WebSocket fixture agent: each worker with the port its clients connect to."""
    (agent_a, platform_a), (agent_b, platform_b) = ws_agent(), ws_agent()
    async with two_workers(dsn, (agent_a, agent_b)) as (a, b):
        yield (a, platform_a.port), (b, platform_b.port)


def free_port() -> int:
    """A TCP port nothing listens on now (for a worker process to take)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def ready(process: subprocess.Popen[str]) -> str:
    """Wait for a worker process's ``READY <worker id>`` line; return the worker id."""
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30)
    assert line.startswith("READY "), line
    return line.split()[1]


async def stop_processes(processes: Sequence[subprocess.Popen[str]], within: float = 30.0) -> None:
    """SIGTERM every process still running, wait for each (killing one that outlives ``within``)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            await asyncio.to_thread(process.wait, within)
        except subprocess.TimeoutExpired:
            process.kill()
        if process.stdout is not None:
            process.stdout.close()


async def owner_of(dsn: str, session_id: str) -> str | None:
    """The id of the worker holding the session's lease (live or not), or None."""
    async with PostgresLog(dsn, worker_id="probe") as probe:
        info = await Leases(probe).owner_of(session_id)
    return None if info is None else info.owner


async def shown_records(dsn: str, session_id: str, after: int = 0) -> list[dict[str, Any]]:
    """What the log holds for the user after ``after``, as history items (seq and type)."""
    async with PostgresLog(dsn, read_only=True) as log:
        return [item for item in history_items(await log.read(session_id, after)) if item["type"] != "user"]


async def turn_done(dsn: str, session_id: str, question: str, within: float = 30.0) -> None:
    """Wait until the log holds the whole turn answering ``question``: its reply, then the step that closes
    its reasoning (whichever worker ran it)."""
    async with PostgresLog(dsn, read_only=True) as log, asyncio.timeout(within):
        while True:
            items = history_items(await log.read(session_id))
            replies = [i for i, item in enumerate(items) if item.get("text") == f"answer to {question}"]
            if replies and any(
                item["type"] == "reasoning_step" and item["step"].get("kind") == "reasoning_finished"
                for item in items[replies[-1] :]
            ):
                return
            await asyncio.sleep(0.05)


def seqs_and_types(frames: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """``(seq, type)`` of each frame or history item: what was shown, in order."""
    return [(frame["seq"], frame["type"]) for frame in frames]


@dataclass
class TwoTabs:
    """One user's session, started by a client on the worker that runs it (``owner``) and resumed by the
    same user on another worker (``other``), which got the session's ``history`` on resuming."""

    owner: Client
    other: Client
    session_id: str
    token: str
    history: dict[str, Any]

    async def close(self) -> None:
        await self.owner.close()
        await self.other.close()


async def resumed_on_another_worker(owner_port: int, other_port: int, owner_leaves: bool = False) -> TwoTabs:
    """Open a client on the worker at ``owner_port``, ask ``q1`` there (that worker runs the session), then
    resume the session with its token on the worker at ``other_port``. With ``owner_leaves`` the first
    client closes before the resume (a page reload that lands on the other worker)."""
    owner = await Client.open(owner_port)
    welcome = await owner.hello()
    await owner.ask("q1")
    if owner_leaves:
        await owner.close()
    other = await Client.open(other_port)
    assert (await other.hello(welcome["resume_token"]))["resumed"] is True
    history = await other.until("history")
    return TwoTabs(owner, other, welcome["session_id"], welcome["resume_token"], history)


__all__ = [
    "FIXTURE",
    "TwoTabs",
    "assert_each_question_answered_once",
    "eventually",
    "free_port",
    "fresh_agent",
    "load_agent",
    "message",
    "owner_of",
    "ready",
    "resumed_on_another_worker",
    "seqs_and_types",
    "shown_records",
    "stop_processes",
    "turn_done",
    "two_workers",
    "two_ws_workers",
    "wait_for_answers",
    "ws_agent",
]


async def ready_worker_pids(serve: subprocess.Popen[str], workers: int = 2) -> list[int]:
    """The process ids of ``baf serve``'s workers, from the ``READY host:pid:random`` lines they print once
    they serve (each within 30 s)."""
    assert serve.stdout is not None
    pids = []
    for _ in range(workers):
        line = await asyncio.wait_for(asyncio.to_thread(serve.stdout.readline), 30)
        assert line.startswith("READY "), line
        pids.append(int(line.split()[1].split(":")[1]))
    return pids
