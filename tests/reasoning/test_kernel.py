"""The reasoning kernel's own guarantees, through both engines (the reasoning state and a pattern state):
every adapter's response is checked in one place, and tool-call arguments over the size limit are refused
without being copied all over the log."""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from baf import Agent
from baf.library.state.pattern_state import new_pattern_state
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.reasoning.patterns import ReAct
from baf.testing import FunctionLLM, RecordingPlatform, ScriptedLLM


class OddLLM(LLM):
    """A custom adapter answering with a response of the wrong shape."""

    name = "odd-model"

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def predict_with_tools(self, messages: Any, tools: Any, parameters: Any = None,
                                 system_message: Any = None) -> LLMResponse:  # fmt: skip
        return self.answer  # type: ignore[no-any-return]


def _no_calls() -> LLMResponse:
    return LLMResponse(text=None, tool_calls=None)  # type: ignore[arg-type]  # the wrong shape on purpose


WRONG_SHAPES: list[tuple[Callable[[], LLM], str, str]] = [
    (lambda: FunctionLLM(lambda messages, tools, **kw: _no_calls(), name="fn"),
     "FunctionLLM 'fn'", "tool_calls is NoneType, expected a list of ToolCall"),
    (lambda: ScriptedLLM([_no_calls()], name="script"), "ScriptedLLM 'script'", "tool_calls is NoneType"),
    (lambda: OddLLM(_no_calls()), "OddLLM 'odd-model'", "tool_calls is NoneType"),
    (lambda: OddLLM(LLMResponse(text=42)), "OddLLM 'odd-model'", "text is int"),  # type: ignore[arg-type]
    (lambda: OddLLM(LLMResponse(tool_calls=[object()])), "OddLLM 'odd-model'",  # type: ignore[list-item]
     "tool_calls[0] is object, not a ToolCall"),
    (lambda: OddLLM({"text": "hi"}), "OddLLM 'odd-model'", "it returned dict, not an LLMResponse"),
    (lambda: OddLLM(None), "OddLLM 'odd-model'", "it returned NoneType, not an LLMResponse"),
]  # fmt: skip


@pytest.mark.parametrize("engine", ["reasoning", "react"])
@pytest.mark.parametrize(("make", "adapter", "problem"), WRONG_SHAPES)
async def test_a_response_of_the_wrong_shape_is_an_error_record_and_a_clear_reply(
    make: Callable[[], LLM], adapter: str, problem: str, engine: str
) -> None:
    llm = make()
    agent = Agent("shapes", log="memory://")
    if engine == "reasoning":
        state = new_reasoning_state(agent, llm)
    else:
        state = new_pattern_state(agent, llm, ReAct(max_steps=2))
    state.when_event().go_to(state)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "hello", platform)
        records = await agent.log.read("s")
    errors = [r.data for r in records if r.kind == "error"]
    assert len(errors) == 1, errors
    error = errors[0]
    assert error["type"] == "LLMResponseError" and error["source"] in ("llm", "pattern")
    assert adapter in error["message"] and problem in error["message"]
    (reply,) = platform.replies["s"]
    assert adapter in reply and problem in reply  # the user is told what went wrong, not "TypeError"
    assert "TypeError" not in reply
    assert not any(r.kind == "llm_response" for r in records)  # a wrong response is never recorded as one


