"""Crash resume of pattern states: a ``ReAct`` state, and a pipeline of two, killed with kill -9 in the
middle of a run, finish the run after a restart: recorded model responses are used (the model is not
asked again), a non-idempotent tool call whose result was not recorded is reported to the model as
interrupted and never runs twice, and every question gets exactly one answer. The pipeline runs with a
working memory in the session: after the restarts it holds what the runs wrote, and each second stage's
model calls were shown the first stage's output."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from baf.log import Record, open_log
from baf.log.projection import project
from baf.reasoning.effects import rebuild_requests
from baf.reasoning.resume import INTERRUPTED_TOOL_MESSAGE

AGENT = Path(__file__).parent.parent / "fixtures" / "pattern_crash_agent.py"


def _run(args: list[str], questions: list[str], kill_after: float | None) -> list[str]:
    proc = subprocess.Popen([sys.executable, str(AGENT), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write("".join(f"{q}\n" for q in questions))
    proc.stdin.close()
    if kill_after is None:
        out = proc.stdout.read()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    else:
        line = proc.stdout.readline()  # the first ACK: the agent is up and working
        assert line, proc.stderr.read()
        time.sleep(kill_after)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        out = line + proc.stdout.read()
    proc.stdout.close()
    proc.stderr.close()
    return [text[4:] for text in out.splitlines() if text.startswith("ACK ")]


def runs(records: list[Record]) -> list[list[Record]]:
    """The records of each pattern run, from its ``reasoning_started`` on."""
    groups: list[list[Record]] = []
    for record in records:
        if record.kind == "reasoning_step" and record.data["kind"] == "reasoning_started":
            groups.append([])
        if groups:
            groups[-1].append(record)
    return groups


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["react", "pipeline"])
async def test_kill_9_in_the_middle_of_a_pattern_run(tmp_path: Path, shape: str) -> None:
    db, calls, effects = tmp_path / "agent.db", tmp_path / "calls.txt", tmp_path / "effects.txt"
    calls.touch()
    effects.touch()
    args = [str(db), str(calls), str(effects), shape]
    rng = random.Random(99)
    acked: list[str] = []
    for trial in range(int(os.environ.get("BAF_KILL_TRIALS", "12"))):
        acked += _run(args, [f"q{trial}"], kill_after=rng.uniform(0.0, 0.12))
    acked += _run(args, [], kill_after=None)  # a clean run finishes whatever was left

    async with open_log(f"sqlite:///{db}") as log:
        records = await log.read("s")
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    p = project("s", records)
    assert p.unstarted == {} and p.open_step is None
    received = [r.data["text"] for r in records if r.kind == "message_received"]
    assert set(acked) <= set(received) and len(received) == len(set(received))
    groups = runs(records)
    assert [g[0].data["details"]["request"] for g in groups] == received
    assert any(r.kind == "step_resumed" for r in records), "no kill landed inside a run; widen the window"
    for group in groups:
        kinds = [r.data["kind"] for r in group if r.kind == "reasoning_step"]
        assert kinds.count("reasoning_started") == 1 and kinds.count("reasoning_finished") == 1, kinds
        finished = next(r for r in group if r.kind == "reasoning_step" and r.data["kind"] == "reasoning_finished")
        assert finished.data["details"]["outcome"] == "completed"
        question = group[0].data["details"]["request"]
        replies = [r.data["text"] for r in group if r.kind == "reply"]
        assert len(replies) == 1 and f"{question} [" in replies[0], replies
        # Every call of every recorded response has exactly one result.
        asked = sorted(c["id"] for r in group if r.kind == "llm_response" for c in r.data["tool_calls"])
        assert asked == sorted(r.data["call_id"] for r in group if r.kind == "tool_result")
        requests = [(r.data["loop"], r.data["run"], r.data["turn"]) for r in group if r.kind == "llm_request"]
        responses = [(r.data["loop"], r.data["run"], r.data["turn"]) for r in group if r.kind == "llm_response"]
        assert requests == responses and len(set(requests)) == len(requests)
    # A recorded response came from the last call the model received for that task and turn: a
    # response recorded before a kill was served on resume, never asked for again.
    made: dict[tuple[str, int], list[str]] = {}
    for line in calls.read_text().splitlines():
        task, turn, nonce = line.split("\t")
        made.setdefault((task, int(turn)), []).append(nonce)
    for group in groups:
        tasks: dict[tuple[str, int], str] = {}  # the task of each loop run: its first request's user message
        for record in group:
            key = (record.data.get("loop"), record.data.get("run"))
            if record.kind == "llm_request" and key not in tasks:
                tasks[key] = next(m["content"] for m in record.data["messages"] if m["role"] == "user")
            if record.kind == "llm_response":
                nonce = record.data["tool_calls"][0]["id"].split("-", 1)[1]
                assert made[(tasks[key], record.data["turn"])][-1] == nonce
    if shape == "pipeline":  # the working memory survived every kill
        for group in groups:
            question = group[0].data["details"]["request"]
            first = next(r.data["details"]["text"] for r in group if r.kind == "reasoning_step"
                         and r.data["kind"] == "llm_text" and r.data["details"]["pattern"] == "first")  # fmt: skip
            seconds = [q for q in rebuild_requests(group) if q.loop == "second"]
            assert seconds and all(f"- reasoning:first: {first}" in (q.system or "") for q in seconds), question
        last = groups[-1][0].data["details"]["request"]
        assert f"answer to {last} [" in p.variables["reasoning:first"]["reasoning:output"]
        last_reply = next(r.data["text"] for r in groups[-1] if r.kind == "reply")
        assert p.variables["reasoning:pipeline"]["reasoning:output"] == last_reply
    # The non-idempotent tool never ran twice for one call; a call cut off is reported, not repeated.
    written = effects.read_text().splitlines()
    assert len(written) == len(set(written))
    for result in (r for r in records if r.kind == "tool_result" and r.data["content"] == INTERRUPTED_TOOL_MESSAGE):
        assert result.data["name"] == "write_note" and result.data["is_error"]
