"""What the model is sent: tools, system prompt, messages, memory; and that the log can rebuild it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from baf import Session
from baf.library.state.reasoning_prompt import PLANNING_GUIDANCE
from baf.llm.base import LLMResponse
from baf.log import open_log
from baf.testing import FunctionLLM, RecordingPlatform, ScriptedLLM

from .helpers import reasoning_agent, rebuild_requests, records_of, tool_messages


async def test_tools_are_read_when_each_turn_runs(platform: RecordingPlatform) -> None:
    def extra(x: int) -> int:
        """Double a number.

        Args:
            x: The number.
        """
        return 2 * x

    def unlock(session: Session) -> str:
        """Unlock the extra tool."""
        session.agent.add_tool(extra)
        return "unlocked"

    def late() -> str:
        """A tool registered after the reasoning state was created."""
        return "late"

    llm = ScriptedLLM([ScriptedLLM.tool_call("unlock", {}), ScriptedLLM.tool_call("extra", {"x": 21}), "42"])
    agent, _ = reasoning_agent(llm, enable_task_planning=False)
    agent.add_tool(unlock)
    agent.add_tool(late)
    async with agent:
        await agent.receive_message("s", "go", platform)
    assert platform.replies["s"] == ["42"]
    assert llm.requests[0].tool_names == ["unlock", "late"]
    # Added by a tool during the loop: offered from the very next turn.
    assert llm.requests[1].tool_names == ["unlock", "late", "extra"]
    assert tool_messages(llm.requests[2])[-1]["content"] == "42"


async def test_request_contents_system_prompt_and_messages(tmp_path: Path, platform: RecordingPlatform) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "menu.txt").write_text("soup\n")

    async def slow_lookup(key: str) -> str:
        """Look a key up slowly.

        Args:
            key: The key.
        """
        await asyncio.sleep(0.05)
        return f"slow:{key}"

    def fast_lookup(key: str) -> str:
        """Look a key up quickly.

        Args:
            key: The key.
        """
        return f"fast:{key}"

    llm = ScriptedLLM([
        ScriptedLLM.tool_call("add_tasks", {"descriptions": ["Look both up"]}),
        ScriptedLLM.tool_calls([("slow_lookup", {"key": "a"}), ("fast_lookup", {"key": "b"})]),
        ScriptedLLM.tool_call("complete_task", {"task_id": 1, "result": "both found"}),
        "a and b",
    ])  # fmt: skip
    agent, _ = reasoning_agent(llm, system_prompt="BASE PROMPT: be brief.", parameters={"temperature": 0})
    agent.add_tool(slow_lookup)
    agent.add_tool(fast_lookup)
    agent.new_skill("haiku", "Always answer in haiku.", description="Poetry")
    agent.new_workspace(tmp_path / "ws", name="kitchen", description="Recipes")
    async with agent:
        await agent.receive_message("s", "look up a and b", platform)
    assert platform.replies["s"] == ["a and b"]

    systems = [r.system_message or "" for r in llm.requests]
    for system in systems:
        assert system.startswith("BASE PROMPT: be brief.")
        assert "Always answer in haiku." in system
        assert "kitchen" in system and "Recipes" in system and "menu.txt" in system
        assert PLANNING_GUIDANCE in system
    # The live task list changes between turns.
    assert systems[0].endswith("## Current task list\nNo tasks yet.")
    assert systems[1].endswith("## Current task list\n- [~] 1. Look both up (in_progress)")
    assert systems[3].endswith("## Current task list\n- [x] 1. Look both up (completed) — both found")
    assert all(r.parameters == {"temperature": 0} for r in llm.requests)
    assert llm.requests[0].tool_names == [
        "slow_lookup", "fast_lookup", "list_directory", "read_file", "add_tasks", "complete_task", "skip_task",
    ]  # fmt: skip

    # The assistant's tool-call message, then one result per call in call order (not finishing order).
    messages = llm.requests[2].messages
    assert messages[0] == {"role": "user", "content": "look up a and b"}
    announce = messages[3]
    assert announce["role"] == "assistant"
    assert [(c["id"], c["function"]["name"]) for c in announce["tool_calls"]] == [
        ("call_2", "slow_lookup"), ("call_3", "fast_lookup"),
    ]  # fmt: skip
    assert all(c["type"] == "function" for c in announce["tool_calls"])
    assert messages[4:] == [
        {"role": "tool", "tool_call_id": "call_2", "content": "slow:a"},
        {"role": "tool", "tool_call_id": "call_3", "content": "fast:b"},
    ]


async def test_memory_sees_earlier_exchanges_from_the_log(log_url: str, platform: RecordingPlatform) -> None:
    llm = ScriptedLLM(["A1", "A2"])
    agent, _ = reasoning_agent(llm, log_url)
    async with agent:
        await agent.receive_message("s", "Q1", platform)
        await agent.receive_message("s", "Q2", platform)
    assert llm.requests[1].messages == [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
    ]


async def test_memory_survives_a_restart(db_url: str, platform: RecordingPlatform) -> None:
    first = ScriptedLLM(["My name is Baf."])
    agent, _ = reasoning_agent(first, db_url)
    async with agent:
        await agent.receive_message("s", "What is your name?", platform)
    second = ScriptedLLM(["You asked my name."])
    agent, _ = reasoning_agent(second, db_url)
    async with agent:
        await agent.receive_message("s", "What did I ask?", platform)
    assert second.requests[0].messages == [
        {"role": "user", "content": "What is your name?"},
        {"role": "assistant", "content": "My name is Baf."},
        {"role": "user", "content": "What did I ask?"},
    ]


async def test_memory_off_and_last_exchange_only(platform: RecordingPlatform) -> None:
    none = ScriptedLLM(["A1", "A2"])
    agent, _ = reasoning_agent(none, memory=0)
    async with agent:
        await agent.receive_message("s", "Q1", platform)
        await agent.receive_message("s", "Q2", platform)
    assert none.requests[1].messages == [{"role": "user", "content": "Q2"}]

    last = ScriptedLLM(["A1", "A2", "A3"])
    agent, _ = reasoning_agent(last, memory=1)
    async with agent:
        for text in ("Q1", "Q2", "Q3"):
            await agent.receive_message("s", text, platform)
    assert last.requests[2].messages == [
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"},
        {"role": "user", "content": "Q3"},
    ]


async def test_memory_of_other_sessions_is_not_shared(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM(["A1", "B1"])
    agent, _ = reasoning_agent(llm)
    async with agent:
        await agent.receive_message("alice", "secret", platform)
        await agent.receive_message("bob", "hello", platform)
    assert llm.requests[1].messages == [{"role": "user", "content": "hello"}]


async def test_records_are_written_ahead_and_rebuild_every_request(db_url: str, platform: RecordingPlatform) -> None:
    """With SQLite, a second connection sees each response before its tools run and each tool result
    before the model sees it; and the ``llm_request`` records alone rebuild every request exactly."""
    seen: dict[str, Any] = {}

    async def durable(session_id: str) -> list[Any]:
        async with open_log(db_url) as other:
            return await other.read(session_id)

    async def check_log(session: Session, note: str) -> str:
        """Look at what is durable.

        Args:
            note: Anything.
        """
        responses = [r for r in await durable(session.id) if r.kind == "llm_response"]
        seen.setdefault("calls_seen_by_tool", []).append([c["arguments"] for c in responses[-1].data["tool_calls"]])
        return f"checked {note}"

    async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **kwargs: Any) -> LLMResponse | str:
        turn = len(llm.requests)
        if turn in (2, 4):
            results = [r for r in await durable("s") if r.kind == "tool_result"]
            seen.setdefault("results_before_model", []).append([r.data["content"] for r in results])
        script: list[LLMResponse | str] = [
            ScriptedLLM.tool_call("add_tasks", {"descriptions": ["Check the log"]}),
            ScriptedLLM.tool_call("check_log", {"note": "one"}),
            "premature",
            ScriptedLLM.tool_calls([("check_log", {"note": "two"}), ("complete_task", {"task_id": 1, "result": "ok"})]),
            "done",
            "second answer",
        ]
        return script[turn - 1]

    llm = FunctionLLM(model)
    agent, _ = reasoning_agent(llm, db_url, parameters={"temperature": 0.2})
    agent.add_tool(check_log)
    async with agent:
        await agent.receive_message("s", "check it", platform)
        await agent.receive_message("s", "again", platform)
        records = await records_of(agent, "s")

    assert platform.replies["s"] == ["done", "second answer"]
    assert seen["calls_seen_by_tool"] == [['{"note": "one"}'], ['{"note": "two"}', '{"task_id": 1, "result": "ok"}']]
    assert seen["results_before_model"] == [
        ["Added tasks: 1. Check the log"],
        ["Added tasks: 1. Check the log", "checked one"],
    ]

    rebuilt = rebuild_requests(records)
    assert len(rebuilt) == len(llm.requests) == 6
    for index, (expected, actual) in enumerate(zip(llm.requests, rebuilt, strict=True)):
        assert actual == expected, f"request {index} cannot be rebuilt from the log"
    # Only what changed is repeated: the tools once per invocation, the system prompt when tasks change.
    requests = [r.data for r in records if r.kind == "llm_request"]
    assert ["tools" in r for r in requests] == [True, False, False, False, False, True]
    assert ["system" in r for r in requests] == [True, True, False, False, True, True]


async def test_a_new_tool_with_an_old_name_is_recorded(platform: RecordingPlatform) -> None:
    """Tools are compared by identity, not name, when deciding whether to record them again."""

    def probe() -> str:
        """First version."""
        return "v1"

    def probe_v2() -> str:
        """Second version."""
        return "v2"

    def swap(session: Session) -> str:
        """Swap the probe tool."""
        from baf.reasoning.tool import Tool

        session.agent._tools["probe"] = Tool(probe_v2, name="probe")
        return "swapped"

    llm = ScriptedLLM([ScriptedLLM.tool_call("swap", {}), "ok"])
    agent, _ = reasoning_agent(llm, enable_task_planning=False)
    agent.add_tool(probe)
    agent.add_tool(swap)
    async with agent:
        await agent.receive_message("s", "go", platform)
        records = await records_of(agent, "s")
    assert llm.requests[0].tools[0]["function"]["description"] == "First version."
    assert llm.requests[1].tools[0]["function"]["description"] == "Second version."
    assert rebuild_requests(records) == llm.requests


async def test_json_message_is_answered_with_its_text(platform: RecordingPlatform) -> None:
    from baf import ReceiveJSONEvent

    llm = ScriptedLLM(["got it"])
    agent, _ = reasoning_agent(llm)
    async with agent:
        await (await agent.receive_event(ReceiveJSONEvent("s", payload={"q": 1}), platform))
    assert llm.requests[0].messages == [{"role": "user", "content": '{"q": 1}'}]
    assert platform.replies["s"] == ["got it"]


async def test_system_prompt_is_rebuilt_every_turn(tmp_path: Path, platform: RecordingPlatform) -> None:
    """A file written by the model shows in the next turn's workspace preview; a skill added by a tool
    shows in the next turn's skills."""

    def learn(session: Session) -> str:
        """Learn a new skill."""
        session.agent.new_skill("tidy", "Keep notes tidy.")
        return "learned"

    llm = ScriptedLLM([
        ScriptedLLM.tool_calls([("write_file", {"relative_path": "new-note.md", "content": "hi"}), ("learn", {})]),
        "written",
    ])  # fmt: skip
    agent, _ = reasoning_agent(llm)
    agent.add_tool(learn)
    agent.new_workspace(tmp_path, name="notes", writable=True)
    async with agent:
        await agent.receive_message("s", "write a note", platform)
        records = await records_of(agent, "s")
    before, after = (r.system_message or "" for r in llm.requests)
    assert "new-note.md" not in before and "Keep notes tidy." not in before
    assert "new-note.md" in after and "Keep notes tidy." in after
    assert rebuild_requests(records) == llm.requests


