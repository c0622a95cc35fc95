"""Sessions come back from the log: after a clean stop, and after kill -9 in the middle of work."""

from __future__ import annotations

import concurrent.futures
import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from baf import Agent, ReceiveTextEvent, Session
from baf.core.session import runtime_side
from baf.log import Record, open_log
from baf.log.projection import project
from baf.testing import RecordingPlatform

CRASH_AGENT = Path(__file__).parent.parent / "fixtures" / "crash_agent.py"


def build_agent(url: str) -> Agent:
    agent = Agent("restart", log=url)
    asking = agent.new_state("asking", initial=True)
    answered = agent.new_state("answered")

    def remember(session: Session) -> None:
        if session.event:
            session.set("name", session.event.text)
            session.reply(f"nice to meet you, {session.event.text}")

    answered.set_body(remember)
    asking.when_event().go_to(answered)
    answered.set_fallback_body(lambda s: s.reply(f"still {s.get('name')}"))
    return agent


async def test_state_variables_and_history_survive_a_restart(db_url: str) -> None:
    platform = RecordingPlatform()
    async with build_agent(db_url) as agent:
        await agent.receive_message("s", "Ada", platform)
    platform2 = RecordingPlatform()
    agent2 = build_agent(db_url)
    agent2.add_platform(platform2)
    async with agent2:
        session = await agent2.get_or_create_session("s")  # loaded from the log on first use
        assert session.current_state.name == "answered"
        assert session["name"] == "Ada"
        assert [e.text for e in session.chat_history()] == ["Ada", "nice to meet you, Ada"]
        await agent2.receive_message("s", "who am I?", platform2)
    assert platform2.replies["s"] == ["still Ada"]


