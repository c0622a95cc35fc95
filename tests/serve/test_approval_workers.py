"""Human approval with many workers: the decision is an ordinary inbound event, so it reaches the worker
that owns the session wherever it arrives, and a session whose call waits can move to another worker."""

from __future__ import annotations

import asyncio
from typing import Any

from baf import Agent, ApprovalEvent, ReceiveTextEvent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.log.postgres import PostgresLog
from baf.log.record import Record, RecordKind
from baf.serve import Worker
from baf.testing.llms import FunctionLLM, ScriptedLLM


def _agent(ran: list[str]) -> Agent:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> Any:
        if messages[-1]["role"] == "tool":
            return f"answer: {messages[-1]['content']}"
        return ScriptedLLM.tool_call("pay", {"to": messages[-1]["content"]}, id="pay-1")

    agent = Agent("approvals")

    @agent.tool(requires_approval=True)
    def pay(to: str) -> str:
        """Pay someone."""
        ran.append(to)
        return f"paid {to}"

    state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False, memory=0)
    state.when_event().go_to(state)
    return agent


async def _records(dsn: str, session_id: str, until: str, within: float = 30.0) -> list[Record]:
    """The session's records once one of kind ``until`` is there."""
    reader = PostgresLog(dsn, read_only=True)
    await reader.start()
    try:
        async with asyncio.timeout(within):
            while True:
                records = await reader.read(session_id)
                if any(r.kind == until for r in records):
                    return records
                await asyncio.sleep(0.1)
    finally:
        await reader.close()


async def test_a_decision_sent_to_another_worker_reaches_the_owner_and_runs_once(postgres_dsn: str) -> None:
    ran: list[str] = []
    a = Worker(_agent(ran), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
    b = Worker(_agent(ran), postgres_dsn, worker_id="b", lease_ttl=10, poll_interval=1)
    await a.start()
    await b.start()
    try:
        await (await a.runtime.receive(ReceiveTextEvent("w1", message="alice")))  # a owns w1; the call waits
        await _records(postgres_dsn, "w1", RecordKind.APPROVAL_REQUESTED)
        await b.runtime.receive(ApprovalEvent("w1", call_id="pay-1", approved=True, approver="ops"))
        records = await _records(postgres_dsn, "w1", RecordKind.REPLY)
        assert "w1" not in b.runtime.sessions  # b only forwarded it
        await b.runtime.receive(ApprovalEvent("w1", call_id="pay-1", approved=True))  # again: refused
        records = await _records(postgres_dsn, "w1", RecordKind.ERROR)
    finally:
        await a.stop()
        await b.stop()
    assert ran == ["alice"]
    assert [r.data["text"] for r in records if r.kind == RecordKind.REPLY] == ["answer: paid alice"]
    assert [r.data["by"] for r in records if r.kind == RecordKind.APPROVAL_DECIDED] == ["ops"]
    # What the owner told the user about the second decision is recorded: a worker following the session
    # (the client that sent it is connected there) shows the same message (``baf.core.delivery``).
    (refused,) = [r for r in records if r.kind == RecordKind.ERROR]
    assert refused.data["shown"].startswith("Approval refused: no tool call 'pay-1' is waiting")


async def test_a_waiting_call_moves_with_its_session_to_another_worker(postgres_dsn: str) -> None:
    ran: list[str] = []
    a = Worker(_agent(ran), postgres_dsn, worker_id="a2", lease_ttl=10, poll_interval=1)
    await a.start()
    try:
        await (await a.runtime.receive(ReceiveTextEvent("w2", message="bob")))
    finally:
        await a.stop()  # gives the session up with its call still waiting
    b = Worker(_agent(ran), postgres_dsn, worker_id="b2", lease_ttl=10, poll_interval=1)
    await b.start()
    try:
        await (await b.runtime.receive(ApprovalEvent("w2", call_id="pay-1", approved=False, reason="not bob")))
        records = await _records(postgres_dsn, "w2", RecordKind.REPLY)
    finally:
        await b.stop()
    assert ran == []
    (reply,) = [r.data["text"] for r in records if r.kind == RecordKind.REPLY]
    assert "denied" in reply and "not bob" in reply
