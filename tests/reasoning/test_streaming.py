"""Token streaming through the reasoning kernel: deltas reach the platform, only whole responses are recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llm.fake_openai_server import FakeOpenAIServer, serve, streamed, tool_call_fragment

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm import LLMOpenAI
from baf.llm.base import LLMResponse, ToolCall
from baf.log import open_log
from baf.log.record import Record
from baf.log.redaction import Redactor
from baf.reasoning.patterns import ReAct
from baf.reasoning.patterns.compaction import ContextCompactor
from baf.reasoning.streaming import TextDeltas
from baf.testing import RecordingPlatform, ScriptedLLM

SECRET = "hunter2-streaming-secret"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with serve() as running:
        yield running


def streaming_llm(server: FakeOpenAIServer, **options: Any) -> LLMOpenAI:
    settings: dict[str, Any] = {"base_url": server.base_url, "timeout": 5.0, "max_retries": 2,
                                "backoff": 0.01, "max_backoff": 0.05, "stream": True}  # fmt: skip
    settings.update(options)
    return LLMOpenAI("fake-model", **settings)


def agent_on(log: str, llm: Any, platform: RecordingPlatform, **options: Any) -> Agent:
    agent = Agent("streamer", log=log)
    state = new_reasoning_state(agent, llm, enable_task_planning=False, **options)
    state.when_event().go_to(state)
    agent.add_platform(platform)
    return agent


async def records(db: Path) -> list[Record]:
    async with open_log(f"sqlite:///{db}") as log:
        return await log.read("s")


def kinds(events: list[tuple[str, str, Any]]) -> list[str]:
    """The kinds of what the platform got, with runs of deltas folded into one ``delta``."""
    out: list[str] = []
    for _, kind, _ in events:
        if not (kind == "delta" and out and out[-1] == "delta"):
            out.append(kind)
    return out


# --- TextDeltas on its own ----------------------------------------------------------------------


class Sent:
    def __init__(self, fail_after: int | None = None) -> None:
        self.items: list[tuple[str, str]] = []
        self.fail_after = fail_after

    async def __call__(self, run_id: str, text: str) -> None:
        if self.fail_after is not None and len(self.items) >= self.fail_after:
            raise ConnectionError("the client went away")
        self.items.append((run_id, text))


async def test_deltas_are_sent_under_the_request_seq_and_attempt() -> None:
    sent = Sent()
    deltas = TextDeltas(sent, 12)
    await deltas("Hel", 1)
    await deltas("lo", 1)
    await deltas("Hi", 2)  # a retry after a broken stream: a new answer
    await deltas.finish()
    assert sent.items == [("12.1", "Hel"), ("12.1", "lo"), ("12.2", "Hi")]


async def test_a_secret_split_across_pieces_is_redacted_whole() -> None:
    sent = Sent()
    deltas = TextDeltas(sent, 3, Redactor([SECRET]))
    pieces = ["The key is hun", "ter2-stream", "ing-secret, and hu", "mble pie", " and hunter2"]
    for piece in pieces:
        await deltas(piece, 1)
    await deltas.finish()
    shown = "".join(text for _, text in sent.items)
    assert shown == "The key is [REDACTED], and humble pie and hunter2"
    assert not any("hun" in text and "ter2" in text for _, text in sent.items[:-1])
    assert all(SECRET[:4] not in text for _, text in sent.items[:2])  # held back until it was known


async def test_a_failing_platform_is_reported_once_and_gets_no_more() -> None:
    sent = Sent(fail_after=1)
    failures: list[BaseException] = []
    deltas = TextDeltas(sent, 1, failed=failures.append)
    for piece in ["a", "b", "c"]:
        await deltas(piece, 1)
    assert sent.items == [("1.1", "a")]
    assert len(failures) == 1 and isinstance(failures[0], ConnectionError)


# --- end to end: a real SQLite log, real HTTP -----------------------------------------------------


async def test_deltas_reach_the_platform_and_only_the_complete_response_is_recorded(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    server.script(streamed("Paris ", "is ", "the ", "capital.", interval=0.02, prompt_tokens=20, completion_tokens=5))
    platform = RecordingPlatform()
    db = tmp_path / "log.db"
    async with agent_on(f"sqlite:///{db}", streaming_llm(server), platform) as agent:
        await agent.receive_message("s", "capital of France?", platform)
        await agent.wait_idle()
    logged = await records(db)
    request = next(r for r in logged if r.kind == "llm_request")
    assert platform.deltas["s"] == [(f"{request.seq}.1", p) for p in ["Paris ", "is ", "the ", "capital."]]
    assert platform.replies["s"] == ["Paris is the capital."]
    # The deltas came before the reply, and nothing was delivered twice.
    assert kinds([e for e in platform.events if e[1] in ("delta", "reply")]) == ["delta", "reply"]
    responses = [r for r in logged if r.kind == "llm_response"]
    assert len(responses) == 1
    assert responses[0].data["text"] == "Paris is the capital."
    assert responses[0].data["usage"] == {"prompt_tokens": 20, "completion_tokens": 5}
    assert not [r for r in logged if "delta" in r.kind]
    assert [r.data["text"] for r in logged if r.kind == "reply"] == ["Paris is the capital."]


async def test_a_stream_cut_mid_way_is_retried_and_recorded_once_whole(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    server.script(streamed("I think ", "the answ", "er is", drop_after=3), streamed("The answer ", "is 42."))
    platform = RecordingPlatform()
    db = tmp_path / "log.db"
    async with agent_on(f"sqlite:///{db}", streaming_llm(server), platform) as agent:
        await agent.receive_message("s", "question", platform)
        await agent.wait_idle()
    logged = await records(db)
    seq = next(r.seq for r in logged if r.kind == "llm_request")
    assert platform.deltas["s"] == [(f"{seq}.1", "I think "), (f"{seq}.1", "the answ"),
                                    (f"{seq}.2", "The answer "), (f"{seq}.2", "is 42.")]  # fmt: skip
    assert [r.data["text"] for r in logged if r.kind == "llm_response"] == ["The answer is 42."]
    assert platform.replies["s"] == ["The answer is 42."]


async def test_a_stream_that_keeps_breaking_is_an_error_never_half_a_response(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    server.script(streamed("Half ", "of it", drop_after=2), streamed("Half ", "of it", drop_after=2))
    platform = RecordingPlatform()
    db = tmp_path / "log.db"
    async with agent_on(f"sqlite:///{db}", streaming_llm(server, max_retries=1), platform) as agent:
        await agent.receive_message("s", "question", platform)
        await agent.wait_idle()
    logged = await records(db)
    assert [r.kind for r in logged if r.kind.startswith("llm_")] == ["llm_request"]  # no response: not half of one
    error = next(r for r in logged if r.kind == "error")
    assert error.data["source"] == "llm" and error.data["type"] == "LLMConnectionError"
    assert "broke off" in error.data["message"]
    assert len(platform.replies["s"]) == 1 and "could not get an answer" in platform.replies["s"][0]
    # Each attempt streamed its part; the reply that followed supersedes them.
    assert [run_id.split(".")[1] for run_id, _ in platform.deltas["s"]] == ["1", "2"]


async def test_streamed_tool_call_fragments_out_of_order_run_once_assembled(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    fragments = [
        tool_call_fragment(1, "c2", "add", '{"a": 2,'),
        tool_call_fragment(0, "c1", "add", '{"a": 1,'),
        tool_call_fragment(0, arguments=' "b": 1}'),
        tool_call_fragment(1, arguments=' "b": 2}'),
    ]
    server.script(streamed("Adding. ", tool_calls=fragments), streamed("2 and 4."))
    platform = RecordingPlatform()
    db = tmp_path / "log.db"
    ran: list[tuple[int, int]] = []
    agent = agent_on(f"sqlite:///{db}", streaming_llm(server), platform)

    @agent.tool
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: One.
            b: The other.
        """
        ran.append((a, b))
        return a + b

    async with agent:
        await agent.receive_message("s", "1+1 and 2+2?", platform)
        await agent.wait_idle()
    assert sorted(ran) == [(1, 1), (2, 2)]
    logged = await records(db)
    response = next(r for r in logged if r.kind == "llm_response")
    assert response.data["tool_calls"] == [
        {"id": "c1", "name": "add", "arguments": '{"a": 1, "b": 1}'},
        {"id": "c2", "name": "add", "arguments": '{"a": 2, "b": 2}'},
    ]
    # The response was durable before either call ran.
    first_result = next(r.seq for r in logged if r.kind == "tool_result")
    assert response.seq < first_result
    assert [text for _, text in platform.deltas["s"]] == ["Adding. ", "2 and 4."]
    assert platform.replies["s"] == ["2 and 4."]


