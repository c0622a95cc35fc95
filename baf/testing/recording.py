"""A platform that remembers what it was sent, for tests."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from baf.core.platform import Platform

if TYPE_CHECKING:
    from baf.core.session import Session

__all__ = ["RecordingPlatform"]


class RecordingPlatform(Platform):
    """Records, per session id, the replies, errors, reasoning steps, task-list updates, streamed text
    (``deltas``: ``(run_id, text)`` pairs), approval requests
    (:class:`~baf.reasoning.approval.ApprovalRequest`), decisions
    (:class:`~baf.reasoning.approval.ApprovalDecision`) and expiries
    (:class:`~baf.reasoning.approval.ApprovalExpiry`) it was sent.

    ``events`` keeps everything in arrival order as ``(session_id, kind, payload)`` tuples, so tests can
    assert on the interleaving of steps and replies.
    """

    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.replies: defaultdict[str, list[str]] = defaultdict(list)
        self.steps: defaultdict[str, list[Any]] = defaultdict(list)
        self.task_lists: defaultdict[str, list[list[dict[str, Any]]]] = defaultdict(list)
        self.errors: defaultdict[str, list[str]] = defaultdict(list)
        self.approval_requests: defaultdict[str, list[Any]] = defaultdict(list)
        self.approval_decisions: defaultdict[str, list[Any]] = defaultdict(list)
        self.approval_expiries: defaultdict[str, list[Any]] = defaultdict(list)
        self.deltas: defaultdict[str, list[tuple[str, str]]] = defaultdict(list)
        self.events: list[tuple[str, str, Any]] = []

    async def reply(self, session: Session, message: str) -> None:
        self.replies[session.id].append(message)
        self.events.append((session.id, "reply", message))

    async def reply_error(self, session: Session, message: str) -> None:
        self.errors[session.id].append(message)
        self.events.append((session.id, "error", message))

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        self.steps[session.id].append(step)
        self.events.append((session.id, "step", step))

    async def reply_approval_request(self, session: Session, request: Any) -> None:
        self.approval_requests[session.id].append(request)
        self.events.append((session.id, "approval_request", request))

    async def reply_approval_decision(self, session: Session, decision: Any) -> None:
        self.approval_decisions[session.id].append(decision)
        self.events.append((session.id, "approval_decision", decision))

    async def reply_approval_expired(self, session: Session, expiry: Any) -> None:
        self.approval_expiries[session.id].append(expiry)
        self.events.append((session.id, "approval_expired", expiry))

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        self.task_lists[session.id].append(tasks)
        self.events.append((session.id, "tasks", tasks))

    async def reply_delta(self, session: Session, run_id: str, text: str) -> None:
        self.deltas[session.id].append((run_id, text))
        self.events.append((session.id, "delta", (run_id, text)))
