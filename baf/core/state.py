"""States: what an agent does (its body) and where it may go next (its transitions)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from baf.core.events import Event, ReceiveFileEvent, ReceiveTextEvent, WildcardEvent
from baf.core.intent import Intent
from baf.core.intent_routing import intent_condition, no_intent_condition
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
        self._routes_by_intent = False

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

    def when_intent_matched(self, intent: Intent | str) -> TransitionBuilder:
        """A transition triggered by a text message the intent classifier reads as ``intent``.

        The prediction (score, extracted parameters) is ``session.event.predicted_intent`` in the
        destination's body. ``intent`` is an :class:`~baf.core.intent.Intent` of this agent or its name.
        """
        resolved = self._own_intent(intent)
        self._routes_by_intent = True
        return TransitionBuilder(self, ReceiveTextEvent, [intent_condition(resolved)],
                                 label=f"intent {resolved.name}", intent=resolved)  # fmt: skip

    def when_no_intent_matched(self) -> TransitionBuilder:
        """A transition for a text message that matched none of this state's intents (nor a global one)."""
        self._routes_by_intent = True
        return TransitionBuilder(self, ReceiveTextEvent, [no_intent_condition], label="no intent matched")

    def set_global(self, intent: Intent | str) -> None:
        """Make this state reachable from every other state when ``intent`` is matched.

        When the session comes to rest at the end of this state's component (a state reachable from it
        that has no transitions of its own, this state itself if it has none), it returns to the state
        the user was in, without running that state's body again. One intent leads to one global state.
        """
        self.agent._add_global_state(self, self._own_intent(intent))

    @property
    def routes_by_intent(self) -> bool:
        """Whether a text message in this state is classified (the state has intent transitions)."""
        return self._routes_by_intent

    def _own_intent(self, intent: Intent | str) -> Intent:
        if isinstance(intent, str):
            return self.agent.get_intent(intent)
        if not isinstance(intent, Intent):
            raise ConfigurationError(f"expected an Intent or an intent's name, got {type(intent).__name__}")
        if self.agent.intents.get(intent.name) is not intent:
            raise ConfigurationError(f"intent {intent.name!r} does not belong to agent {self.agent.name!r}; "
                                     "create it with agent.new_intent")  # fmt: skip
        return intent

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
