"""Working memory across patterns (issue 17 item 6): each pattern its scope ``reasoning:<name>``, each
model call enriched from it, each step persisted as it runs, the output under ``reasoning:output``, a
pipeline's later stages seeing the earlier ones' outputs; in-memory, and backed by the session (so
replay, re-run and resume see it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from baf import Agent, ApprovalEvent
from baf.library.state.pattern_state import new_pattern_state, session_memory
from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.log import MemoryLog, Record, open_log
from baf.reasoning.patterns import MemoryManager, ReAct, ReasoningPipeline
from baf.reasoning.patterns.memory import LAST_STEP_KEY, OUTPUT_KEY
from baf.reasoning.tool import Tool
from baf.replay.rerun import assert_replays
from baf.replay.state_at import state_at
from baf.testing import FunctionLLM, RecordingPlatform

WM = "## Working memory"


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


class Model:
    """Each ReAct stage looks one key up, then answers; the answer names the stage's task. Decides from
    the conversation alone (a resumed run gets the same answers). Keeps the system message of every call."""

    def __init__(self) -> None:
        self.systems: list[tuple[str, str | None]] = []  # (task, system) per call
        self.llm = FunctionLLM(self.answer)

    def answer(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], **kw: Any) -> LLMResponse:
        task = str(messages[0]["content"])
        self.systems.append((task, kw.get("system_message")))
        if not any(m["role"] == "tool" for m in messages):
            return LLMResponse(text=f"look up {task}", tool_calls=[ToolCall(f"l{len(self.systems)}", "lookup",
                                                                           json.dumps({"key": task}))])  # fmt: skip
        done = json.dumps({"answer": f"<{task}> answered"})
        return LLMResponse(tool_calls=[ToolCall(f"f{len(self.systems)}", "final_answer", done)])


def pipeline() -> ReasoningPipeline:
    return ReasoningPipeline([ReAct(name="first", max_steps=3), ReAct(name="second", max_steps=3)])


async def test_a_pipelines_second_pattern_sees_the_first_ones_output() -> None:
    model = Model()
    memory = MemoryManager()
    result = await pipeline().execute(model.llm, "q", tools=[lookup_tool()], memory=memory)
    assert result.success and result.text == "<<q> answered> answered"

    first, second = memory.scope("first"), memory.scope("reasoning:second")
    assert first[OUTPUT_KEY] == "<q> answered" and second[OUTPUT_KEY] == "<<q> answered> answered"
    assert memory.get("pipeline", OUTPUT_KEY) == result.text
    # Each step persisted as it ran: thought, action, observation, answer; the last one also as last_step.
    assert [first[f"reasoning:step:{n}"].split(":")[0] for n in (1, 2, 3, 4)] == [
        "thought", "action", "observation", "llm_text"]  # fmt: skip
    assert first[LAST_STEP_KEY] == first["reasoning:step:4"] and "reasoning:step:5" not in first
    assert list(memory.scopes()) == ["reasoning:pipeline", "reasoning:first", "reasoning:second"]

    systems = model.systems
    # The first model call of the first stage has nothing to be enriched with.
    assert systems[0][0] == "q" and not (systems[0][1] or "").startswith(WM)
    # Its second call sees its own steps so far; the other stages have no output yet.
    assert systems[1][1] is not None and systems[1][1].startswith(WM)
    assert "- reasoning:step:1: thought: look up q" in systems[1][1] and "Outputs of earlier" not in systems[1][1]
    # Every call of the second stage sees the first stage's output.
    second_stage = [system or "" for task, system in systems if task == "<q> answered"]
    assert len(second_stage) == 2
    assert all("Outputs of earlier reasoning:\n- reasoning:first: <q> answered" in s for s in second_stage)


async def test_the_same_manager_across_runs_restarts_a_scope_and_keeps_the_others() -> None:
    model = Model()
    memory = MemoryManager()
    await pipeline().execute(model.llm, "q", tools=[lookup_tool()], memory=memory)
    model.systems.clear()
    await pipeline().execute(model.llm, "r", tools=[lookup_tool()], memory=memory)
    # The first stage's new run starts its scope afresh, and sees what the other scopes kept from run 1.
    opening = model.systems[0][1] or ""
    assert "- reasoning:second: <<q> answered> answered" in opening and "reasoning:first:" not in opening
    assert "This run so far" not in opening
    assert memory.get("first", OUTPUT_KEY) == "<r> answered"


async def test_without_memory_nothing_is_added() -> None:
    model = Model()
    result = await pipeline().execute(model.llm, "q", tools=[lookup_tool()])
    assert result.success
    assert not any(WM in (system or "") for _, system in model.systems)


async def test_a_guard_stop_keeps_the_partial_output() -> None:
    def never_done(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
        return LLMResponse(text="still thinking", tool_calls=[ToolCall(f"l{len(messages)}", "lookup", '{"key": "k"}')])

    memory = MemoryManager()
    result = await ReAct(max_steps=2).execute(FunctionLLM(never_done), "q", tools=[lookup_tool()], memory=memory)
    assert result.stop_reason == "max_steps"
    scope = memory.scope("react")
    assert scope["reasoning:last_step"].startswith("observation: stopped")
    assert OUTPUT_KEY not in scope  # ReAct has no partial output before a final answer


def lookup_tool() -> Tool:
    return Tool(lookup)


def build(log: Any, llm: LLM, approval: bool = False, **options: Any) -> Agent:
    agent = Agent("memory", log=log)
    if approval:
        agent.new_tool(lookup, requires_approval=True)
    else:
        agent.new_tool(lookup, idempotent=True)  # a cut between a call and its result runs it again
    state = new_pattern_state(agent, llm, pipeline(), memory=True, **options)
    state.when_event().go_to(state)
    return agent


def scopes(records: Sequence[Record]) -> dict[str, Any]:
    variables = state_at("s", records).to_dict()["variables"]
    return {name: value for name, value in variables.items() if name.startswith("reasoning:")}


async def test_in_a_session_the_scopes_are_recorded_variables_and_replay_identically() -> None:
    model = Model()
    log = MemoryLog()
    async with build(log, model.llm) as agent:
        await agent.receive_message("s", "q")
        await agent.receive_message("s", "r")
        records = await log.read("s")
        session = await agent.get_or_create_session("s")
        assert session_memory(session).get("first", OUTPUT_KEY) == "<r> answered"

    replies = [r.data["text"] for r in records if r.kind == "reply"]
    assert replies == ["<<q> answered> answered", "<<r> answered> answered"]
    written = [r.data["name"] for r in records if r.kind == "variable_set"]
    assert {"reasoning:pipeline", "reasoning:first", "reasoning:second"} <= set(written)
    # Replay at any seq shows the memory as it was then: after the first stage answered q, its output.
    first_output = next(r.seq for r in records if r.kind == "variable_set" and r.data["name"] == "reasoning:first"
                        and OUTPUT_KEY in r.data["value"])  # fmt: skip
    then = scopes([r for r in records if r.seq <= first_output])
    assert then["reasoning:first"][OUTPUT_KEY] == "<q> answered" and "reasoning:second" not in then
    # The second message's first stage was shown what the first message left in the second's scope.
    second_message = [s or "" for task, s in model.systems if task == "r"]
    assert "- reasoning:second: <<q> answered> answered" in second_message[0]
    # A re-run of the current code over the log (memory read from the re-run's own variables) is identical.
    report = await assert_replays(log, "s", build(MemoryLog(), FunctionLLM(forbidden)))
    assert report.identical


def memory_writes(records: Sequence[Record]) -> list[tuple[str, Any]]:
    return [(r.data["name"], r.data["value"]) for r in records
            if r.kind == "variable_set" and r.data["name"].startswith("reasoning:")]  # fmt: skip


def forbidden(*_: Any, **__: Any) -> LLMResponse:
    raise AssertionError("a re-run must not call the model")


async def test_resume_after_a_crash_mid_pipeline_keeps_the_memory(tmp_path: Path) -> None:
    """Cut a SQLite log after each commit of a two-message session, restart on the cut: the run resumes
    with the memory it had, and the log ends exactly as the uncut one (a re-run over it is identical)."""
    model = Model()
    whole = tmp_path / "whole.db"
    async with build(f"sqlite:///{whole}", model.llm) as agent:
        await agent.receive_message("s", "q")
        await agent.receive_message("s", "r")
    async with open_log(f"sqlite:///{whole}") as log:
        records = await log.read("s")
    expected = scopes(records)
    assert expected["reasoning:first"][OUTPUT_KEY] == "<r> answered"
    # Cut where a crash could leave the log: inside the second message's run, at each memory write.
    second = next(r.seq for r in records if r.kind == "message_received" and r.data["text"] == "r")
    cuts = [r.seq for r in records if r.seq > second and r.kind == "variable_set"][:-1]
    assert len(cuts) > 10
    for number, cut in enumerate(cuts[::3]):
        path = tmp_path / f"cut{number}.db"
        async with open_log(f"sqlite:///{path}") as cut_log:
            await cut_log.append(records[:cut])
        resumed = Model()
        async with build(f"sqlite:///{path}", resumed.llm) as agent:
            await agent.wait_idle()
        async with open_log(f"sqlite:///{path}") as cut_log:
            after = await cut_log.read("s")
            assert any(r.kind == "step_resumed" for r in after), cut
            assert scopes(after) == expected, cut
            assert [r.data["text"] for r in after if r.kind == "reply"][-1] == "<<r> answered> answered"
            await assert_replays(cut_log, "s", build(MemoryLog(), FunctionLLM(forbidden)))
        # Model calls made after the restart were shown the memory as the uncut run showed it.
        for task, system in resumed.systems:
            assert (task, system) in model.systems, (cut, task, system)


async def test_a_run_paused_for_approval_continues_with_its_memory() -> None:
    plain = MemoryLog()
    async with build(plain, Model().llm) as agent:
        await agent.receive_message("s", "q")
        expected = scopes(await plain.read("s"))
        writes = memory_writes(await plain.read("s"))

    model = Model()
    log = MemoryLog()
    platform = RecordingPlatform()
    async with build(log, model.llm, approval=True) as agent:
        await agent.receive_message("s", "q", platform)
        for _ in range(2):  # one lookup in each stage
            (request,) = platform.approval_requests["s"][-1:]
            await (await agent.receive_event(ApprovalEvent("s", call_id=request.call_id, approved=True), platform))
        records = await log.read("s")
    assert platform.replies["s"] == ["<<q> answered> answered"]
    assert scopes(records) == expected
    assert memory_writes(records) == writes  # the continued run wrote each memory change once
    # The second stage, continued from the log after its approval, was shown the first stage's output.
    second_stage = [system or "" for task, system in model.systems if task == "<q> answered"]
    assert second_stage and all("- reasoning:first: <q> answered" in s for s in second_stage)
    await assert_replays(log, "s", build(MemoryLog(), FunctionLLM(forbidden), approval=True))
