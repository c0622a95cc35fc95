"""Hooks that hang off the engine step: logging, metrics, streaming, test capture."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from baf.core.session import runtime_side

if TYPE_CHECKING:
    from baf.core.events import Event
    from baf.core.session import Session
    from baf.core.transition import Transition

__all__ = ["HookChain", "StepHooks"]


class StepHooks:
    """Override the methods you need; each is awaited by the engine at a fixed point of a step.

    Order within a step: ``before_step`` → (``after_transition`` for each transition taken) →
    ``after_step`` (after the step's records are committed and its replies delivered). A hook that
    raises is logged and recorded as an error; it never breaks the step.
    """

    async def before_step(self, session: Session, event: Event | None) -> None:
        """Called when a step starts, before any transition is picked."""

    async def after_transition(self, session: Session, transition: Transition) -> None:
        """Called after a transition is recorded, before the destination body runs."""

    async def after_step(self, session: Session, event: Event | None, seconds: float) -> None:
        """Called after the step is committed and delivered; ``seconds`` is its duration."""


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


async def _guard(session: Session, call: Callable[[], object]) -> None:
    """Run one hook method, sync or async; a failure is logged and recorded, never raised."""
    try:
        result = call()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        runtime_side(session).report_error("a step hook raised", "hook", exc)
