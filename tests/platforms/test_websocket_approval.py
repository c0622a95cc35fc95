"""The websocket protocol's approval frames: a decision acts only on the connection's own session, bad
frames get a clear error, and the history carries requests and decisions."""

from __future__ import annotations

import time
from typing import Any

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.platforms.websocket import WebSocketPlatform
from baf.testing.llms import FunctionLLM, ScriptedLLM

from .helpers import Client


def _agent(ran: list[str]) -> tuple[Agent, WebSocketPlatform]:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> Any:
        if messages[-1]["role"] == "tool":
            return "done"
        return ScriptedLLM.tool_call("wipe", {"what": messages[-1]["content"]}, id="call-1")

    agent = Agent("assistant", log="memory://")

    @agent.tool(requires_approval=True)
    def wipe(what: str) -> str:
        """Wipe something."""
        ran.append(what)
        return "wiped"

    state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False)
    state.when_event().go_to(state)
    platform = WebSocketPlatform("127.0.0.1", 0)
    agent.add_platform(platform)
    return agent, platform


async def test_a_connection_decides_only_for_its_own_session() -> None:
    ran: list[str] = []
    agent, platform = _agent(ran)
    async with agent:
        victim, other = await Client.open(platform.ws_url), await Client.open(platform.ws_url)
        await victim.hello()
        await other.hello()
        await victim.send({"type": "message", "text": "the disk"})
        request, _ = await victim.until("approval_request")
        assert (request["call_id"], request["tool"], request["arguments"]) == ("call-1", "wipe", '{"what": "the disk"}')
        assert isinstance(request["seq"], int)

        # The other connection names the victim's call: it acts on its own session, where nothing waits.
        await other.send({"type": "approval", "call_id": "call-1", "approved": True})
        error, _ = await other.until("error")
        assert error["code"] == "agent" and "call-1" in error["message"]
        assert ran == []

        for bad in ({"type": "approval", "call_id": "call-1"}, {"type": "approval", "approved": True},
                    {"type": "approval", "call_id": "call-1", "approved": True, "reason": 5}):  # fmt: skip
            await victim.send(bad)
            error, _ = await victim.until("error")
            assert error["code"] == "bad_frame"
        assert ran == []

        await victim.send({"type": "approval", "call_id": "call-1", "approved": True, "reason": "fine"})
        reply, _ = await victim.until("reply")
        assert reply["text"] == "done" and ran == ["the disk"]

        # The history shows the request and who decided it.
        await victim.send({"type": "history", "after_seq": 0})
        history, _ = await victim.until("history")
        items = [item for item in history["items"] if item["type"].startswith("approval_")]
        assert [item["type"] for item in items] == ["approval_request", "approval_decision"]
        assert items[1]["approved"] is True and items[1]["reason"] == "fine"
        assert items[1]["by"].startswith("web client ")
        await victim.close()
        await other.close()


async def test_an_approval_before_hello_is_refused() -> None:
    agent, platform = _agent([])
    async with agent:
        client = await Client.open(platform.ws_url)
        await client.send({"type": "approval", "call_id": "call-1", "approved": True})
        error, _ = await client.until("error")
        assert error["code"] == "no_session"
        await client.close()


async def test_every_tab_of_the_session_is_shown_who_decided_and_when_as_its_history_says() -> None:
    ran: list[str] = []
    agent, platform = _agent(ran)
    async with agent:
        deciding = await Client.open(platform.ws_url)
        await deciding.hello()
        watching = await Client.open(platform.ws_url)  # the same conversation in another tab
        assert deciding.token is not None
        await watching.hello(resume=deciding.token)
        await watching.until("history")
        await deciding.send({"type": "message", "text": "the disk"})
        await watching.until("approval_request", call_id="call-1")
        before = time.time()
        await deciding.send({"type": "approval", "call_id": "call-1", "approved": False, "reason": "not today"})
        frames = []
        for client in (deciding, watching):
            decision, seen = await client.until("approval_decision")
            assert not [f for f in seen if f["type"] == "reply"]  # shown before what follows the decision
            frames.append(decision)
        assert frames[0] == frames[1]
        decision = frames[0]
        assert (decision["call_id"], decision["tool"], decision["approved"], decision["reason"]) == (
            "call-1", "wipe", False, "not today",
        )  # fmt: skip
        assert decision["by"].startswith("web client 127.0.0.1")
        assert before - 1 <= decision["at"] <= time.time() and isinstance(decision["seq"], int)
        await watching.until("reply")
        assert ran == []

        # The history item of the decision is the live frame (a reload reads the same).
        await watching.send({"type": "history", "after_seq": 0})
        history, _ = await watching.until("history")
        (item,) = [i for i in history["items"] if i["type"] == "approval_decision"]
        assert item == decision

        # A new message from one tab expires the waiting call: the other tab is told, live and in its history.
        await deciding.send({"type": "message", "text": "the cache"})
        await watching.until("approval_request", call_id="call-1")  # the model asks again (same call id)
        await deciding.send({"type": "message", "text": "never mind"})
        expired, _ = await watching.until("approval_expired")
        assert expired["call_ids"] == ["call-1"] and "new message" in expired["reason"]
        assert isinstance(expired["at"], float) and isinstance(expired["seq"], int)
        await watching.send({"type": "history", "after_seq": expired["seq"] - 1})
        history, _ = await watching.until("history")
        assert history["items"][0] == expired
        assert ran == []
        await deciding.close()
        await watching.close()
