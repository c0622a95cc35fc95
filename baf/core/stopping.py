"""The runtime's stop and interrupt state, in one object: which sessions are in a step, who cut one short.

The runtime owns one :class:`StopControl`; the engine tells it when a step begins and when it starts
finishing, and the runtime asks it which steps it may cancel. Nothing else holds this state, so a
session object carries no flags the runtime writes from outside.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass

__all__ = ["Cut", "StopControl"]


@dataclass(frozen=True, slots=True)
class Cut:
    """Why a step was cancelled: ``by`` is ``"user"`` (told to stop now) or ``"stop"`` (the grace
    period ran out); ``how`` names what asked (``"a second SIGTERM"``), or ``None`` if unknown."""

    by: str
    how: str | None = None


class StopControl:
    """Stopping, stopping now, and the steps running, for one runtime.

    A step is *running* from :meth:`begin_step` until :meth:`finish_step`: only then may the runtime
    cancel it. Once finishing (recording its end, committing, delivering) it is never cut, or its reply
    would be lost and its log left with an open step.
    """

    def __init__(self) -> None:
        #: :meth:`Runtime.stop` has begun.
        self.stopping = False
        #: The stop under way (or about to begin) waits for no step and starts none.
        self.stop_now = False
        #: What asked to stop now (see :meth:`Runtime.interrupt`), for the recorded message.
        self.stop_now_how: str | None = None
        self._stop_now_set = asyncio.Event()
        # Session id -> how its running step was cut (None: not cut, still running).
        self._running: dict[str, Cut | None] = {}
        # Workers cancelled by an interrupt on a runtime that goes on: they carry on with their queue.
        self._going_on: weakref.WeakSet[asyncio.Task[None]] = weakref.WeakSet()

    # -- the engine's side ----------------------------------------------------------------------

    def begin_step(self, session_id: str) -> None:
        """A step of ``session_id`` starts running (it may be cancelled from now on)."""
        self._running[session_id] = None

    def finish_step(self, session_id: str) -> Cut | None:
        """The step of ``session_id`` starts finishing (it is not cancelled from now on): how it was
        cut, if it was. Safe to call twice."""
        return self._running.pop(session_id, None)

    def in_step(self, session_id: str) -> bool:
        """Whether a step of ``session_id`` is running (not yet finishing)."""
        return session_id in self._running

    # -- the runtime's side ---------------------------------------------------------------------

    def cut(self, session_id: str, cut: Cut) -> bool:
        """Mark the running step of ``session_id`` as cut short; ``False`` if none is running."""
        if session_id not in self._running:
            return False
        self._running[session_id] = cut
        return True

    def cut_of(self, session_id: str) -> Cut | None:
        """How the running step of ``session_id`` was cut, if it was."""
        return self._running.get(session_id)

    def set_stop_now(self, how: str | None) -> None:
        """Stop now: wake a stop waiting out its grace period."""
        self.stop_now = True
        self.stop_now_how = how
        self._stop_now_set.set()

    async def wait_stop_now(self) -> None:
        """Return once :meth:`set_stop_now` was called."""
        await self._stop_now_set.wait()

    @property
    def halting(self) -> bool:
        """Whether a stop has begun or is about to (no further step starts once ``stop_now``)."""
        return self.stopping or self.stop_now

    def goes_on(self, worker: asyncio.Task[None]) -> None:
        """``worker`` is being cancelled by an interrupt on a runtime that goes on afterwards."""
        self._going_on.add(worker)

    def absorb(self, worker: asyncio.Task[None] | None) -> bool:
        """Whether ``worker``'s cancellation was such an interrupt and nothing else (a stop, the loop
        ending): if so it is taken back, and the worker goes on with its queue."""
        if worker is None or worker not in self._going_on:
            return False
        self._going_on.discard(worker)
        return not self.halting and worker.uncancel() == 0
