"""Reading a streamed chat completion: server-sent events in, one assembled answer out.

A streamed answer (``"stream": true``) arrives as server-sent events, each ``data:`` holding a JSON
*chunk* with a ``delta``: a piece of text, or fragments of tool calls. :class:`EventReader` turns lines
into event data; :class:`ChunkAssembler` folds the chunks into the message a non-streamed answer would
have held, giving back each piece of text as it comes so it can be shown at once.

Tool-call fragments are keyed by their ``index``: the first fragment of a call usually carries its id and
name, later ones pieces of its arguments, and fragments of different calls may be interleaved or arrive
out of order (index 1 before index 0). Each call's arguments are joined in arrival order and the calls
are returned in index order, only once the stream is complete: nothing acts on half a call.

A stream is complete when the server sent ``data: [DONE]``, or when it ended cleanly after a chunk with
a ``finish_reason`` (some local servers send no ``[DONE]``). A stream that ends before either was cut:
the caller retries it like a dropped connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChunkAssembler", "EventReader", "StreamFormatError"]


class StreamFormatError(ValueError):
    """A chunk that is not part of a usable completion. ``LLMOpenAI`` reports it as an
    :class:`~baf.errors.LLMResponseError`; it never leaves the client."""


class EventReader:
    """Server-sent events, fed one line at a time (without its line ending).

    Only ``data`` fields matter to a chat completion; ``event``, ``id``, ``retry`` and comments are
    passed over. An event's data lines are joined with newlines, as the SSE format says.
    """

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """The data of the event this line ends (a blank line ends one), else ``None``."""
        if not line:
            return self.end()
        if line.startswith(":"):
            return None  # a comment, often sent as a keep-alive
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def end(self) -> str | None:
        """The data of an event the stream ended without a blank line after, if any."""
        if not self._data:
            return None
        data, self._data = "\n".join(self._data), []
        return data


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChunkAssembler:
    """Folds the chunks of one streamed answer into a message (see the module docstring)."""

    def __init__(self) -> None:
        self._content: list[str] | None = None
        self._refusal: list[str] | None = None
        self._calls: dict[int, _PartialCall] = {}
        self._last_index: int | None = None
        #: The last ``usage`` object a chunk carried (with ``include_usage``, a final chunk of its own).
        self.usage: Any = None
        #: Whether ``data: [DONE]`` arrived.
        self.done = False
        #: Whether a chunk said why the answer ended (``finish_reason``).
        self.finished = False
        #: How many chunks were read.
        self.chunks = 0

    @property
    def complete(self) -> bool:
        """Whether the answer can be used if the stream ends now (cleanly)."""
        return self.done or self.finished

    def add(self, data: str) -> str:
        """Fold one event's data in; returns the text it adds (``""`` for none)."""
        if data.strip() == "[DONE]":
            self.done = True
            return ""
        try:
            chunk = json.loads(data)
        except ValueError:
            raise StreamFormatError(f"an event of the stream is not JSON: {data[:200]!r}") from None
        if not isinstance(chunk, dict):
            raise StreamFormatError(f"an event of the stream is not a JSON object: {data[:200]!r}")
        self.chunks += 1
        choices = chunk.get("choices")
        if chunk.get("error") and not choices:
            # OpenAI and others report a failure mid-answer this way, after a 200 status.
            raise StreamFormatError(f"the server reported an error mid-answer: {chunk['error']}")
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        if choices is None:
            return ""
        if not isinstance(choices, list):
            raise StreamFormatError(f"a chunk's choices is a {type(choices).__name__}, not a list")
        text = ""
        for choice in choices:
            if not isinstance(choice, dict):
                raise StreamFormatError(f"a chunk's choice is a {type(choice).__name__}, not an object")
            if choice.get("index", 0) != 0:
                continue  # one answer is asked for; another choice is not part of it
            if choice.get("finish_reason"):
                self.finished = True
            delta = choice.get("delta")
            if delta is None:
                continue
            if not isinstance(delta, dict):
                raise StreamFormatError(f"a chunk's delta is a {type(delta).__name__}, not an object")
            text += self._add_text(delta)
            calls = delta.get("tool_calls")
            if calls is not None:
                if not isinstance(calls, list):
                    raise StreamFormatError(f"a chunk's tool_calls is a {type(calls).__name__}, not a list")
                for fragment in calls:
                    self._add_call(fragment)
        return text

    def _add_text(self, delta: dict[str, Any]) -> str:
        content = delta.get("content")
        if content is not None:
            if not isinstance(content, str):
                raise StreamFormatError(f"a chunk's content is a {type(content).__name__}, not a string")
            if self._content is None:
                self._content = []
            self._content.append(content)
        refusal = delta.get("refusal")
        if isinstance(refusal, str):
            if self._refusal is None:
                self._refusal = []
            self._refusal.append(refusal)
        return content or ""

    def _add_call(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise StreamFormatError(f"a tool-call fragment is a {type(fragment).__name__}, not an object")
        index = fragment.get("index")
        call_id = fragment.get("id")
        if not isinstance(index, int) or isinstance(index, bool):
            index = self._index_without_one(call_id)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _PartialCall()
        self._last_index = index
        if isinstance(call_id, str) and call_id:
            if not call.id:
                call.id = call_id
            elif call.id != call_id:
                raise StreamFormatError(f"tool call {index} has fragments with two ids, {call.id!r} and {call_id!r}")
        function = fragment.get("function")
        if function is None:
            return
        if not isinstance(function, dict):
            raise StreamFormatError(f"tool call {index}: function is a {type(function).__name__}, not an object")
        name = function.get("name")
        if isinstance(name, str) and name and name != call.name:
            # Sent whole in the first fragment by most servers, repeated by some, in pieces by a few.
            call.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif isinstance(arguments, dict):
            call.arguments.append(json.dumps(arguments))  # a whole object at once: serialising loses nothing
        elif arguments is not None:
            raise StreamFormatError(f"tool call {index}: arguments are a {type(arguments).__name__}, not text")

    def _index_without_one(self, call_id: Any) -> int:
        """Where a fragment without an ``index`` belongs: the call with its id, a new call for a new id,
        else the call the previous fragment belonged to."""
        if isinstance(call_id, str) and call_id:
            for index, call in self._calls.items():
                if call.id == call_id:
                    return index
            return max(self._calls, default=-1) + 1
        if self._last_index is not None:
            return self._last_index
        return 0

    def message(self) -> dict[str, Any]:
        """The assembled message, shaped like a non-streamed answer's ``choices[0].message``."""
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if self._content:
            message["content"] = "".join(self._content) or None  # "" pieces (a role chunk's) are no answer
        if self._refusal is not None:
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            message["tool_calls"] = [
                {"id": call.id, "function": {"name": call.name or None, "arguments": "".join(call.arguments)}}
                for _, call in sorted(self._calls.items())
            ]
        return message
