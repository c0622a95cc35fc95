"""Human approval across restarts: a request recorded by one process is decided in another, on a real
SQLite file, and the approved call runs exactly once (also when a crash cuts it off)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from baf.log import open_log
from baf.log.record import Record, RecordKind
from baf.reasoning.resume import INTERRUPTED_TOOL_MESSAGE

AGENT = Path(__file__).parent.parent / "fixtures" / "approval_agent.py"

pytestmark = pytest.mark.slow


def _start(db: Path, effects: Path, *args: str, block: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent.parent)}
    if block:
        env["BLOCK_IN_TOOL"] = "1"
    return subprocess.Popen([sys.executable, str(AGENT), str(db), str(effects), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip


def _line(process: subprocess.Popen[str], prefix: str) -> str:
    """The next stdout line starting with ``prefix`` (the process is killed if it ends first)."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(prefix):
            return line.strip()
    process.kill()
    raise AssertionError(f"no {prefix!r} line; stderr: {process.stderr.read() if process.stderr else ''}")


def _kill(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=10)  # reaps it and closes its pipes


def _run(db: Path, effects: Path, *args: str) -> str:
    process = _start(db, effects, *args)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return out


def _records(db: Path) -> list[Record]:
    async def read() -> list[Record]:
        log = open_log(f"sqlite:///{db}")
        await log.start()
        try:
            return list(await log.read("s"))
        finally:
            await log.close()

    return asyncio.run(read())


def _paused(db: Path, effects: Path) -> str:
    """Start an agent, ask it to pay, kill -9 it once the call waits for approval; the call's id."""
    process = _start(db, effects, "ask", "pay the plumber")
    try:
        waiting = _line(process, "PAUSED").split()[1:]
    finally:
        _kill(process)
    assert waiting == ["pay-1"]
    return waiting[0]


def test_a_decision_reaches_a_new_process_and_the_approved_call_runs_once(tmp_path: Path) -> None:
    db, effects = tmp_path / "agent.db", tmp_path / "effects.txt"
    call_id = _paused(db, effects)
    assert not effects.exists()  # killed while waiting: nothing ran

    assert "HANDLED" in _run(db, effects, "decide", call_id, "yes")
    assert effects.read_text() == "paid 40\n"
    records = _records(db)
    replies = [r.data["text"] for r in records if r.kind == RecordKind.REPLY]
    assert replies == ["payment outcome: paid 40"]
    decided = [r for r in records if r.kind == RecordKind.APPROVAL_DECIDED]
    assert [(r.data["approved"], r.data["by"]) for r in decided] == [(True, "operator")]

    # The same decision again, in a third process: the call no longer waits; refused, nothing runs.
    assert "HANDLED" in _run(db, effects, "decide", call_id, "yes")
    assert effects.read_text() == "paid 40\n"
    errors = [r for r in _records(db) if r.kind == RecordKind.ERROR]
    assert errors[-1].data["source"] == "approval" and "pay-1" in errors[-1].data["message"]


def test_a_denial_in_a_new_process_tells_the_model(tmp_path: Path) -> None:
    db, effects = tmp_path / "agent.db", tmp_path / "effects.txt"
    call_id = _paused(db, effects)
    _run(db, effects, "decide", call_id, "no")
    assert not effects.exists()
    replies = [r.data["text"] for r in _records(db) if r.kind == RecordKind.REPLY]
    assert len(replies) == 1 and "denied by operator" in replies[0]


def test_a_crash_while_the_approved_call_runs_does_not_run_it_again(tmp_path: Path) -> None:
    db, effects = tmp_path / "agent.db", tmp_path / "effects.txt"
    call_id = _paused(db, effects)
    process = _start(db, effects, "decide", call_id, "yes", block=True)
    try:
        _line(process, "RECORDED")
        deadline = time.monotonic() + 30
        while not (effects.exists() and effects.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        _kill(process)  # the approved call has taken effect and is still running
    assert effects.read_text() == "paid 40\n"

    assert "IDLE" in _run(db, effects, "restart")
    assert effects.read_text() == "paid 40\n"  # not paid twice
    records = _records(db)
    results = [r.data["content"] for r in records if r.kind == RecordKind.TOOL_RESULT]
    assert results == [INTERRUPTED_TOOL_MESSAGE]
    assert [r.kind for r in records].count(RecordKind.STEP_RESUMED) == 1
    replies = [r.data["text"] for r in records if r.kind == RecordKind.REPLY]
    assert replies == [f"payment outcome: {INTERRUPTED_TOOL_MESSAGE}"]
