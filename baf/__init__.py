"""baf: an event-sourced state-machine agent framework.

Every session is an append-only log of records; its state is a fold of that log, so any session can be
replayed, resumed and trusted.
"""

from baf.core import (
    Agent,
    Event,
    ReceiveFileEvent,
    ReceiveJSONEvent,
    ReceiveTextEvent,
    Session,
    State,
    StepHooks,
    Transition,
    WildcardEvent,
)
from baf.platforms.base import Platform

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "Event",
    "Platform",
    "ReceiveFileEvent",
    "ReceiveJSONEvent",
    "ReceiveTextEvent",
    "Session",
    "State",
    "StepHooks",
    "Transition",
    "WildcardEvent",
    "__version__",
]
