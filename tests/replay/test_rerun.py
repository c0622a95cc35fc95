"""Deterministic re-run: record with scripted models, re-run the agent's code with everything served
from the log, and find the first divergence after a change."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from baf import Agent, Session
from baf.library.state.pattern_state import new_pattern_state
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLM, LLMResponse
from baf.log import MemoryLog, Record, SQLiteLog
from baf.reasoning.patterns import ReAct
from baf.replay.rerun import assert_replays, rerun
from baf.testing import ScriptedLLM


class ForbiddenLLM(LLM):
    """Fails the test if a re-run ever reaches the model."""

    name = "scripted"

    async def predict_with_tools(self, *args: Any, **kwargs: Any) -> LLMResponse:
        pytest.fail("the re-run called the model")


def build(llm: LLM, *, tools_live: bool = True, reply_prefix: str = "", units: str = "C",
          shortcut: bool = False) -> Agent:  # fmt: skip
    """A greeting state, then a reasoning state with a weather tool; the variations model code changes."""
    agent = Agent("weather", log=MemoryLog())
    greeting = agent.new_state("greeting", initial=True)
    named = agent.new_state("named")
    reasoning = new_reasoning_state(agent, llm, initial=False, memory=0)
    done = agent.new_state("done")

    def greet(session: Session) -> None:
        if session.event is not None:
            session.set("name", session.event.text)
            session.reply(f"{reply_prefix}Hello {session.event.text}, ask me about the weather.")

    named.set_body(greet)
    greeting.when_event().go_to(named)
    named.when_event().go_to(done if shortcut else reasoning)
    reasoning.when_event().go_to(reasoning)
    done.set_body(lambda s: s.reply("bye"))

    if units == "C":

        def weather(city: str) -> str:
            """The weather in a city.

            Args:
                city: The city.
            """
            if not tools_live:
                pytest.fail("the re-run ran a tool")
            return f"sunny, 21 C in {city}"

        agent.add_tool(weather)
    else:

        def weather(city: str, units: str = "F") -> str:  # type: ignore[misc]  # a changed signature
            """The weather in a city.

            Args:
                city: The city.
                units: C or F.
            """
            pytest.fail("the re-run ran a tool")

        agent.add_tool(weather)
    return agent


def script() -> ScriptedLLM:
    return ScriptedLLM([
        ScriptedLLM.tool_call("add_tasks", {"descriptions": ["Check the weather"]}),
        ScriptedLLM.tool_call("weather", {"city": "Paris"}),
        ScriptedLLM.tool_call("complete_task", {"task_id": 1, "result": "sunny"}),
        "It is sunny in Paris.",
        ScriptedLLM.tool_call("weather", {"city": "Rome"}),
        "Rome is sunny too.",
    ])  # fmt: skip


async def record() -> tuple[MemoryLog, list[Record]]:
    agent = build(script())
    assert isinstance(agent.log, MemoryLog)
    async with agent:
        for text in ("Ada", "Weather in Paris?", "And Rome?"):
            await agent.receive_message("s", text)
        records = await agent.log.read("s")
    return agent.log, records


async def test_unchanged_agent_replays_identically_without_model_or_tools() -> None:
    log, records = await record()
    report = await assert_replays(log, "s", build(ForbiddenLLM(), tools_live=False))
    assert report.identical and "identical" in str(report)
    assert report.llm_responses_served == sum(1 for r in records if r.kind == "llm_response") == 6
    assert report.tool_results_served == 2  # the two weather calls; planning tools run for real
    assert report.records_compared == sum(1 for r in records if r.kind != "message_received")


async def test_a_different_reply_is_reported_at_its_seq() -> None:
    log, records = await record()
    report = await rerun(log, "s", build(ForbiddenLLM(), tools_live=False, reply_prefix="Hi! "))
    first_reply = next(r for r in records if r.kind == "reply")
    assert report.divergence is not None
    assert report.divergence.seq == first_reply.seq
    assert report.divergence.what == "a different reply"
    assert report.divergence.recorded["text"].startswith("Hello Ada")
    assert report.divergence.now["text"].startswith("Hi! Hello Ada")
    with pytest.raises(AssertionError, match=f"diverges at seq {first_reply.seq}: a different reply"):
        await assert_replays(log, "s", build(ForbiddenLLM(), tools_live=False, reply_prefix="Hi! "))


async def test_a_different_transition_is_reported_at_its_seq() -> None:
    log, records = await record()
    report = await rerun(log, "s", build(ForbiddenLLM(), tools_live=False, shortcut=True))
    second = [r for r in records if r.kind == "transition"][1]
    assert report.divergence is not None and report.divergence.seq == second.seq
    assert report.divergence.what == "a different transition"
    assert report.divergence.recorded["dest"] == "reasoning_state" and report.divergence.now["dest"] == "done"


async def test_a_changed_tool_shows_in_the_first_llm_request() -> None:
    log, records = await record()
    report = await rerun(log, "s", build(ForbiddenLLM(), tools_live=False, units="F"))
    first_request = next(r for r in records if r.kind == "llm_request")
    assert report.divergence is not None and report.divergence.seq == first_request.seq
    assert report.divergence.what == "a different LLM request"
    recorded_params = report.divergence.recorded["tools"][0]["function"]["parameters"]["properties"]
    now_params = report.divergence.now["tools"][0]["function"]["parameters"]["properties"]
    assert set(recorded_params) == {"city"} and set(now_params) == {"city", "units"}
    assert report.divergence.recorded["messages"] == report.divergence.now["messages"]


async def test_planning_turned_off_diverges_at_the_first_reasoning_step() -> None:
    log, records = await record()
    agent = Agent("weather", log=MemoryLog())
    greeting = agent.new_state("greeting", initial=True)
    named = agent.new_state("named")
    reasoning = new_reasoning_state(agent, ForbiddenLLM(), initial=False, memory=0, enable_task_planning=False)

    def greet(session: Session) -> None:
        if session.event is not None:
            session.set("name", session.event.text)
            session.reply(f"Hello {session.event.text}, ask me about the weather.")

    named.set_body(greet)
    greeting.when_event().go_to(named)
    named.when_event().go_to(reasoning)
    reasoning.when_event().go_to(reasoning)
    report = await rerun(log, "s", agent)
    started = next(r for r in records if r.kind == "reasoning_step")
    assert report.divergence is not None and report.divergence.seq == started.seq
    assert report.divergence.recorded["details"]["planning"] is True
    assert report.divergence.now["details"]["planning"] is False


async def test_a_model_call_the_log_cannot_answer_fails_the_guard() -> None:
    """The log lost its last response (cut there): the re-run must not fall back to a model."""
    _, records = await record()
    last_response = [r for r in records if r.kind == "llm_response"][-1]
    cut = MemoryLog()
    await cut.append([r for r in records if r.seq < last_response.seq])
    report = await rerun(cut, "s", build(ForbiddenLLM(), tools_live=False))
    assert report.guard_failures and "the log has only 5 responses" in report.guard_failures[0]
    assert report.divergence is not None and report.divergence.seq == last_response.seq
    assert "guard:" in str(report)


def build_pattern(llm: LLM, *, tools_live: bool = False, max_steps: int = 10) -> Agent:
    """A ReAct pattern state with a multiply tool; ``tools_live=False`` fails the test if the tool runs."""
    agent = Agent("calc", log=MemoryLog())
    state = new_pattern_state(agent, llm, ReAct(max_steps=max_steps))
    state.when_event().go_to(state)

    def multiply(a: int, b: int) -> int:
        """Multiply two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        if not tools_live:
            pytest.fail("the re-run ran a tool")
        return a * b

    agent.add_tool(multiply)
    return agent


