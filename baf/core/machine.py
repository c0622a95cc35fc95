"""Compiles an agent's states and transitions into a ``transitions`` AsyncMachine.

Each live session (:class:`~baf.core.live.LiveSession`) is a model of the machine. Event transitions
hang off one trigger and automatic ones off another; ``transitions`` tries them in declaration order and
fires the first whose conditions hold.
Bodies are not machine callbacks: the engine runs them, so it can record before every effect.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from transitions.extensions.asyncio import AsyncMachine

from baf.core.engine import CHECK_TRIGGER, EVENT_TRIGGER
from baf.core.intent_routing import global_transitions

if TYPE_CHECKING:
    from transitions.extensions.asyncio import AsyncEventData

    from baf.core.live import LiveSession
    from baf.core.state import State
    from baf.core.transition import Condition, Transition

__all__ = ["MachineModel", "compile_machine"]

# transitions logs every state's entry and exit at INFO ("Finished processing state idle exit callbacks"):
# how baf works inside, not what the agent did (the session log says that), and it filled the output of
# any application that logs at INFO. An application that sets this logger's level keeps its own choice.
_transitions_logger = logging.getLogger("transitions")
if _transitions_logger.level == logging.NOTSET:
    _transitions_logger.setLevel(logging.WARNING)


class MachineModel:
    """The object whose ``state`` attribute the machine moves; one per session."""

    state: str


class _SequentialMachine(AsyncMachine):
    """An AsyncMachine that awaits callbacks one after another.

    The stock machine wraps every callback list in ``asyncio.gather`` (a task per callable), which costs as
    much as the rest of a message. Ours are one condition and one ``before`` callback per transition, in a
    fixed order, so running them in sequence loses nothing.
    """

    @staticmethod
    async def await_all(callables: list[Callable[[], Any]]) -> list[Any]:
        return [await func() for func in callables]

    async def callbacks(self, funcs: Iterable[Any], event_data: AsyncEventData) -> None:  # type: ignore[override]
        # A trigger awaits this about ten times, nearly always for an empty list (prepare, exit, enter,
        # after, ...): looping here spares a list of partials and an ``await_all`` per call, a third of
        # the trigger's cost. The order is the same as through ``await_all``.
        for func in funcs:
            await self.callback(func, event_data)


def compile_machine(states: list[State], initial: State) -> AsyncMachine:
    """Build the machine for ``states``; add sessions with ``machine.add_model(MachineModel(), initial=...)``."""
    machine = _SequentialMachine(
        model=None,
        states=[state.name for state in states],
        initial=initial.name,
        auto_transitions=False,
        ignore_invalid_triggers=True,
        send_event=False,
    )
    for state in states:
        # A state's own transitions first: they keep precedence over reaching a global state.
        for transition in [*state.transitions, *global_transitions(state)]:
            trigger = CHECK_TRIGGER if transition.is_automatic else EVENT_TRIGGER
            machine.add_transition(
                trigger,
                source=state.name,
                dest=transition.dest.name,
                conditions=[_all_conditions(transition)],
                before=[_remember(transition)],
            )
    return machine


def _all_conditions(transition: Transition) -> Callable[[LiveSession], Coroutine[Any, Any, bool]]:
    """One condition for the machine: the event type first, then the user's conditions in order,
    stopping at the first false. (The machine would run separate conditions all at once.)"""
    pattern = transition.event
    conditions = transition.conditions

    async def check(live: LiveSession) -> bool:
        if pattern is not None and (live.event is None or not live.event.matches(pattern)):
            return False
        for condition in conditions:
            if not await _holds(live, condition):
                return False
        return True

    return check


async def _holds(live: LiveSession, condition: Condition) -> bool:
    """A user condition that raises is recorded and counts as false, so the machine goes on."""
    try:
        result: Any = condition(live.session)
        if inspect.isawaitable(result):
            result = await result
        return bool(result)
    except Exception as exc:
        name = getattr(condition, "__name__", repr(condition))
        live.report_error(f"transition condition {condition!r} raised", "condition", exc, condition=name)
        return False


def _remember(transition: Transition) -> Callable[[LiveSession], None]:
    def remember(live: LiveSession) -> None:
        live.fired_transition = transition

    return remember
