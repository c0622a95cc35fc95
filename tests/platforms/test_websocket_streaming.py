"""``reply_delta`` frames on the WebSocket: a model streaming over real HTTP, a real websocket client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from llm.fake_openai_server import serve, streamed

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm import LLMOpenAI
from baf.llm.base import LLM
from baf.platforms.websocket import WebSocketPlatform
from baf.testing import ScriptedLLM

from .helpers import Client


@asynccontextmanager
async def serving(llm: LLM) -> AsyncIterator[WebSocketPlatform]:
    agent = Agent("streamer", log="memory://")
    state = new_reasoning_state(agent, llm, enable_task_planning=False)
    state.when_event().go_to(state)
    platform = WebSocketPlatform("127.0.0.1", 0)
    agent.add_platform(platform)
    async with agent:
        yield platform


def answer_frames(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] in ("reply_delta", "reply")]


async def one_more_turn(client: Client) -> list[dict[str, Any]]:
    """Ask once more (the model's next scripted answer is ``Once more.``) and return the frames up to its
    reply: a connection's frames keep their order, so an earlier answer shown again would be among them."""
    await client.send({"type": "message", "text": "once more"})
    _, frames = await client.until("reply", text="Once more.")
    return frames


def only_the_next_answer(frames: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> bool:
    """``frames`` show the next answer only: its deltas (under a new run id), then its one reply."""
    runs = {f["run_id"] for f in earlier if f["type"] == "reply_delta"}
    shown = answer_frames(frames)
    return [f["type"] for f in shown][-1:] == ["reply"] and all(
        f["type"] == "reply_delta" and f["run_id"] not in runs for f in shown[:-1]
    )


async def test_deltas_arrive_as_frames_then_one_reply() -> None:
    with serve() as server:
        server.script(streamed("Streaming ", "**works**", " here.", interval=0.05), streamed("Once ", "more."))
        llm = LLMOpenAI("fake-model", base_url=server.base_url, stream=True, timeout=5.0)
        async with serving(llm) as platform:
            client = await Client.open(platform.ws_url)
            await client.hello()
            await client.send({"type": "message", "text": "does it stream?"})
            reply, frames = await client.until("reply")
            later = await one_more_turn(client)
            await client.close()
        await llm.close()
    deltas = [f for f in frames if f["type"] == "reply_delta"]
    assert [f["text"] for f in deltas] == ["Streaming ", "**works**", " here."]
    assert len({f["run_id"] for f in deltas}) == 1
    assert all("seq" not in f for f in deltas)  # not records
    assert reply["text"] == "Streaming **works** here." and isinstance(reply["seq"], int)
    # The deltas came before the reply, and the answer was not sent again afterwards.
    assert answer_frames(frames)[-1] is reply
    assert only_the_next_answer(later, frames)


async def test_a_broken_stream_starts_a_new_run_id_on_the_wire() -> None:
    with serve() as server:
        server.script(streamed("Half ", "a thought", drop_after=3), streamed("Whole ", "answer."))
        llm = LLMOpenAI("fake-model", base_url=server.base_url, stream=True, timeout=5.0, backoff=0.01)
        async with serving(llm) as platform:
            client = await Client.open(platform.ws_url)
            await client.hello()
            await client.send({"type": "message", "text": "go"})
            reply, frames = await client.until("reply")
            await client.close()
        await llm.close()
    deltas = [(f["run_id"], f["text"]) for f in frames if f["type"] == "reply_delta"]
    first, second = deltas[0][0], deltas[-1][0]
    assert first != second and first.endswith(".1") and second.endswith(".2")
    assert "".join(text for run_id, text in deltas if run_id == second) == "Whole answer."
    assert reply["text"] == "Whole answer."


async def test_every_connection_of_the_session_gets_the_deltas_and_history_has_only_the_reply() -> None:
    async with serving(ScriptedLLM(["one two three"], stream=True)) as platform:
        first = await Client.open(platform.ws_url)
        await first.hello()
        assert first.token is not None
        second = await Client.open(platform.ws_url)
        await second.hello(resume=first.token)
        await first.send({"type": "message", "text": "count"})
        _, seen_first = await first.until("reply")
        _, seen_second = await second.until("reply")
        for seen in (seen_first, seen_second):
            assert "".join(f["text"] for f in seen if f["type"] == "reply_delta") == "one two three"
        # A client that comes back later gets the answer once, from the log: no deltas there.
        third = await Client.open(platform.ws_url)
        await third.hello(resume=first.token)
        history, _ = await third.until("history")
        assert [i["type"] for i in history["items"] if i["type"] in ("reply", "reply_delta")] == ["reply"]
        for client in (first, second, third):
            await client.close()


async def test_a_client_not_bound_to_the_session_gets_no_deltas() -> None:
    async with serving(ScriptedLLM(["private words", "Once more."], stream=True)) as platform:
        alice = await Client.open(platform.ws_url)
        await alice.hello()
        bob = await Client.open(platform.ws_url)
        await bob.hello()
        await alice.send({"type": "message", "text": "hi"})
        await alice.until("reply")
        # bob's own turn comes after: a delta of alice's sent to bob too would be before it
        assert "".join(f["text"] for f in await one_more_turn(bob) if f["type"] == "reply_delta") == "Once more."
        await alice.close()
        await bob.close()


async def test_a_burst_of_pieces_does_not_overflow_a_reading_client_s_queue() -> None:
    # 2,000 pieces handed over at once (a fast model, one network read): each one is let out before the
    # next is queued, so a small send queue holds up and the client that reads is not taken for stuck.
    answer = " ".join(f"w{i}" for i in range(2000))
    agent = Agent("burst", log="memory://")
    state = new_reasoning_state(agent, ScriptedLLM([answer], stream=True), enable_task_planning=False)
    state.when_event().go_to(state)
    platform = WebSocketPlatform("127.0.0.1", 0, send_queue_size=64)
    agent.add_platform(platform)
    async with agent:
        client = await Client.open(platform.ws_url)
        await client.hello()
        await client.send({"type": "message", "text": "go"})
        reply, frames = await client.until("reply", wait=20)
        await client.close()
        records = await agent.log.read(client.session_id or "")
    assert len([f for f in frames if f["type"] == "reply_delta"]) == 2000
    assert reply["text"] == answer
    assert not [r for r in records if r.kind == "delivery_dropped"]


async def test_a_streamed_turn_waiting_for_approval_then_a_streamed_answer_once() -> None:
    # The text before an approved call streams under one run_id; after the decision the answer streams
    # under another, and the reply comes once.
    llm = ScriptedLLM(
        [
            ScriptedLLM.tool_calls([("wipe", {"what": "cache"})], text="I will wipe the cache."),
            "Wiped it, done.",
            "Once more.",
        ],
        stream=True,
    )
    agent = Agent("careful", log="memory://")
    wiped: list[str] = []

    @agent.tool(requires_approval=True)
    def wipe(what: str) -> str:
        """Wipe something."""
        wiped.append(what)
        return "wiped"

    state = new_reasoning_state(agent, llm, enable_task_planning=False)
    state.when_event().go_to(state)
    platform = WebSocketPlatform("127.0.0.1", 0)
    agent.add_platform(platform)
    async with agent:
        client = await Client.open(platform.ws_url)
        await client.hello()
        await client.send({"type": "message", "text": "wipe the cache"})
        request, before = await client.until("approval_request")
        await client.send({"type": "approval", "call_id": request["call_id"], "approved": True})
        reply, after = await client.until("reply")
        later = await one_more_turn(client)
        await client.close()
    first = [(f["run_id"], f["text"]) for f in before if f["type"] == "reply_delta"]
    second = [(f["run_id"], f["text"]) for f in after if f["type"] == "reply_delta"]
    assert "".join(text for _, text in first) == "I will wipe the cache."
    assert "".join(text for _, text in second) == "Wiped it, done."
    assert {run for run, _ in first}.isdisjoint({run for run, _ in second})
    assert wiped == ["cache"] and reply["text"] == "Wiped it, done."
    assert only_the_next_answer(later, before + after)
