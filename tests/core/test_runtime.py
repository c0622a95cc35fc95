"""The definition and the running instance apart: Runtime(agent, log) runs an Agent; bodies get a narrow Session."""

from __future__ import annotations

import pytest

import baf
from baf import Agent, ReceiveTextEvent, Runtime, Session
from baf.core.session import runtime_side
from baf.errors import ConfigurationError
from baf.log import MemoryLog


def counter() -> Agent:
    agent = Agent("counter", log="memory://")
    idle = agent.new_state("idle", initial=True)

    def count(session: Session) -> None:
        if session.event is not None:
            session["n"] = session.get("n", 0) + 1
            session.reply(f"n={session['n']}")

    idle.set_body(count)
    idle.when_event().go_to(idle)
    return agent


async def test_two_runtimes_run_one_definition_over_their_own_logs() -> None:
    agent = counter()
    first, second = MemoryLog(), MemoryLog()
    one, two = Runtime(agent, first), Runtime(agent, second)
    await one.start()
    await two.start()
    try:
        for _ in range(2):
            await (await one.receive(ReceiveTextEvent("s", message="go")))
        await (await two.receive(ReceiveTextEvent("s", message="go")))
        assert one.sessions["s"].get("n") == 2 and two.sessions["s"].get("n") == 1
        assert not agent.running  # the agent's own runtime (its sugar) was never started
        with pytest.raises(ConfigurationError, match="while agent 'counter' is running"):
            agent.new_state("late")  # the definition is fixed while a runtime runs it
        replies = [r.data["text"] for r in await second.read("s") if r.kind == "reply"]
    finally:
        await one.stop()
        await two.stop()
    agent.new_state("later")  # no runtime runs it any more
    assert replies == ["n=1"]


async def test_the_agent_is_sugar_for_one_runtime_it_owns() -> None:
    agent = counter()
    async with agent:
        assert isinstance(agent.runtime, Runtime) and agent.runtime.log is agent.log
        session = await agent.receive_message("s", "go")
        assert agent.sessions["s"] is session and session.get("n") == 1
    assert not agent.running
    with pytest.raises(ConfigurationError, match="not running"):
        _ = agent.runtime


def test_runtime_is_exported_from_baf() -> None:
    assert baf.Runtime is Runtime and "Runtime" in baf.__all__


def test_bodies_see_a_narrow_session() -> None:
    public = {name for name in dir(Session) if not name.startswith("_")}
    assert public == {
        "id", "agent", "platform", "event", "current_state",  # where the conversation is
        "get", "set", "delete",  # variables (and session[key], key in session)
        "chat_history", "reply", "reply_markdown", "reply_options", "reply_file", "reply_image",
        "record", "record_error",  # the log
        "run_sync", "run_tool_sync",  # blocking code in the agent's threads
    }  # fmt: skip
    # Commits, flushes, queued sends and the step's bookkeeping live on the runtime's side.
    assert not public & {"commit", "flush", "after_commit", "queue_platform_call", "projection", "event_seq"}
    with pytest.raises(AttributeError):
        Session.__new__(Session).foo = 1  # type: ignore[attr-defined]  # no field a caller could add


async def test_the_runtime_side_commits_what_a_body_recorded() -> None:
    agent = counter()
    async with agent:
        session = await agent.get_or_create_session("s")
        await agent.wait_idle()
        live = runtime_side(session)
        session.record("note", {"x": 1})
        assert live.has_unflushed_records
        await live.commit()
        assert not live.has_unflushed_records
        assert (await agent.log.read("s"))[-1].kind == "note"
