"""The terminal platform asks about a tool call waiting for approval before the next message."""

from __future__ import annotations

import asyncio
import io
import os
import sys

import pytest
from rich.console import Console

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.log.record import RecordKind
from baf.platforms.terminal import TerminalPlatform
from baf.testing.llms import ScriptedLLM


async def test_the_terminal_prompts_for_a_decision_and_sends_it() -> None:
    ran: list[str] = []
    llm = ScriptedLLM([
        ScriptedLLM.tool_call("remove", {"name": "a"}), "removed a",
        ScriptedLLM.tool_call("remove", {"name": "b"}), "kept b",
    ])  # fmt: skip
    agent = Agent("term", log="memory://")

    @agent.tool(requires_approval=True)
    def remove(name: str) -> str:
        """Remove something."""
        ran.append(name)
        return f"removed {name}"

    state = new_reasoning_state(agent, llm, enable_task_planning=False)
    state.when_event().go_to(state)
    read_end, write_end = os.pipe()
    output = io.StringIO()
    platform = TerminalPlatform("t", console=Console(file=output, width=100), input_fd=read_end)
    agent.add_platform(platform)
    os.write(write_end, b"remove a\ny\nremove b\nb is still needed\n")
    os.close(write_end)
    try:
        async with agent:
            assert platform._reader is not None
            await asyncio.wait_for(platform._reader, 20)  # ends at the end of the input
            records = await agent.log.read("t")
    finally:
        os.close(read_end)
    assert ran == ["a"]
    shown = output.getvalue()
    assert "approval needed" in shown and 'remove({"name": "a"})' in shown
    assert "approve remove? [y/N, or a reason to deny]" in shown
    assert "removed a" in shown and "kept b" in shown
    # Each decision is said back, with who took it and why, before what follows it.
    approved = next(line for line in shown.splitlines() if line.startswith("✓ remove approved by terminal user"))
    denied = next(line for line in shown.splitlines() if line.startswith("✗ remove denied by terminal user"))
    assert denied.endswith(": b is still needed")
    assert shown.index(approved) < shown.index("removed a") < shown.index(denied) < shown.index("kept b")
    decided = [r.data for r in records if r.kind == RecordKind.APPROVAL_DECIDED]
    assert [(d["approved"], d["reason"]) for d in decided] == [(True, ""), (False, "b is still needed")]
    assert all(d["by"].startswith("terminal user") for d in decided)


async def test_a_call_that_expired_is_said_so() -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("remove", {"name": "a"}, id="call-a"), "fine, nothing removed"])
    agent = Agent("term", log="memory://")

    @agent.tool(requires_approval=True)
    def remove(name: str) -> str:
        """Remove something."""
        return f"removed {name}"

    state = new_reasoning_state(agent, llm, enable_task_planning=False)
    state.when_event().go_to(state)
    read_end, write_end = os.pipe()  # the chat's input stays open: its own session is not used here
    output = io.StringIO()
    platform = TerminalPlatform("t", console=Console(file=output, width=100), input_fd=read_end)
    agent.add_platform(platform)
    try:
        async with agent:
            # Another session shown on this terminal: its call waits, then a new message expires it.
            await agent.receive_message("other", "remove a", platform)
            await agent.receive_message("other", "never mind", platform)
            os.close(write_end)
            assert platform._reader is not None
            await asyncio.wait_for(platform._reader, 20)
    finally:
        os.close(read_end)
    shown = output.getvalue()
    assert "· approval expired (call-a): a new message arrived before the decision" in shown
    assert shown.index("approval expired") < shown.index("fine, nothing removed")


async def test_a_terminal_read_with_input_shows_the_prompts_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # Standard input that is not a pipe is read with input(), the prompt printed by rich: its "[y/N, ...]"
    # is text, not a markup tag to drop.
    llm = ScriptedLLM([ScriptedLLM.tool_call("remove", {"name": "a"}), "removed a"])
    agent = Agent("term", log="memory://")

    @agent.tool(requires_approval=True)
    def remove(name: str) -> str:
        """Remove something."""
        return f"removed {name}"

    state = new_reasoning_state(agent, llm, enable_task_planning=False)
    state.when_event().go_to(state)
    monkeypatch.setattr(sys, "stdin", io.StringIO("remove a\ny\n"))
    output = io.StringIO()
    platform = TerminalPlatform("t", console=Console(file=output, width=100), prompt="[you]> ")
    agent.add_platform(platform)
    async with agent:
        assert platform._reader is not None
        await asyncio.wait_for(platform._reader, 20)  # ends at the end of the input
    shown = output.getvalue()
    assert "approve remove? [y/N, or a reason to deny]" in shown
    assert shown.count("[you]> ") == 2  # before the message, and before the end of the input
    assert "removed a" in shown
