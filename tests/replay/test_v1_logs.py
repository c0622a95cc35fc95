"""Logs written before record version 2, by each engine (``tests/fixtures/golden/v1_engines.db``, made by
the baf of commit d31f012 with ``make_v1_engines.py``): they read through the upcasters as version 2,
show in the timeline, re-run identically with the same agents, and resume after a (simulated) crash."""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest

from baf.log.record import CURRENT_VERSION
from baf.reasoning.effects import rebuild_requests
from baf.reasoning.resume import INTERRUPTED_TOOL_MESSAGE
from baf.replay import build_timeline, rerun
from baf.replay.timeline import EntryKind, flatten

from .helpers import GOLDEN_DIR, read_records

V1_DB = GOLDEN_DIR / "v1_engines.db"


def maker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_v1_engines", GOLDEN_DIR / "make_v1_engines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(session_id: str, log: str, effects: list[str]) -> object:
    m = maker()
    if session_id == "reasoning-1":
        return m.build_reasoning_agent(log, effects)
    return m.build_pattern_agent(log, effects, pipeline=session_id == "pipeline-1")


def copy_cut(tmp_path: Path, session_id: str, last_seq: int | None = None) -> Path:
    """A copy of the v1 log; with ``last_seq``, ``session_id`` ends there, as a crash would have left it."""
    target = tmp_path / "v1.db"
    shutil.copyfile(V1_DB, target)
    if last_seq is not None:
        with sqlite3.connect(target) as db:
            db.execute("DELETE FROM baf_records WHERE session_id = ? AND seq > ?", (session_id, last_seq))
        db.close()
    return target


async def test_the_fixture_holds_version_1_records() -> None:
    with sqlite3.connect(V1_DB) as db:
        versions = {v for (v,) in db.execute("SELECT DISTINCT version FROM baf_records")}
        pattern_keys = db.execute("SELECT count(*) FROM baf_records WHERE kind = 'llm_request' "
                                  "AND data LIKE '{\"pattern\":%'").fetchone()[0]  # fmt: skip
    db.close()
    assert versions == {1} and pattern_keys == 6  # react-1: 2 calls, pipeline-1: 2 stages of 2


async def test_both_version_1_shapes_read_as_version_2(tmp_path: Path) -> None:
    path = copy_cut(tmp_path, "")
    reasoning = await read_records(path, "reasoning-1")
    assert all(r.version == CURRENT_VERSION == 2 for r in reasoning)
    requests = [r.data for r in reasoning if r.kind == "llm_request"]
    assert [(d["loop"], d["run"], d["turn"], d.get("extends", False)) for d in requests] == [
        ("reasoning", 0, 0, False),
        ("reasoning", 0, 1, True),
        ("reasoning", 0, 2, True),
        ("reasoning", 0, 3, True),
    ]
    full = rebuild_requests(reasoning)
    assert [len(r.messages) for r in full] == [1, 3, 6, 9] and all(r.system and r.tools for r in full)
    results = [r.data for r in reasoning if r.kind == "tool_result"]
    assert all("original_size" in d for d in results)

    pipeline = await read_records(path, "pipeline-1")
    requests = [r.data for r in pipeline if r.kind == "llm_request"]
    assert [(d["loop"], d["turn"], d["purpose"]) for d in requests] == [
        ("lookup_stage", 0, "thought"), ("lookup_stage", 1, "thought"),
        ("write_stage", 0, "thought"), ("write_stage", 1, "thought")]  # fmt: skip
    assert all("pattern" not in d and "call" not in d and "extends" not in d for d in requests)
    assert [len(r.messages) for r in rebuild_requests(pipeline)] == [1, 4, 1, 4]
    responses = [r.data for r in pipeline if r.kind == "llm_response"]
    assert [(d["loop"], d["turn"]) for d in responses] == [(d["loop"], d["turn"]) for d in requests]
    results = [r.data for r in pipeline if r.kind == "tool_result"]
    assert [d["original_size"] for d in results] == [len(d["content"]) for d in results]


