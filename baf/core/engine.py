"""The engine step: everything that happens to a session for one inbound event.

Read :func:`run_step` top to bottom: it is the whole runtime semantics. The inbound event was already
recorded (``message_received``) and committed before the step was queued.

**Resuming a step.** A crash, or a stop whose grace period ran out while the step ran, leaves a step
open (``step_started`` without ``step_finished``). If the
body that was running has a ``resume`` attribute, ``async def resume(session, records)``, the restarted
runtime continues the step (:func:`find_resumption`): it records ``step_resumed`` and calls
``resume`` with the records that body had written, instead of the body; automatic transitions,
``step_finished`` and the commit follow as usual. Any other open step is closed as interrupted, since
its body may already have acted outside baf. The reasoning body is resumable.

**Bodies that commit first.** A body with ``commits_before_acting = True`` does nothing outside baf
before its own first commit (the reasoning body commits its model request before each model call). The
step's start and transition are then committed with that first commit rather than by one of their own
before the body runs; a crash before it leaves only the message, which the restarted runtime handles anew.

**Approvals.** An :class:`~baf.core.events.ApprovalEvent` matches no transition: the step takes the
decision and, once every call held with it is decided, continues the body that paused for it
(:mod:`baf.core.approval`). A message with text expires the calls still waiting before it is handled.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from baf.core.approval import continuation_after_crash, expire_approvals, take_decision
from baf.core.events import ApprovalEvent, Event, ReceiveJSONEvent, ReceiveTextEvent, event_from_data
from baf.core.hooks import StepHooks
from baf.core.intent_routing import entering_global, predict_intent, return_transition
from baf.core.stopping import Cut
from baf.errors import LeaseLostError
from baf.log.record import Record, RecordKind

if TYPE_CHECKING:
    from baf.core.live import LiveSession
    from baf.core.session import Session
    from baf.core.state import Body, State
    from baf.core.transition import Transition

__all__ = ["MAX_AUTOMATIC_TRANSITIONS", "Resumption", "find_resumption", "run_step"]

logger = logging.getLogger("baf.runtime")


#: Automatic transitions followed in one step before the engine declares a loop and stops.
MAX_AUTOMATIC_TRANSITIONS = 100

# The ``error`` message recorded for a step cut by a stop that was told not to wait (``interrupted_by``
# ``user`` on it and on the step's ``step_finished``: a second Ctrl-C or SIGTERM, ``Runtime.interrupt()``;
# ``{how}`` says which). A step still running when a stop's grace period ends is left open instead, as a
# crash leaves it (see _leave_open).
_INTERRUPTED_NOW = "interrupted by the user: told to stop now{how}, the agent did not wait for this step"

# Triggers of the compiled ``transitions`` machine (see ``baf.core.machine``).
EVENT_TRIGGER = "_baf_event"
CHECK_TRIGGER = "_baf_check"


async def run_step(
    live: LiveSession,
    event: Event | None,
    event_seq: int | None,
    hooks: StepHooks,
    enter_current: bool = False,
    resume: Resumption | None = None,
) -> None:
    """Handle one event: pick a transition, run bodies, follow automatic transitions, commit, deliver.

    ``event`` is ``None`` when the session moves without one: at its start (``enter_current`` runs the
    initial state's body) or after a variable changed outside a step (only automatic transitions).
    ``resume`` continues a step a crash interrupted instead of starting one (see the module docstring).
    """
    started = time.perf_counter()
    session, control = live.session, live.runtime.control
    live.event, live.event_seq = event, event_seq
    control.begin_step(live.id)  # from here until it finishes, the runtime may cancel this step
    cut: Cut | None = None
    left_open = False
    try:
        live.record(RecordKind.STEP_RESUMED if resume else RecordKind.STEP_STARTED, {"event_seq": event_seq})
        await hooks.before_step(session, event)
        if resume is not None:
            await _run_body(live, resume.state, resume.body, resume.role, resume.answers)
        elif enter_current:
            state = session.current_state
            await _run_body(live, state, state.body, "body")
        elif isinstance(event, ApprovalEvent):
            paused = await take_decision(live, event)
            if paused is not None:
                await _run_body(live, paused.state, paused.body, paused.role, (paused.event, paused.event_seq))
        elif event is not None:
            if live.projection.approvals and event.text is not None:
                expire_approvals(live, "a new message arrived before the decision")
            await predict_intent(live, event)  # recorded, for the transitions that route on intents
            transition = await _fire(live, EVENT_TRIGGER)
            if transition is not None:
                await _take(live, transition, hooks)
            elif isinstance(event, ReceiveTextEvent | ReceiveJSONEvent):
                state = session.current_state
                await _run_body(live, state, state.fallback_body, "fallback")
        await _follow_automatic(live, hooks)
    except asyncio.CancelledError as exc:
        cut, left_open = _cancelled(live, exc, event_seq)
        raise
    finally:
        if left_open:
            await _leave_open(live, said=cut is None)
        else:
            await _end_step(live, event, event_seq, cut, hooks, started)


def _cancelled(live: LiveSession, exc: asyncio.CancelledError, event_seq: int | None) -> tuple[Cut | None, bool]:
    """What cancelled the step (its :class:`Cut`, if the runtime's), and whether to leave it open (see
    :func:`_leave_open`); records what the step's end does not. From here on the step is finishing, which
    the runtime does not cancel (that would cut these records and the commit)."""
    cut = live.runtime.control.finish_step(live.id)
    task = asyncio.current_task()
    if cut is None and (task is None or not task.cancelling()):
        # Nobody cancelled this step: its body raised CancelledError itself (a future it awaited was
        # cancelled by someone else). An error of the body's, and the session goes on.
        live.report_error("the step's body raised CancelledError without being cancelled", "body", exc)
        return None, False
    if cut is None or cut.by == "stop":
        # The stop's grace period ran out, or the session was dropped (its log refused a write, its lease
        # was lost): cut as a crash would cut it.
        return cut, True
    how = f" ({cut.how})" if cut.how else ""  # told to stop now: say so in the log, and who asked
    live.record_error("runtime", exc, event_seq=event_seq, message=_INTERRUPTED_NOW.format(how=how),
                      interrupted_by=cut.by)  # fmt: skip
    return cut, False


async def _leave_open(live: LiveSession, said: bool) -> None:
    """End a cancelled step as a crash would end it: what it committed stays, what it recorded since (its
    body's clean-up from the cancellation too) is dropped, nothing more is taken (a body thread still
    running is refused), and the step stays open in the log. The write-ahead rule makes that safe: every
    effect's records were committed before it. The session's next load (the next start, or another
    worker taking the session over) resumes the step from its records, or closes it and tells the user
    their request was cut off. ``said``: the runtime told why already (a dropped session); else the stop's
    grace period ran out, which is said here."""
    live.close()
    live.drop_unflushed()  # and the sends queued for those records
    await live.flush()  # an append already under way ends first (it raises if the log refused it)
    if not said:
        logger.warning(
            "session %s: its step did not finish within the stop's grace period; it is left open in the log, "
            "and resumes (or is closed, telling the user) when the session is next loaded",
            live.id,
        )


async def _follow_automatic(live: LiveSession, hooks: StepHooks) -> None:
    """Take the automatic transitions that hold now (at most ``MAX_AUTOMATIC_TRANSITIONS``), then the
    return from a global state's component, if its end was reached."""
    session = live.session
    for _ in range(MAX_AUTOMATIC_TRANSITIONS):
        if not session.current_state.has_automatic_transitions:
            break  # nothing to check: skip the machine, whose trigger costs ~100 µs
        transition = await _fire(live, CHECK_TRIGGER)
        if transition is None:
            break
        await _take(live, transition, hooks)
    else:
        live.record_error(
            "engine",
            RuntimeError(f"more than {MAX_AUTOMATIC_TRANSITIONS} automatic transitions in one step"),
            state=live.projection.current_state,
        )
    back = return_transition(live)  # the end of a global state's component: back where the user was
    if back is not None:
        _move(live, back, {"return_to": None, "visiting": None})
        await hooks.after_transition(session, back)


async def _end_step(
    live: LiveSession, event: Event | None, event_seq: int | None, cut: Cut | None, hooks: StepHooks, started: float
) -> None:
    """Record the step's end (interrupted, when ``cut``), commit, deliver, and tell the hooks how long the
    step took since ``started`` (``time.perf_counter()``)."""
    control = live.runtime.control
    control.finish_step(live.id)  # a body that swallowed a cancel ends its step as a normal one
    finished: dict[str, object] = {"event_seq": event_seq}
    if cut is not None:
        finished.update(interrupted=True, interrupted_by=cut.by)
    live.record(RecordKind.STEP_FINISHED, finished)
    if cut is not None and control.halting:
        # A body thread the runtime abandoned must not add records after the step's end. A runtime
        # that goes on (an interrupt without a stop) keeps the session open for later events.
        live.close()
    await live.commit()
    await hooks.after_step(live.session, event, time.perf_counter() - started)
    if live.has_unflushed_records:  # an after_step hook recorded an error
        await live.flush()


@dataclass(frozen=True, slots=True)
class Resumption:
    """An open step the engine can continue: its event, and the resumable body that was running."""

    event: Event | None
    event_seq: int | None
    state: State
    role: str
    body: Body  # the body's ``resume`` bound to the records it had written
    #: The event (and its seq) the body answers, when not the step's own: a body paused for approval
    #: that a decision was continuing answers the message its invocation began with.
    answers: tuple[Event | None, int | None] | None = None


def find_resumption(session: Session, records: Sequence[Record]) -> Resumption | None:
    """The open step of ``records`` (a session's log) if its running body is resumable, else ``None``.

    The running body is the destination body of the step's last transition; with no transition, the
    fallback body (a message matched nothing) or, in the session's first step, the initial body.
    """
    steps = [i for i, r in enumerate(records) if r.kind == RecordKind.STEP_STARTED]
    if not steps or any(r.kind == RecordKind.STEP_FINISHED for r in records[steps[-1] :]):
        return None
    start = steps[-1]
    event_seq = records[start].data.get("event_seq")
    received = next((r for r in records if r.seq == event_seq and r.kind == RecordKind.MESSAGE_RECEIVED), None)
    event = event_from_data(session.id, received.data["event"]) if received is not None else None
    if isinstance(event, ApprovalEvent):  # a decision was continuing a paused body
        paused = continuation_after_crash(session, records)
        if paused is None:
            return None
        return Resumption(event, event_seq, paused.state, paused.role, paused.body, (paused.event, paused.event_seq))
    state = session.current_state
    moves = [i for i in range(start, len(records)) if records[i].kind == RecordKind.TRANSITION]
    if moves:
        role, body, written = "body", state.body, records[moves[-1] + 1 :]
    elif isinstance(event, ReceiveTextEvent | ReceiveJSONEvent):
        role, body, written = "fallback", state.fallback_body, records[start + 1 :]
    elif event is None and len(steps) == 1:
        role, body, written = "body", state.body, records[start + 1 :]
    else:
        return None
    resume = getattr(body, "resume", None)
    if resume is None:
        return None
    return Resumption(event, event_seq, state, role, functools.partial(resume, records=list(written)))


async def _fire(live: LiveSession, trigger: str) -> Transition | None:
    """Ask the state machine for the first transition (declaration order) whose event and conditions
    match; it moves the machine's state and tells us which one fired."""
    live.fired_transition = None
    result = live.machine_model.trigger(trigger, live)
    if inspect.isawaitable(result):  # a trigger no transition uses answers False without a coroutine
        await result
    return live.fired_transition


async def _take(live: LiveSession, transition: Transition, hooks: StepHooks) -> None:
    _move(live, transition, entering_global(live, transition))
    await hooks.after_transition(live.session, transition)
    await _run_body(live, transition.dest, transition.dest.body, "body")


def _move(live: LiveSession, transition: Transition, extra: dict[str, object]) -> None:
    """Record a transition (the machine has already moved, except for a return from a global state)."""
    data = {"source": transition.source.name, "dest": transition.dest.name, "label": transition.describe(), **extra}
    live.record(RecordKind.TRANSITION, data)
    # A return from a global state is not a machine transition (its target differs per session): set it.
    live.machine_model.state = transition.dest.name


async def _run_body(
    live: LiveSession, state: State, body: Body, role: str, answers: tuple[Event | None, int | None] | None = None
) -> None:
    """Run a body, sync ones in the agent's worker threads so a slow one cannot stall other sessions.
    An exception is recorded as an ``error`` and contained: the session goes on. ``answers``: the event
    (and seq) the body sees as the one it handles, when not the step's own (see :class:`Resumption`)."""
    # Write ahead: the inbound message, the step start and the transition are durable before the body
    # can act. A LogError here propagates: the body must not run on an unrecorded event. A body that
    # commits before each of its own effects (``commits_before_acting``) has them committed by its first
    # commit instead: one round trip less per step, and nothing acts on an unrecorded event either way.
    if not getattr(body, "commits_before_acting", False):
        await live.flush()
    session = live.session
    if answers is not None:
        step_event = live.event, live.event_seq
        live.event, live.event_seq = answers
    try:
        if inspect.iscoroutinefunction(body):
            await body(session)
        else:
            result = await live.run_sync(body, session)
            if inspect.isawaitable(result):
                await result
    except LeaseLostError:
        # A commit the body awaited found the session taken over by another worker (this one was paused, or
        # cut from the database, past its lease): not the body's fault, and nothing more of this step can
        # be written here. The step ends; the runtime drops the session and the new owner resumes it.
        raise
    except Exception as exc:
        shown = f"Something went wrong while handling that ({type(exc).__name__} in state {state.name!r})."
        # ``shown``: what a reconnecting UI's history shows for it.
        live.report_error(f"{role} of state {state.name!r} raised", role, exc, state=state.name, shown=shown)
        # Shown on the platform once the error record is durable.
        live.queue_platform_call("reply_error", shown)
    finally:
        if answers is not None:
            live.event, live.event_seq = step_event
