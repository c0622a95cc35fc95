"""A record whose JSON is valid but whose fields are not what its kind needs (a hand-edited or damaged
log) is corrupt: it fails with ``CorruptRecordError`` naming session and seq, not a bare ``KeyError``
and not a silently wrong state."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from baf_test_helpers import baf

from baf import Agent, ReceiveTextEvent, Session
from baf.cli import main
from baf.core.session import runtime_side
from baf.errors import CorruptRecordError
from baf.log import open_log


async def _write_log(db: Path) -> None:
    agent = Agent("g", log=f"sqlite:///{db}")
    idle = agent.new_state("idle", initial=True)
    talk = agent.new_state("talk")

    def body(session: Session) -> None:
        session.set("n", session.get("n", 0) + 1)
        session.reply(f"hi {session.get('n')}")

    talk.set_body(body)
    idle.when_event(ReceiveTextEvent).go_to(talk)
    talk.go_to(idle)
    async with agent:
        await agent.receive_message("s1", "hello")
        await agent.receive_message("s2", "other")


def _seq_of(db: Path, kind: str) -> int:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT seq FROM baf_records WHERE session_id = 's1' AND kind = ? ORDER BY seq LIMIT 1", (kind,)
        ).fetchone()
    return int(row[0])


def _set_data(db: Path, seq: int, data: str) -> None:
    with sqlite3.connect(db) as conn:
        # Without its checksum (as a row written before schema 4), so the fold's own checks are what is tested.
        conn.execute(
            "UPDATE baf_records SET data = ?, checksum = NULL WHERE session_id = 's1' AND seq = ?", (data, seq)
        )


@pytest.mark.parametrize(
    ("kind", "data", "reason"),
    [
        ("transition", '{"source": "idle"}', "transition record: dest should be a state name, found missing"),
        ("transition", '{"source": "idle", "dest": 7}', "dest should be a state name, found int 7"),
        ("message_received", '{"text": "hello"}', "message_received record: event should be an object"),
        ("variable_set", '{"name": 3, "value": 1}', "variable_set record: name should be text, found int 3"),
        ("variable_set", '{"name": "n"}', "variable_set record: value should be present, found missing"),
        ("reply", '{"text": ["x"]}', "reply record: text should be text, found list"),
        ("step_started", '{"event_seq": "abc"}', "step_started record: event_seq should be a seq or null"),
        ("session_started", '{"agent": "g"}', "session_started record: initial_state should be a state name"),
    ],
)
def test_a_record_of_the_wrong_shape_is_corrupt_naming_session_and_seq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, data: str, reason: str
) -> None:
    db = tmp_path / "log.db"
    asyncio.run(_write_log(db))
    seq = _seq_of(db, kind)
    _set_data(db, seq, data)

    async def read_and_restart() -> None:
        async with open_log(f"sqlite:///{db}?read_only=true") as log:
            with pytest.raises(CorruptRecordError) as caught:
                await log.project("s1")
            assert (caught.value.session_id, caught.value.seq) == ("s1", seq)
            assert reason in str(caught.value)
            assert (await log.project("s2")).history[-1].text == "hi 1"  # the other session reads as before
        # An agent does not load a session it cannot fold: loudly, naming the record. (Start-up touches
        # only sessions with unfinished work; s1 is loaded on its first use.)
        agent = Agent("g", log=f"sqlite:///{db}")
        agent.new_state("idle", initial=True)
        agent.new_state("talk")
        async with agent:
            with pytest.raises(CorruptRecordError) as caught:
                await agent.get_or_create_session("s1")
            assert (caught.value.session_id, caught.value.seq) == ("s1", seq)
            assert "s1" not in agent.sessions

    asyncio.run(read_and_restart())
    # The CLI says so in one line, naming session and seq, instead of a bare "'dest'" or a traceback.
    assert main(["replay", str(db), "s1", "--at", str(seq)]) == 2
    err = capsys.readouterr().err
    assert f"corrupt record in session 's1' at seq {seq}" in err and reason in err


def test_message_text_that_is_not_a_string_in_an_older_log_is_shown_as_text(tmp_path: Path) -> None:
    # Older baf recorded whatever an event's text was: such a log still opens, the text shown as text.
    db = tmp_path / "log.db"
    asyncio.run(_write_log(db))
    _set_data(db, _seq_of(db, "message_received"), '{"event": {"type": "text"}, "text": 5}')

    async def read() -> None:
        async with open_log(f"sqlite:///{db}?read_only=true") as log:
            history = (await log.project("s1")).history
            assert [(e.role, e.text) for e in history] == [("user", "5"), ("assistant", "hi 1")]

    asyncio.run(read())


async def test_a_str_subclass_is_text_to_the_fold() -> None:
    # State names and variable names may be StrEnum members: recorded (as their text), folded, restarted.
    import enum

    class Name(enum.StrEnum):
        IDLE = "idle"
        COUNT = "count"

    agent = Agent("g", log="memory://")
    idle = agent.new_state(Name.IDLE, initial=True)
    idle.set_body(lambda session: session.set(Name.COUNT, 1))
    idle.when_event().go_to(idle)
    async with agent:
        session = await agent.receive_message("s", "hello")
        assert session.current_state.name == "idle" and session.get("count") == 1
        assert runtime_side(session).projection.errors == 0


async def test_an_event_whose_text_is_not_a_string_is_refused_before_it_is_recorded() -> None:
    agent = Agent("g", log="memory://")
    agent.new_state("idle", initial=True)
    async with agent:
        with pytest.raises(ValueError, match="text must be a string or None"):
            await agent.receive_event(ReceiveTextEvent("s", message=5))  # type: ignore[arg-type]
        assert not [r for r in await agent.log.read("s") if r.kind == "message_received"]


@pytest.mark.parametrize("command", ["sessions", "replay"])
@pytest.mark.parametrize("data", ["{bad json", '{"source": "idle"}'])
def test_a_session_listing_shows_the_readable_sessions_and_names_the_unreadable_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, data: str
) -> None:
    db = tmp_path / "log.db"
    asyncio.run(_write_log(db))
    seq = _seq_of(db, "transition")
    _set_data(db, seq, data)
    assert main([command, str(db)]) == 2  # the log is not sound: a script must notice
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert any("s2" in line and "idle" in line for line in lines), out  # the other session is listed
    assert any("s1" in line and "unreadable" in line for line in lines), out
    assert f"baf {command}: corrupt record in session 's1' at seq {seq}" in " ".join(err.split())


async def test_a_record_the_fold_refuses_at_write_time_takes_no_seq() -> None:
    # Written by code (session.record), a reply without its text is refused at once, and the session
    # goes on without a gap in its seqs.
    agent = Agent("g", log="memory://")
    agent.new_state("idle", initial=True)
    async with agent:
        session = await agent.get_or_create_session("s")
        await agent.wait_idle()
        last = runtime_side(session).projection.last_seq
        with pytest.raises(CorruptRecordError, match="reply record: text should be text, found missing"):
            session.record("reply", {"format": "json"})
        assert runtime_side(session).projection.last_seq == last
        assert session.record("note", {"ok": True}).seq == last + 1
        await runtime_side(session).commit()
        assert [r.seq for r in await agent.log.read("s")] == list(range(1, last + 2))


def test_a_lone_surrogate_in_a_records_json_is_corrupt_naming_session_and_seq(tmp_path: Path) -> None:
    # JSON escapes can spell a lone surrogate, which no baf writer stores (it is not Unicode) but a tool or
    # an edit can: reading it must be a one-line CorruptRecordError, not a traceback mid-export (exit 0,
    # the output cut short) or an encoding error from the terminal.
    db = tmp_path / "s.db"
    asyncio.run(_write_log(db))
    seq = _seq_of(db, "reply")
    _set_data(db, seq, '{"text": "hi \\ud800 there"}')

    async def read() -> None:
        async with open_log(f"sqlite:///{db}", read_only=True) as log:
            await log.read("s1")

    with pytest.raises(CorruptRecordError, match=rf"session 's1' at seq {seq}.*surrogate"):
        asyncio.run(read())
    for command in (["log", "s.db", "s1"], ["replay", "s.db", "s1"], ["export", "--format", "otel", "s.db", "s1"],
                    ["export", "s.db", "s1"]):  # fmt: skip
        done = baf(*command, cwd=tmp_path)
        assert done.returncode == 2, (command, done.stdout[-300:], done.stderr)
        assert "Traceback" not in done.stderr
        assert f"session 's1' at seq {seq}" in done.stderr and "surrogate" in done.stderr, (command, done.stderr)
    checked = baf("check", "s.db", cwd=tmp_path)
    assert checked.returncode == 1 and f"seq {seq}" in checked.stdout and "surrogate" in checked.stdout