async def test_secrets_are_redacted_from_deltas(tmp_path: Path, server: FakeOpenAIServer) -> None:
    server.script(streamed("the password is hunt", "er2-streaming-sec", "ret ok"))
    platform = RecordingPlatform()
    agent = agent_on(f"sqlite:///{tmp_path / 'log.db'}", streaming_llm(server), platform)
    agent.mark_secret(SECRET)
    async with agent:
        await agent.receive_message("s", "tell me", platform)
        await agent.wait_idle()
    shown = "".join(text for _, text in platform.deltas["s"])
    assert shown == "the password is [REDACTED] ok"
    assert all("hunt" not in text for _, text in platform.deltas["s"])


async def test_a_platform_failing_on_deltas_still_gets_the_reply(tmp_path: Path, server: FakeOpenAIServer) -> None:
    class Broken(RecordingPlatform):
        async def reply_delta(self, session: Any, run_id: str, text: str) -> None:
            raise RuntimeError("no streaming here")

    server.script(streamed("one ", "two"))
    platform = Broken()
    db = tmp_path / "log.db"
    async with agent_on(f"sqlite:///{db}", streaming_llm(server), platform) as agent:
        await agent.receive_message("s", "count", platform)
        await agent.wait_idle()
    assert platform.replies["s"] == ["one two"]
    errors = [r.data for r in await records(db) if r.kind == "error"]
    assert len(errors) == 1 and errors[0]["source"] == "platform" and "no streaming here" in errors[0]["message"]


