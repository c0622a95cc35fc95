"""Models for tests: no server, no network, fully deterministic.

- :class:`ScriptedLLM` plays a fixed list of answers in order.
- :class:`FunctionLLM` lets a function play the model, so a test can answer based on what it was sent.

Both record every request in ``.requests`` (as :class:`LLMRequest`, with deep copies of the messages and
tools, so later changes to the conversation do not rewrite history) and count them in ``.calls``.

Tool calls built with :func:`tool_call_response` (also ``ScriptedLLM.tool_call``) may leave their id
out; the test model then gives them ``call_1``, ``call_2``, ... in the order it produces them, so ids are
unique within one model and do not depend on which other tests ran first.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from baf.llm.base import LLM, LLMResponse, TextSink, ToolCall
from baf.llm.call_ids import ToolCallNumbering

__all__ = [
    "FunctionLLM",
    "LLMRequest",
    "ScriptExhaustedError",
    "ScriptItem",
    "ScriptedLLM",
    "tool_call_response",
]

#: One scripted answer: a response, a plain text answer, or an exception to raise.
ScriptItem: TypeAlias = LLMResponse | str | BaseException

#: What a FunctionLLM function may return (directly or from a coroutine).
FunctionResult: TypeAlias = LLMResponse | str

#: Arguments of a scripted tool call: a dict (serialised to JSON) or a raw string sent verbatim, which
#: is how a test feeds the tool layer malformed JSON.
ToolArguments: TypeAlias = Mapping[str, Any] | str


class ScriptExhaustedError(AssertionError):
    """A :class:`ScriptedLLM` was called more times than it has answers.

    An ``AssertionError`` on purpose, not an ``LLMError``: a script that is too short is a broken test,
    and code that contains model failures (``except LLMError``) must not turn it into a recorded
    outage that lets the test pass.
    """


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One call a test model received."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    parameters: dict[str, Any] = field(default_factory=dict)
    system_message: str | None = None

    @property
    def last_message(self) -> dict[str, Any] | None:
        """The final message of the conversation sent, if any."""
        return self.messages[-1] if self.messages else None

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered in this call."""
        return [str(tool.get("function", {}).get("name")) for tool in self.tools]


def tool_call_response(
    calls: Iterable[tuple[str, ToolArguments] | ToolCall],
    text: str | None = None,
) -> LLMResponse:
    """A response asking for one or more tool calls.

    Each call is a ``ToolCall`` or a ``(name, arguments)`` pair; pairs get an empty id that the test
    model fills in (``call_1``, ``call_2``, ...) when it plays the response.
    """
    tool_calls = [
        call if isinstance(call, ToolCall) else ToolCall(id="", name=call[0], arguments=_arguments(call[1]))
        for call in calls
    ]
    if not tool_calls:
        raise ValueError("tool_call_response needs at least one call")
    return LLMResponse(text=text, tool_calls=tool_calls)


def _arguments(arguments: ToolArguments) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(dict(arguments))


class _TestLLM(LLM):
    """What both test models share: request recording and deterministic tool-call ids."""

    provider = "baf.testing"

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[LLMRequest] = []
        self._call_ids = ToolCallNumbering("call_")

    @property
    def calls(self) -> int:
        """How many times the model was called (including calls that raised)."""
        return len(self.requests)

    @property
    def last_request(self) -> LLMRequest:
        """The most recent request; fails the test when there was none."""
        if not self.requests:
            raise AssertionError(f"{type(self).__name__} {self.name!r} has not been called")
        return self.requests[-1]

    def _record(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None,
        system_message: str | None,
    ) -> LLMRequest:
        request = LLMRequest(
            messages=copy.deepcopy(messages),
            tools=copy.deepcopy(tools),
            parameters=copy.deepcopy(parameters or {}),
            system_message=system_message,
        )
        self.requests.append(request)
        return request

    def _finish(self, result: object) -> LLMResponse:
        """Turn a scripted answer into the response to return, numbering id-less tool calls.

        Anything that is not a string or a well-formed response is handed back as it is: the reasoning
        kernel checks every adapter's response in one place and reports what is wrong with it
        (``baf.reasoning.turn.check_response``)."""
        if isinstance(result, str):
            return LLMResponse(text=result)
        if not isinstance(result, LLMResponse) or not isinstance(result.tool_calls, list):
            return result  # type: ignore[return-value]  # refused by the kernel, naming this model
        return self._call_ids.number(result)


