"""Human approval of tool calls in the reasoning state: the pause, the decision, and bad decisions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from baf import Agent, ApprovalEvent
from baf.core.session import runtime_side
from baf.errors import ConfigurationError
from baf.llm.base import ToolCall
from baf.log.record import RecordKind
from baf.reasoning.approval import ApprovalDecision, ApprovalExpiry, ApprovalRequest
from baf.replay.timeline import EntryKind, build_timeline, flatten
from baf.testing import RecordingPlatform
from baf.testing.llms import FunctionLLM, ScriptedLLM
from tests.library.helpers import reasoning_agent, records_of, tool_messages


def _agent(llm: Any, ran: list[str], *, requires_approval: Any = True, **options: Any) -> Agent:
    agent, _ = reasoning_agent(llm, enable_task_planning=False, **options)

    @agent.tool(requires_approval=requires_approval)
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file to delete.
        """
        ran.append(path)
        return f"deleted {path}"

    return agent


async def _decide(agent: Agent, session_id: str, platform: RecordingPlatform, **fields: Any) -> None:
    done = await agent.receive_event(ApprovalEvent(session_id, **fields), platform)
    await done


def _kinds(records: list[Any]) -> list[str]:
    return [r.kind for r in records]


async def test_an_approved_call_runs_once_after_the_decision_and_the_loop_goes_on() -> None:
    ran: list[str] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}), "Deleted a.txt."])
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a.txt", platform)
        # Paused: nothing ran, nothing was replied, the platform was shown the request, and no step is open.
        assert ran == [] and platform.replies["s"] == []
        assert platform.approval_requests["s"] == [ApprovalRequest("call_1", "delete_file", '{"path": "a.txt"}', 0)]
        live = runtime_side(agent.sessions["s"])
        assert live.projection.open_step is None and set(live.projection.approvals) == {"call_1"}
        assert llm.calls == 1

        await _decide(agent, "s", platform, call_id="call_1", approved=True, approver="alice")
        assert ran == ["a.txt"]
        assert platform.replies["s"] == ["Deleted a.txt."]
        assert tool_messages(llm.last_request)[0]["content"] == "deleted a.txt"
        assert live.projection.approvals == {}
        records = await records_of(agent, "s")
    kinds = _kinds(records)
    assert kinds.count(RecordKind.APPROVAL_REQUESTED) == 1 and kinds.count(RecordKind.TOOL_RESULT) == 1
    # Recorded ahead: the decision before the result, the request before the decision.
    assert kinds.index(RecordKind.APPROVAL_REQUESTED) < kinds.index(RecordKind.APPROVAL_DECIDED)
    assert kinds.index(RecordKind.APPROVAL_DECIDED) < kinds.index(RecordKind.TOOL_RESULT)
    decided = next(r for r in records if r.kind == RecordKind.APPROVAL_DECIDED)
    assert decided.data["approved"] is True and decided.data["by"] == "alice"
    assert decided.data["name"] == "delete_file" and decided.ts > 0
    # Exactly one reasoning invocation, finished once.
    finished = [r for r in records if r.kind == RecordKind.REASONING_STEP and r.data["kind"] == "reasoning_finished"]
    assert len(finished) == 1 and finished[0].data["details"]["outcome"] == "answered"


