"""Sessions are a cache over the log: loaded on first use, dropped when idle, never dropped with work;
start-up touches only the sessions with unfinished work; long sessions load from a snapshot."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path

import pytest

from baf import Agent, ReceiveTextEvent, Runtime, Session
from baf.errors import LogClosedError
from baf.log import MemoryLog, Record, open_log
from baf.log.projection import project
from baf.log.record import RecordKind
from baf.log.sqlite import SQLiteLog


def counter(log: str = "memory://") -> Agent:
    """Counts the messages of each session and replies with the count and the text."""
    agent = Agent("counter", log=log)
    idle = agent.new_state("idle", initial=True)

    def count(session: Session) -> None:
        if session.event is not None:
            session["n"] = session.get("n", 0) + 1
            session["seen"] = [*session.get("seen", []), session.event.text]
            session.reply(f"{session['n']}: {session.event.text}")

    idle.set_body(count)
    idle.when_event().go_to(idle)
    return agent


async def replies(log: MemoryLog | SQLiteLog, session_id: str) -> list[str]:
    return [r.data["text"] for r in await log.read(session_id) if r.kind == "reply"]


async def until(condition: object, what: str) -> None:
    """Wait (up to 5 s) until ``condition()`` holds: eviction by idle time is a timer, not a poll here."""
    for _ in range(500):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


# -- bounds ---------------------------------------------------------------------------------------


async def test_idle_sessions_beyond_the_count_bound_are_dropped_and_reloaded_intact() -> None:
    log = MemoryLog()
    runtime = Runtime(counter(), log, max_sessions=2)
    await runtime.start()
    try:
        for round_ in range(3):
            for n in range(5):
                await runtime.receive_message(f"s{n}", f"r{round_}")
                assert len(runtime.sessions) <= 2
        assert list(runtime.sessions) == ["s3", "s4"]  # the most recently used stay
        for n in range(5):
            assert await replies(log, f"s{n}") == ["1: r0", "2: r1", "3: r2"]  # each reload went on from the log
            session = await runtime.get_or_create(f"s{n}")
            assert session.get("seen") == ["r0", "r1", "r2"]
    finally:
        await runtime.stop()


async def test_sessions_unused_for_idle_seconds_are_dropped() -> None:
    runtime = Runtime(counter(), MemoryLog(), idle_seconds=0.05)
    await runtime.start()
    try:
        for n in range(3):
            await runtime.receive_message(f"s{n}", "hi")
        await until(lambda: len(runtime.sessions) == 0, "the idle sessions were dropped")
        session = await runtime.get_or_create("s1")
        assert session.get("n") == 1
    finally:
        await runtime.stop()


async def test_a_session_with_queued_or_running_work_is_never_dropped() -> None:
    agent = Agent("slow", log="memory://")
    idle = agent.new_state("idle", initial=True)
    gate = asyncio.Event()

    async def wait_for_gate(session: Session) -> None:
        if session.event is not None:
            if session.id == "busy":
                await gate.wait()
            session.reply(f"done {session.event.text}")

    idle.set_body(wait_for_gate)
    idle.when_event().go_to(idle)
    log = MemoryLog()
    runtime = Runtime(agent, log, max_sessions=0, idle_seconds=0.01)  # drop everything at rest, at once
    await runtime.start()
    try:
        first = await runtime.receive(ReceiveTextEvent("busy", message="a"))
        second = await runtime.receive(ReceiveTextEvent("busy", message="b"))
        for n in range(3):  # other sessions come and go meanwhile, and the timer fires many times
            await runtime.receive_message(f"other{n}", "x")
        await asyncio.sleep(0.1)
        assert list(runtime.sessions) == ["busy"]  # running one step, another queued
        gate.set()
        await first
        await second
        await until(lambda: "busy" not in runtime.sessions, "the session at rest was dropped")
        assert await replies(log, "busy") == ["done a", "done b"]
    finally:
        await runtime.stop()


async def test_a_session_let_go_is_dropped_once_at_rest_and_comes_back_intact() -> None:
    agent = Agent("slow", log="memory://")
    idle = agent.new_state("idle", initial=True)
    gate = asyncio.Event()

    async def wait_for_gate(session: Session) -> None:
        if session.event is not None:
            if session.event.text == "slow":
                await gate.wait()
            session["n"] = session.get("n", 0) + 1
            session.reply(f"done {session.event.text}")

    idle.set_body(wait_for_gate)
    idle.when_event().go_to(idle)
    log = MemoryLog()
    runtime = Runtime(agent, log)  # the default bounds would keep both for minutes
    await runtime.start()
    try:
        await runtime.receive_message("rest", "a")
        runtime.let_go("rest")  # at rest: dropped at once
        assert "rest" not in runtime.sessions
        slow = await runtime.receive(ReceiveTextEvent("busy", message="slow"))
        await asyncio.sleep(0.05)
        runtime.let_go("busy")  # in a step: kept until it ends
        assert "busy" in runtime.sessions
        gate.set()
        await slow
        await until(lambda: "busy" not in runtime.sessions, "the session was dropped at the end of its step")
        runtime.let_go("never-loaded")  # nothing to drop
        assert (await runtime.receive_message("busy", "b")).get("n") == 2  # loaded again from the log
        assert "busy" in runtime.sessions  # let go once: not again at the end of later steps
        assert await replies(log, "busy") == ["done slow", "done b"]
    finally:
        await runtime.stop()


async def test_a_caller_holding_a_dropped_session_is_told_clearly() -> None:
    runtime = Runtime(counter(), MemoryLog(), max_sessions=0)
    await runtime.start()
    try:
        held = await runtime.get_or_create("s")
        await runtime.wait_idle()
        await runtime.receive_message("t", "hi")  # s, at rest, is dropped to keep the bound
        assert "s" not in runtime.sessions
        with pytest.raises(LogClosedError, match="dropped from memory while idle; get it again"):
            held.set("x", 1)
        again = await runtime.get_or_create("s")
        again.set("x", 1)  # a session loaded again takes writes
        await runtime.wait_idle()
    finally:
        await runtime.stop()


# -- races ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_session_dropped_while_messages_for_it_arrive_loses_nothing_and_keeps_their_order(
    tmp_path: Path, store: str
) -> None:
    log = MemoryLog() if store == "memory" else SQLiteLog(tmp_path / "cache.db")
    # Dropped whenever at rest: every gap between messages is a chance to be dropped and reloaded.
    runtime = Runtime(counter(), log, max_sessions=0, idle_seconds=0.001)
    await runtime.start()
    rng = random.Random(7)
    sent: list[str] = []
    try:
        pending = []
        for n in range(60):
            text = f"m{n}"
            sent.append(text)
            pending.append(await runtime.receive(ReceiveTextEvent("s", message=text)))
            if rng.random() < 0.5:
                await asyncio.sleep(rng.choice([0, 0.002, 0.01]))  # sometimes at rest (dropped) before the next
            if rng.random() < 0.2:
                await runtime.receive_message(f"other{n}", "x")  # others push s out of the cache
        await asyncio.gather(*pending)
        await runtime.wait_idle()
        assert await replies(log, "s") == [f"{n + 1}: {text}" for n, text in enumerate(sent)]
        records = await log.read("s")
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        assert not [r for r in records if r.kind == "error"]
        handled = [r.data["event_seq"] for r in records if r.kind == "step_started" and r.data["event_seq"]]
        received = [r.seq for r in records if r.kind == "message_received"]
        assert handled == received  # each message handled once, in the order it was recorded
    finally:
        await runtime.stop()


def unfinished_log(path: Path) -> None:
    """A log where s0..s2 each have a message recorded and not handled (the process died), and f0..f9
    are finished."""

    async def write() -> None:
        agent = counter(f"sqlite:///{path}")
        async with agent:
            for n in range(10):
                await agent.receive_message(f"f{n}", "done")
            for n in range(3):
                await agent.receive_message(f"s{n}", "first")
        async with SQLiteLog(path) as log:
            for n in range(3):
                last = (await log.read(f"s{n}"))[-1]
                data = {"event": {"type": "text", "message": "second"}, "text": "second"}
                await log.append([Record(f"s{n}", last.seq + 1, RecordKind.MESSAGE_RECEIVED, data)])

    asyncio.run(write())


async def test_eviction_racing_a_restart_recovery_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "crashed.db"
    await asyncio.to_thread(unfinished_log, path)
    log = SQLiteLog(path)
    runtime = Runtime(counter(), log, max_sessions=1, idle_seconds=0.001)
    await runtime.start()  # recovery queued for s0..s2; each may be dropped as soon as it is at rest
    try:
        late = [await runtime.receive(ReceiveTextEvent(f"s{n}", message="third")) for n in range(3)]
        await asyncio.gather(*late)
        await runtime.wait_idle()
        for n in range(3):
            assert await replies(log, f"s{n}") == ["1: first", "2: second", "3: third"]
        for n in range(10):
            assert await replies(log, f"f{n}") == ["1: done"]  # untouched
    finally:
        await runtime.stop()


# -- start-up -------------------------------------------------------------------------------------


class CountingLog(MemoryLog):
    """A MemoryLog that counts which sessions the runtime reads, and whether it listed them all."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []
        self.listed_all = False

    async def sessions(self) -> list[str]:
        self.listed_all = True
        return await super().sessions()

    async def read_for_load(self, session_id: str) -> list[Record]:
        self.loaded.append(session_id)
        return await super().read_for_load(session_id)


