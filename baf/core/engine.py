"""The engine step: everything that happens to a session for one inbound event.

Read :func:`run_step` top to bottom: it is the whole runtime semantics. The inbound event was already
recorded (``message_received``) and committed before the step was queued.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import time
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from baf.core.events import Event, ReceiveJSONEvent, ReceiveTextEvent
from baf.core.hooks import StepHooks
from baf.log.record import RecordKind

if TYPE_CHECKING:
    from baf.core.session import Session
    from baf.core.state import Body, State
    from baf.core.transition import Transition

__all__ = ["MAX_AUTOMATIC_TRANSITIONS", "run_step"]

logger = logging.getLogger("baf.engine")

#: Automatic transitions followed in one step before the engine declares a loop and stops.
MAX_AUTOMATIC_TRANSITIONS = 100

# Triggers of the compiled ``transitions`` machine (see ``baf.core.machine``).
EVENT_TRIGGER = "_baf_event"
CHECK_TRIGGER = "_baf_check"


async def run_step(
    session: Session,
    event: Event | None,
    event_seq: int | None,
    hooks: StepHooks,
    executor: Executor,
    enter_current: bool = False,
) -> None:
    """Handle one event: pick a transition, run bodies, follow automatic transitions, commit, deliver.

    ``event`` is ``None`` when the session moves without one: at its start (``enter_current`` runs the
    initial state's body) or after a variable changed outside a step (only automatic transitions).
    """
    started = time.perf_counter()
    session.event = event
    session.event_seq = event_seq
    session._in_step = True
    session.record(RecordKind.STEP_STARTED, {"event_seq": event_seq})
    await hooks.before_step(session, event)
    try:
        if enter_current:
            state = session.current_state
            await _run_body(session, state, state.body, "body", executor)
        elif event is not None:
            transition = await _fire(session, EVENT_TRIGGER)
            if transition is not None:
                await _take(session, transition, hooks, executor)
            elif isinstance(event, ReceiveTextEvent | ReceiveJSONEvent):
                state = session.current_state
                await _run_body(session, state, state.fallback_body, "fallback", executor)
        for _ in range(MAX_AUTOMATIC_TRANSITIONS):
            if not session.current_state.has_automatic_transitions:
                break  # nothing to check: skip the machine, whose trigger costs ~100 µs
            transition = await _fire(session, CHECK_TRIGGER)
            if transition is None:
                break
            await _take(session, transition, hooks, executor)
        else:
            session.record_error(
                "engine",
                RuntimeError(f"more than {MAX_AUTOMATIC_TRANSITIONS} automatic transitions in one step"),
                state=session.projection.current_state,
            )
    finally:
        session._in_step = False
        session.record(RecordKind.STEP_FINISHED, {"event_seq": event_seq})
        await session.commit()
        await hooks.after_step(session, event, time.perf_counter() - started)


async def _fire(session: Session, trigger: str) -> Transition | None:
    """Ask the state machine for the first transition (declaration order) whose event and conditions
    match; it moves the machine's state and tells us which one fired."""
    session.fired_transition = None
    result = session.machine_model.trigger(trigger, session)
    if inspect.isawaitable(result):  # a trigger no transition uses answers False without a coroutine
        await result
    return session.fired_transition


async def _take(session: Session, transition: Transition, hooks: StepHooks, executor: Executor) -> None:
    session.record(
        RecordKind.TRANSITION,
        {"source": transition.source.name, "dest": transition.dest.name, "label": transition.describe()},
    )
    await hooks.after_transition(session, transition)
    await _run_body(session, transition.dest, transition.dest.body, "body", executor)


async def _run_body(session: Session, state: State, body: Body, role: str, executor: Executor | None) -> None:
    """Run a body, sync ones in a worker thread so a slow one cannot stall other sessions.
    An exception is recorded as an ``error`` and contained: the session goes on."""
    try:
        if inspect.iscoroutinefunction(body):
            await body(session)
        else:
            loop = asyncio.get_running_loop()
            context = contextvars.copy_context()
            call = functools.partial(context.run, body, session)
            result: Any = await loop.run_in_executor(executor, call)
            if inspect.isawaitable(result):
                await result
    except Exception as exc:
        logger.exception("session %s: %s of state %r raised", session.id, role, state.name)
        session.record_error(role, exc, state=state.name)
        _tell_user(session, f"Something went wrong while handling that ({type(exc).__name__} in state {state.name!r}).")


def _tell_user(session: Session, message: str) -> None:
    """Show an error on the platform, after the error record is durable."""
    platform = session.platform
    if platform is None:
        return

    async def send() -> None:
        await platform.reply_error(session, message)

    session.queue_after_commit(send)
