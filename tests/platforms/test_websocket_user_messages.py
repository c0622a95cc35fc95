"""A user's message is shown live on every connection of its session (a second tab, another device), in
order with the replies, with the id the sending client gave it; real websockets, one process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from baf import Agent
from baf.core.session import Session
from baf.platforms.websocket import WebSocketPlatform

from .helpers import Client, body_agent, echo


@asynccontextmanager
async def two_tabs(agent: Agent) -> AsyncIterator[tuple[WebSocketPlatform, Client, Client]]:
    """Two connections showing one session: the second resumed it with the first one's token."""
    platform = WebSocketPlatform("127.0.0.1", 0)
    agent.add_platform(platform)
    async with agent:
        first = await Client.open(platform.ws_url)
        await first.hello()
        second = await Client.open(platform.ws_url)
        await second.hello(resume=first.token)
        await second.until("history")
        try:
            yield platform, first, second
        finally:
            await first.close()
            await second.close()


def shown(frames: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f["type"], f["text"]) for f in frames if f["type"] in ("user", "reply")]


async def test_a_message_from_one_tab_shows_in_the_other_before_its_reply_with_the_senders_id() -> None:
    async with two_tabs(body_agent(echo)) as (platform, first, second):
        await first.send({"type": "message", "text": "hi there", "id": "tab1-msg-1"})
        _, to_sender = await first.until("reply")
        _, to_other = await second.until("reply")
        for frames in (to_sender, to_other):
            assert shown(frames) == [("user", "hi there"), ("reply", "echo: hi there")]
            user, reply = (f for f in frames if f["type"] in ("user", "reply"))
            # The sender finds its own message by the id; the other tab shows it. Both in log order.
            assert user["id"] == "tab1-msg-1" and 0 < user["seq"] < reply["seq"]
        # From the other tab, without an id: the first tab sees it too, and the frame carries no id.
        await second.send({"type": "message", "text": "and me"})
        user, _ = await first.until("user")
        assert user["text"] == "and me" and "id" not in user
        # A reload shows the same, each message with the id it was sent with.
        third = await Client.open(platform.ws_url)
        await third.hello(resume=first.token)
        history, _ = await third.until("history")
        users = [(i["text"], i.get("id")) for i in history["items"] if i["type"] == "user"]
        assert users == [("hi there", "tab1-msg-1"), ("and me", None)]
        await third.close()


async def test_the_other_tab_sees_a_message_while_the_step_before_it_still_runs() -> None:
    """A message sent while the session is busy is shown at once, not when the running step next commits:
    the other tab sees it before the earlier question's answer."""
    release = asyncio.Event()

    async def slow(session: Session) -> None:
        assert session.event is not None
        if session.event.text == "slow question":
            await release.wait()
        session.reply(f"answer to {session.event.text}")

    async with two_tabs(body_agent(slow)) as (_platform, first, second):
        await first.send({"type": "message", "text": "slow question", "id": "a"})
        await second.until("user", text="slow question")
        await first.send({"type": "message", "text": "follow-up", "id": "b"})
        user, seen = await second.until("user", text="follow-up")
        assert user["id"] == "b"
        assert not [f for f in seen if f["type"] == "reply"]  # the slow step has not answered yet
        release.set()
        _, rest = await second.until("reply", text="answer to follow-up")
        assert shown(rest) == [("reply", "answer to slow question"), ("reply", "answer to follow-up")]


async def test_a_message_id_that_is_not_a_short_token_is_refused_and_nothing_is_recorded() -> None:
    agent = body_agent(echo)
    async with two_tabs(agent) as (_platform, first, second):
        for bad in ("", "x" * 65, "has space", "<b>", 7, ["a"]):
            await first.send({"type": "message", "text": "hi", "id": bad})
            error = await first.recv()
            assert error["type"] == "error" and error["code"] == "bad_frame" and "'id'" in error["message"]
        # Nothing was recorded, so nothing was shown: the other tab's first frames are of the next message
        await first.send({"type": "message", "text": "ok", "id": "good-1"})
        _, seen = await second.until("reply", text="echo: ok")
        assert [(f["type"], f.get("text")) for f in seen] == [("user", "ok"), ("reply", "echo: ok")]
        assert first.session_id is not None
        records = await agent.runtime.log.read(first.session_id)
        assert [r.data["text"] for r in records if r.kind == "message_received"] == ["ok"]


async def test_a_refused_message_is_named_by_its_id_and_the_welcome_gives_the_size_limit() -> None:
    release = asyncio.Event()

    async def slow(session: Session) -> None:
        await release.wait()
        session.reply("done")

    agent = body_agent(slow)
    platform = WebSocketPlatform("127.0.0.1", 0, max_pending_messages=1, max_message_size=4000)
    agent.add_platform(platform)
    async with agent:
        client = await Client.open(platform.ws_url)
        assert (await client.hello())["max_message_size"] == 4000
        await client.send({"type": "message", "text": "   ", "id": "blank"})
        error = await client.recv()
        assert (error["code"], error["id"]) == ("bad_frame", "blank")
        await client.send({"type": "message", "text": "first", "id": "m1"})
        await client.until("user", id="m1")
        await client.send({"type": "message", "text": "second", "id": "m2"})
        error, _ = await client.until("error")
        assert (error["code"], error["id"]) == ("busy", "m2")
        assert error["message"] == "1 earlier message is still being handled; send this one once answered"
        await client.send({"type": "message", "text": "third"})  # no id: a refusal names none
        error, _ = await client.until("error")
        assert error["code"] == "busy" and "id" not in error
        release.set()
        await client.until("reply", text="done")
        records = await agent.runtime.log.read(client.session_id or "")
        assert [r.data["text"] for r in records if r.kind == "message_received"] == ["first"]
        await client.close()


async def test_a_message_the_server_failed_on_is_refused_with_its_id() -> None:
    async def broken(platform: WebSocketPlatform, client: Any, frame: dict[str, Any]) -> None:
        raise RuntimeError("a bug")

    agent = body_agent(echo)
    platform = WebSocketPlatform("127.0.0.1", 0)
    platform._handlers = {**WebSocketPlatform._handlers, "message": broken}  # type: ignore[misc]
    agent.add_platform(platform)
    async with agent:
        client = await Client.open(platform.ws_url)
        await client.hello()
        await client.send({"type": "message", "text": "hi", "id": "m-1"})
        refused, _ = await client.until("error")
        assert refused["code"] == "internal" and refused["id"] == "m-1"
        # An id that is not well-formed is not echoed back.
        await client.send({"type": "message", "text": "hi", "id": "<script>"})
        refused, _ = await client.until("error")
        assert refused["code"] == "internal" and "id" not in refused
        await client.close()


async def test_a_message_sent_without_an_id_is_not_echoed_to_its_sender_but_shown_in_the_other_tab() -> None:
    # A protocol 1 client sends no id: it could not tell its own message from another tab's.
    async with two_tabs(body_agent(echo)) as (_, first, second):
        await first.send({"type": "message", "text": "old client"})
        _, to_sender = await first.until("reply")
        _, to_other = await second.until("reply")
        assert shown(to_sender) == [("reply", "echo: old client")]
        assert shown(to_other) == [("user", "old client"), ("reply", "echo: old client")]
        # The same text again from the other tab: the first tab sees it, once.
        await second.send({"type": "message", "text": "old client"})
        _, to_first = await first.until("reply")
        _, to_second = await second.until("reply")
        assert shown(to_first) == [("user", "old client"), ("reply", "echo: old client")]
        assert shown(to_second) == [("reply", "echo: old client")]
