"""Tool calls in the loop: concurrency, timeouts, and bad input answered with clear errors."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from pathlib import Path
from typing import Any

import pytest

from baf import Agent, ReceiveTextEvent, Session
from baf.errors import ConfigurationError, LogClosedError, ToolTimeoutError
from baf.llm.base import LLMResponse, ToolCall
from baf.log import open_log
from baf.reasoning import Tool
from baf.testing import RecordingPlatform, ScriptedLLM

from .helpers import reasoning_agent, records_of, tool_messages


def rendezvous_tools(agent: Agent) -> None:
    """Two tools that each wait for the other to start: run one after the other, the first never ends."""
    started = {"ping": asyncio.Event(), "pong": asyncio.Event()}

    async def ping() -> str:
        """Wait for pong."""
        started["ping"].set()
        await started["pong"].wait()
        return "ping done"

    async def pong() -> str:
        """Wait for ping."""
        started["pong"].set()
        await started["ping"].wait()
        return "pong done"

    agent.add_tool(ping)
    agent.add_tool(pong)


def rendezvous_script() -> ScriptedLLM:
    return ScriptedLLM([ScriptedLLM.tool_calls([("ping", {}), ("pong", {})]), "both ran"])


async def test_tool_calls_of_one_turn_run_concurrently(platform: RecordingPlatform) -> None:
    llm = rendezvous_script()
    agent, _ = reasoning_agent(llm, enable_task_planning=False, tool_timeout=30)
    rendezvous_tools(agent)
    async with agent:
        await asyncio.wait_for(agent.receive_message("s", "go", platform), timeout=5)
    assert platform.replies["s"] == ["both ran"]
    assert tool_messages(llm.requests[1]) == [
        {"role": "tool", "tool_call_id": "call_1", "content": "ping done"},
        {"role": "tool", "tool_call_id": "call_2", "content": "pong done"},
    ]


async def test_one_parallel_slot_runs_calls_in_turn_and_the_timeout_frees_it(platform: RecordingPlatform) -> None:
    llm = rendezvous_script()
    agent, _ = reasoning_agent(llm, enable_task_planning=False, max_parallel_tools=1, tool_timeout=0.2)
    rendezvous_tools(agent)
    async with agent:
        await asyncio.wait_for(agent.receive_message("s", "go", platform), timeout=5)
        results = await records_of(agent, "s", "tool_result")
    assert platform.replies["s"] == ["both ran"]
    # ping ran alone and timed out waiting for pong; pong then found ping started. Results in call order.
    ping, pong = tool_messages(llm.requests[1])
    assert ping == {
        "role": "tool", "tool_call_id": "call_1", "content": "Error: tool 'ping' did not finish within 0.2 seconds.",
    }  # fmt: skip
    assert pong == {"role": "tool", "tool_call_id": "call_2", "content": "pong done"}
    assert [(r.data["name"], r.data["is_error"]) for r in results] == [("ping", True), ("pong", False)]


async def test_parallel_tool_calls_are_bounded(platform: RecordingPlatform) -> None:
    running = 0
    peak = 0

    async def work(n: int) -> int:
        """Do some work.

        Args:
            n: A number.
        """
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return n

    llm = ScriptedLLM([ScriptedLLM.tool_calls([("work", {"n": n}) for n in range(6)]), "done"])
    agent, _ = reasoning_agent(llm, max_parallel_tools=2)
    agent.add_tool(work)
    async with agent:
        await agent.receive_message("s", "go", platform)
    assert peak == 2
    assert [m["content"] for m in tool_messages(llm.requests[1])] == ["0", "1", "2", "3", "4", "5"]


def weather(city: str, unit: str | None = None, days: int = 1) -> str:
    """The weather in a city.

    Args:
        city: The city.
        unit: "C" or "F".
        days: How many days.
    """
    return f"{city}: sunny ({unit or 'C'}, {days} day(s))"


def explode() -> str:
    """Always fails."""
    raise ValueError("boom")


async def slow() -> str:
    """Never finishes in time."""
    await asyncio.sleep(10)
    return "late"


def huge() -> str:
    """Returns far too much."""
    return "x" * 50_000


# (name, raw arguments, fragment of the message the model must get, is_error)
BAD_INPUT = {
    "unknown tool": ("weathr", "{}", "Error: there is no tool named 'weathr'. Available tools: weather,", True),
    "not JSON": ("weather", '{"city": "Paris"', "are not valid JSON", True),
    "wrong type": ("weather", '{"city": 3}', "Invalid arguments for tool 'weather'", True),
    "missing argument": ("weather", "{}", "missing required argument 'city'", True),
    "unknown argument": ("weather", '{"city": "Paris", "country": "FR"}', "unknown argument 'country'", True),
    "tool raises": ("explode", "{}", "Error: tool 'explode' failed: ValueError: boom", True),
    "tool times out": ("slow", "{}", "Error: tool 'slow' did not finish within 0.1 seconds.", True),
    "null optional": ("weather", '{"city": "Paris", "unit": null}', "Paris: sunny (C, 1 day(s))", False),
    "empty task": ("add_tasks", '{"descriptions": ["Go", " "]}', "description 2 is empty; no tasks were added", True),
    "no tasks": ("add_tasks", '{"descriptions": []}', "needs at least one description", True),
    "unknown task": ("complete_task", '{"task_id": 7, "result": "x"}', "there is no task 7 (task ids: none yet)", True),
    "bad task id": ("skip_task", '{"task_id": "one", "reason": "x"}', "Invalid arguments for tool 'skip_task'", True),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_INPUT))
async def test_bad_input_gets_a_clear_error_and_the_loop_goes_on(case: str, platform: RecordingPlatform) -> None:
    name, arguments, expected, is_error = BAD_INPUT[case]
    llm = ScriptedLLM([LLMResponse(tool_calls=[ToolCall("c1", name, arguments)]), "recovered"])
    agent, _ = reasoning_agent(llm, tool_timeout=0.1)
    for tool in (weather, explode, slow, huge):
        agent.add_tool(tool)
    async with agent:
        session = await agent.receive_message("s", "try", platform)
        results = await records_of(agent, "s", "tool_result")
        responses = await records_of(agent, "s", "llm_response")
        errors = await records_of(agent, "s", "error")
    assert platform.replies["s"] == ["recovered"]
    (message,) = tool_messages(llm.requests[1])
    assert message["tool_call_id"] == "c1"
    assert expected in message["content"]
    assert message["content"].startswith("Error: ") is is_error
    assert results[0].data["is_error"] is is_error and results[0].data["content"] == message["content"]
    # The model's arguments are recorded exactly as it sent them, never repaired.
    assert responses[0].data["tool_calls"] == [{"id": "c1", "name": name, "arguments": arguments}]
    # Failures (planning tools included) show in the step stream as failed tool results.
    step = platform.steps["s"][2]
    if is_error:
        assert (step.kind, step.details["is_error"], step.details["name"]) == ("tool_result", True, name)
        assert step.details["result"] == message["content"]
        assert platform.task_lists["s"] == []
        assert session["reasoning_scratchpad"]["tasks"] == []
        assert "No tasks yet." in (llm.requests[1].system_message or "")
    # Only a tool's own crash is an error record (with the traceback); bad input from the model is not.
    assert [e.data["source"] for e in errors] == (["tool"] if case == "tool raises" else [])
    if case == "tool raises":
        assert errors[0].data["type"] == "ValueError" and "boom" in errors[0].data["traceback"]
        assert errors[0].data["tool"] == "explode" and errors[0].data["call_id"] == "c1"


async def test_huge_output_is_capped_with_its_size(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("huge", {}), "ok"])
    agent, _ = reasoning_agent(llm, max_tool_output=1000)
    agent.add_tool(huge)
    async with agent:
        await agent.receive_message("s", "go", platform)
        (result,) = await records_of(agent, "s", "tool_result")
    content = tool_messages(llm.requests[1])[0]["content"]
    assert content == "x" * 1000 + "\n[output truncated: 50000 characters in all, the first 1000 shown]"
    assert result.data["content"] == content
    assert result.data["original_size"] == 50_000 and result.data["is_error"] is False


async def test_complete_twice_and_skip_completed_are_refused(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([
        ScriptedLLM.tool_call("add_tasks", {"descriptions": ["One"]}),
        ScriptedLLM.tool_calls([
            ("complete_task", {"task_id": 1, "result": "done"}),
            ("complete_task", {"task_id": 1, "result": "again"}),
            ("skip_task", {"task_id": 1, "reason": "no"}),
        ]),
        "finished",
    ])  # fmt: skip
    agent, _ = reasoning_agent(llm)
    async with agent:
        session = await agent.receive_message("s", "go", platform)
    contents = [m["content"] for m in tool_messages(llm.requests[2])]
    assert contents[1:] == [
        "Task 1 completed.", "Error: task 1 is already completed", "Error: task 1 is already completed",
    ]  # fmt: skip
    assert [s.kind for s in platform.steps["s"]][4:7] == ["task_completed", "tool_result", "tool_result"]
    assert session["reasoning_scratchpad"]["tasks"][0]["result"] == "done"


async def test_workspace_tools_and_path_escape(tmp_path: Path, platform: RecordingPlatform) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "todo.md").write_text("- buy milk\n")
    (tmp_path / "secret.txt").write_text("password")
    (tmp_path / "notes-private").mkdir()
    (tmp_path / "notes-private" / "diary.txt").write_text("dear diary")

    llm = ScriptedLLM([
        ScriptedLLM.tool_call("list_directory", {}),
        ScriptedLLM.tool_calls([
            ("read_file", {"relative_path": "todo.md"}),
            ("read_file", {"relative_path": "../secret.txt"}),
            ("read_file", {"relative_path": str(tmp_path / "secret.txt")}),
            ("read_file", {"relative_path": "../notes-private/diary.txt"}),
            ("write_file", {"relative_path": "x.txt", "content": "hi"}),
        ]),
        "Buy milk.",
    ])  # fmt: skip
    agent, _ = reasoning_agent(llm)
    agent.new_workspace(root, name="notes")
    async with agent:
        await agent.receive_message("s", "what is on my list?", platform)
    assert platform.replies["s"] == ["Buy milk."]
    names = llm.requests[0].tool_names
    assert "list_directory" in names and "read_file" in names
    assert "write_file" not in names  # read-only by default
    assert "todo.md" in tool_messages(llm.requests[1])[0]["content"]
    results = [m["content"] for m in tool_messages(llm.requests[2])][1:]
    assert results[0] == "- buy milk\n"
    assert results[1].startswith("Error: ") and "uses '..' to leave workspace 'notes'" in results[1]
    assert results[2].startswith("Error: ") and "is absolute" in results[2]
    assert results[3].startswith("Error: ") and "'..'" in results[3]
    assert "there is no tool named 'write_file'" in results[4]
    assert "password" not in str(llm.requests[2].messages) and "dear diary" not in str(llm.requests[2].messages)


async def test_tool_that_takes_the_session(platform: RecordingPlatform) -> None:
    def remember(fact: str, session: Any) -> str:
        """Remember a fact.

        Args:
            fact: The fact.
        """
        session.set("fact", fact)
        return "remembered"

    llm = ScriptedLLM([ScriptedLLM.tool_call("remember", {"fact": "sky is blue"}), "ok"])
    agent, _ = reasoning_agent(llm)
    agent.add_tool(remember)
    async with agent:
        session = await agent.receive_message("s", "remember", platform)
        assert session["fact"] == "sky is blue"
    assert "session" not in str(llm.requests[0].tools[0]["function"]["parameters"]["properties"])


@pytest.mark.parametrize("clash", ["workspace", "planning"])
async def test_a_user_tool_named_like_a_builtin_tool_is_refused(
    clash: str, tmp_path: Path, platform: RecordingPlatform
) -> None:
    name = "read_file" if clash == "workspace" else "add_tasks"

    def shadowed(text: str) -> str:
        """A user's tool.

        Args:
            text: Anything.
        """
        return text

    def agent_with(llm: ScriptedLLM) -> Agent:
        agent, _ = reasoning_agent(llm)
        if clash == "workspace":
            agent.new_workspace(tmp_path)
        return agent

    # Known at start: the agent does not start.
    early = agent_with(ScriptedLLM(["never used"]))
    early.new_tool(shadowed, name=name)
    with pytest.raises(ConfigurationError, match=repr(name)):
        await early.start()
    await early.stop()

    # Added while running: the turn is refused before the model is asked with an ambiguous tool set.
    llm = ScriptedLLM(["never used"])
    late = agent_with(llm)
    async with late:
        late.new_tool(shadowed, name=name)
        await late.receive_message("s", "hi", platform)
        errors = await records_of(late, "s", "error")
    assert llm.requests == []
    assert len(errors) == 1 and repr(name) in errors[0].data["message"] and "rename" in errors[0].data["message"]
    assert "ConfigurationError" in platform.errors["s"][0]


async def test_planning_tool_names_are_free_without_task_planning(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("add_tasks", {"text": "mine"}), "done"])
    agent, _ = reasoning_agent(llm, enable_task_planning=False)

    def add_tasks(text: str) -> str:
        """The user's own tool.

        Args:
            text: Anything.
        """
        return f"user tool got {text}"

    agent.new_tool(add_tasks)
    async with agent:
        await agent.receive_message("s", "hi", platform)
    assert tool_messages(llm.requests[1])[0]["content"] == "user tool got mine"


_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="unset")


async def test_a_sync_tool_called_with_a_session_runs_on_the_agents_threads_with_the_callers_context(
    platform: RecordingPlatform,
) -> None:
    def where() -> str:
        return f"{threading.current_thread().name} {_REQUEST.get()}"

    agent = Agent("a", log="memory://", max_body_threads=1)
    agent.new_state("idle", initial=True)
    async with agent:
        session = await agent.get_or_create_session("s", platform)
        token = _REQUEST.set("mine")
        try:
            # The agent's daemon threads for tools (max_body_threads of them), not asyncio's default ones.
            assert await Tool(where).call({}, session=session) == "baf-tool_0 mine"
        finally:
            _REQUEST.reset(token)


async def test_the_reasoning_loop_runs_sync_tools_on_the_agents_threads(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("where", {}), "done"])
    agent, _ = reasoning_agent(llm, enable_task_planning=False)

    def where() -> str:
        """Name the thread this runs in."""
        return threading.current_thread().name

    agent.new_tool(where)
    async with agent:
        await agent.receive_message("s", "hi", platform)
    assert tool_messages(llm.requests[1])[0]["content"].startswith("baf-tool_")


async def test_sync_tools_that_time_out_leave_the_threads_of_sync_bodies_free(platform: RecordingPlatform) -> None:
    # A timed-out sync tool keeps its thread until it returns (Python cannot stop it); with tools on the
    # bodies' threads, max_body_threads of them would leave every sync body waiting for a thread.
    release = threading.Event()

    def stuck() -> str:
        release.wait(10)
        return "late"

    replies: list[str] = []

    def body(session: Session) -> None:
        replies.append(threading.current_thread().name)

    agent = Agent("a", log="memory://", max_body_threads=1)
    state = agent.new_state("idle", initial=True)
    state.set_body(body)
    state.when_event().go_to(state)
    try:
        async with agent:
            session = await agent.get_or_create_session("s", platform)
            with pytest.raises(ToolTimeoutError):
                await Tool(stuck, timeout=0.05).call({}, session=session)
            await asyncio.wait_for(agent.receive_message("s", "hi", platform), 5)
            assert replies and replies[-1].startswith("baf-body_")
    finally:
        release.set()


async def test_interrupt_abandons_a_sync_tool_whose_late_calls_fail_clearly(
    db_url: str, platform: RecordingPlatform
) -> None:
    started, release = threading.Event(), threading.Event()
    late: dict[str, BaseException | None] = {}

    def slow(session: Session) -> str:
        """Wait to be released, then set a variable."""
        started.set()
        release.wait(10)
        try:
            session.set("x", 1)
            late["set"] = None
        except Exception as exc:  # what the abandoned thread sees
            late["set"] = exc
        return "late result"

    llm = ScriptedLLM([ScriptedLLM.tool_call("slow", {}), "never reached"])
    agent, _ = reasoning_agent(llm, log=db_url, enable_task_planning=False)
    agent.new_tool(slow)
    await agent.start()
    runtime = agent.runtime
    await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
    assert await asyncio.to_thread(started.wait, 10)
    stopping = asyncio.ensure_future(agent.stop())
    await asyncio.sleep(0.05)
    runtime.interrupt()
    await asyncio.wait_for(stopping, 5)  # did not wait for the tool, still blocked

    release.set()
    for _ in range(100):
        if "set" in late:
            break
        await asyncio.sleep(0.02)
    assert isinstance(late["set"], LogClosedError)
    async with open_log(db_url) as log:
        records = await log.read("s")
    assert not [r for r in records if r.kind == "tool_result" or r.data.get("name") == "x"]
    assert records[-1].kind == "step_finished" and records[-1].data["interrupted_by"] == "user"