def finished_session(session_id: str, ts: float) -> list[Record]:
    return [
        Record(session_id, 1, "session_started", {"agent": "counter", "platform": None, "initial_state": "idle"}, ts),
        Record(session_id, 2, "step_started", {"event_seq": None}, ts),
        Record(session_id, 3, "step_finished", {"event_seq": None}, ts),
        Record(session_id, 4, "message_received", {"event": {"type": "text", "message": "hi"}, "text": "hi"}, ts),
        Record(session_id, 5, "step_started", {"event_seq": 4}, ts),
        Record(session_id, 6, "reply", {"text": "1: hi"}, ts),
    ]


async def test_start_up_resumes_exactly_the_sessions_with_open_steps(tmp_path: Path) -> None:
    log = CountingLog()
    now = time.time()
    batch: list[Record] = []
    open_ones = {"open-17", "open-2500", "open-4999"}
    for n in range(5000):
        session_id = f"open-{n}" if f"open-{n}" in open_ones else f"done-{n}"
        records = finished_session(session_id, now)
        if session_id not in open_ones:
            records.append(Record(session_id, 7, "step_finished", {"event_seq": 4}, now))
        batch += records
    await log.append(batch)
    runtime = Runtime(counter(), log)
    await runtime.start()
    try:
        await runtime.wait_idle()
        assert sorted(log.loaded) == sorted(open_ones)
        assert not log.listed_all  # start-up never lists every session
        for session_id in open_ones:
            last = (await log.read(session_id))[-1]
            assert last.kind == "step_finished" and last.data["interrupted_by"] == "crash"
        assert len(await log.read("done-18")) == 7
        assert await log.unfinished_sessions() == []
    finally:
        await runtime.stop()


