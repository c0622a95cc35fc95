"""``baf sessions`` on a real SQLite log, run as the real command: ids never wrapped at any width, the whole
table (nothing squeezed or dropped) when the output is a file or a pipe, ``--plain`` and ``--json`` for
scripts; and ``baf log``'s kinds kept on their line in a narrow terminal, one record a line to a file."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from baf_test_helpers import baf
from rich.cells import cell_len

from baf import Agent

IDS = [
    "terminal",
    "ws-Jq3vK9xR2mPzL8tY4nB7cWd1",
    "telegram-123456789",
    "a2a-0f8e2c1b-9d7a-4e3f-8c2b-1a0d9e8f7c6b",
    "a-session-id-a-user-chose-with-many-words-in-it-to-be-long",
]


@pytest.fixture
async def log_file(tmp_path: Path) -> Path:
    agent = Agent("assistant-with-a-long-name", log=f"sqlite:///{tmp_path / 'agent.db'}")
    idle = agent.new_state("idle", initial=True)
    idle.set_body(lambda session: session.reply("hi") if session.event is not None else None)
    idle.when_event().go_to(idle)
    async with agent:
        for number, session_id in enumerate(IDS):
            for _ in range(number + 1):
                await agent.receive_message(session_id, "hello")
    return tmp_path / "agent.db"


def _rows(output: str) -> dict[str, str]:
    """Each session id and the line it is on (an id on two lines is not found)."""
    lines = output.splitlines()
    return {session_id: next((line for line in lines if session_id in line), "") for session_id in IDS}


@pytest.mark.parametrize("columns", [120, 80, 60, 40])
def test_ids_are_never_wrapped_and_lines_fit_the_terminal(log_file: Path, columns: int) -> None:
    done = baf("sessions", log_file.name, cwd=log_file.parent, columns=columns)
    assert done.returncode == 0, done.stderr
    assert all(cell_len(line) <= columns for line in done.stdout.splitlines() if not _rows(line)), done.stdout
    rows = _rows(done.stdout)
    assert all(rows.values()), done.stdout  # every id whole, on a line of its own
    assert "…" not in "".join(rows.values())
    assert "assistant-with-a-long-name" in done.stdout  # every session has it: named once, in the title
    if columns >= 100:  # a table: the records, the state and the errors on the id's line
        assert rows["terminal"].split()[-3:] == ["8", "idle", "0"]
    else:  # too narrow for a table with the longest id: the id on a line, what the table would say on the next
        lines = done.stdout.splitlines()
        after = " ".join(lines[lines.index("terminal") + 1 : lines.index(IDS[1])])
        assert "8 records · idle · 0 errors" in " ".join(after.split())


def test_a_file_or_a_pipe_gets_the_whole_table_unwrapped(log_file: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES") and not k.startswith("OPENAI_")}
    done = subprocess.run([sys.executable, "-m", "baf.cli", "sessions", log_file.name], cwd=log_file.parent,
                          capture_output=True, text=True, timeout=60, env=environ)  # fmt: skip
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if "session" in line and "records" in line)
    assert header.split() == ["session", "first", "activity", "last", "activity", "records", "state", "errors"]
    rows = _rows(done.stdout)
    assert all(rows.values()) and "…" not in done.stdout, done.stdout
    longest = rows[IDS[-1]]
    assert cell_len(longest) > 80  # not squeezed into 80 columns: seconds and every column are there
    assert longest.split()[-3:] == ["28", "idle", "0"] and longest.count(":") == 4


def test_plain_is_a_header_and_one_tab_separated_line_per_session(log_file: Path) -> None:
    done = baf("sessions", log_file.name, "--plain", cwd=log_file.parent, columns=40)
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    fields = header.split("\t")
    assert fields == ["session", "agent", "first_activity", "last_activity", "records", "state", "errors",
                      "unreadable"]  # fmt: skip
    rows = [dict(zip(fields, line.split("\t"), strict=True)) for line in lines]
    assert sorted(row["session"] for row in rows) == sorted(IDS)
    by_id = {row["session"]: row for row in rows}
    for number, session_id in enumerate(IDS):
        row = by_id[session_id]
        assert (row["agent"], row["records"], row["state"], row["errors"], row["unreadable"]) == (
            "assistant-with-a-long-name", str(3 + 5 * (number + 1)), "idle", "0", "",
        )  # fmt: skip
        first, last = datetime.fromisoformat(row["first_activity"]), datetime.fromisoformat(row["last_activity"])
        assert first.tzinfo is not None and first <= last


def test_json_is_one_object_per_session_and_an_unreadable_one_says_why(log_file: Path) -> None:
    connection = sqlite3.connect(log_file)
    with connection:
        connection.execute("UPDATE baf_records SET data = X'7B7D', checksum = NULL WHERE session_id = ? AND seq = 2",
                           ("telegram-123456789",))  # fmt: skip
    connection.close()
    done = baf("sessions", log_file.name, "--json", cwd=log_file.parent)
    assert done.returncode == 2 and "seq 2" in done.stderr  # as for the table: a damaged log is reported
    objects = {item["session"]: item for item in map(json.loads, done.stdout.splitlines())}
    assert set(objects) == set(IDS)
    assert objects["terminal"]["records"] == 8 and objects["terminal"]["state"] == "idle"
    assert isinstance(objects["terminal"]["last_activity"], float) and objects["terminal"]["unreadable"] is None
    broken = objects["telegram-123456789"]
    assert broken["records"] is None and "seq 2" in broken["unreadable"]
    plain = baf("sessions", log_file.name, "--plain", cwd=log_file.parent).stdout
    (line,) = [line for line in plain.splitlines() if line.startswith("telegram-123456789\t")]
    assert line.split("\t")[4:7] == ["", "", ""] and "seq 2" in line.split("\t")[7]


def test_plain_and_json_together_are_refused(log_file: Path) -> None:
    done = baf("sessions", log_file.name, "--plain", "--json", cwd=log_file.parent)
    assert done.returncode == 2 and "not allowed with" in done.stderr


def test_baf_log_keeps_seq_time_and_kind_on_their_line_in_a_narrow_terminal(log_file: Path) -> None:
    done = baf("log", log_file.name, "terminal", cwd=log_file.parent, columns=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(cell_len(line) <= 60 for line in lines)
    kinds = [line.split()[3] for line in lines if line.split() and line.split()[0].isdigit()]  # seq, date, time, kind
    assert kinds[:3] == ["session_started", "step_started", "message_received"]
    assert len(kinds) == 8  # one line starts each record: its seq, time and whole kind


def test_baf_log_to_a_file_or_a_pipe_is_one_tab_separated_record_a_line(log_file: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES") and not k.startswith("OPENAI_")}
    done = subprocess.run([sys.executable, "-m", "baf.cli", "log", log_file.name, IDS[-1]], cwd=log_file.parent,
                          capture_output=True, text=True, timeout=60, env=environ)  # fmt: skip
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split("\t") == ["seq", "time", "kind", "data"]
    rows = [line.split("\t") for line in lines]
    assert [row[0] for row in rows] == [str(seq) for seq in range(1, 29)]  # every record, each on its line
    assert [row[2] for row in rows[:3]] == ["session_started", "step_started", "message_received"]
    assert json.loads(rows[2][3])["text"] == "hello"
    assert datetime.fromisoformat(rows[0][1]).tzinfo is not None
    assert not any(line.endswith(" ") for line in lines)  # not padded to the widest record's width
    # The same lines in a terminal with --plain
    assert baf("log", log_file.name, IDS[-1], "--plain", cwd=log_file.parent).stdout == done.stdout


def test_a_log_without_sessions_says_so_instead_of_an_empty_table(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    create = f"import asyncio\nfrom baf.log import SQLiteLog\nasyncio.run(SQLiteLog({str(empty)!r}).start())"
    subprocess.run([sys.executable, "-c", create], check=True)  # a log with its tables and no session
    listed = baf("sessions", str(empty), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == f"sessions in {empty}: no sessions yet"
    replayed = baf("replay", str(empty), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.strip() == f"sessions in {empty}: no sessions yet"  # no "pick one"
    assert baf("sessions", str(empty), "--plain", cwd=tmp_path).stdout.splitlines()[0].startswith("session\t")
