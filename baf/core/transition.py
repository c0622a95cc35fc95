"""Transitions between states and the fluent builder that declares them."""

from __future__ import annotations

import inspect
import operator
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from baf.core.events import Event, ReceiveFileEvent
from baf.errors import ConfigurationError

if TYPE_CHECKING:
    from baf.core.intent import Intent
    from baf.core.session import Session
    from baf.core.state import State

__all__ = ["Condition", "Transition", "TransitionBuilder", "file_condition", "variable_condition"]

#: A condition receives the session and returns a bool (or an awaitable of one).
Condition = Callable[["Session"], "bool | Awaitable[bool]"]

_OPERATIONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda value, target: value in target,
    "contains": lambda value, target: target in value,
}


@dataclass(eq=False)
class Transition:
    """A move from ``source`` to ``dest``.

    ``event`` is the event class that triggers it; ``None`` makes it an automatic transition, checked
    after each body and after each variable change, which fires when all ``conditions`` hold.
    """

    source: State
    dest: State
    event: type[Event] | None
    conditions: list[Condition] = field(default_factory=list)
    label: str = ""
    #: The intent this transition routes on (``when_intent_matched``), if any.
    intent: Intent | None = None

    @property
    def is_automatic(self) -> bool:
        """True for transitions that fire without an event."""
        return self.event is None

    def describe(self) -> str:
        """A one-line description for records and error messages."""
        trigger = self.label or (f"on {self.event.__name__}" if self.event else "automatic")
        return f"{self.source.name} -> {self.dest.name} ({trigger})"


class TransitionBuilder:
    """Collects the trigger and conditions of a transition until ``go_to`` names its target."""

    def __init__(
        self,
        source: State,
        event: type[Event] | None,
        conditions: list[Condition] | None = None,
        label: str = "",
        intent: Intent | None = None,
    ) -> None:
        self._source = source
        self._event = event
        self._conditions = list(conditions or [])
        self._label = label
        self._intent = intent

    def with_condition(self, condition: Condition) -> TransitionBuilder:
        """Require ``condition(session)`` to hold as well."""
        _check_callable(condition, "condition")
        self._conditions.append(condition)
        return self

    def go_to(self, dest: State) -> Transition:
        """Finish the declaration: the transition leads to ``dest``."""
        transition = Transition(self._source, dest, self._event, self._conditions, self._label, self._intent)
        self._source._add_transition(transition)
        return transition


def variable_condition(name: str, op: str | Callable[[Any, Any], bool], target: Any) -> Condition:
    """A condition that compares session variable ``name`` with ``target`` using ``op``.

    ``op`` is one of ``== != < <= > >= in contains`` or any two-argument callable. A missing variable,
    or values that cannot be compared, make the condition false rather than raise.
    """
    if isinstance(op, str):
        if op not in _OPERATIONS:
            raise ConfigurationError(f"unknown operation {op!r}; use one of {', '.join(_OPERATIONS)}")
        compare = _OPERATIONS[op]
    elif callable(op):
        compare = op
    else:
        raise ConfigurationError(f"operation must be a string or a callable, got {type(op).__name__}")

    def condition(session: Session) -> bool:
        missing = object()
        value = session.get(name, missing)
        if value is missing:
            return False
        try:
            return bool(compare(value, target))
        except TypeError:
            return False

    condition.__name__ = f"variable {name} {op if isinstance(op, str) else op.__name__} {target!r}"
    return condition


def file_condition(types: list[str] | str | None) -> list[Condition]:
    """Conditions for ``when_file_received``: match MIME types (``image/*``) or extensions (``.pdf``)."""
    if types is None:
        return []
    wanted = [types] if isinstance(types, str) else list(types)

    def condition(session: Session) -> bool:
        event = session.event
        if not isinstance(event, ReceiveFileEvent):
            return False
        for pattern in wanted:
            if pattern.startswith("."):
                if event.name.lower().endswith(pattern.lower()):
                    return True
            elif pattern.endswith("/*"):
                if event.mime_type.startswith(pattern[:-1]):
                    return True
            elif event.mime_type == pattern:
                return True
        return False

    return [condition]


def _check_callable(fn: Any, what: str) -> None:
    if not callable(fn):
        raise ConfigurationError(f"{what} must be callable, got {type(fn).__name__}")
    try:
        inspect.signature(fn).bind(object())
    except TypeError as exc:
        raise ConfigurationError(f"{what} {fn!r} must take exactly one argument, the session") from exc
    except ValueError:
        pass  # builtins without a signature: trust them
