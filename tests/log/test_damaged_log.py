"""Real SQLite files damaged as a disk or a hand would damage them: truncated, overwritten, a flipped byte
inside a record, text that is not UTF-8, a record deleted from the middle of a session.

Each reading command (``baf sessions``, ``baf log``, ``baf replay``, ``baf export``) exits 2 with one line
naming the file (and the session and seq where it can be told); ``baf check`` reports the damage and
exits non-zero; starting an agent on the file raises a baf error naming the file.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from baf import Agent
from baf.cli import main
from baf.errors import CorruptRecordError, LogError
from baf.log import Record, RecordKind, SQLiteLog
from baf.log.projection import project
from baf.log.snapshot import seal, snapshot_data

PAGE = 4096


def turn(session_id: str, first: int, text: str) -> list[Record]:
    """A message and the step that handled it (seqs ``first`` .. ``first + 3``); ``text`` is findable in the file."""
    return [
        Record(session_id, first, RecordKind.MESSAGE_RECEIVED, {"event": {"type": "text", "text": text}, "text": text}),
        Record(session_id, first + 1, RecordKind.STEP_STARTED, {"event_seq": first}),
        Record(session_id, first + 2, RecordKind.REPLY, {"text": f"re: {text}"}),
        Record(session_id, first + 3, RecordKind.STEP_FINISHED, {"event_seq": first}),
    ]


def started(session_id: str) -> Record:
    return Record(session_id, 1, RecordKind.SESSION_STARTED, {"agent": "a", "platform": None, "initial_state": "idle"})


def initial_step(session_id: str) -> list[Record]:
    return [
        Record(session_id, 2, RecordKind.STEP_STARTED, {"event_seq": None}),
        Record(session_id, 3, RecordKind.STEP_FINISHED, {"event_seq": None}),
    ]


async def write(db: Path, sessions: int = 3, turns: int = 40) -> None:
    """A log of ``sessions`` sessions, each with ``turns`` turns whose texts are ``MARK-<session>-<turn>``."""
    async with SQLiteLog(db) as log:
        for n in range(sessions):
            session_id = f"s{n}"
            records = [started(session_id), *initial_step(session_id)]
            for t in range(turns):
                records += turn(session_id, 4 + 4 * t, f"MARK-{session_id}-{t:03d}-" + "x" * 40)
            await log.append(records)
    # Closing the last connection copied the WAL into the file: the damage below lands in the database.
    assert not os.path.exists(f"{db}-wal")  # noqa: ASYNC240 - a test's one stat


def overwrite(db: Path, marker: bytes, replacement: bytes) -> None:
    """Replace the one occurrence of ``marker`` in the file's bytes, in place, keeping its length."""
    assert len(marker) == len(replacement)
    content = db.read_bytes()
    assert content.count(marker) == 1, content.count(marker)
    with db.open("r+b") as file:
        file.seek(content.index(marker))
        file.write(replacement)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


READERS = [
    ("sessions", "{db}"),
    ("log", "{db}", "s1"),
    ("replay", "{db}", "s1"),
    ("export", "{db}", "s1", "--format", "jsonl"),
]


def reading_commands(db: Path) -> list[list[str]]:
    return [[part.format(db=db) for part in command] for command in READERS]


