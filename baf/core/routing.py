"""Which process handles a session: the hook a runtime that is one worker among many consults.

A plain runtime handles every session it is given. A worker (``baf.serve``) runs its runtime with a
:class:`SessionRouter`: before a session is loaded the runtime asks ``claim`` (take the session's lease);
a message for a session another worker owns is ``forward``\\ ed to that owner (through the durable inbox),
and a session whose lease was lost is dropped without another write (``Runtime.drop``). A session another
worker runs, whose client is connected here, is ``follow``\\ ed: its replies reach the client by reading
the log.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from baf.core.platform import Platform

__all__ = ["SessionRouter"]


class SessionRouter(Protocol):
    """Decides, per session, whether this runtime handles it."""

    async def claim(self, session_id: str) -> bool:
        """Take ownership of ``session_id`` if no other worker holds it; ``False`` when another does."""
        ...

    async def forward(self, session_id: str, data: dict[str, Any], platform: Platform | None) -> None:
        """Hand a message (``message_received`` data) to the worker that owns ``session_id``, durably.
        ``platform`` is where its client is connected, for the replies to find their way back."""
        ...

    def release(self, session_id: str) -> Coroutine[Any, Any, None]:
        """This runtime no longer holds ``session_id`` (it dropped it): the router stops taking it as held
        here at once, when called, and gives its ownership up when the coroutine returned is run."""
        ...

    def follow(self, session_id: str) -> None:
        """The runtime shows ``session_id``, which another worker runs, on a platform
        (``Runtime.follow``): keep it current, delivering the records committed after the last one shown
        (``LiveSession.show_recorded``) until no client of it is left here."""
        ...