# -- snapshots ------------------------------------------------------------------------------------


def branching_agent(log: str) -> Agent:
    """States, variables set and deleted, replies, a fallback: enough for the fold to have work."""
    agent = Agent("brancher", log=log, snapshot_every=7)
    idle = agent.new_state("idle", initial=True)
    busy = agent.new_state("busy")

    def enter(session: Session) -> None:
        if session.event is not None:
            session["count"] = session.get("count", 0) + 1
            session["last"] = {"text": session.event.text, "n": session["count"]}
            if session["count"] % 3 == 0:
                session.delete("last")
            session.reply(f"busy with {session.event.text}")

    def leave(session: Session) -> None:
        session.reply(f"idle after {session.get('count')}")

    busy.set_body(enter)
    idle.set_body(leave)
    idle.when_event().go_to(busy)
    busy.when_event().go_to(idle)
    return agent


async def test_every_session_of_a_real_run_folds_the_same_with_and_without_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    agent = branching_agent(f"sqlite:///{path}")
    async with agent:
        for turn in range(9):
            for n in range(4):
                await agent.receive_message(f"s{n}", f"t{turn}")
    async with open_log(f"sqlite:///{path}") as log:
        sessions = await log.sessions()
        assert len(sessions) == 4
        for session_id in sessions:
            records = await log.read(session_id)
            snapshots = [r for r in records if r.kind == RecordKind.SNAPSHOT]
            assert len(snapshots) >= 3  # snapshot_every=7: the run wrote several
            without = project(session_id, records, snapshots=False).to_state()
            through = project(session_id, records).to_state()  # checks each snapshot against the fold
            tail = await log.read_for_load(session_id)
            assert tail[0].kind == RecordKind.SNAPSHOT and tail[0].seq == snapshots[-1].seq
            from_snapshot = project(session_id, tail).to_state()
            assert without == through == from_snapshot
    # And the runtime loads them that way and goes on where they were.
    again = branching_agent(f"sqlite:///{path}")
    async with again:
        session = await again.receive_message("s2", "more")
        assert session.get("count") == 5 and session.current_state.name == "idle"  # its 10th message: back


