"""Human approval inside the pattern catalogue: a ReAct state pauses on a tool that needs approval and
goes on from the log once decided, as the reasoning state does."""

from __future__ import annotations

from baf import Agent, ApprovalEvent
from baf.library.state.pattern_state import new_pattern_state
from baf.log.record import RecordKind
from baf.reasoning.patterns import ReAct
from baf.reasoning.tool import Tool
from baf.testing import RecordingPlatform, ScriptedLLM


async def test_a_react_state_pauses_for_approval_and_runs_the_call_once_approved() -> None:
    ran: list[int] = []
    llm = ScriptedLLM([
        ScriptedLLM.tool_calls([("transfer", {"amount": 5})], text="Transfer it."),
        ScriptedLLM.tool_call("final_answer", {"answer": "Transferred 5."}),
    ])  # fmt: skip
    agent = Agent("patterns", log="memory://")

    @agent.tool(requires_approval=True)
    def transfer(amount: int) -> str:
        """Transfer money."""
        ran.append(amount)
        return f"transferred {amount}"

    state = new_pattern_state(agent, llm, ReAct())
    state.when_event().go_to(state)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "send 5", platform)
        assert ran == [] and platform.replies["s"] == [] and llm.calls == 1
        (request,) = platform.approval_requests["s"]
        assert request.tool == "transfer"
        done = await agent.receive_event(ApprovalEvent("s", call_id=request.call_id, approved=True), platform)
        await done
        records = await agent.log.read("s")
    assert ran == [5] and platform.replies["s"] == ["Transferred 5."]
    finished = [r for r in records if r.kind == RecordKind.REASONING_STEP and r.data["kind"] == "reasoning_finished"]
    assert len(finished) == 1  # one run, paused and continued, finished once


async def test_outside_a_session_a_call_that_needs_approval_is_refused_to_the_model() -> None:
    ran: list[int] = []

    def transfer(amount: int) -> str:
        """Transfer money."""
        ran.append(amount)
        return "done"

    llm = ScriptedLLM([
        ScriptedLLM.tool_calls([("transfer", {"amount": 5})]),
        ScriptedLLM.tool_call("final_answer", {"answer": "I could not."}),
    ])  # fmt: skip
    result = await ReAct().execute(llm, "send 5", tools=[Tool(transfer, requires_approval=True)])
    assert ran == [] and result.text == "I could not."
    observation = next(m for m in llm.requests[1].messages if m["role"] == "tool")["content"]
    assert "denied" in observation and "only be asked for inside a session" in observation
