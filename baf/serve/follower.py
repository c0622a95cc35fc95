"""Delivery by following the log: a worker shows its clients the sessions other workers run.

A client may be connected to one worker while another runs its session (it reconnected elsewhere, or its
messages reach the owner through the inbox). Replies, reasoning steps, task lists and the errors shown to
users are records, so the worker holding the connection delivers them by reading that session's records:

- the runtime keeps a read-only view of each such session (``Runtime.follow``), folded from the log, that
  knows the last record it showed (its ``last_seq``);
- every commit notifies ``baf_records`` with the session id (``PostgresLog``); while it follows a session,
  the :class:`Follower` listens to that channel, and on a notification reads the records after that seq
  and has the view deliver them in order, each with its seq (``LiveSession.show_recorded``), exactly as the
  owner's own platform calls would have;
- a slow poll (the worker's ``poll_interval``) reads every followed session again, so a lost notification
  (or a reconnect of the listening connection) delays records and loses none; reading from the last seq
  shown means none is delivered twice;
- a session whose last client here went away is no longer followed (after a grace period, so a client
  binding right now is not missed); one this worker takes over is caught up first, then run here, and its
  deliveries go on from the next record.

A platform reads a followed session's history and binds the client between deliveries
(``LiveSession.read_delivered``), as for a session it runs: each record reaches the client once, in the
history or live.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from baf.errors import LogError

if TYPE_CHECKING:
    from baf.core.runtime import Runtime
    from baf.log.store import SessionLog

__all__ = ["Follower", "Listen"]

#: Starts listening to the records channel, calling back with each committed session id; returns ``stop()``.
Listen = Callable[[Callable[[str], None]], Awaitable[Callable[[], Awaitable[None]]]]

logger = logging.getLogger("baf.serve")


class Follower:
    """Keeps the sessions ``runtime`` follows current from ``log``: on notification, and every
    ``poll_interval`` seconds for all of them. A followed session with no client left on its platform is
    dropped once ``grace`` seconds have passed since it was last asked for."""

    def __init__(
        self, runtime: Runtime, log: SessionLog, listen: Listen, *, poll_interval: float, grace: float
    ) -> None:
        self._runtime = runtime
        self._log = log
        self._listen = listen
        self._stop_listening: Callable[[], Awaitable[None]] | None = None
        self.poll_interval = poll_interval
        self.grace = grace
        self._due: set[str] = set()
        self._wake = asyncio.Event()
        self._locks: dict[str, asyncio.Lock] = {}
        self._asked: dict[str, float] = {}  # when each session was last asked for (Runtime.follow)

    def follow(self, session_id: str) -> None:
        """The runtime follows ``session_id`` (again): catch it up now."""
        self._asked[session_id] = asyncio.get_running_loop().time()
        self._due.add(session_id)
        self._wake.set()

    def all_due(self) -> None:
        """Catch every followed session up now (the records channel's listener reconnected: what was
        notified while it was away was lost)."""
        self._due |= set(self._runtime.followed)
        self._wake.set()

    def notified(self, session_id: str) -> None:
        """Records of ``session_id`` were committed (a ``baf_records`` notification)."""
        if session_id in self._runtime.followed:
            self._due.add(session_id)
            self._wake.set()

    async def run(self) -> None:
        """Catch up what notifications name at once, and every followed session every ``poll_interval``.
        Listens to the records channel only while it follows a session (each commit of every worker
        notifies it)."""
        loop = asyncio.get_running_loop()
        next_poll = loop.time() + self.poll_interval
        try:
            while True:
                timeout = max(0.0, next_poll - loop.time())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
                due, self._due = self._due, set()
                if loop.time() >= next_poll:
                    next_poll = loop.time() + self.poll_interval
                    self._sweep(loop.time())
                    due |= set(self._runtime.followed)
                # Listening before reading: a commit after the read is then notified.
                await self._listen_while_following()
                if due:
                    await asyncio.gather(*(self.catch_up(session_id) for session_id in due))
        finally:
            if self._stop_listening is not None:
                stop, self._stop_listening = self._stop_listening, None
                await stop()

    async def _listen_while_following(self) -> None:
        if self._runtime.followed and self._stop_listening is None:
            try:
                self._stop_listening = await self._listen(lambda session_id: self.notified(session_id))
            except Exception as exc:  # the database is away: the poll keeps every session current meanwhile
                logger.warning("cannot listen to the records channel: %s", exc)
        elif not self._runtime.followed and self._stop_listening is not None:
            stop, self._stop_listening = self._stop_listening, None
            await stop()

    async def catch_up(self, session_id: str) -> None:
        """Deliver the records of ``session_id`` committed after the last one its view showed."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            view = self._runtime.followed.get(session_id)
            if view is None:
                return
            try:
                records = await self._log.read(session_id, view.projection.last_seq)
            except LogError as exc:  # the database is away: the next notification or poll retries
                logger.warning("following session %s: %s", session_id, exc)
                return
            view.show_recorded(records)
            try:
                await view.commit()
            except Exception:  # a platform failing to send: logged (LiveSession), the next records go on
                logger.exception("following session %s: delivery failed", session_id)

    async def finish(self, session_id: str) -> None:
        """This worker now runs ``session_id`` (it took the lease, so nobody else writes): deliver what is
        left to deliver, then stop following it; the session's own deliveries go on from there."""
        if session_id not in self._runtime.followed:
            return
        await self.catch_up(session_id)
        self._forget(session_id)

    def _sweep(self, now: float) -> None:
        """Stop following the sessions no client here watches any more."""
        for session_id, view in list(self._runtime.followed.items()):
            if now - self._asked.get(session_id, 0.0) < self.grace:
                continue
            if view.platform is not None and view.platform.has_client(session_id):
                continue
            self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        self._runtime.unfollow(session_id)
        self._asked.pop(session_id, None)
        lock = self._locks.get(session_id)
        if lock is not None and not lock.locked():
            del self._locks[session_id]
