"""States: what an agent does (its body) and where it may go next (its transitions)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from baf.core.events import Event, ReceiveFileEvent, WildcardEvent
from baf.core.transition import (
    Condition,
    Transition,
    TransitionBuilder,
    _check_callable,
    file_condition,
    variable_condition,
)
from baf.errors import ConfigurationError

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session

__all__ = ["Body", "State", "default_fallback_body"]

#: A state body: called with the session; ``def`` or ``async def``.
Body = Callable[["Session"], "Awaitable[Any] | Any"]

DEFAULT_FALLBACK_MESSAGE = "Sorry, I didn't understand that."


async def default_fallback_body(session: Session) -> None:
    """Reply that the message was not understood (used when a state sets no fallback)."""
    await session.reply(DEFAULT_FALLBACK_MESSAGE)


def _empty_body(session: Session) -> None:
    """A state without a body does nothing when entered."""


class State:
    """A state of an agent. Create states with ``agent.new_state(name)``."""

    def __init__(self, agent: Agent, name: str, initial: bool = False) -> None:
        self.agent = agent
        self.name = name
        self.initial = initial
        self.body: Body = _empty_body
        self.fallback_body: Body = default_fallback_body
        self.transitions: list[Transition] = []
        self._automatic = False

    def __repr__(self) -> str:
        return f"State({self.name!r}{', initial' if self.initial else ''})"

    def set_body(self, body: Body) -> None:
        """Run ``body(session)`` each time the state is entered."""
        _check_callable(body, "body")
        self.body = body

    def set_fallback_body(self, body: Body) -> None:
        """Run ``body(session)`` when a text or JSON message matches none of this state's transitions."""
        _check_callable(body, "fallback body")
        self.fallback_body = body

    def when_event(self, event: type[Event] | Event | None = None) -> TransitionBuilder:
        """A transition triggered by an event of this type (any event when ``None``)."""
        if event is None:
            event_type: type[Event] = WildcardEvent
        elif isinstance(event, Event):
            event_type = type(event)
        elif isinstance(event, type) and issubclass(event, Event):
            event_type = event
        else:
            raise ConfigurationError(f"when_event expects an Event class, got {event!r}")
        return TransitionBuilder(self, event_type)

    def when_condition(self, condition: Condition) -> TransitionBuilder:
        """An automatic transition that fires once ``condition(session)`` holds."""
        _check_callable(condition, "condition")
        return TransitionBuilder(self, None, [condition], label=f"when {_name_of(condition)}")

    def when_variable_matches_operation(
        self, name: str, op: str | Callable[[Any, Any], bool], target: Any
    ) -> TransitionBuilder:
        """An automatic transition that fires once ``session[name] <op> target`` holds."""
        condition = variable_condition(name, op, target)
        return TransitionBuilder(self, None, [condition], label=f"when {_name_of(condition)}")

    def when_file_received(self, types: list[str] | str | None = None) -> TransitionBuilder:
        """A transition triggered by a file, optionally only of some MIME types or extensions."""
        return TransitionBuilder(self, ReceiveFileEvent, file_condition(types))

    def go_to(self, dest: State) -> Transition:
        """An automatic transition: right after this state's body runs, move to ``dest``."""
        return TransitionBuilder(self, None, label="automatic").go_to(dest)

    @property
    def has_automatic_transitions(self) -> bool:
        """Whether any transition of this state fires without an event."""
        return self._automatic

    def _add_transition(self, transition: Transition) -> None:
        if transition.dest.agent is not self.agent:
            raise ConfigurationError(
                f"cannot go from {self.name!r} to {transition.dest.name!r}: the states belong to different agents"
            )
        self.agent._check_mutable("add a transition")
        self.transitions.append(transition)
        self._automatic = self._automatic or transition.is_automatic


def _name_of(fn: Any) -> str:
    return str(getattr(fn, "__name__", repr(fn)))
