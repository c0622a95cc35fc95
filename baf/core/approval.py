"""The engine's side of human approval: a decision taken, requests expired, a paused body continued.

A reasoning loop that holds tool calls for approval ends its step (see :mod:`baf.reasoning.approval`);
the projection keeps the waiting calls (``SessionProjection.approvals``). An
:class:`~baf.core.events.ApprovalEvent` is an ordinary inbound event: recorded on arrival, then handled
in the session's order by the engine step, which calls :func:`take_decision` instead of matching
transitions:

1. A decision that names no call waiting in this session (decided already, expired, never asked here:
   another session's call is not this session's), or that is malformed, is refused: an ``error`` record
   (:class:`~baf.errors.ApprovalError`) and an error shown to the sender. Nothing runs.
2. Otherwise ``approval_decided`` is recorded (who, approve or deny, the reason; the record's time is
   when), and the platform is told (``reply_approval_decision``) once it is durable. While other calls
   held with it wait, that is all.
3. Once every call held together is decided, the body that paused is continued: its ``resume`` hook is
   given the records of the paused invocation and the calls just ``decided``, and it runs in this step,
   answering the event the invocation began with (its memory and request are that event's).

A new message with text (the user moved on) expires the waiting calls first (:func:`expire_approvals`):
``approval_expired`` (the platform is told: ``reply_approval_expired``), and a decision that comes later is
refused as in 1.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baf.core.events import ApprovalEvent, Event, event_from_data
from baf.core.session import runtime_side
from baf.errors import ApprovalError
from baf.log.record import Record, RecordKind
from baf.reasoning.approval import ApprovalDecision, ApprovalExpiry

if TYPE_CHECKING:
    from baf.core.live import LiveSession
    from baf.core.session import Session
    from baf.core.state import Body, State

__all__ = ["Continuation", "continuation_after_crash", "expire_approvals", "invocation_records", "take_decision"]


@dataclass(frozen=True, slots=True)
class Continuation:
    """A paused body to run again: where, which body (bound to its records), and the event it answers."""

    state: State
    role: str
    body: Body
    event: Event | None
    event_seq: int | None


async def take_decision(live: LiveSession, event: ApprovalEvent) -> Continuation | None:
    """Record the decision ``event`` carries (or refuse it), and return the paused body to continue once
    every call held with it is decided (see the module docstring)."""
    problem = _malformed(event)
    entry = live.projection.approvals.get(event.call_id) if problem is None else None
    if problem is None and entry is None:
        problem = (
            f"no tool call {event.call_id!r} is waiting for approval in this session (it was decided already, "
            "it expired when the conversation moved on, or it was never asked for here); nothing was run"
        )
    elif entry is not None and entry["decided"]:
        problem = f"the tool call {event.call_id!r} was already decided; this second decision was ignored"
    if problem is not None:
        shown = f"Approval refused: {problem}"
        # ``shown``: what the user was told, so a worker following the session tells its client too.
        live.record_error("approval", ApprovalError(problem), call_id=str(event.call_id)[:200], shown=shown)
        live.queue_platform_call("reply_error", shown)
        return None
    assert entry is not None
    since = entry["since"]
    held_with = [key for key, other in live.projection.approvals.items() if other["since"] == since]
    decided = live.record(RecordKind.APPROVAL_DECIDED, {
        "call_id": event.call_id, "name": entry["name"], "approved": event.approved, "reason": event.reason,
        "by": event.approver, "request_seq": entry["seq"], "since": since,
    })  # fmt: skip
    # Every client of the session is shown who decided (another browser tab too), once it is durable.
    live.queue_platform_call("reply_approval_decision", ApprovalDecision.from_record(decided))
    if live.projection.continuing is None:
        return None  # other calls held with this one still wait for their decisions
    # The decision is durable before anything acts on it, and shown before an approved tool runs (which
    # may take long): commit, not just flush.
    await live.commit()
    first = entry["event_seq"] or since  # the message the invocation answers comes before it
    records = await live.runtime.log.read(live.id, first - 1)
    paused = _continuation(live.session, entry, records, frozenset(held_with))
    if paused is None:  # the agent changed: no resumable body where the loop paused (told, not silent)
        problem = (f"the loop that asked for this decision ran in the {entry['role']} of state {entry['state']!r}, "
                   "which this agent no longer has as a resumable body; it cannot go on")  # fmt: skip
        shown = f"The decision was recorded, but {problem}."
        live.record_error("approval", ApprovalError(problem), call_id=event.call_id, shown=shown)
        live.queue_platform_call("reply_error", shown)
    return paused


def continuation_after_crash(session: Session, records: Sequence[Record]) -> Continuation | None:
    """For a restart: the paused body a crash cut off while a decision continued it (the open step of
    ``records`` is an approval's). Calls approved there without a result may have been running, so
    nothing is passed as just ``decided``: they are handled as any call cut off by a crash."""
    entry = runtime_side(session).projection.continuing
    if entry is None:
        return None
    return _continuation(session, entry, records, frozenset())


def _continuation(
    session: Session, entry: dict[str, Any], records: Sequence[Record], decided: frozenset[str]
) -> Continuation | None:
    agent = session.agent
    state = next((s for s in agent.states if s.name == entry["state"]), None)
    body = None if state is None else (state.fallback_body if entry["role"] == "fallback" else state.body)
    resume = getattr(body, "resume", None)
    if state is None or resume is None:
        return None
    event_seq = entry["event_seq"] or None
    received = next((r for r in records if r.seq == event_seq and r.kind == RecordKind.MESSAGE_RECEIVED), None)
    event = event_from_data(session.id, received.data["event"]) if received is not None else None
    written = invocation_records(records, entry["since"])
    bound = (
        functools.partial(resume, records=written, decided=decided)
        if decided
        else functools.partial(resume, records=written)
    )
    return Continuation(state, entry["role"], bound, event, event_seq)


def invocation_records(records: Sequence[Record], since: int) -> list[Record]:
    """The records of the paused invocation that began at seq ``since``: those of the step it began in,
    from ``since`` on, and of every step that continued it (the steps whose ``approval_decided`` names
    it). Steps the session took for other events meanwhile are left out."""
    kept: list[Record] = []
    step: list[Record] = []
    first = True  # the records from ``since`` up to the next step are the invocation's own step
    for record in records:
        if record.seq < since:
            continue
        if record.kind == RecordKind.STEP_STARTED:
            if first or _continues(step, since):
                kept.extend(step)
            step, first = [], False
        step.append(record)
    if first or _continues(step, since):
        kept.extend(step)
    return kept


def _continues(step: list[Record], since: int) -> bool:
    return any(r.kind == RecordKind.APPROVAL_DECIDED and r.data.get("since") == since for r in step)


def expire_approvals(live: LiveSession, reason: str) -> None:
    """Drop every waiting call undecided (``approval_expired``): the conversation moved on."""
    call_ids = sorted(live.projection.approvals)
    if call_ids:
        expired = live.record(RecordKind.APPROVAL_EXPIRED, {"call_ids": call_ids, "reason": reason})
        live.queue_platform_call("reply_approval_expired", ApprovalExpiry.from_record(expired))


def _malformed(event: ApprovalEvent) -> str | None:
    """What is wrong with the decision's fields (it came from a client), or ``None``."""
    if not isinstance(event.call_id, str) or not event.call_id:
        return "the decision names no tool call (call_id must be a non-empty string)"
    if not isinstance(event.approved, bool):
        return "'approved' must be true or false"
    if not isinstance(event.reason, str) or not isinstance(event.approver, str):
        return "'reason' and 'approver' must be strings"
    return None
