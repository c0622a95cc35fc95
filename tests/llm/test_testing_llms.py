"""ScriptedLLM and FunctionLLM, the test models shipped in baf.testing.llms."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from baf.errors import LLMError, LLMResponseError, LLMTimeoutError
from baf.llm import LLM, LLMResponse, ToolCall, Usage
from baf.reasoning.turn import check_response
from baf.testing.llms import FunctionLLM, LLMRequest, ScriptedLLM, ScriptExhaustedError, tool_call_response

USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "search", "description": "", "parameters": {}}}


# --- ScriptedLLM ----------------------------------------------------------------------------------


async def test_scripted_plays_items_in_order() -> None:
    canned = LLMResponse(text="full", usage=Usage(3, 4))
    llm = ScriptedLLM(["first", canned])

    assert isinstance(llm, LLM)
    assert (await llm.predict_with_tools(USER, [])).text == "first"
    assert await llm.predict_with_tools(USER, []) is canned
    assert llm.calls == 2
    assert llm.remaining == 0


async def test_scripted_records_requests_as_deep_copies() -> None:
    llm = ScriptedLLM(["a"])
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi", "meta": {"n": 1}}]

    await llm.predict_with_tools(messages, [TOOL], parameters={"temperature": 0}, system_message="sys")
    messages[0]["meta"]["n"] = 2
    messages.append({"role": "assistant", "content": "later"})

    assert llm.requests == [
        LLMRequest(
            messages=[{"role": "user", "content": "hi", "meta": {"n": 1}}],
            tools=[TOOL],
            parameters={"temperature": 0},
            system_message="sys",
        )
    ]
    assert llm.last_request.tool_names == ["search"]
    assert llm.last_request.last_message == {"role": "user", "content": "hi", "meta": {"n": 1}}


async def test_scripted_raises_exception_items_and_counts_them() -> None:
    error = LLMTimeoutError("scripted timeout")
    llm = ScriptedLLM([error, "after"])

    with pytest.raises(LLMTimeoutError) as caught:
        await llm.predict_with_tools(USER, [])

    assert caught.value is error
    assert llm.calls == 1
    assert (await llm.predict_with_tools(USER, [])).text == "after"


async def test_scripted_exhaustion_is_a_test_failure_not_a_model_error() -> None:
    llm = ScriptedLLM(["only"], name="planner")
    await llm.predict_with_tools(USER, [])

    with pytest.raises(ScriptExhaustedError, match=r"'planner' was called 2 times .* only 1 responses") as caught:
        await llm.predict_with_tools([{"role": "user", "content": "one more"}], [])

    assert isinstance(caught.value, AssertionError)
    assert not isinstance(caught.value, LLMError)  # `except LLMError` cannot swallow a broken script
    assert "one more" in str(caught.value)
    assert llm.calls == 2


async def test_tool_call_ids_are_numbered_per_model() -> None:
    script = [
        ScriptedLLM.tool_call("search", {"q": "cats"}),
        ScriptedLLM.tool_calls([("search", {"q": "dogs"}), ("read", "not json{")], text="two at once"),
        ScriptedLLM.tool_call("search", {"q": "fish"}, id="mine"),
    ]
    llm = ScriptedLLM(script)

    first = await llm.predict_with_tools(USER, [TOOL])
    second = await llm.predict_with_tools(USER, [TOOL])
    third = await llm.predict_with_tools(USER, [TOOL])

    assert first.tool_calls == [ToolCall("call_1", "search", '{"q": "cats"}')]
    assert second.text == "two at once"
    assert second.tool_calls == [
        ToolCall("call_2", "search", '{"q": "dogs"}'),
        ToolCall("call_3", "read", "not json{"),  # raw strings are kept verbatim
    ]
    assert third.tool_calls == [ToolCall("mine", "search", '{"q": "fish"}')]
    # A second model built from the same items starts again at call_1: ids do not depend on test order.
    again = ScriptedLLM(script[:1])
    assert (await again.predict_with_tools(USER, [])).tool_calls[0].id == "call_1"


def test_tool_call_response_needs_a_call() -> None:
    with pytest.raises(ValueError):
        tool_call_response([])


def test_scripted_rejects_unknown_items() -> None:
    with pytest.raises(TypeError, match="item 1"):
        ScriptedLLM(["ok", {"text": "a dict"}])  # type: ignore[list-item]


async def test_scripted_delay_simulates_latency_and_keeps_call_order() -> None:
    llm = ScriptedLLM(["a", "b", "c"], delay=0.05)

    started = time.monotonic()
    answers = await asyncio.gather(
        *(llm.predict_with_tools([{"role": "user", "content": str(i)}], []) for i in range(3))
    )

    assert 0.05 <= time.monotonic() - started < 0.5  # concurrent callers wait together
    assert [answer.text for answer in answers] == ["a", "b", "c"]
    assert [request.messages[0]["content"] for request in llm.requests] == ["0", "1", "2"]


async def test_scripted_predict_helper() -> None:
    llm = ScriptedLLM(["pong"])
    assert await llm.predict("ping", system_message="be terse") == "pong"
    assert llm.last_request.system_message == "be terse"
    assert llm.last_request.tools == []


# --- FunctionLLM ----------------------------------------------------------------------------------


async def test_function_llm_sync_function() -> None:
    seen: list[dict[str, Any]] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **kwargs: Any) -> LLMResponse | str:
        seen.append({"tools": tools, **kwargs})
        messages.append({"role": "assistant", "content": "mutating my copy"})
        if len(seen) == 1:
            return ScriptedLLM.tool_call("search", {"q": messages[0]["content"]})
        return f"done after {len(messages)} messages"

    llm = FunctionLLM(model)
    conversation = [{"role": "user", "content": "hi"}]

    first = await llm.predict_with_tools(conversation, [TOOL], parameters={"seed": 1}, system_message="sys")
    second = await llm.predict_with_tools(conversation, [TOOL])

    assert first.tool_calls == [ToolCall("call_1", "search", '{"q": "hi"}')]
    assert second.text == "done after 2 messages"
    assert conversation == [{"role": "user", "content": "hi"}]  # the function got a copy
    assert llm.requests[0].messages == [{"role": "user", "content": "hi"}]
    assert seen[0] == {"tools": [TOOL], "parameters": {"seed": 1}, "system_message": "sys"}
    assert seen[1]["parameters"] == {} and seen[1]["system_message"] is None
    assert llm.calls == 2


async def test_function_llm_async_function() -> None:
    async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        await asyncio.sleep(0)
        return LLMResponse(text=messages[-1]["content"].upper(), usage=Usage(1, 1))

    llm = FunctionLLM(model, name="shouter")

    response = await llm.predict_with_tools(USER, [])

    assert response.text == "HI"
    assert llm.name == "shouter"
    assert llm.last_request.messages == USER


async def test_function_llm_errors_propagate_and_are_recorded() -> None:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **kwargs: Any) -> str:
        raise LLMTimeoutError("function says timeout")

    llm = FunctionLLM(model)

    with pytest.raises(LLMTimeoutError, match="function says timeout"):
        await llm.predict_with_tools(USER, [])
    assert llm.calls == 1


async def test_a_wrong_return_type_is_refused_by_the_kernel_naming_the_model() -> None:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **kwargs: Any) -> Any:
        return {"text": "a dict is not a response"}

    llm = FunctionLLM(model, name="fn-model")
    answer = await llm.predict_with_tools(USER, [])  # handed back as it is: the kernel checks it
    with pytest.raises(LLMResponseError, match="FunctionLLM 'fn-model' returned a response of the wrong shape: "
                       "it returned dict, not an LLMResponse"):  # fmt: skip
        check_response(answer, llm)


def test_last_request_without_calls_fails_clearly() -> None:
    with pytest.raises(AssertionError, match="has not been called"):
        _ = FunctionLLM(lambda messages, tools, **kw: "x").last_request
