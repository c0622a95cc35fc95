"""The model turn: the one way every reasoning loop (the reasoning state, each pattern) calls its model.

A turn is::

    record llm_request → commit → response from the effect source (resume, re-run) or the model
      → check its shape → record llm_response (with latency, usage and, given a price table, cost)

so the request is durable before the model sees it, and a response is durable before anything acts
on it. The tool calls a response asks for go to :class:`~baf.reasoning.tool_calls.ToolRunner`.

**The record shape (version 2).** Each loop *run* (the reasoning state's invocation, one pattern
execution, each stage of a pipeline) has a name (``loop``: ``"reasoning"`` or the pattern's name) and
a number within its invocation (``run``); its model calls are its ``turn`` 0, 1, 2, ...; ``step`` is
the loop's own step counter. An ``llm_request`` carries::

    {"loop", "run", "turn", "step", "model", "purpose"?, "extends"?, "messages", "system"?, "tools"?,
     "parameters"?}

With ``"extends": true`` the record continues the previous request of the same run: ``messages`` are
only those appended since, and ``system`` / ``tools`` appear only when they changed. Without it the
record is complete (``system`` when there is one, ``tools`` always). :func:`~baf.reasoning.effects.rebuild_requests`
turns the records back into full requests. An ``llm_response`` carries
``{"loop", "run", "turn", "step", "model", "provider", "latency_ms", "text", "tool_calls", "usage", "cost"?}``
(``provider``, the model client's, for OpenTelemetry's ``gen_ai.provider.name``; absent in older records).
Records written before version 2 are lifted by the upcasters in :mod:`baf.log.upcast`.

With a model that streams (``LLM.streams``), the text of a live turn goes to the platform as it is
written (:mod:`baf.reasoning.streaming`); only the complete response is ever recorded.
"""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baf.errors import LLMResponseError
from baf.llm.base import LLM, LLMResponse, ToolCall, Usage
from baf.log.record import RecordKind
from baf.reasoning.awaiting import time_limited
from baf.reasoning.effects import FullRequest

if TYPE_CHECKING:
    from baf.reasoning.patterns.accounting import PriceTable
    from baf.reasoning.recorder import Recorder
    from baf.reasoning.streaming import TextDeltas

__all__ = ["ModelTurns", "Turn", "check_response"]


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs a microsecond per turn
class Turn:
    """One model turn's outcome: the response, how long it took, and its cost (``None`` without prices)."""

    response: LLMResponse
    latency_ms: float
    cost: float | None


class ModelTurns:
    """The model turns of one loop run (see the module docstring for what each records).

    Args:
        recorder: Where the records go (and, while resuming, what is already recorded).
        llm: The model called when the effect source does not answer.
        loop: The loop's name in the records: ``"reasoning"`` or a pattern's name.
        prices: Prices to record each response's ``cost`` with; ``None`` records no cost.
    """

    def __init__(self, recorder: Recorder, llm: LLM, *, loop: str, prices: PriceTable | None = None) -> None:
        self.recorder = recorder
        self.llm = llm
        self.loop = loop
        self.run = recorder.next_run()
        self.prices = prices
        self.turn = 0
        # What the previous request of this run held, to record only what changed.
        self._messages: list[dict[str, Any]] | None = None  # the list itself: loops only append to it
        self._count = 0
        self._system: str | None = None
        self._tools: list[dict[str, Any]] = []
        self._previous_written = False

    async def take(
        self,
        messages: list[dict[str, Any]],
        *,
        step: int,
        system: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        parameters: dict[str, Any] | None = None,
        purpose: str | None = None,
        llm: LLM | None = None,
        time_limit: float | None = None,
    ) -> Turn:
        """Record the request, commit, get the response and record it.

        Raises whatever the model raised (``TimeoutError`` past ``time_limit`` seconds), and
        :class:`~baf.errors.LLMResponseError` for a response of the wrong shape: the caller decides
        what the user is told. ``messages`` must not be changed in place afterwards (later requests
        record only what was appended to it).
        """
        model = llm or self.llm
        tools = tools or []
        turn = self.turn
        self.turn += 1
        self._record_request(messages, step, system, tools, parameters, purpose, model.name, turn)
        await self.recorder.commit()  # what the model will see is durable before it is asked
        source = self.recorder.source
        started = time.perf_counter()
        response = None
        if source is not None:
            request = FullRequest(step, list(messages), system, list(tools), dict(parameters or {}), model.name,
                                  None, self.loop, turn)  # fmt: skip
            response = source.llm_response(request)
        if response is None:  # the one place a loop calls its model
            response = await time_limited(self._call(model, messages, tools, parameters, system, purpose), time_limit)
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        response = check_response(response, model)
        cost = self.prices.cost(model.name, response.usage) if self.prices is not None else None
        data: dict[str, Any] = {"loop": self.loop, "run": self.run, "turn": turn, "step": step, "model": model.name,
                                "provider": model.provider, "latency_ms": latency_ms, **response.to_dict()}  # fmt: skip
        if cost is not None:
            data["cost"] = cost
        self.recorder.record(RecordKind.LLM_RESPONSE, data)
        return Turn(response, latency_ms, cost)

    def _call(
        self,
        model: LLM,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None,
        system: str | None,
        purpose: str | None,
    ) -> Awaitable[LLMResponse]:
        """The model's answer, its text streamed to the platform when the model streams (see
        :mod:`baf.reasoning.streaming`). A compaction's summary is nobody's answer: it, and any turn without
        a platform, is asked whole."""
        deltas = self.recorder.text_deltas() if model.streams and purpose != "compaction" else None
        if deltas is None:
            return model.predict_with_tools(messages, tools, parameters=parameters or None, system_message=system)
        return _streamed(model.stream_with_tools(messages, tools, deltas, parameters=parameters or None,
                                                 system_message=system), deltas)  # fmt: skip

    def _record_request(
        self,
        messages: list[dict[str, Any]],
        step: int,
        system: str | None,
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None,
        purpose: str | None,
        model: str,
        turn: int,
    ) -> None:
        data: dict[str, Any] = {"loop": self.loop, "run": self.run, "turn": turn, "step": step, "model": model}
        if purpose is not None:
            data["purpose"] = purpose
        # After a resume, the previous request is one recorded before the crash, perhaps by an older baf
        # under another run number: the first request written anew is complete.
        previous = self._messages if self._previous_written else None
        count = self._count
        self._previous_written = not self.recorder.replaying
        # The same list grown, or the same message objects in front: only the new ones are recorded (a
        # compacted or rebuilt list is recorded whole). Identity, not equality: it costs nothing per message.
        if (
            previous is not None
            and count <= len(messages)
            and (previous is messages or all(map(operator.is_, itertools.islice(previous, count), messages)))
        ):
            data["extends"] = True
            data["messages"] = messages[count:]
            if system != self._system:
                data["system"] = system
            if tools is not self._tools and not _same(tools, self._tools):
                data["tools"] = tools
        else:
            # A copy: the loop goes on appending to its list, and a record must not change once recorded
            # (hooks see records before the commit serialises them).
            data["messages"] = list(messages)
            if system is not None:
                data["system"] = system
            data["tools"] = tools
        if parameters:
            data["parameters"] = parameters
        self._messages, self._count, self._system, self._tools = messages, len(messages), system, tools
        self.recorder.record(RecordKind.LLM_REQUEST, data)