def run_crash_agent(db: Path, messages: list[str], kill_after_acks: int | None) -> tuple[list[str], str]:
    """Feed messages to the crash agent; kill -9 it after some ACKs. Returns (acked, full stdout)."""
    proc = subprocess.Popen(
        [sys.executable, str(CRASH_AGENT), str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    acked: list[str] = []
    lines: list[str] = []
    for text in messages:
        proc.stdin.write(text + "\n")
    proc.stdin.flush()
    if kill_after_acks is None:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        lines = out.splitlines()
    else:
        while len(acked) < kill_after_acks:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else "agent died"
            lines.append(line.strip())
            if line.startswith("ACK "):
                acked.append(line.split(" ", 1)[1].strip())
        time.sleep(random.uniform(0, 0.05))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        rest = proc.stdout.read()
        lines += rest.splitlines()
        proc.stdin.close()
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()
    acked = [line.split(" ", 1)[1] for line in lines if line.startswith("ACK ")]
    return acked, "\n".join(lines)


async def test_kill_9_mid_conversation_loses_no_acknowledged_message(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    random.seed(7)
    sent: list[str] = []
    acked_all: list[str] = []
    for trial in range(4):
        batch = [f"m{trial}-{i}" for i in range(12)]
        sent += batch
        acked, _ = run_crash_agent(db, batch, kill_after_acks=random.randint(3, 12))
        acked_all += acked
    # Restart with no new input: it must finish whatever was recorded but not yet handled.
    _, out = run_crash_agent(db, [], kill_after_acks=None)
    final_state = next(line for line in out.splitlines() if line.startswith("STATE "))

    async with open_log(f"sqlite:///{db}") as log:
        records = await log.read("s")
    p = project("s", records)
    received = [r.data["text"] for r in records if r.kind == "message_received"]
    # Every acknowledged message is in the log, once, in the order it was sent.
    for text in acked_all:
        assert received.count(text) == 1, text
    assert received == [t for t in sent if t in received]
    # Every recorded message was handled: nothing is left unstarted, no step is left open.
    assert p.unstarted == {} and p.open_step is None
    # Each message was either counted (its step finished) or reported as interrupted by the crash.
    interrupted = {r.data["event_seq"] for r in records if r.kind == "step_finished" and r.data.get("interrupted")}
    message_seq = {r.data["text"]: r.seq for r in records if r.kind == "message_received"}
    for text, seq in message_seq.items():
        assert p.variables.get(f"seen:{text}") is True or seq in interrupted, text
    # count and seen:X are set together before any flush point, so they are durable together.
    counted = sum(1 for name in p.variables if name.startswith("seen:"))
    assert p.variables["count"] == counted
    # A step is only reported interrupted when it had started durably; otherwise it was re-run.
    started = {r.data["event_seq"] for r in records if r.kind == "step_started"}
    assert interrupted <= started
    # The state machine agrees with the fold of the log.
    _, state, count = final_state.split()
    assert state == p.current_state and int(count) == p.variables["count"]
    assert [r.seq for r in records] == list(range(1, len(records) + 1))


_STUCK_AT_START = """
import asyncio, sys
from baf import Agent
from baf.core.session import runtime_side

agent = Agent("starting", log=f"sqlite:///{sys.argv[1]}")
state = agent.new_state("idle", initial=True)

async def body(session):
    session.set("started", True)
    await runtime_side(session).commit()
    print("READY", flush=True)
    await asyncio.sleep(60)

state.set_body(body)

async def main():
    async with agent:
        await agent.get_or_create_session("s")
        await asyncio.sleep(60)

asyncio.run(main())
"""


def _kill_9_once_ready(db: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _STUCK_AT_START, str(db)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        # A bounded wait for the line (a stalled child must fail the test, not hang it).
        ready = concurrent.futures.ThreadPoolExecutor(1).submit(proc.stdout.readline)
        assert ready.result(timeout=60).strip() == "READY"
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # in every case: a failed test must not leave it holding the file
        proc.wait(timeout=30)
        proc.stdout.close()


async def test_kill_9_in_the_initial_body_closes_that_step_without_inventing_an_event(tmp_path: Path) -> None:
    """The step that ran the initial state has no event (``event_seq: null``): closing it after a crash
    must not record ``event_seq: 0`` (no record has seq 0), and replay shows it as the session start."""
    from rich.console import Console

    from baf.replay import iter_timeline, state_at
    from baf.replay.render import render_snapshot

    db = tmp_path / "log.db"
    _kill_9_once_ready(db)

    agent = Agent("starting", log=f"sqlite:///{db}")
    agent.new_state("idle", initial=True)
    async with agent:
        await agent.wait_idle()
        records = await agent.log.read("s")
    started = next(r for r in records if r.kind == "step_started")
    assert started.data == {"event_seq": None}
    error, finished = records[-2:]
    assert error.kind == "error" and error.data["interrupted_by"] == "crash" and error.data["event_seq"] is None
    assert finished.data == {"event_seq": None, "interrupted": True, "interrupted_by": "crash"}
    assert project("s", records).open_step is None
    titles = [entry.title for entry in iter_timeline(records)]
    assert any(t.startswith("step finished (session start)") and "crash" in t for t in titles), titles
    snapshot = state_at("s", records, started.seq)
    assert snapshot.projection.open_step == 0  # the fold's mark for "no event"
    console = Console(file=io.StringIO(), width=200)
    render_snapshot(console, snapshot)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "a step is running (no event: the session start or a check)" in shown and "#0" not in shown


async def test_replies_a_restart_makes_reach_a_platform_attached_later(db_url: str) -> None:
    """The platform is passed to get_or_create_session, not registered: what the restart handled in the
    background before that call is delivered to it then, in order, errors included."""
    async with build_agent(db_url) as agent:
        await agent.receive_message("s", "Ada", RecordingPlatform())
        last = (await agent.log.read("s"))[-1].seq
    # Two messages recorded by a process that died before handling them.
    async with open_log(db_url) as log:
        for offset, text in enumerate(["who am I?", "boom"]):
            event = ReceiveTextEvent("s", message=text).to_data()
            await log.append([Record("s", last + 1 + offset, "message_received", {"event": event, "text": text})])
    agent2 = build_agent(db_url)
    answered = agent2.get_state("answered")

    def fallback(session: Session) -> None:
        if session.event is not None and session.event.text == "boom":
            raise RuntimeError("boom")
        session.reply(f"still {session.get('name')}")

    answered.set_fallback_body(fallback)
    platform = RecordingPlatform()
    async with agent2:
        await agent2.wait_idle()  # handled in the background, with no platform to send to
        assert platform.events == []
        await agent2.get_or_create_session("s", platform)
        await agent2.wait_idle()
        await runtime_side(agent2.sessions["s"]).commit()  # the delivery attaching started
        assert [kind for _, kind, _ in platform.events] == ["reply", "error"]
        assert platform.replies["s"] == ["still Ada"]
        await agent2.receive_message("s", "and now?", platform)
    assert platform.replies["s"] == ["still Ada", "still Ada"]
