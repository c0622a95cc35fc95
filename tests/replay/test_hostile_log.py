"""A log is data, possibly someone else's: what it holds is shown, never interpreted by the terminal.

A hand-made log puts terminal escape sequences (colours, an OSC 8 hyperlink, a C1 CSI), a carriage
return that would overwrite the line, a right-to-left override and rich markup in every field the CLI
prints (session id, kind, state name, message and reply text, error message, tool name, arguments and
result, task description, variable name). Every reading command runs in a real subprocess, and its output
must hold none of those characters, while the markup is printed literally.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from baf_test_helpers import baf

from baf.errors import CorruptRecordError
from baf.log import Record, SQLiteLog

# ESC [31m (colour), OSC 8 hyperlink, C1 CSI (one character), CR, RTL override, BEL, backspace.
HOSTILE = "a\x1b[31mred\x1b]8;;http://evil.invalid/\x1b\\click\x1b]8;;\x1b\\ \x9b2J \rover \u202eeno\u202c \x07\x08"
MARKUP = "[link=http://evil.invalid/]x[/link] [red]r[/red]"
SESSION = "s[red]1[/red]\x1b[2J"
FORBIDDEN = ("\x1b", "\x9b", "\r", "\u202e", "\x07", "\x08")


def hostile_log(db: Path) -> None:
    text = HOSTILE + MARKUP
    call = {"id": "c1", "name": "tool" + text, "arguments": '{"q": "' + text.replace("\\", "\\\\") + '"}'}
    records = [
        Record(
            SESSION,
            1,
            "session_started",
            {"agent": "agent" + text, "platform": "p" + text, "initial_state": "idle" + text},
        ),
        Record(SESSION, 2, "message_received", {"event": {}, "text": text}),
        Record(SESSION, 3, "step_started", {"event_seq": 2}),
        Record(SESSION, 4, "transition", {"source": "idle" + text, "dest": "busy" + text, "trigger": text}),
        Record(
            SESSION,
            5,
            "reasoning_step",
            {"kind": "reasoning_started", "step": 0, "summary": text, "details": {"request": text}},
        ),
        Record(
            SESSION, 6, "llm_request", {"step": 0, "model": "m" + text, "messages": [{"role": "user", "content": text}]}
        ),
        Record(
            SESSION,
            7,
            "llm_response",
            {"step": 0, "model": "m" + text, "latency_ms": 1, "text": None, "tool_calls": [call], "usage": {}},
        ),
        Record(
            SESSION,
            8,
            "tool_result",
            {
                "step": 0,
                "call_id": "c1",
                "name": call["name"],
                "content": text,
                "is_error": False,
                "original_size": len(text),
            },
        ),
        Record(
            SESSION, 9, "task_list", {"tasks": [{"id": 1, "description": text, "status": "pending", "result": text}]}
        ),
        Record(
            SESSION,
            10,
            "reasoning_step",
            {"kind": "reasoning_finished", "step": 1, "summary": text, "details": {"outcome": text}},
        ),
        Record(SESSION, 11, "reply", {"text": text}),
        Record(SESSION, 12, "variable_set", {"name": "v" + text, "value": text}),
        Record(SESSION, 13, "error", {"source": "body", "type": "E" + text, "message": text, "traceback": text}),
        Record(SESSION, 14, "kind" + text, {"x": text}),
        Record(SESSION, 15, "step_finished", {"event_seq": 2}),
    ]

    async def write() -> None:
        async with SQLiteLog(db) as log:
            await log.append(records)

    asyncio.run(write())


@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "h.db"],
        ["log", "h.db", SESSION],
        ["log", "h.db", SESSION, "--json"],
        ["replay", "h.db"],
        ["replay", "h.db", SESSION, "--limit", "0"],
        ["replay", "h.db", SESSION, "--limit", "0", "--expand"],
        ["replay", "h.db", SESSION, "--json"],
        ["replay", "h.db", SESSION, "--at", "15"],
        ["replay", "h.db", SESSION, "--interactive"],
        ["export", "h.db", SESSION, "--format", "jsonl"],
        ["export", "h.db", SESSION, "--format", "otel"],
        ["log", "h.db", "missing" + HOSTILE],
    ],
    ids=[
        "sessions",
        "log",
        "log-json",
        "replay-list",
        "timeline",
        "expand",
        "replay-json",
        "at",
        "interactive",
        "export-jsonl",
        "export-otel",
        "missing-session",
    ],
)
def test_control_characters_and_markup_from_the_log_are_shown_not_interpreted(
    tmp_path: Path, command: list[str]
) -> None:
    hostile_log(tmp_path / "h.db")
    stdin = "n\nn\ne\ns\no\nl\nj 8\ne\nq\n" if "--interactive" in command else ""
    result = baf(*command, cwd=tmp_path, stdin=stdin)
    output = result.stdout + result.stderr
    assert result.returncode in (0, 2), output
    for char in FORBIDDEN:
        assert char not in output, f"{char!r} reached the terminal: {output!r}"
    if result.returncode == 0 and "--json" not in command and "export" not in command:
        # Shown as written: the markup is text, and the escape character is visible as an escape.
        assert "[red]" in output and "\\x1b" in output, output


@pytest.mark.parametrize("command", [["log"], ["replay"], ["export", "--format", "otel"], ["check"]])
def test_a_record_whose_time_no_clock_gives_is_named_as_damage_not_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    """A ``ts`` edited to 1e300 (or damaged): no date can show it. Every command that reads the record says
    which one it is, in one line, and exits with 2; ``baf check`` counts it as damage (status 1)."""
    import sqlite3

    db = tmp_path / "log.db"

    async def write() -> None:
        async with SQLiteLog(db) as log:
            await log.append(
                [Record("s", 1, "reply", {"text": "hi"}, 1.7e9), Record("s", 2, "reply", {"text": "x"}, 1.7e9)]
            )

    asyncio.run(write())
    with sqlite3.connect(db) as connection:  # the edit: its checksum dropped, as an older baf's row has none
        connection.execute("UPDATE baf_records SET ts = 1e300, checksum = NULL WHERE seq = 2")
    connection.close()
    verb, *options = command
    result = baf(verb, str(db), *(["s"] if verb != "check" else []), *options, cwd=tmp_path)
    assert result.returncode == (1 if verb == "check" else 2), result.stdout + result.stderr  # check: damage found
    assert "Traceback" not in result.stderr
    assert "seq 2" in result.stdout + result.stderr and "not a time" in result.stdout + result.stderr


def test_every_store_refuses_to_write_a_time_no_reader_could_show(tmp_path: Path) -> None:
    from baf.log import MemoryLog
    from baf.log.postgres import decode_row

    async def append_to(log: object) -> None:
        async with log:  # type: ignore[attr-defined]
            with pytest.raises(TypeError, match="ts must be a finite number of seconds within the years 1 to 9999"):
                await log.append([Record("s", 1, "k", {}, 1e300)])  # type: ignore[attr-defined]

    asyncio.run(append_to(SQLiteLog(tmp_path / "log.db")))
    asyncio.run(append_to(MemoryLog()))
    # A PostgreSQL row read with such a time is damage, named (the row as the store selects it).
    with pytest.raises(CorruptRecordError, match=r"seq 3.*not a time"):
        decode_row("s", (3, "reply", '{"text": "x"}', 1e300, 2))
