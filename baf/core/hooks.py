"""Hooks that hang off the engine step: logging, metrics, streaming, test capture."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from baf.core.session import runtime_side

if TYPE_CHECKING:
    from baf.core.events import Event
    from baf.core.session import Session
    from baf.core.transition import Transition
    from baf.log.record import Record

__all__ = ["HookChain", "StepHooks"]

logger = logging.getLogger("baf.hooks")


class StepHooks:
    """Override the methods you need; each is awaited by the engine at a fixed point of a step.

    Order within a step: ``before_step`` → (``after_transition`` for each transition taken) →
    ``after_step`` (after the step's records are committed and its replies delivered). A hook that
    raises is logged and recorded as an error; it never breaks the step.

    ``on_record`` is the one synchronous method: it sees every record of the session as it is written
    (telemetry follows a session this way, see ``baf.telemetry``).
    """

    async def before_step(self, session: Session, event: Event | None) -> None:
        """Called when a step starts, before any transition is picked."""

    async def after_transition(self, session: Session, transition: Transition) -> None:
        """Called after a transition is recorded, before the destination body runs."""

    async def after_step(self, session: Session, event: Event | None, seconds: float) -> None:
        """Called after the step is committed and delivered; ``seconds`` is its duration."""

    def on_record(self, session: Session, record: Record) -> None:
        """Called for each record as it is written, before it is durable, in seq order, from the thread
        that wrote it (a sync body's worker thread too), with the session's writer locked: it must be
        quick and must not block (hand the record to a queue). A failure is logged, not recorded (that
        would call it again). Only hooks that override it are called."""


class HookChain(StepHooks):
    """Calls several hooks in registration order, containing their failures."""

    def __init__(self, hooks: Sequence[StepHooks] = ()) -> None:
        self.hooks = list(hooks)

    async def before_step(self, session: Session, event: Event | None) -> None:
        for hook in self.hooks:
            await _guard(session, functools.partial(hook.before_step, session, event))

    async def after_transition(self, session: Session, transition: Transition) -> None:
        for hook in self.hooks:
            await _guard(session, functools.partial(hook.after_transition, session, transition))

    async def after_step(self, session: Session, event: Event | None, seconds: float) -> None:
        for hook in self.hooks:
            await _guard(session, functools.partial(hook.after_step, session, event, seconds))

    def record_observer(self, session: Session) -> Callable[[Record], None] | None:
        """What the session's writer calls with each record: the ``on_record`` of the hooks that have
        one, failures logged; ``None`` when no hook has one (so writing a record costs nothing more)."""
        observers = [hook for hook in self.hooks if type(hook).on_record is not StepHooks.on_record]
        if not observers:
            return None

        def observe(record: Record) -> None:
            for hook in observers:
                try:
                    hook.on_record(session, record)
                except Exception:
                    logger.exception("session %s: on_record of %r raised", record.session_id, hook)

        return observe


async def _guard(session: Session, call: Callable[[], object]) -> None:
    """Run one hook method, sync or async; a failure is logged and recorded, never raised."""
    try:
        result = call()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        runtime_side(session).report_error("a step hook raised", "hook", exc)