def assert_one_line_naming(err: str, *names: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for name in names:
        assert name in lines[0], (name, lines[0])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    asyncio.run(write(path))
    return path


def agent_on(db: Path) -> Agent:
    agent = Agent("a", log=f"sqlite:///{db}")
    idle = agent.new_state("idle", initial=True)
    idle.when_event().go_to(idle)
    return agent


# -- structural damage: SQLite itself cannot read the file ---------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
def test_structural_damage_is_one_line_naming_the_file(
    db: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    size = db.stat().st_size
    assert size > 8 * PAGE
    if damage == "truncate":
        os.truncate(db, PAGE)  # the schema page survives; every table's pages are gone
    else:
        with db.open("r+b") as file:  # every page after the schema page: garbage
            file.seek(PAGE)
            file.write(bytes((i * 37 + 11) % 256 for i in range(size - PAGE)))
    for argv in reading_commands(db):
        code, _, err = run(capsys, *argv)
        assert code == 2, (argv, err)
        assert_one_line_naming(err, str(db))
        assert "Traceback" not in err
    code, out, _ = run(capsys, "check", str(db))
    assert code != 0
    assert "damaged" in out or "malformed" in out


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
async def test_starting_an_agent_on_a_structurally_damaged_file_names_it(db: Path, damage: str) -> None:
    size = os.path.getsize(db)  # noqa: ASYNC240 - a test's one stat
    if damage == "truncate":
        os.truncate(db, PAGE)
    else:
        with open(db, "r+b") as file:  # noqa: ASYNC230 - a test damaging its file
            file.seek(PAGE)
            file.write(b"\xa5" * (size - PAGE))
    agent = agent_on(db)
    with pytest.raises(LogError) as caught:
        await agent.start()
    await agent.stop()
    assert str(db) in str(caught.value)


# -- damage inside one record: found by its checksum, its decoding, or the gap it leaves -------------


def test_a_flipped_byte_inside_a_record_is_found_by_its_checksum(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overwrite(db, b"re: MARK-s1-007-", b"re: MARK-s1-00X-")  # the reply of turn 7: seq 4 + 4 * 7 + 2
    for argv in reading_commands(db):
        code, _, err = run(capsys, *argv)
        assert code == 2, (argv, err)
        assert_one_line_naming(err, "'s1'", "seq 34", "checksum")
    code, out, _ = run(capsys, "check", str(db))
    assert code == 1
    assert "session 's1' seq 34: its checksum does not match" in out
    assert "s0" not in out and "s2" not in out  # the other sessions are sound


def test_text_that_is_not_utf8_names_session_and_seq(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overwrite(db, b"re: MARK-s1-012-", b"re: MARK-s1-\xff\xfe2-")  # the reply of turn 12: seq 54
    for argv in reading_commands(db):
        code, _, err = run(capsys, *argv)
        assert code == 2, (argv, err)
        assert_one_line_naming(err, "'s1'", "seq 54", "UTF-8")
    code, out, _ = run(capsys, "check", str(db))
    assert code == 1 and "session 's1' seq 54" in out and "UTF-8" in out


def test_a_record_deleted_from_the_middle_is_a_gap_naming_session_and_seq(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM baf_records WHERE session_id = 's1' AND seq = 20")
    connection.close()
    for argv in reading_commands(db):
        code, _, err = run(capsys, *argv)
        assert code == 2, (argv, err)
        assert_one_line_naming(err, "'s1'", "seq 20", "missing", str(db))
    code, out, _ = run(capsys, "check", str(db))
    assert code == 1
    assert "session 's1' seq 20: the record is missing: the session's records go from seq 19 to 21" in out
    assert out.count("damaged: session") == 1 and "is damaged: 1 problem found" in out


async def test_starting_an_agent_with_a_gap_in_a_session_to_resume_names_it(db: Path) -> None:
    async with SQLiteLog(db) as log:  # s1 gets a message not handled yet: a restart must load it
        await log.append(turn("s1", 164, "pending")[:1])
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM baf_records WHERE session_id = 's1' AND seq = 20")
    connection.close()
    agent = agent_on(db)
    with pytest.raises(CorruptRecordError) as caught:
        await agent.start()
    await agent.stop()
    assert (caught.value.session_id, caught.value.seq) == ("s1", 20)
    assert str(db) in str(caught.value)


def test_check_counts_one_session_and_one_record_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "one.db"

    async def write() -> None:
        async with SQLiteLog(db) as log:
            await log.append(turn("only", 1, "hello")[:1])

    asyncio.run(write())
    code, out, _ = run(capsys, "check", str(db))
    assert code == 0
    assert f"{db}: 1 session, 1 record read" in out


def test_a_read_only_check_of_a_sound_log_changes_nothing(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = db.read_bytes()
    code, out, _ = run(capsys, "check", str(db))
    assert code == 0
    assert "3 sessions, 489 records read" in out and "no damage found" in out
    assert db.read_bytes() == before


async def test_check_compares_snapshots_and_the_work_index_with_the_fold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "log.db"
    records = [started("s"), *initial_step("s"), *turn("s", 4, "hello")]
    wrong = project("s", records).to_state()
    wrong["current_state"] = "elsewhere"
    async with SQLiteLog(db) as log:
        await log.append([*records, Record("s", 8, RecordKind.SNAPSHOT, seal(wrong))])  # a valid digest
        await log.append([started("t"), *initial_step("t")])
        good = [started("u"), *initial_step("u")]
        await log.append([*good, Record("u", 4, RecordKind.SNAPSHOT, snapshot_data(project("u", good)))])
    with sqlite3.connect(db) as connection:  # the index says t has work: it has none
        status = '{"start":true,"open":null,"unhandled":[],"held":[]}'
        connection.execute("INSERT INTO baf_work VALUES ('t', ?, 1)", (status,))
    connection.close()
    code, out, _ = await asyncio.to_thread(run, capsys, "check", str(db))
    assert code == 1
    assert "session 's' seq 8: snapshot disagrees with the fold of the records before it (fields current_state)" in out
    assert "session 't': listed as having unfinished work, but its records say not" in out
    assert "'u'" not in out