async def test_version_1_turns_show_in_the_timeline(tmp_path: Path) -> None:
    path = copy_cut(tmp_path, "")
    titles = {sid: [e.title for _, e in flatten(build_timeline(await read_records(path, sid)))
                    if e.kind == EntryKind.LLM_CALL] for sid in ("reasoning-1", "react-1")}  # fmt: skip
    assert titles["reasoning-1"][0] == "v1-model step 0 → calls add_tasks"
    assert titles["react-1"] == ["v1-model react call 1 (thought) → calls lookup, write_note",
                                 "v1-model react call 2 (thought) → calls final_answer"]  # fmt: skip


async def test_version_1_turns_export_as_spans_of_their_loop(tmp_path: Path) -> None:
    from baf.telemetry import spans_from_records

    path = copy_cut(tmp_path, "")
    loops = {sid: [span.attributes["baf.loop"] for span in spans_from_records(await read_records(path, sid))
                   if span.name.startswith("chat ")] for sid in ("reasoning-1", "pipeline-1")}  # fmt: skip
    assert loops == {"reasoning-1": ["reasoning"] * 4,
                     "pipeline-1": ["lookup_stage", "lookup_stage", "write_stage", "write_stage"]}  # fmt: skip


@pytest.mark.parametrize("session_id", ["reasoning-1", "react-1", "pipeline-1"])
async def test_version_1_sessions_rerun_identically(tmp_path: Path, session_id: str) -> None:
    path = copy_cut(tmp_path, "")
    effects: list[str] = []
    report = await rerun(f"sqlite:///{path}", session_id, build(session_id, "memory://", effects))  # type: ignore[arg-type]
    assert report.identical, str(report)
    assert report.llm_responses_served > 0 and effects == []  # nothing ran: everything came from the log


@pytest.mark.parametrize(("session_id", "cut", "lookups"), [
    ("reasoning-1", 17, ["lookup k"]),  # the calls of turn 1 were announced, no result recorded
    ("react-1", 12, []),  # lookup's result recorded, write_note's not
    ("pipeline-1", 24, ["lookup k"]),  # the second stage's first response recorded, no tool ran
])  # fmt: skip
async def test_version_1_sessions_resume_after_a_crash(tmp_path: Path, session_id: str, cut: int,
                                                       lookups: list[str]) -> None:  # fmt: skip
    path = copy_cut(tmp_path, session_id, cut)
    effects: list[str] = []
    agent = build(session_id, f"sqlite:///{path}", effects)
    async with agent:  # type: ignore[attr-defined]
        await agent.wait_idle()  # type: ignore[attr-defined]
    records = await read_records(path, session_id)
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    after = records[cut:]
    assert after[0].kind == "step_resumed"
    assert effects == lookups  # the idempotent tool ran again if its result was missing; write_note never
    interrupted = [r.data for r in after if r.kind == "tool_result" and r.data["content"] == INTERRUPTED_TOOL_MESSAGE]
    assert [d["name"] for d in interrupted] == ["write_note"]
    replies = [r.data["text"] for r in records if r.kind == "reply"]
    assert len(replies) == 1 and replies[0]
    finished = [r for r in after if r.kind == "reasoning_step" and r.data["kind"] == "reasoning_finished"]
    assert len(finished) == 1 and finished[0].data["details"]["outcome"] in ("answered", "completed")
    assert records[-1].kind == "step_finished" and not records[-1].data.get("interrupted")
    # The recorded responses were served, not asked for again: one response per turn of each run.
    turns = [(r.data["loop"], r.data["run"], r.data["turn"]) for r in records if r.kind == "llm_response"]
    assert len(turns) == len(set(turns))
    # Every request rebuilds whole, the first one written after the restart included.
    for request in rebuild_requests(records):
        assert request.messages[0]["role"] == "user" and request.tools, request