async def record_pattern() -> tuple[MemoryLog, list[Record]]:
    agent = build_pattern(ScriptedLLM([
        ScriptedLLM.tool_call("multiply", {"a": 17, "b": 23}),
        ScriptedLLM.tool_call("final_answer", {"answer": "391"}),
    ]), tools_live=True)  # fmt: skip
    assert isinstance(agent.log, MemoryLog)
    async with agent:
        await agent.receive_message("p", "What is 17 * 23?")
        records = await agent.log.read("p")
    assert any(r.kind == "tool_result" and r.data["content"] == "391" for r in records)
    return agent.log, records


async def test_a_pattern_session_replays_identically_without_model_or_tools() -> None:
    log, records = await record_pattern()
    report = await assert_replays(log, "p", build_pattern(ForbiddenLLM()))
    assert report.llm_responses_served == sum(1 for r in records if r.kind == "llm_response") == 2
    assert report.tool_results_served >= 1


async def test_a_changed_pattern_diverges_at_its_first_llm_request() -> None:
    log, records = await record_pattern()
    agent = Agent("calc", log=MemoryLog())
    state = new_pattern_state(agent, ForbiddenLLM(), ReAct(prompts={"task": "Solve: {task}"}))
    state.when_event().go_to(state)
    report = await rerun(log, "p", agent)
    first_request = next(r for r in records if r.kind == "llm_request")
    assert report.divergence is not None and report.divergence.seq == first_request.seq
    assert report.divergence.what == "a different LLM request"
    assert report.divergence.now["messages"][0]["content"].startswith("Solve: ")
    assert report.divergence.recorded["messages"] == first_request.data["messages"]


async def test_a_rerun_from_a_url_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """A recorded fixture is opened read-only: not migrated (here: a schema-1 file), not rewritten."""
    _, records = await record()
    db = tmp_path / "weather.db"
    async with SQLiteLog(db) as log:
        await log.append(records)
    connection = sqlite3.connect(db)
    connection.executescript("""UPDATE baf_meta SET value = '1' WHERE key = 'schema_version';
        CREATE TRIGGER baf_records_register_session AFTER INSERT ON baf_records
        BEGIN INSERT OR IGNORE INTO baf_sessions (session_id) VALUES (NEW.session_id); END;
        PRAGMA journal_mode = DELETE;""")
    connection.close()
    before = db.read_bytes()
    await assert_replays(f"sqlite:///{db}", "s", build(ForbiddenLLM(), tools_live=False))
    assert db.read_bytes() == before
    assert os.listdir(tmp_path) == ["weather.db"]


def test_a_report_counts_in_words_that_agree_with_the_number() -> None:
    from baf.replay.rerun import RerunReport

    one = RerunReport("s", None, records_compared=1, llm_responses_served=1, tool_results_served=1)
    assert str(one) == "session 's': identical (1 record compared; 1 LLM response and 1 tool result served)"
    two = RerunReport("s", None, records_compared=18, llm_responses_served=2, tool_results_served=0)
    assert str(two) == "session 's': identical (18 records compared; 2 LLM responses and 0 tool results served)"
