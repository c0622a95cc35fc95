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

A session that is dropped again soon after it was brought back (its own step makes the write fail: data the
log refuses) is given up after :data:`MAX_ROUNDS` rounds in a row, with an error line: its next message or a
restart brings it back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from baf.errors import LogClosedError, LogError

__all__ = ["FIRST_DELAY", "MAX_DELAY", "MAX_ROUNDS", "Recovery"]

logger = logging.getLogger("baf.runtime")

#: Seconds before the first try to load a dropped session again.
FIRST_DELAY: Final = 0.5
#: The longest wait (seconds) between two tries while the log stays away.
MAX_DELAY: Final = 30.0
#: Drops of one session, each within :data:`ROUND_WINDOW` of the previous, after which it is given up.
MAX_ROUNDS: Final = 5
#: Seconds within which a drop counts as the same failure as the previous one.
ROUND_WINDOW: Final = 300.0


class Recovery:
    """Loads sessions again, in the background, after the runtime dropped them on a failed write.

    ``load(session_id)`` brings one back: it returns once the session is loaded (or needs no load: another
    caller loaded it, another worker holds it now) and raises ``LogError`` while the log refuses.
    """

    def __init__(self, load: Callable[[str], Awaitable[None]]) -> None:
        self._load = load
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Per session: drops in a row, and when the latest was (time.monotonic()).
        self._rounds: dict[str, tuple[int, float]] = {}
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
        if not self._counted_again(session_id):
            return
        self._tasks[session_id] = asyncio.ensure_future(self._bring_back(session_id))

    async def _bring_back(self, session_id: str) -> None:
        try:
            await self._bring_back_once(session_id)
            while session_id in self._again and not self._closed:
                self._again.discard(session_id)
                if not self._counted_again(session_id):
                    return
                await self._bring_back_once(session_id)
        finally:
            self._again.discard(session_id)
            del self._tasks[session_id]

    async def _bring_back_once(self, session_id: str) -> None:
        delay = FIRST_DELAY
        while True:
            await asyncio.sleep(delay)
            try:
                await self._load(session_id)
            except LogClosedError:
                return  # the store was closed: the next start loads the session
            except LogError as exc:
                if delay == FIRST_DELAY:  # said once per failure, not at every try of a long outage
                    logger.warning("session %s: cannot load it again yet (%s); trying again, up to every %g s",
                                   session_id, exc, MAX_DELAY)  # fmt: skip
                delay = min(delay * 2, MAX_DELAY)
                continue
            except Exception:
                logger.exception("session %s: loading it again failed; it waits for its next message", session_id)
            return

    def _counted_again(self, session_id: str) -> bool:
        """Count one more drop of ``session_id``; ``False`` (said once) when it has been dropped too often in
        a row to be brought back again."""
        now = time.monotonic()
        if len(self._rounds) > 1024:  # forget the drops too old to count (an outage drops many sessions)
            self._rounds = {key: value for key, value in self._rounds.items() if now - value[1] < ROUND_WINDOW}
        rounds, last = self._rounds.get(session_id, (0, now))
        rounds = rounds + 1 if now - last < ROUND_WINDOW else 1
        self._rounds[session_id] = (rounds, now)
        if rounds <= MAX_ROUNDS:
            return True
        del self._rounds[session_id]
        logger.error(
            "session %s: dropped %d times in a row after failed writes; not loaded again until its next "
            "message or a restart",
            session_id, MAX_ROUNDS,
        )  # fmt: skip
        return False

    async def close(self) -> None:
        """Stop bringing sessions back (the runtime stops): the next start loads those with unfinished work."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
