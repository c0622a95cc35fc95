"""Live frames carry their record's seq; a client that reconnects asks for what came after the last seq it
saw and sees every reply once. Real websockets on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from baf.core.session import Session

from .helpers import Client, body_agent, planning_script, reasoning_agent
from .test_websocket_protocol import serving


async def test_every_live_frame_carries_the_seq_of_its_record() -> None:
    async with serving(reasoning_agent(planning_script())) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        await client.send({"type": "message", "text": "total?"})
        _, frames = await client.until("reply")
        live = [f for f in frames if f["type"] in ("reply", "reasoning_step", "task_list")]
        assert live and all(isinstance(f.get("seq"), int) for f in live)
        assert [f["seq"] for f in live] == sorted({f["seq"] for f in live})  # increasing, none twice
        assert platform.agent is not None and client.session_id is not None
        records = {r.seq: r for r in await platform.agent.log.read(client.session_id)}
        kinds = {"reply": "reply", "reasoning_step": "reasoning_step", "task_list": "task_list"}
        for frame in live:
            assert records[frame["seq"]].kind == kinds[frame["type"]], frame
        assert records[live[-1]["seq"]].data["text"] == live[-1]["text"]


def replies_seen(frames: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(seq, text) of every reply a client was shown: history items and live frames alike."""
    seen = []
    for frame in frames:
        if frame["type"] == "history":
            seen += [(item["seq"], item["text"]) for item in frame["items"] if item["type"] == "reply"]
        elif frame["type"] == "reply":
            seen.append((frame["seq"], frame["text"]))
    return seen


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.005, 0.02])
async def test_a_connection_dropped_between_two_replies_sees_nothing_twice_and_misses_nothing(delay: float) -> None:
    gate = asyncio.Event()

    async def body(session: Session) -> None:
        session.reply("one")
        await gate.wait()
        for text in ("two", "three", "four"):
            session.reply(text)
            await asyncio.sleep(delay)

    async with serving(body_agent(body)) as platform:
        client = await Client.open(platform.ws_url)
        welcome = await client.hello()
        await client.send({"type": "message", "text": "go"})
        first, _ = await client.until("reply")
        assert first["text"] == "one"
        client.ws.transport.abort()  # the network goes away: no closing handshake
        gate.set()  # the next replies are produced while, and just after, the client is away
        await asyncio.sleep(delay)
        again = await Client.open(platform.ws_url)
        await again.send({"type": "hello", "resume": welcome["resume_token"], "after_seq": first["seq"]})
        frames = []
        async with asyncio.timeout(5):
            while [text for _, text in replies_seen(frames)][-1:] != ["four"]:
                frames.append(await again.recv())
        # The next turn's replies come after: a reply of this turn shown twice would be before them
        await again.send({"type": "message", "text": "go on"})
        async with asyncio.timeout(5):
            while [text for _, text in replies_seen(frames)].count("four") < 2:
                frames.append(await again.recv())
        seen = replies_seen(frames)
        assert [text for _, text in seen] == ["two", "three", "four", "one", "two", "three", "four"]
        assert [seq for seq, _ in seen] == sorted({seq for seq, _ in seen})
        assert all(seq > first["seq"] for seq, _ in seen)
        history = next(f for f in frames if f["type"] == "history")
        assert history["after_seq"] == first["seq"]
        live = [f for f in frames if f["type"] == "reply"]
        assert all(f["seq"] > history["last_seq"] for f in live)
