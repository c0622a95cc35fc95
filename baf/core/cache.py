"""The live sessions a runtime holds: a cache over the log, bounded by count and by idle time.

A session is loaded on first use (a message for it, ``get_or_create``, a restart finding unfinished work)
and dropped once it is idle: when more than ``max_sessions`` are held, the least recently used idle ones
go; and any left unused for ``idle_seconds`` goes. *Idle* is the runtime's call (``can_drop``): nothing
queued or running, nothing recorded and not yet durable. A session with work is never dropped; it is
looked at again once it comes to rest. Dropping loses nothing: the log holds everything, and the next use
loads the session again from its latest snapshot and the records after it.

The expiry needs no polling loop: one timer is armed for the moment the least recently used session
would expire, and re-armed when it fires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from baf.core.live import LiveSession

__all__ = ["DEFAULT_IDLE_SECONDS", "DEFAULT_MAX_SESSIONS", "SessionCache"]

#: Idle sessions a runtime keeps in memory by default.
DEFAULT_MAX_SESSIONS = 10_000
#: Seconds an unused session stays in memory by default.
DEFAULT_IDLE_SECONDS = 600.0


class SessionCache:
    """Live sessions by id, least recently used first. ``drop`` is called for each session let go."""

    def __init__(
        self,
        max_sessions: int,
        idle_seconds: float,
        can_drop: Callable[[LiveSession], bool],
        drop: Callable[[LiveSession], None],
    ) -> None:
        if max_sessions < 0 or not idle_seconds > 0:
            raise ValueError(f"max_sessions must be >= 0 and idle_seconds > 0, got {max_sessions}, {idle_seconds}")
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._can_drop = can_drop
        self._drop = drop
        self._sessions: dict[str, LiveSession] = {}  # insertion order is use order: oldest first
        self._last_used: dict[str, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[str]:
        return iter(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def get(self, session_id: str) -> LiveSession | None:
        """The session ``session_id`` if it is held (without counting this as a use)."""
        return self._sessions.get(session_id)

    def values(self) -> list[LiveSession]:
        """The sessions held now."""
        return list(self._sessions.values())

    def add(self, live: LiveSession) -> None:
        """Hold ``live`` (just loaded), as the most recently used."""
        self._sessions[live.id] = live
        self.touch(live)

    def touch(self, live: LiveSession) -> None:
        """``live`` was used now: it becomes the most recently used."""
        session_id = live.id
        if self._sessions.get(session_id) is not live:
            return  # dropped meanwhile (or replaced by a reload): nothing to move
        del self._sessions[session_id]
        self._sessions[session_id] = live
        self._last_used[session_id] = asyncio.get_running_loop().time()
        if self._timer is None and not self._closed:
            self._arm()

    def remove(self, live: LiveSession) -> bool:
        """Stop holding ``live`` (without calling ``drop``); ``False`` if it was not held."""
        if self._sessions.get(live.id) is not live:
            return False
        del self._sessions[live.id]
        del self._last_used[live.id]
        return True

    def trim(self) -> None:
        """Drop the least recently used idle sessions while more than ``max_sessions`` are held."""
        excess = len(self._sessions) - self.max_sessions
        if excess <= 0 or self._closed:
            return
        idle: list[LiveSession] = []
        for live in self._sessions.values():  # oldest first: usually the first ones are idle
            if len(idle) == excess:
                break
            if self._can_drop(live):
                idle.append(live)
        for live in idle:
            self.let_go(live)

    def close(self) -> None:
        """Drop nothing more (the runtime is stopping); cancel the expiry timer."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def let_go(self, live: LiveSession) -> None:
        """Drop ``live`` now (``drop`` is called), whether or not it is idle: the caller checked."""
        if self.remove(live):
            self._drop(live)

    def _arm(self) -> None:
        """Fire :meth:`_expire` when the least recently used session would expire (one timer at most)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        oldest = next(iter(self._last_used.values()), None)
        if oldest is None:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(oldest + self.idle_seconds, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self._closed:
            return
        deadline = asyncio.get_running_loop().time() - self.idle_seconds
        for session_id, used in list(self._last_used.items()):
            if used > deadline:
                break  # use order: every later one was used more recently
            live = self._sessions[session_id]
            if self._can_drop(live):
                self.let_go(live)
            else:
                self.touch(live)  # busy: looked at again one idle period after it comes to rest
        self._arm()