async def test_a_compaction_summary_is_not_streamed() -> None:
    llm = ScriptedLLM(["first answer", "a summary", "second answer"], stream=True)
    platform = RecordingPlatform()
    compactor = ContextCompactor(max_tokens=1, threshold=0.1, keep_last=1, mode="summarize")
    async with agent_on("memory://", llm, platform, compactor=compactor, memory=10) as agent:
        await agent.receive_message("s", "one", platform)
        await agent.receive_message("s", "two", platform)
        await agent.wait_idle()
    assert llm.remaining == 0
    assert "".join(t for _, t in platform.deltas["s"]) == "first answersecond answer"


async def test_a_pattern_state_streams_through_the_same_kernel() -> None:
    from baf.library.state.pattern_state import pattern_body

    final = ToolCall("f1", "final_answer", '{"answer": "42"}')
    llm = ScriptedLLM([LLMResponse("Thinking it over.", [final])], stream=True)
    platform = RecordingPlatform()
    agent = Agent("patterned", log="memory://")
    state = agent.new_state("main", initial=True)
    state.set_body(pattern_body(ReAct(), llm))
    state.when_event().go_to(state)
    agent.add_platform(platform)
    async with agent:
        await agent.receive_message("s", "go", platform)
        await agent.wait_idle()
    assert "".join(t for _, t in platform.deltas["s"]) == "Thinking it over."
    assert len({run_id for run_id, _ in platform.deltas["s"]}) == 1
    assert platform.replies["s"][-1] == "42"


# --- resume: a response served from the log is not streamed again --------------------------------


async def test_a_resumed_loop_delivers_a_recorded_response_whole_and_streams_only_new_turns(tmp_path: Path) -> None:
    first = RecordingPlatform()
    db = tmp_path / "full.db"
    async with agent_on(f"sqlite:///{db}", ScriptedLLM(["recorded answer"], stream=True), first) as agent:
        await agent.receive_message("s", "question", first)
        await agent.wait_idle()
    logged = await records(db)
    assert first.deltas["s"]
    response = next(r for r in logged if r.kind == "llm_response")
    request = next(r for r in logged if r.kind == "llm_request")

    async def resume(upto: int, llm: ScriptedLLM) -> RecordingPlatform:
        cut = tmp_path / f"cut{upto}.db"
        async with open_log(f"sqlite:///{cut}") as log:
            await log.append(logged[:upto])
        platform = RecordingPlatform()
        async with agent_on(f"sqlite:///{cut}", llm, platform) as agent:
            await agent.wait_idle()
        return platform

    # Killed after the response was recorded: it is served from the log, delivered whole, not streamed.
    served = await resume(response.seq, ScriptedLLM([], stream=True))
    assert served.deltas["s"] == []
    assert served.replies["s"] == ["recorded answer"]
    # Killed while the model was streaming: nothing of that answer was recorded, so it is asked again
    # and streamed again (named after the last record before the model was asked: the step_resumed).
    llm = ScriptedLLM(["asked again"], stream=True)
    again = await resume(request.seq, llm)
    assert llm.remaining == 0
    (run_id,) = {run_id for run_id, _ in again.deltas["s"]}
    assert run_id == f"{request.seq + 1}.1"
    assert again.replies["s"] == ["asked again"]