async def test_kept_tools_and_prompt_follow_new_skills_and_workspaces(
    tmp_path: Path, platform: RecordingPlatform
) -> None:
    """The loop keeps the tool set and the static prompt between turns (no workspaces): a skill or a
    workspace added by a tool still shows from the next turn, and the log still rebuilds every request."""
    (tmp_path / "menu.txt").write_text("soup\n")

    def learn(session: Session) -> str:
        """Learn a new skill."""
        session.agent.new_skill("tidy", "Keep notes tidy.")
        return "learned"

    def mount(session: Session) -> str:
        """Mount the kitchen."""
        session.agent.new_workspace(tmp_path, name="kitchen")
        return "mounted"

    llm = ScriptedLLM([ScriptedLLM.tool_call("learn", {}), ScriptedLLM.tool_call("mount", {}), "done"])
    agent, _ = reasoning_agent(llm, enable_task_planning=False)
    agent.add_tool(learn)
    agent.add_tool(mount)
    async with agent:
        await agent.receive_message("s", "go", platform)
        records = await records_of(agent, "s")
    prompts = [r.system_message or "" for r in llm.requests]
    assert ["Keep notes tidy." in p for p in prompts] == [False, True, True]
    assert ["menu.txt" in p for p in prompts] == [False, False, True]
    assert [r.tool_names for r in llm.requests][:2] == [["learn", "mount"], ["learn", "mount"]]
    assert {"learn", "mount", "list_directory", "read_file"} <= set(llm.requests[2].tool_names)
    assert rebuild_requests(records) == llm.requests
