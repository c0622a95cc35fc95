"""The committed golden log keeps loading, projecting, rendering and exporting as the code changes.

If one of these fails after a change to the record format, the change needs an upcaster
(``baf.log.upcast``), not a new golden log.
"""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

from baf.errors import RecordNotFoundError, UnknownRecordVersionError
from baf.log.projection import project
from baf.log.record import CURRENT_VERSION
from baf.replay import build_timeline, export_otel, state_at
from baf.replay.render import render_timeline
from baf.replay.timeline import EntryKind

from .helpers import GOLDEN_SESSION, copy_golden, read_records, read_records_sync


def test_golden_log_loads_and_projects(tmp_path: Path) -> None:
    records = read_records_sync(copy_golden(tmp_path))
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert all(r.version == CURRENT_VERSION for r in records)
    p = project(GOLDEN_SESSION, records)
    assert p.agent == "golden"
    assert p.current_state == "farewell"
    assert p.variables["visits"] == 1 and p.variables["done"] is True
    assert p.variables["reasoning_scratchpad"]["outcome"] == "answered"
    assert p.errors == 1
    assert [c.role for c in p.history] == ["assistant", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert p.history[-1].text == "Goodbye."
    assert p.open_step is None and not p.unstarted


def test_golden_log_timeline_groups_reasoning(tmp_path: Path) -> None:
    entries = build_timeline(read_records_sync(copy_golden(tmp_path)))
    groups = [e for e in entries if e.kind == EntryKind.REASONING]
    assert [g.title for g in groups] == ["hi", "What is 6 times 7, with tax?"]
    assert all(g.status == "ok" for g in groups)
    children = groups[1].children
    tools = [c for c in children if c.kind == EntryKind.TOOL_CALL]
    assert [t.data["call"]["name"] for t in tools] == ["add_tasks", "multiply", "complete_task", "tax", "skip_task"]
    assert [t.status for t in tools] == ["ok", "ok", "ok", "error", "ok"]
    assert tools[1].data["result"]["content"] == "42"
    llm_calls = [c for c in children if c.kind == EntryKind.LLM_CALL]
    assert len(llm_calls) == 5
    assert sum(c.data["response"]["usage"]["prompt_tokens"] for c in llm_calls) == 180 + 230 + 260 + 300 + 330
    assert any(c.kind == EntryKind.ERROR and "tax service unavailable" in c.title for c in children)
    assert [c.kind for c in children].count(EntryKind.TASK_LIST) == 3
    top = [e.kind for e in entries if e.kind != EntryKind.VARIABLE]
    assert top[:3] == [EntryKind.SESSION, EntryKind.REPLY, EntryKind.MESSAGE]
    assert top[-3:] == [EntryKind.MESSAGE, EntryKind.TRANSITION, EntryKind.REPLY]


def test_golden_log_renders(tmp_path: Path) -> None:
    entries = build_timeline(read_records_sync(copy_golden(tmp_path)))
    console = Console(file=io.StringIO(), width=200)
    render_timeline(console, entries)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    for expected in (
        "session started: agent golden",
        "welcome → reasoning_state",
        "multiply(",
        "→ 42",
        "[180 in / 25 out tokens",
        "tax service unavailable",
        "[x] 1. multiply",
        "Goodbye.",
    ):
        assert expected in text, expected


def test_golden_log_state_at_points(tmp_path: Path) -> None:
    records = read_records_sync(copy_golden(tmp_path))
    after_welcome = state_at(GOLDEN_SESSION, records, 4)
    assert after_welcome.projection.current_state == "welcome"
    assert after_welcome.projection.variables == {"visits": 1}
    first_task_list = next(r.seq for r in records if r.kind == "task_list")
    mid = state_at(GOLDEN_SESSION, records, first_task_list)
    assert mid.reasoning_in_flight and mid.reasoning_request == "What is 6 times 7, with tax?"
    assert [t["status"] for t in mid.tasks] == ["in_progress", "pending"]
    assert mid.projection.current_state == "reasoning_state"
    end = state_at(GOLDEN_SESSION, records)
    assert not end.reasoning_in_flight and [t["status"] for t in end.tasks] == ["completed", "skipped"]
    with pytest.raises(RecordNotFoundError, match="no record 999") as caught:
        state_at(GOLDEN_SESSION, records, 999)
    assert isinstance(caught.value, LookupError) and caught.value.seq == 999
    assert caught.value.last_seq == records[-1].seq


def test_golden_log_exports(tmp_path: Path) -> None:
    document = export_otel(read_records_sync(copy_golden(tmp_path)))
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    names = [s["name"] for s in spans]
    assert names.count("invoke_agent golden") == 2
    assert names.count("chat scripted-golden") == 6
    assert sorted(n for n in names if n.startswith("execute_tool")) == sorted(
        f"execute_tool {t}" for t in ("add_tasks", "multiply", "complete_task", "tax", "skip_task")
    )
    json.dumps(document)  # serialisable as is


async def test_a_record_of_a_newer_version_fails_clearly(tmp_path: Path) -> None:
    path = copy_golden(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE baf_records SET version = ? WHERE session_id = ? AND seq = 5", (CURRENT_VERSION + 1, GOLDEN_SESSION)
        )
    db.close()
    with pytest.raises(UnknownRecordVersionError) as caught:
        await read_records(path)
    message = str(caught.value)
    assert GOLDEN_SESSION in message and "5" in message and str(CURRENT_VERSION + 1) in message