async def _streamed(answer: Awaitable[LLMResponse], deltas: TextDeltas) -> LLMResponse:
    response = await answer
    await deltas.finish()
    return response


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Whether two tool lists are the same schemas (by identity first: loops reuse their schema dicts)."""
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


def _well_formed(response: Any) -> bool:
    """The common case, checked fast: exact types, so no ``isinstance`` walk and no list of problems
    (~6,000 instructions of a ~680,000-instruction turn, ``bench/ab_instructions.py``); anything else
    gets :func:`check_response`'s full check."""
    if type(response) is not LLMResponse or type(response.usage) is not Usage:
        return False
    text, calls = response.text, response.tool_calls
    if (text is not None and type(text) is not str) or type(calls) is not list:
        return False
    for call in calls:
        if type(call) is not ToolCall or type(call.arguments) is not str or not call.id or not call.name:
            return False
    return len(calls) < 2 or len({call.id for call in calls}) == len(calls)


def check_response(response: Any, llm: LLM) -> LLMResponse:
    """``response`` if it has the shape of an :class:`~baf.llm.base.LLMResponse`; else
    :class:`~baf.errors.LLMResponseError` naming the adapter and what is wrong (every adapter's answer
    is checked here, so a wrong one is an error record and a clear message, never a crash later)."""
    if _well_formed(response):
        return response
    problems: list[str] = []
    if not isinstance(response, LLMResponse):
        problems.append(f"it returned {type(response).__name__}, not an LLMResponse")
    else:
        if response.text is not None and not isinstance(response.text, str):
            problems.append(f"text is {type(response.text).__name__}, expected a string or None")
        calls = response.tool_calls
        if not isinstance(calls, list):
            problems.append(f"tool_calls is {type(calls).__name__}, expected a list of ToolCall (empty for none)")
        else:
            for index, call in enumerate(calls):
                if not isinstance(call, ToolCall):
                    problems.append(f"tool_calls[{index}] is {type(call).__name__}, not a ToolCall")
                    continue
                for field in ("id", "name"):
                    value = getattr(call, field)
                    if not isinstance(value, str) or not value:
                        problems.append(f"tool_calls[{index}].{field} is {value!r}, expected a non-empty string")
                if not isinstance(call.arguments, str):
                    problems.append(
                        f"tool_calls[{index}].arguments is {type(call.arguments).__name__}, expected the JSON text"
                    )
            ids = [c.id for c in calls if isinstance(c, ToolCall)]
            if len(set(ids)) != len(ids):
                problems.append("two tool calls share an id")
        if not isinstance(response.usage, Usage):
            problems.append(f"usage is {type(response.usage).__name__}, expected a Usage")
    if not problems:
        return response
    adapter = f"{type(llm).__name__} {llm.name!r}"
    raise LLMResponseError(f"the model adapter {adapter} returned a response of the wrong shape: {'; '.join(problems)}")
