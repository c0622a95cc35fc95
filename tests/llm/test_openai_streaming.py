"""LLMOpenAI(stream=True) over real HTTP against the local fake server, and the chunk assembly on its own."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from baf.errors import LLMConnectionError, LLMResponseError, LLMTimeoutError
from baf.llm import LLMOpenAI, ToolCall, Usage
from baf.llm.openai_stream import ChunkAssembler, EventReader, StreamFormatError

from .fake_openai_server import (
    FakeOpenAIServer,
    StreamReply,
    chunk,
    completion,
    error_reply,
    serve,
    streamed,
    tool_call_fragment,
)

SECRET = "sk-test-secret-stream-0123456789"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with serve() as running:
        yield running


@pytest.fixture
async def make_llm(server: FakeOpenAIServer) -> AsyncIterator[Callable[..., LLMOpenAI]]:
    made: list[LLMOpenAI] = []

    def make(**kwargs: Any) -> LLMOpenAI:
        options: dict[str, Any] = {"base_url": server.base_url, "api_key": SECRET, "timeout": 5.0,
                                   "max_retries": 2, "backoff": 0.01, "max_backoff": 0.05, "stream": True}  # fmt: skip
        options.update(kwargs)
        llm = LLMOpenAI("fake-model", **options)
        made.append(llm)
        return llm

    yield make
    for llm in made:
        await llm.close()


class Sink:
    """Collects what a stream hands over, with when it arrived."""

    def __init__(self) -> None:
        self.pieces: list[tuple[int, str, float]] = []

    async def __call__(self, text: str, attempt: int) -> None:
        self.pieces.append((attempt, text, time.monotonic()))

    def text(self, attempt: int | None = None) -> str:
        return "".join(t for a, t, _ in self.pieces if attempt is None or a == attempt)


# --- streaming over HTTP ------------------------------------------------------------------------


async def test_text_arrives_piece_by_piece_and_the_whole_answer_is_returned(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    server.script(streamed("The ", "answer ", "is ", "42.", interval=0.08, prompt_tokens=11, completion_tokens=4))
    llm = make_llm()
    assert llm.streams
    sink = Sink()
    response = await llm.stream_with_tools(USER, [], sink)
    finished = time.monotonic()
    assert response.text == "The answer is 42."
    assert response.tool_calls == []
    assert response.usage == Usage(11, 4)  # include_usage: the counts still arrive, in their own chunk
    assert [(a, t) for a, t, _ in sink.pieces] == [(1, "The "), (1, "answer "), (1, "is "), (1, "42.")]
    # Each piece was handed over as it arrived, not all at the end.
    assert finished - sink.pieces[0][2] >= 0.2
    body = server.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_predict_with_tools_still_asks_for_a_whole_answer(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    server.script(completion("whole"))
    response = await make_llm().predict_with_tools(USER, [])
    assert response.text == "whole"
    assert "stream" not in server.requests[0].body


async def test_a_stream_dropped_mid_way_is_retried_from_the_start(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI], caplog: pytest.LogCaptureFixture
) -> None:
    server.script(
        streamed("Half ", "an ", "answer", interval=0.02, drop_after=3),  # role chunk + two pieces, then gone
        streamed("The ", "whole ", "answer", interval=0.02),
    )
    sink = Sink()
    with caplog.at_level(logging.WARNING, logger="baf.llm.openai_llm"):
        response = await make_llm().stream_with_tools(USER, [], sink)
    assert response.text == "The whole answer"
    assert sink.text(1) == "Half an "
    assert sink.text(2) == "The whole answer"  # the retry starts again, under the next attempt number
    assert len(server.requests) == 2
    assert "broke off" in caplog.text and "attempt 1 of 3" in caplog.text


async def test_a_stream_that_keeps_dropping_is_a_connection_error(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    server.script(*[streamed("x", "y", drop_after=2) for _ in range(2)])
    with pytest.raises(LLMConnectionError, match=r"after 2 attempts: the answer broke off"):
        await make_llm(max_retries=1).stream_with_tools(USER, [], Sink())


async def test_a_stream_ending_before_it_is_complete_is_retried(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    # A clean end of the body, but no finish_reason and no [DONE]: the answer was cut, not finished.
    cut = StreamReply([chunk({"content": "Hal"}), chunk({"content": "f"})])
    server.script(cut, streamed("Whole"))
    sink = Sink()
    response = await make_llm().stream_with_tools(USER, [], sink)
    assert response.text == "Whole"
    assert sink.text(1) == "Half" and sink.text(2) == "Whole"
    with serve() as other:
        other.script(cut)
        llm = make_llm(base_url=other.base_url, max_retries=0)
        with pytest.raises(LLMConnectionError, match=r"before the answer was complete"):
            await llm.stream_with_tools(USER, [], Sink())


async def test_a_finish_reason_without_done_is_a_complete_answer(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    server.script(streamed("fine", done=False))  # some local servers send no [DONE]
    assert (await make_llm().stream_with_tools(USER, [], Sink())).text == "fine"
    assert len(server.requests) == 1


async def test_tool_call_fragments_out_of_order_are_assembled_before_anything_is_returned(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    fragments = [
        tool_call_fragment(1, "call_b", "lookup", '{"ci'),  # the second call starts first
        tool_call_fragment(0, "call_a", "weather", ""),
        tool_call_fragment(1, arguments='ty": "Pa'),
        tool_call_fragment(0, arguments='{"city": '),
        tool_call_fragment(1, arguments='ris"}'),
        tool_call_fragment(0, arguments='"Oslo"}'),
    ]
    server.script(streamed("Checking. ", tool_calls=fragments, interval=0.01))
    sink = Sink()
    response = await make_llm().stream_with_tools(USER, [], sink)
    assert response.tool_calls == [
        ToolCall("call_a", "weather", '{"city": "Oslo"}'),
        ToolCall("call_b", "lookup", '{"city": "Paris"}'),
    ]
    assert response.text == "Checking. " and sink.text() == "Checking. "


async def test_a_broken_stream_never_returns_half_a_tool_call(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    fragments = [tool_call_fragment(0, "c1", "weather", '{"city": '), tool_call_fragment(0, arguments='"Oslo"}')]
    server.script(streamed(tool_calls=fragments, drop_after=2), streamed(tool_calls=fragments))
    response = await make_llm().stream_with_tools(USER, [], Sink())
    assert response.tool_calls == [ToolCall("c1", "weather", '{"city": "Oslo"}')]
    server.script(streamed(tool_calls=fragments, drop_after=2))
    with pytest.raises(LLMConnectionError):
        await make_llm(max_retries=0).stream_with_tools(USER, [], Sink())


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ("not json", "an event of the stream is not JSON"),
        ({"error": {"message": "the model crashed"}}, "reported an error mid-answer"),
        (chunk({"content": 7}), "content is a int"),
        (chunk({"tool_calls": [tool_call_fragment(0, "a")["choices"][0]["delta"]["tool_calls"][0], 3]}), "fragment"),
    ],
)
async def test_unusable_chunks_are_a_response_error_not_retried(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI], event: Any, reason: str
) -> None:
    server.script(StreamReply([chunk({"content": "ok "}), event, "[DONE]"]))
    with pytest.raises(LLMResponseError, match=reason):
        await make_llm().stream_with_tools(USER, [], Sink())
    assert len(server.requests) == 1


async def test_a_server_ignoring_stream_answers_whole_as_one_piece(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    server.script(completion("all at once"))
    sink = Sink()
    response = await make_llm().stream_with_tools(USER, [], sink)
    assert response.text == "all at once" and sink.text() == "all at once"


async def test_errors_before_the_stream_starts_follow_the_retry_policy(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    server.script(error_reply(503, "busy"), streamed("after all"))
    assert (await make_llm().stream_with_tools(USER, [], Sink())).text == "after all"


async def test_timeout_bounds_each_gap_not_the_whole_answer(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    # 6 gaps of 0.1 s: longer than the timeout in all, each well within it.
    server.script(streamed("a", "b", "c", interval=0.1))
    assert (await make_llm(timeout=0.4).stream_with_tools(USER, [], Sink())).text == "abc"
    server.script(StreamReply([chunk({"content": "a"}), chunk({"content": "b"})], interval=1.0))
    with pytest.raises(LLMTimeoutError):
        await make_llm(timeout=0.3, max_retries=0).stream_with_tools(USER, [], Sink())


async def test_the_key_is_not_in_a_stream_error(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    server.script(StreamReply([f"not json {SECRET}"]))
    with pytest.raises(LLMResponseError) as caught:
        await make_llm().stream_with_tools(USER, [], Sink())
    assert SECRET not in str(caught.value)


def test_repr_says_it_streams() -> None:
    assert "stream=True" in repr(LLMOpenAI("m", base_url="http://127.0.0.1:1/v1", stream=True))
    assert "stream" not in repr(LLMOpenAI("m", base_url="http://127.0.0.1:1/v1"))


# --- the assembly, without HTTP -----------------------------------------------------------------


def _fragment(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": [fields]}}]}


def _assemble(*chunks: dict[str, Any] | str) -> ChunkAssembler:
    import json

    assembler = ChunkAssembler()
    for item in chunks:
        assembler.add(item if isinstance(item, str) else json.dumps(item))
    return assembler


def test_event_reader_joins_data_lines_and_skips_comments_and_other_fields() -> None:
    reader = EventReader()
    lines = [": keep-alive", "event: message", "id: 3", 'data: {"a":', "data: 1}", "", "data:[DONE]", ""]
    assert [data for line in lines if (data := reader.feed(line)) is not None] == ['{"a":\n1}', "[DONE]"]
    reader.feed("data: tail")
    assert reader.end() == "tail" and reader.end() is None


def test_fragments_interleaved_across_indices_keep_their_own_arguments() -> None:
    assembler = _assemble(
        _fragment(index=2, id="c", function={"name": "third", "arguments": "[3"}),
        _fragment(index=0, id="a", function={"name": "first", "arguments": "[1"}),
        _fragment(index=2, function={"arguments": "]"}),
        _fragment(index=0, function={"arguments": "]"}),
        "[DONE]",
    )
    calls = assembler.message()["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a", "first", "[1]"),
        ("c", "third", "[3]"),
    ]
    assert assembler.complete


def test_repeated_names_are_kept_once_and_pieces_are_joined() -> None:
    repeated = _assemble(
        _fragment(index=0, id="a", function={"name": "weather", "arguments": "{"}),
        _fragment(index=0, id="a", function={"name": "weather", "arguments": "}"}),
    )
    assert repeated.message()["tool_calls"][0]["function"] == {"name": "weather", "arguments": "{}"}
    pieces = _assemble(
        _fragment(index=0, id="a", function={"name": "wea"}), _fragment(index=0, function={"name": "ther"})
    )
    assert pieces.message()["tool_calls"][0]["function"]["name"] == "weather"


def test_fragments_without_an_index_follow_their_id_or_the_previous_fragment() -> None:
    assembler = _assemble(
        _fragment(id="a", function={"name": "one", "arguments": '{"x"'}),
        _fragment(function={"arguments": ": 1}"}),
        _fragment(id="b", function={"name": "two", "arguments": "{}"}),
    )
    calls = assembler.message()["tool_calls"]
    assert [(c["id"], c["function"]["arguments"]) for c in calls] == [("a", '{"x": 1}'), ("b", "{}")]


def test_arguments_sent_as_an_object_are_serialised() -> None:
    assembler = _assemble(_fragment(index=0, id="a", function={"name": "f", "arguments": {"x": 1}}))
    assert assembler.message()["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'


def test_two_ids_for_one_call_are_refused() -> None:
    with pytest.raises(StreamFormatError, match="two ids"):
        _assemble(_fragment(index=0, id="a"), _fragment(index=0, id="b"))


def test_usage_finish_reason_and_refusal() -> None:
    assembler = _assemble(
        {"choices": [{"index": 0, "delta": {"refusal": "I can"}}]},
        {"choices": [{"index": 0, "delta": {"refusal": "not."}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    )
    assert assembler.finished and not assembler.done and assembler.complete
    assert assembler.message() == {"role": "assistant", "content": None, "refusal": "I cannot."}
    assert assembler.usage == {"prompt_tokens": 3, "completion_tokens": 2}


def test_other_choices_are_not_part_of_the_answer() -> None:
    assembler = _assemble(
        {"choices": [{"index": 1, "delta": {"content": "other"}}, {"index": 0, "delta": {"content": "mine"}}]}
    )
    assert assembler.message()["content"] == "mine"