async def test_a_session_whose_latest_snapshot_is_refused_is_loaded_from_its_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bad.db"
    agent = branching_agent(f"sqlite:///{path}")
    async with agent:
        for turn in range(6):
            await agent.receive_message("s", f"t{turn}")
    async with SQLiteLog(path) as log:  # a snapshot that does not hold what its digest says, appended last
        records = await log.read("s")
        state = project("s", records).to_state()
        wrong = {**state, "variables": {"count": 99}}
        data = {"format": 1, "state": wrong, "digest": "0" * 64}
        await log.append([Record("s", records[-1].seq + 1, RecordKind.SNAPSHOT, data, time.time())])
    again = branching_agent(f"sqlite:///{path}")
    with caplog.at_level(logging.ERROR, logger="baf"):
        async with again:
            session = await again.get_or_create_session("s")
            assert session.get("count") == 3  # busy after messages 1, 3 and 5: from the records
    assert f"at seq {records[-1].seq + 1}" in caplog.text and "rebuilding session 's'" in caplog.text


async def test_a_snapshot_is_written_only_between_steps_and_only_when_due() -> None:
    log = MemoryLog()
    runtime = Runtime(counter(), log, snapshot_every=20)
    await runtime.start()
    try:
        for n in range(12):
            await runtime.receive_message("s", f"m{n}")
        records = await log.read("s")
        seqs = [r.seq for r in records if r.kind == RecordKind.SNAPSHOT]
        assert seqs, "a snapshot was due"
        gaps = [b - a for a, b in zip([0, *seqs], seqs, strict=False)]
        assert all(gap > 20 for gap in gaps)
        for seq in seqs:
            before = records[seq - 2]
            assert before.kind == "step_finished"  # never inside a step
    finally:
        await runtime.stop()
    never = MemoryLog()
    off = Runtime(counter(), never, snapshot_every=None)
    await off.start()
    for n in range(12):
        await off.receive_message("s", f"m{n}")
    await off.stop()
    await never.start()
    assert RecordKind.SNAPSHOT not in {r.kind for r in await never.read("s")}