@pytest.mark.parametrize("engine", ["reasoning", "react"])
async def test_a_10_mb_argument_is_refused_and_stored_once(tmp_path: Path, engine: str) -> None:
    huge = json.dumps({"text": "x" * 10_000_000})
    ran: list[int] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse | str:
        told = [m["content"] for m in messages if m["role"] == "tool"]
        if not told:
            return LLMResponse(tool_calls=[ToolCall("big", "write_note", huge)])
        if engine == "react":
            return LLMResponse(tool_calls=[ToolCall("fin", "final_answer", json.dumps({"answer": told[0][:120]}))])
        return told[0][:120]

    db = tmp_path / "big.db"
    agent = Agent("big", log=f"sqlite:///{db}")
    if engine == "reasoning":
        state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False)
    else:
        state = new_pattern_state(agent, FunctionLLM(model), ReAct(max_steps=3))
    state.when_event().go_to(state)

    @agent.tool
    def write_note(text: str) -> str:
        """Write a note.

        Args:
            text: The note.
        """
        ran.append(len(text))
        return "noted"

    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "write it down", platform)
        records = await agent.log.read("s")
    assert ran == []  # refused: the tool never ran
    result = next(r.data for r in records if r.kind == "tool_result" and r.data["call_id"] == "big")
    assert result["is_error"] and "10000012 characters long; at most 1000000 are accepted" in result["content"]
    assert "at most 1000000" in platform.replies["s"][0]  # the model was told the reason, and said so
    # One full copy, in the llm_response; every other record keeps a shortened one with the size.
    payload = "x" * 10_000_000
    full_copies = [r.kind for r in records if payload in json.dumps(r.data)]
    assert full_copies == ["llm_response"]
    big = [r for r in records if len(json.dumps(r.data)) > 100_000]
    assert [r.kind for r in big] == ["llm_response"]
    steps = [r.data for r in records if r.kind == "reasoning_step"
             and r.data["kind"] in ("llm_tool_calls", "tool_result", "action")]  # fmt: skip
    assert steps and all('"arguments_size": 10000012' in json.dumps(s) for s in steps)
    if engine == "reasoning":
        pad = next(r.data["value"] for r in records if r.kind == "variable_set")
        assert payload not in json.dumps(pad) and '"arguments_size": 10000012' in json.dumps(pad)
    assert db.stat().st_size < 15_000_000  # was ~60 MB: the argument stored six times


def test_an_unknown_tool_is_a_tool_not_found_error_naming_the_ones_there_are() -> None:
    from baf.errors import ToolNotFoundError
    from baf.reasoning.tool import Tool
    from baf.reasoning.tool_calls import find_tool

    def add(a: int, b: int) -> int:
        return a + b

    tools = {"add": Tool(add)}
    assert find_tool(tools, "add") is tools["add"]
    with pytest.raises(ToolNotFoundError, match=r"^there is no tool named 'sub'. Available tools: add.$"):
        find_tool(tools, "sub")
    with pytest.raises(ToolNotFoundError, match="Available tools: none"):
        find_tool({}, "sub")


def test_resuming_records_in_an_order_baf_never_writes_is_an_invariant_error() -> None:
    """A tool result before any model response of the loop: serving it would answer a call the model
    never made, so the resume stops with the session and seq instead of skipping the record."""
    from baf.errors import InvariantError
    from baf.log.record import Record, RecordKind
    from baf.reasoning.resume import ResumeEffects

    started = Record("s1", 4, RecordKind.REASONING_STEP, {"kind": "reasoning_started"})
    stray = Record("s1", 5, RecordKind.TOOL_RESULT, {"step": 1, "call_id": "c1", "name": "add", "content": "3",
                                                      "is_error": False, "original_size": 1})  # fmt: skip
    with pytest.raises(InvariantError, match=r"session 's1', seq 5: a tool_result record comes before any"):
        ResumeEffects([started, stray])


_SEEN_BY_TOOLS: contextvars.ContextVar[str] = contextvars.ContextVar("seen_by_tools", default="unset")


@pytest.mark.parametrize("engine", ["reasoning", "react"])
@pytest.mark.parametrize("max_parallel", [1, 4])
async def test_context_variables_a_tool_sets_stay_in_that_call(engine: str, max_parallel: int) -> None:
    """Each call runs in a copy of the loop's context, alone or with others: what a tool sets in a context
    variable is gone for the next call, the next turn and the next message (the same session task)."""
    seen: list[str] = []
    turns = [
        [ToolCall("a", "mark", '{"value": "first"}')],  # a response's only call
        [ToolCall("b", "mark", '{"value": "second"}'), ToolCall("c", "mark", '{"value": "third"}')],
        [ToolCall("d", "mark", '{"value": "fourth"}')],
    ]
    given = [0]

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse | str:
        turn = given[0]
        given[0] += 1
        if turn % (len(turns) + 1) < len(turns):
            return LLMResponse(tool_calls=turns[turn % (len(turns) + 1)])
        if engine == "react":
            return LLMResponse(tool_calls=[ToolCall("fin", "final_answer", json.dumps({"answer": "done"}))])
        return "done"

    agent = Agent("ctx", log="memory://")
    if engine == "reasoning":
        state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False,
                                    max_parallel_tools=max_parallel)  # fmt: skip
    else:
        state = new_pattern_state(agent, FunctionLLM(model), ReAct(max_steps=6, max_parallel_tools=max_parallel))
    state.when_event().go_to(state)

    @agent.tool
    async def mark(value: str) -> str:
        """Remember a value in a context variable.

        Args:
            value: The value.
        """
        seen.append(_SEEN_BY_TOOLS.get())
        _SEEN_BY_TOOLS.set(value)
        await asyncio.sleep(0)
        assert _SEEN_BY_TOOLS.get() == value  # the call's own setting holds within the call
        return "marked"

    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "mark them", platform)
        await agent.receive_message("s", "again", platform)
    assert platform.replies["s"] == ["done", "done"]
    assert seen == ["unset"] * 8


