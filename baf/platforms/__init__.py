"""Platforms: adapters between a wire format and an agent's events and replies.

``WebSocketPlatform`` needs the ``web`` extra (``websockets``), ``TelegramPlatform`` the ``telegram``
extra (``aiogram``) and ``A2APlatform`` the ``a2a`` extra (``a2a-sdk``); they are imported lazily so
that the core stays importable without them.
Third-party adapters register under the ``baf.platforms`` entry-point group and are found with
:func:`discover_platforms`::

    # pyproject.toml of an adapter package
    [project.entry-points."baf.platforms"]
    slack = "baf_slack:SlackPlatform"
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from baf.core.platform import Platform

if TYPE_CHECKING:
    from baf.platforms.a2a import A2APlatform
    from baf.platforms.telegram import TelegramPlatform
    from baf.platforms.websocket import WebSocketPlatform

__all__ = [
    "ENTRY_POINT_GROUP",
    "A2APlatform",
    "Platform",
    "TelegramPlatform",
    "WebSocketPlatform",
    "discover_platforms",
]

logger = logging.getLogger("baf.platforms")

#: The entry-point group installed adapters register in.
ENTRY_POINT_GROUP = "baf.platforms"


def discover_platforms() -> dict[str, type[Platform]]:
    """The adapters installed under the ``baf.platforms`` entry-point group, by entry-point name.

    An entry point that fails to load, or that is not a :class:`Platform` subclass, is left out with a
    logged warning: one broken package must not stop an agent from starting with the others.
    """
    found: dict[str, type[Platform]] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
        except Exception:
            logger.warning("platform entry point %r (%s) failed to load", entry.name, entry.value, exc_info=True)
            continue
        if not (isinstance(loaded, type) and issubclass(loaded, Platform)):
            logger.warning("platform entry point %r (%s) is not a Platform subclass", entry.name, entry.value)
            continue
        found[entry.name] = loaded
    return found


def __getattr__(name: str) -> Any:
    if name == "WebSocketPlatform":
        from baf.platforms.websocket import WebSocketPlatform

        return WebSocketPlatform
    if name == "A2APlatform":
        from baf.platforms.a2a import A2APlatform

        return A2APlatform
    if name == "TelegramPlatform":
        from baf.platforms.telegram import TelegramPlatform

        return TelegramPlatform
    raise AttributeError(f"module 'baf.platforms' has no attribute {name!r}")
