"""Bringing back a session the runtime dropped because its log refused a write.

When an append fails (the database away for a moment, a commit cut short, a disk error), the runtime drops
the session from memory: what it held may be ahead of the log. The log still holds the session's open
step and the messages recorded but not yet handled, and nothing would look at them again before the
session's next message or a restart: a user who is waiting for an answer would wait for ever.

:class:`Recovery` loads such a session again as soon as the log answers. Loading does what a start-up does
for a session a crash interrupted: an open step resumes from its records (a recorded model answer is not
asked for again) or is closed as interrupted, telling the user, and the recorded messages not yet handled
are handled. While the log stays away, the load is tried again after a delay that doubles from
:data:`FIRST_DELAY` up to :data:`MAX_DELAY`.

A session dropped again within :data:`AGAIN_WINDOW` of being brought back may be failing its writes
itself (its step records data the log refuses): after :data:`MAX_ROUNDS` such rounds in a row it is given
up, with an error line, and its next message or a restart brings it back. A database that fails now and
then, minutes apart, never gives a session up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from baf.errors import LogClosedError, LogError

__all__ = ["AGAIN_WINDOW", "FIRST_DELAY", "MAX_DELAY", "MAX_ROUNDS", "Recovery"]

logger = logging.getLogger("baf.runtime")

#: Seconds before the first try to load a dropped session again.
FIRST_DELAY: Final = 0.5
#: The longest wait (seconds) between two tries while the log stays away.
MAX_DELAY: Final = 30.0
#: Rounds in a row (each drop within :data:`AGAIN_WINDOW` of the bring-back before) after which a session
#: is given up.
MAX_ROUNDS: Final = 5
#: Seconds after a bring-back within which a new drop of the session counts as the next round.
AGAIN_WINDOW: Final = 60.0


class Recovery:
    """Loads sessions again, in the background, after the runtime dropped them on a failed write.

    ``load(session_id)`` brings one back: it returns once the session is loaded (or needs no load: another
    caller loaded it, another worker holds it now) and raises ``LogError`` while the log refuses.
    """

    def __init__(self, load: Callable[[str], Awaitable[None]]) -> None:
        self._load = load
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Per session brought back lately: its rounds in a row, and when it was last brought back
        # (time.monotonic(); None while being brought back). In the order of those times, oldest first.
        self._rounds: dict[str, tuple[int, float | None]] = {}
        self._again: set[str] = set()  # dropped again while being brought back: once more after
        self._closed = False

    def schedule(self, session_id: str) -> None:
        """Bring ``session_id`` back once the log answers."""
        if self._closed:
            return
        if session_id in self._tasks:
            # Dropped again while being brought back (the step its load resumed failed at once): that
            # task loads it once more when its load is over.
            self._again.add(session_id)
            return
        if self._next_round(session_id):
            self._tasks[session_id] = asyncio.ensure_future(self._bring_back(session_id))

    async def _bring_back(self, session_id: str) -> None:
        try:
            while True:
                await self._bring_back_once(session_id)
                if session_id not in self._again or self._closed:
                    return
                self._again.discard(session_id)
                if not self._next_round(session_id):
                    return
        finally:
            self._again.discard(session_id)
            del self._tasks[session_id]
            if self._rounds.get(session_id, (0, 0.0))[1] is None:
                del self._rounds[session_id]  # not brought back (closed, or a load that cannot succeed)

    async def _bring_back_once(self, session_id: str) -> None:
        delay = FIRST_DELAY
        while True:
            await asyncio.sleep(delay)
            try:
                await self._load(session_id)
            except LogClosedError:
                return  # the store was closed: the next start loads the session
            except LogError as exc:
                if delay == FIRST_DELAY:  # said once per drop, not at every try of a long outage
                    logger.warning("session %s: cannot load it again yet (%s); trying again, up to every %g s",
                                   session_id, exc, MAX_DELAY)  # fmt: skip
                delay = min(delay * 2, MAX_DELAY)
                continue
            except Exception:
                logger.exception("session %s: loading it again failed; it waits for its next message", session_id)
                return
            rounds, _ = self._rounds.pop(session_id, (1, None))
            self._rounds[session_id] = (rounds, time.monotonic())  # at the end: the newest
            return

    def _next_round(self, session_id: str) -> bool:
        """Count a drop of ``session_id``; ``False`` (said once) when it is one round too many in a row."""
        now = time.monotonic()
        while self._rounds:  # forget the sessions brought back too long ago to count (oldest first)
            oldest, (_, at) = next(iter(self._rounds.items()))
            if at is None or now - at < AGAIN_WINDOW:
                break
            del self._rounds[oldest]
        rounds, at = self._rounds.pop(session_id, (0, None))
        rounds = rounds + 1 if at is None or now - at < AGAIN_WINDOW else 1
        if rounds > MAX_ROUNDS:
            logger.error(
                "session %s: dropped %d times in a row, each soon after it was loaded again; not loaded again "
                "until its next message or a restart",
                session_id, MAX_ROUNDS,
            )  # fmt: skip
            return False
        self._rounds[session_id] = (rounds, None)
        return True

    async def close(self) -> None:
        """Stop bringing sessions back (the runtime stops): the next start loads those with unfinished work."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