async def test_the_platform_is_shown_the_decision_before_the_approved_tool_runs_and_an_expiry() -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}), "Deleted a.txt.",
                       ScriptedLLM.tool_call("delete_file", {"path": "b.txt"}), "Fine."])  # fmt: skip
    agent, _ = reasoning_agent(llm, enable_task_planning=False)
    platform = RecordingPlatform()
    shown_when_run: list[list[Any]] = []

    @agent.tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file to delete.
        """
        shown_when_run.append(list(platform.approval_decisions["s"]))  # a slow tool: the decision shows first
        return f"deleted {path}"

    async with agent:
        await agent.receive_message("s", "delete a.txt", platform)
        await _decide(agent, "s", platform, call_id="call_1", approved=True, reason="ok", approver="alice")
        (decision,) = platform.approval_decisions["s"]
        assert shown_when_run == [[decision]]
        decided = next(r for r in await records_of(agent, "s") if r.kind == RecordKind.APPROVAL_DECIDED)
        assert decision == ApprovalDecision("call_1", "delete_file", True, "ok", "alice", decided.ts)
        kinds = [kind for _, kind, _ in platform.events]
        assert kinds.index("approval_request") < kinds.index("approval_decision") < kinds.index("reply")

        await agent.receive_message("s", "delete b.txt", platform)  # waits for a decision ...
        await agent.receive_message("s", "no, leave it", platform)  # ... that never comes: it expires
        (expiry,) = platform.approval_expiries["s"]
        expired = next(r for r in await records_of(agent, "s") if r.kind == RecordKind.APPROVAL_EXPIRED)
        assert expiry == ApprovalExpiry(("call_2",), "a new message arrived before the decision", expired.ts)
    assert platform.approval_decisions["s"] == [decision]


async def test_a_denied_call_does_not_run_and_the_model_reads_the_reason() -> None:
    ran: list[str] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}), "OK, I left it."])
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a.txt", platform)
        await _decide(agent, "s", platform, call_id="call_1", approved=False, reason="it is the backup",
                      approver="bob")  # fmt: skip
        result = next(r for r in await records_of(agent, "s") if r.kind == RecordKind.TOOL_RESULT)
    assert ran == []
    told = tool_messages(llm.last_request)[0]["content"]
    assert "denied by bob" in told and "it is the backup" in told
    assert platform.replies["s"] == ["OK, I left it."]
    assert result.data["is_error"] is True and "it is the backup" in result.data["content"]


async def test_a_policy_decides_per_call_and_a_policy_that_raises_asks_a_human() -> None:
    ran: list[str] = []

    def policy(session: Any, call: ToolCall) -> bool:
        path = json.loads(call.arguments)["path"]
        if path == "boom":
            raise RuntimeError("policy bug")
        return path.startswith("/etc")

    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "tmp.txt"}), "done 1",
                       ScriptedLLM.tool_call("delete_file", {"path": "/etc/passwd"}), "done 2",
                       ScriptedLLM.tool_call("delete_file", {"path": "boom"}), "done 3"])  # fmt: skip
    agent = _agent(llm, ran, requires_approval=policy)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "one", platform)
        assert ran == ["tmp.txt"] and platform.approval_requests["s"] == []  # the policy let it through
        await agent.receive_message("s", "two", platform)
        assert ran == ["tmp.txt"] and len(platform.approval_requests["s"]) == 1
        await _decide(agent, "s", platform, call_id=platform.approval_requests["s"][0].call_id, approved=True)
        assert ran == ["tmp.txt", "/etc/passwd"]
        await agent.receive_message("s", "three", platform)
        assert ran == ["tmp.txt", "/etc/passwd"] and len(platform.approval_requests["s"]) == 2
        errors = await records_of(agent, "s", RecordKind.ERROR)
    assert errors and errors[-1].data["source"] == "approval" and "policy bug" in errors[-1].data["message"]


async def test_calls_held_together_run_together_once_all_are_decided() -> None:
    ran: list[str] = []
    calls = ScriptedLLM.tool_calls([("delete_file", {"path": "a"}), ("delete_file", {"path": "b"})])
    llm = ScriptedLLM([calls, "both handled"])
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a and b", platform)
        ids = [request.call_id for request in platform.approval_requests["s"]]
        assert len(ids) == 2
        await _decide(agent, "s", platform, call_id=ids[1], approved=False, reason="keep b")
        assert ran == [] and llm.calls == 1  # the other one still waits: nothing runs yet
        await _decide(agent, "s", platform, call_id=ids[0], approved=True)
        assert ran == ["a"]
    contents = [m["content"] for m in tool_messages(llm.last_request)]
    assert contents[0] == "deleted a" and "keep b" in contents[1]  # in the order the model called them


async def test_an_unknown_or_malformed_decision_is_refused_and_nothing_runs() -> None:
    ran: list[str] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a"}), "done"])
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a", platform)
        await _decide(agent, "s", platform, call_id="call_404", approved=True)
        await _decide(agent, "s", platform, call_id="call_1", approved="yes")  # not a boolean
        assert ran == [] and llm.calls == 1
        assert len(platform.errors["s"]) == 2 and "call_404" in platform.errors["s"][0]
        assert "true or false" in platform.errors["s"][1]
        # The real request still waits, and a proper decision still works.
        await _decide(agent, "s", platform, call_id="call_1", approved=True)
        assert ran == ["a"]


async def test_a_second_decision_for_the_same_call_is_refused_and_the_tool_ran_once() -> None:
    ran: list[str] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a"}), "done"])
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a", platform)
        await _decide(agent, "s", platform, call_id="call_1", approved=True)
        await _decide(agent, "s", platform, call_id="call_1", approved=True)
        await _decide(agent, "s", platform, call_id="call_1", approved=False)
        kinds = _kinds(await records_of(agent, "s"))
    assert ran == ["a"] and llm.calls == 2
    assert len(platform.errors["s"]) == 2
    assert kinds.count(RecordKind.APPROVAL_DECIDED) == 1 and kinds.count(RecordKind.TOOL_RESULT) == 1


async def test_a_second_decision_while_the_first_is_still_deciding_the_batch_is_refused() -> None:
    ran: list[str] = []
    calls = ScriptedLLM.tool_calls([("delete_file", {"path": "a"}), ("delete_file", {"path": "b"})])
    agent = _agent(ScriptedLLM([calls, "done"]), ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a and b", platform)
        first = platform.approval_requests["s"][0].call_id
        await _decide(agent, "s", platform, call_id=first, approved=True)
        await _decide(agent, "s", platform, call_id=first, approved=False)  # decided already, b still waits
        assert "already decided" in platform.errors["s"][0]
        await _decide(agent, "s", platform, call_id=platform.approval_requests["s"][1].call_id, approved=True)
    assert ran == ["a", "b"]  # the refused second decision changed nothing


async def test_a_decision_from_another_session_is_refused_and_nothing_runs() -> None:
    ran: list[str] = []
    # Both sessions' models name their calls alike: a call id is only meaningful in its own session.
    llm = FunctionLLM(lambda messages, tools, **_: _call_once(messages, "x"))
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("victim", "delete x", platform)
        await agent.receive_message("attacker", "hello", platform)
        victim_call = platform.approval_requests["victim"][0].call_id
        # The attacker's session has no such call waiting: refused there, the victim's call is untouched.
        await _decide(agent, "attacker", platform, call_id=victim_call, approved=True, approver="mallory")
        assert ran == [] and platform.errors["attacker"] and not platform.errors["victim"]
        assert set(runtime_side(agent.sessions["victim"]).projection.approvals) == {victim_call}
        assert not [r for r in await records_of(agent, "victim") if r.kind == RecordKind.APPROVAL_DECIDED]
        await _decide(agent, "victim", platform, call_id=victim_call, approved=True, approver="owner")
    assert ran == ["x"]


def _call_once(messages: list[dict[str, Any]], path: str) -> Any:
    if messages[-1]["role"] == "tool":
        return "done"
    if messages[-1]["content"].startswith("delete"):
        return ScriptedLLM.tool_call("delete_file", {"path": path}, id="call_same")
    return "hi"


async def test_a_new_message_expires_the_waiting_call_and_a_later_decision_is_refused() -> None:
    ran: list[str] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a"}), "never mind then"])
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a", platform)
        await agent.receive_message("s", "actually, don't", platform)
        assert platform.replies["s"] == ["never mind then"]
        await _decide(agent, "s", platform, call_id="call_1", approved=True)
        assert ran == [] and "expired" in platform.errors["s"][0]
        expired = await records_of(agent, "s", RecordKind.APPROVAL_EXPIRED)
    assert len(expired) == 1 and expired[0].data["call_ids"] == ["call_1"]


async def test_a_decision_that_arrives_while_the_session_is_busy_waits_its_turn() -> None:
    ran: list[str] = []
    release = asyncio.Event()
    started = asyncio.Event()
    agent, _ = reasoning_agent(ScriptedLLM([ScriptedLLM.tool_call("slow_delete", {"path": "a"}), "done"]),
                               enable_task_planning=False)  # fmt: skip

    @agent.tool(requires_approval=True)
    async def slow_delete(path: str) -> str:
        """Delete slowly."""
        started.set()
        await release.wait()
        ran.append(path)
        return "deleted"

    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a", platform)
        first = await agent.receive_event(ApprovalEvent("s", call_id="call_1", approved=True), platform)
        await started.wait()  # the approved call is running: the session is busy
        # Recorded at once, handled after the running step, in order: one more decision, one unknown.
        second = await agent.receive_event(ApprovalEvent("s", call_id="call_1", approved=True), platform)
        stray = await agent.receive_event(ApprovalEvent("s", call_id="call_9", approved=True), platform)
        assert not second.done() and ran == []
        release.set()
        await asyncio.gather(first, second, stray)
    assert ran == ["a"] and len(platform.errors["s"]) == 2 and platform.replies["s"] == ["done"]


async def test_the_timeline_shows_who_decided_what_and_when() -> None:
    ran: list[str] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a"}), "done"])
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a", platform)
        await _decide(agent, "s", platform, call_id="call_1", approved=False, reason="no", approver="carol")
        records = await records_of(agent, "s")
    entries = [entry for _, entry in flatten(build_timeline(records))]
    approvals = [entry for entry in entries if entry.kind == EntryKind.APPROVAL]
    assert [entry.title for entry in approvals] == [
        'approval requested: delete_file({"path": "a"})',
        "denied by carol: delete_file (call call_1): no",
    ]
    assert approvals[1].ts >= approvals[0].ts
    # The paused invocation is one group: the decision and the answer after it are inside it.
    group = next(entry for entry in build_timeline(records) if entry.kind == "reasoning")
    assert group.status == "ok" and any(child.kind == EntryKind.APPROVAL for child in group.children)


@pytest.mark.parametrize("approved", [True, False])
async def test_the_timeline_shows_a_held_call_after_its_decision(approved: bool) -> None:
    ran: list[str] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a"}), "done"])
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a", platform)
        await _decide(agent, "s", platform, call_id="call_1", approved=approved, reason="", approver="carol")
        records = await records_of(agent, "s")
    group = next(entry for entry in build_timeline(records) if entry.kind == "reasoning")
    kinds = [child.kind for child in group.children if child.kind in (EntryKind.APPROVAL, EntryKind.TOOL_CALL)]
    # Asked, decided, then run (or refused): not a result shown before anyone was asked.
    assert kinds == [EntryKind.APPROVAL, EntryKind.APPROVAL, EntryKind.TOOL_CALL]
    assert ran == (["a"] if approved else [])


def test_requires_approval_must_be_a_flag_or_a_function() -> None:
    agent = Agent("a", log="memory://")
    with pytest.raises(ConfigurationError, match="requires_approval"):

        @agent.tool(requires_approval="yes")  # type: ignore[arg-type]
        def act() -> str:
            """Act."""
            return ""


async def test_a_session_with_decisions_re_runs_identically_from_its_log(tmp_path: Any) -> None:
    from baf.replay.rerun import assert_replays

    ran: list[str] = []
    log = f"sqlite:///{tmp_path / 'approvals.db'}"
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a"}), "done",
                       ScriptedLLM.tool_call("delete_file", {"path": "b"}), "kept"])  # fmt: skip
    agent = _agent(llm, ran, log=log)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a", platform)
        await _decide(agent, "s", platform, call_id="call_1", approved=True)
        await agent.receive_message("s", "delete b", platform)
        await _decide(agent, "s", platform, call_id="call_2", approved=False, reason="no")
    assert ran == ["a"]
    report = await assert_replays(log, "s", _agent(ScriptedLLM([]), ran, log=log))
    assert report.tool_results_served == 1 and ran == ["a"]  # served from the log, never run again


async def test_the_request_is_redacted_and_an_approved_call_that_held_a_secret_does_not_run_redacted() -> None:
    ran: list[str] = []
    secret = "hunter2-the-password"
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": f"/vault/{secret}"}), "I will ask again"])
    agent = _agent(llm, ran)
    agent.mark_secret(secret)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete it", platform)
        (request,) = platform.approval_requests["s"]
        (recorded,) = await records_of(agent, "s", RecordKind.APPROVAL_REQUESTED)
        await _decide(agent, "s", platform, call_id=request.call_id, approved=True)
    assert secret not in request.arguments and "[REDACTED]" in request.arguments
    assert secret not in recorded.data["arguments"] and "[REDACTED]" in recorded.data["arguments"]
    # The call goes on from the log, which never holds the secret: running it would pass "[REDACTED]" to
    # the tool, so it does not run, and the model is told why.
    assert ran == []
    told = tool_messages(llm.last_request)[0]["content"]
    assert "held a secret" in told and "did not run" in told


async def test_one_invocation_can_pause_several_times_and_goes_on_from_all_its_records() -> None:
    ran: list[str] = []
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a"}),
                       ScriptedLLM.tool_call("delete_file", {"path": "b"}),
                       ScriptedLLM.tool_call("delete_file", {"path": "c"}), "all three handled"])  # fmt: skip
    agent = _agent(llm, ran)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a, b and c", platform)
        for number, approved in ((1, True), (2, False), (3, True)):
            assert [r.call_id for r in platform.approval_requests["s"]][-1] == f"call_{number}"
            await _decide(agent, "s", platform, call_id=f"call_{number}", approved=approved)
        records = await records_of(agent, "s")
    assert ran == ["a", "c"] and platform.replies["s"] == ["all three handled"]
    assert llm.calls == 4  # every recorded response was served on each continuation, never asked again
    contents = [m["content"] for m in tool_messages(llm.last_request)]
    assert contents[0] == "deleted a" and "denied" in contents[1] and contents[2] == "deleted c"
    started = [r for r in records if r.kind == RecordKind.REASONING_STEP and r.data["kind"] == "reasoning_started"]
    assert len(started) == 1  # one invocation across three pauses
    decided = [r.data["since"] for r in records if r.kind == RecordKind.APPROVAL_DECIDED]
    assert len(set(decided)) == 1 and decided[0] == started[0].seq  # all decisions continue that invocation


async def test_a_decision_for_a_loop_whose_state_is_gone_is_recorded_and_the_user_told() -> None:
    ran: list[str] = []
    log = "memory://"
    agent = _agent(ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a"})]), ran, log=log)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "delete a", platform)
        # The state's body is replaced by one that cannot resume (a new version of the agent).
        agent.states[0].body = lambda session: None  # what a redeploy with another body looks like
        await _decide(agent, "s", platform, call_id="call_1", approved=True)
        errors = await records_of(agent, "s", RecordKind.ERROR)
    assert ran == [] and "cannot go on" in platform.errors["s"][0]
    assert errors[-1].data["source"] == "approval"
