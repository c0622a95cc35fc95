"""The websocket protocol's approval frames: a decision acts only on the connection's own session, bad
frames get a clear error, and the history carries requests and decisions."""

from __future__ import annotations

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