class ScriptedLLM(_TestLLM):
    """A model that answers from a script, one item per call, in order.

    Each item is an :class:`LLMResponse`, a ``str`` (a text answer), or an exception instance, which is
    raised for that call (e.g. ``LLMTimeoutError("...")`` to test error handling). Calling once more than
    the script allows raises :class:`ScriptExhaustedError`.

    :param delay: seconds to ``asyncio.sleep`` before each answer, to simulate latency.
    :param stream: stream the text of each answer word by word (:meth:`stream_with_tools`), as a
        streaming model does, so a platform's ``reply_delta`` can be tested without a server.
    """

    def __init__(
        self, responses: Sequence[ScriptItem], *, name: str = "scripted", delay: float = 0.0, stream: bool = False
    ) -> None:
        super().__init__(name)
        self.streams = stream
        for index, item in enumerate(responses):
            if not isinstance(item, LLMResponse | str | BaseException):
                raise TypeError(
                    f"ScriptedLLM item {index} is a {type(item).__name__}; "
                    f"use an LLMResponse, a str or an exception instance"
                )
        self.responses: list[ScriptItem] = list(responses)
        self.delay = delay
        self._position = 0

    @staticmethod
    def tool_call(name: str, arguments: ToolArguments, id: str | None = None) -> LLMResponse:
        """A response with a single tool call; without ``id`` the model numbers it ``call_N``."""
        return tool_call_response([ToolCall(id=id or "", name=name, arguments=_arguments(arguments))])

    @staticmethod
    def tool_calls(calls: Iterable[tuple[str, ToolArguments] | ToolCall], text: str | None = None) -> LLMResponse:
        """A response with several tool calls (parallel calling), optionally with text too."""
        return tool_call_response(calls, text=text)

    @property
    def remaining(self) -> int:
        """Script items not played yet; a test can assert this is 0 to check nothing was skipped."""
        return len(self.responses) - self._position

    async def predict_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """Return (or raise) the next scripted item."""
        self._record(messages, tools, parameters, system_message)
        # Taken before sleeping so that concurrent callers get items in the order they called.
        if self._position >= len(self.responses):
            raise ScriptExhaustedError(
                f"ScriptedLLM {self.name!r} was called {self.calls} times but its script has only "
                f"{len(self.responses)} responses; last message: {self.last_request.last_message!r}"
            )
        item = self.responses[self._position]
        self._position += 1
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        if isinstance(item, BaseException):
            raise item
        return self._finish(item)

    async def stream_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: TextSink,
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """The next scripted item, its text handed to ``on_text`` word by word first (attempt 1)."""
        response = await self.predict_with_tools(messages, tools, parameters, system_message)
        text = response.text if isinstance(response, LLMResponse) else None
        if isinstance(text, str):
            for piece in re.findall(r"\s*\S+\s*|\s+", text):
                await on_text(piece, 1)
        return response


#: The signature of a FunctionLLM function: ``fn(messages, tools, *, parameters, system_message)``.
ModelFunction: TypeAlias = Callable[..., FunctionResult | Awaitable[FunctionResult]]


class FunctionLLM(_TestLLM):
    """A model played by a function, sync or async.

    ``fn(messages, tools, parameters=..., system_message=...)`` returns an :class:`LLMResponse` or a
    ``str`` (a text answer); whatever it raises propagates. It gets its own copies of the messages and
    tools, so it cannot change the caller's conversation or the recorded request.
    """

    def __init__(self, fn: ModelFunction, *, name: str = "function") -> None:
        super().__init__(name)
        self.fn = fn

    async def predict_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """Call the function and return what it answers."""
        self._record(messages, tools, parameters, system_message)
        result = self.fn(
            copy.deepcopy(messages),
            copy.deepcopy(tools),
            parameters=copy.deepcopy(parameters or {}),
            system_message=system_message,
        )
        if inspect.isawaitable(result):
            result = await result
        return self._finish(result)
