"""baf: an event-sourced state-machine agent framework.

Every session is an append-only log of records; its state is a fold of that log, so any session can be
replayed, resumed and trusted.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from baf.core import (
        Agent,
        ApprovalEvent,
        Event,
        ReceiveFileEvent,
        ReceiveJSONEvent,
        ReceiveTextEvent,
        Runtime,
        Session,
        State,
        StepHooks,
        Transition,
        WildcardEvent,
    )
    from baf.core.platform import Platform
    from baf.declarative import load_agent

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "ApprovalEvent",
    "Event",
    "Platform",
    "ReceiveFileEvent",
    "ReceiveJSONEvent",
    "ReceiveTextEvent",
    "Runtime",
    "Session",
    "State",
    "StepHooks",
    "Transition",
    "WildcardEvent",
    "__version__",
    "load_agent",
]


def __getattr__(name: str) -> Any:
    # Loaded on first use, so tools that only read logs (`baf replay`, `baf log`) start without the
    # runtime and its dependencies.
    if name == "Platform":
        return importlib.import_module("baf.core.platform").Platform
    if name == "load_agent":
        return importlib.import_module("baf.declarative").load_agent
    if name in __all__:
        return getattr(importlib.import_module("baf.core"), name)
    raise AttributeError(f"module 'baf' has no attribute {name!r}")
