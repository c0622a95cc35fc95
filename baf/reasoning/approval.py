"""Human approval of tool calls: which calls wait, what is recorded, and what the model is told.

A tool made with ``requires_approval=True`` (or a policy ``(session, call) -> bool``) does not run when
the model calls it. The tool-call runner (:class:`~baf.reasoning.tool_calls.ToolRunner`) first holds
the response's calls that need a decision::

    for each call that needs approval and has none: record approval_requested, tell the platform
    any held → raise ApprovalPending: none of the response's calls runs, the loop ends its step

No task or thread waits for the human. The decision is an ordinary inbound event
(:class:`~baf.core.events.ApprovalEvent`), recorded by the engine as ``approval_decided``; once every
call held together is decided, the engine runs the paused body's resume hook, which goes through the
loop again from its records (:mod:`baf.reasoning.recorder`): the recorded model responses are served,
the held calls are found decided, and the response's calls run as usual, a denied one answered with
:func:`denial_message` instead. So a restart, or another worker, continues exactly where the log says.

The calls of one response are held together, and run together once all are decided: their results are
then recorded in the order the calls were made, as for any response, and a call that depends on an
earlier one of the same response never runs before it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from baf.llm.base import ToolCall
from baf.log.record import Record

__all__ = [
    "ANSWERED",
    "REDACTED_ARGUMENTS_MESSAGE",
    "ApprovalDecision",
    "ApprovalExpiry",
    "ApprovalPolicy",
    "ApprovalRequest",
    "KnownApproval",
    "denial_message",
]

#: A per-call policy: ``(session, call) -> bool``, true when a human must decide on the call.
ApprovalPolicy = Callable[[Any, ToolCall], bool]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What a platform shows a human (:meth:`~baf.core.platform.Platform.reply_approval_request`): the
    call's id (what the :class:`~baf.core.events.ApprovalEvent` names), the tool, its arguments (the
    model's JSON text, with the agent's secrets redacted) and the loop step that made the call."""

    call_id: str
    tool: str
    arguments: str
    step: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The request as JSON: ``{call_id, tool, arguments, step}``."""
        return {"call_id": self.call_id, "tool": self.tool, "arguments": self.arguments, "step": self.step}


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A decision on a call that waited, as platforms show it
    (:meth:`~baf.core.platform.Platform.reply_approval_decision`): the call, its tool, approved or denied,
    the reason given, who decided (the ``approver`` of the :class:`~baf.core.events.ApprovalEvent`) and
    when (``at``, Unix seconds: the ``approval_decided`` record's time)."""

    call_id: str
    tool: str
    approved: bool
    reason: str = ""
    by: str = ""
    at: float = 0.0

    @classmethod
    def from_record(cls, record: Record) -> ApprovalDecision:
        """The decision an ``approval_decided`` record holds."""
        data = record.data
        return cls(
            str(data.get("call_id", "")), str(data.get("name", "")), data.get("approved") is True,
            str(data.get("reason", "") or ""), str(data.get("by", "") or ""), record.ts,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The decision as JSON: ``{call_id, tool, approved, reason, by, at}``."""
        return {
            "call_id": self.call_id, "tool": self.tool, "approved": self.approved, "reason": self.reason,
            "by": self.by, "at": self.at,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class ApprovalExpiry:
    """Calls dropped undecided because the conversation moved on, as platforms show it
    (:meth:`~baf.core.platform.Platform.reply_approval_expired`): their ids, why, and when (``at``, Unix
    seconds: the ``approval_expired`` record's time)."""

    call_ids: tuple[str, ...]
    reason: str = ""
    at: float = 0.0

    @classmethod
    def from_record(cls, record: Record) -> ApprovalExpiry:
        """The expiry an ``approval_expired`` record holds."""
        ids = record.data.get("call_ids")
        call_ids = tuple(str(i) for i in ids) if isinstance(ids, list) else ()
        return cls(call_ids, str(record.data.get("reason", "") or ""), record.ts)

    def to_dict(self) -> dict[str, Any]:
        """The expiry as JSON: ``{call_ids, reason, at}``."""
        return {"call_ids": list(self.call_ids), "reason": self.reason, "at": self.at}


@dataclass(frozen=True, slots=True)
class KnownApproval:
    """What the log says about a call of a recorded response that was held for approval: undecided
    (``approved is None``), or the decision, who made it and why. ``fresh`` is true for a decision the
    event being handled now completed: the call has certainly not started yet."""

    approved: bool | None = None
    reason: str = ""
    by: str = ""
    fresh: bool = False


#: What :meth:`~baf.reasoning.resume.ResumeEffects.approval` says of a call whose result is recorded:
#: it ran (or was refused) before, and no approval applies to it any more.
ANSWERED = KnownApproval(approved=True)


#: What the model reads for an approved call whose arguments held one of the agent's secrets: the log
#: keeps them redacted, and the call goes on from the log, so it cannot run with the real value.
REDACTED_ARGUMENTS_MESSAGE = (
    "Error: the call to tool '{tool}' was approved, but its arguments held a secret, which baf never keeps "
    "in its log; continued from the log after the wait, the call would get '[REDACTED]' instead, so it did "
    "not run. Call it again without the secret in the arguments (a tool should take secrets from its own "
    "configuration)."
)


def denial_message(tool: str, reason: str, by: str) -> str:
    """What the model reads as the result of a call a human denied."""
    who = f" by {by}" if by else ""
    because = f" Reason given: {reason.strip().rstrip('.')}." if reason.strip() else " No reason was given."
    return (
        f"Error: the call to tool '{tool}' was denied{who} and did not run.{because} "
        "Do not call it again with the same arguments unless the user asks you to."
    )