async def test_a_coroutine_run_in_its_own_context_returns_raises_and_is_cancelled_as_if_awaited() -> None:
    from baf.reasoning.awaiting import in_own_context

    cleaned: list[str] = []

    async def answer() -> int:
        _SEEN_BY_TOOLS.set("inside")
        await asyncio.sleep(0)
        return 42

    async def fail() -> None:
        await asyncio.sleep(0)
        raise ValueError("no")

    async def hang() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append(_SEEN_BY_TOOLS.get())

    assert await in_own_context(answer()) == 42 and _SEEN_BY_TOOLS.get() == "unset"
    with pytest.raises(ValueError, match="no"):
        await in_own_context(fail())
    _SEEN_BY_TOOLS.set("outer")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await in_own_context(hang())
    assert cleaned == ["outer"]  # cancelled inside, where it reads the context it was given


async def _under_asyncio_timeout(coroutine: Any, limit: float | None) -> Any:
    async with asyncio.timeout(limit):
        return await coroutine


async def _under_time_limited(coroutine: Any, limit: float | None) -> Any:
    from baf.reasoning.awaiting import time_limited

    return await time_limited(coroutine, limit)


@pytest.mark.parametrize("limited", [_under_asyncio_timeout, _under_time_limited], ids=["asyncio", "baf"])
async def test_a_time_limited_coroutine_ends_as_under_asyncio_timeout(limited: Any) -> None:
    """time_limited arms its timer only when the coroutine first waits; each case ends as it does under
    ``asyncio.timeout`` (run both ways)."""
    cleaned: list[str] = []

    async def at_once() -> str:
        return "now"

    async def after_a_wait() -> str:
        await asyncio.sleep(0)
        return "later"

    async def fail_at_once() -> None:
        raise ValueError("at once")

    async def fail_later() -> None:
        await asyncio.sleep(0)
        raise ValueError("later")

    async def own_timeout() -> None:
        await asyncio.sleep(0)
        raise TimeoutError("the tool's own")

    async def hang() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append("hang")

    async def busy_then_answer() -> str:
        time.sleep(0.15)  # noqa: ASYNC251  # past the limit without waiting: nothing can interrupt it
        return "busy"

    async def busy_then_wait() -> str:
        time.sleep(0.15)  # noqa: ASYNC251  # the limit counts from the start: the first wait is too late
        await asyncio.sleep(0.05)
        return "too late"

    assert await limited(at_once(), 0.1) == "now"
    assert await limited(after_a_wait(), 0.1) == "later"
    assert await limited(after_a_wait(), None) == "later"
    with pytest.raises(ValueError, match="at once"):
        await limited(fail_at_once(), 0.1)
    with pytest.raises(ValueError, match="later"):
        await limited(fail_later(), 0.1)
    with pytest.raises(TimeoutError, match="the tool's own"):
        await limited(own_timeout(), 0.1)
    with pytest.raises(TimeoutError):
        await limited(hang(), 0.05)
    assert cleaned == ["hang"]
    assert await limited(busy_then_answer(), 0.1) == "busy"
    with pytest.raises(TimeoutError):
        await limited(busy_then_wait(), 0.1)
    # Any awaitable, not only a coroutine (a tool's ``call`` may hand back a future).
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[str] = loop.create_future()
    loop.call_later(0.01, answered.set_result, "future")
    assert await limited(answered, 0.1) == "future"
    with pytest.raises(TimeoutError):
        await limited(loop.create_future(), 0.05)
    # Cancelled from outside (the agent stopping): a cancellation, not a timeout, and the coroutine sees it.
    task = asyncio.ensure_future(limited(hang(), 30))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["hang", "hang"]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
