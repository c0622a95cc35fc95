"""One worker: an agent's runtime that owns some sessions of a PostgreSQL log and shares the rest.

A :class:`Worker` runs the agent (its platforms included) over a ``PostgresLog`` opened for this worker,
with itself as the runtime's :class:`~baf.core.routing.SessionRouter`:

- a session is loaded only once the worker holds its lease (``baf.log.postgres_leases``); every append
  checks the lease's epoch in its transaction, so a worker that lost a session can never write to it;
- a message for a session another worker owns goes to the durable inbox (``baf.log.postgres_inbox``) and
  that worker is notified; the owner moves it into the session's log exactly once;
- a heartbeat keeps the worker's leases alive (every third of ``lease_ttl``); a session lost meanwhile
  is dropped without another write;
- a slow poll (``poll_interval``, at least a second) covers lost notifications, and takes over the
  sessions of workers that died: unfinished sessions and waiting messages whose leases expired. A taken
  session resumes as after a restart: recorded model answers are served from the log, not asked again;
- a session another worker runs, whose client is connected to this worker's platform, is delivered by
  following its records (``baf.serve.follower``).

A session no worker holds whose mail every worker is told about (a message forwarded from elsewhere, a
dead worker's session) goes to one live worker chosen by rendezvous hashing of the session id over the
live workers' ids, so such sessions spread evenly instead of going to whichever worker reads its
notifications first, and the others spend no round trip on them. If the chosen worker does not take it (it
died, or is slow), the others' poll finds it and, after a moment (``DEFER_SECONDS``), takes it. A message a
worker's own client sends is claimed there at once. A session given up because its client is on another
worker (see ``_take``) is claimed by that worker on its next message; if mail for it comes through the
inbox instead and the hash picks the worker that gave it up, that worker takes it after ``DEFER_SECONDS``
(a worker with a client of it first), never leaving it to the poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

from baf.core.forwarded import FORWARDED_KEY
from baf.core.runtime import Runtime
from baf.errors import LogClosedError, LogError, LogStorageError, SessionIdError
from baf.log.postgres import PostgresLog, redact_dsn
from baf.log.postgres_connect import KEEPALIVE_SECONDS
from baf.log.postgres_inbox import Inbox, InboxMessage
from baf.log.postgres_leases import Leases
from baf.log.redaction import log_exception
from baf.serve.follower import Follower

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.platform import Platform

__all__ = ["DEFER_SECONDS", "POOL_SIZE", "Worker", "connections_per_worker", "default_worker_id"]

logger = logging.getLogger("baf.serve")

#: How long a worker that is not a free session's chosen one waits before it tries to take the session.
DEFER_SECONDS: Final = 0.05

#: A worker's reading connections by default (its store's pool, opened in full at start).
POOL_SIZE: Final = 4


def _from_a_client(message: InboxMessage) -> bool:
    """Whether a worker forwarded ``message`` for a client of its session connected there, waiting for the
    answer (the runtime marks such a message: ``FORWARDED_KEY``)."""
    return message.payload is not None and FORWARDED_KEY in message.payload


def connections_per_worker(pool_size: int = POOL_SIZE) -> int:
    """The database connections a worker holds at most: its store's reading pool, its writer, the listener
    of its inbox and the one of the records channel (while it follows a session another worker runs)."""
    return pool_size + 3


def default_worker_id() -> str:
    """``host:pid:random``: unique across hosts and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Runs ``agent`` as one worker among many over the PostgreSQL log at ``dsn``.

    ``lease_ttl`` is how long (seconds) a session stays this worker's without a heartbeat: after a crash,
    other workers take its sessions over that much later. ``poll_interval`` is the safety poll.
    ``keepalive`` is how long its database connections last once the other end went silent (a network cut
    without a reset; ``None``: the operating system's settings; see ``baf.log.postgres_connect``).
    """

    def __init__(
        self,
        agent: Agent,
        dsn: str,
        *,
        worker_id: str | None = None,
        lease_ttl: float = 10.0,
        poll_interval: float = 2.0,
        pool_size: int = POOL_SIZE,
        keepalive: float | None = KEEPALIVE_SECONDS,
    ) -> None:
        if not 1.0 <= poll_interval < math.inf:  # nan too; inf: lost notifications would never be found
            raise ValueError(
                "poll_interval must be a finite number of seconds, at least 1 (it only covers lost notifications), "
                f"got {poll_interval!r}"
            )
        self.agent = agent
        self.worker_id = worker_id or default_worker_id()
        # A worker stopped between two statements of a transaction (SIGSTOP) must not hold its leases' row
        # locks, and so its sessions, for long past its lease: the server ends such a transaction then.
        self.log = PostgresLog(dsn, worker_id=self.worker_id, pool_size=pool_size, keepalive=keepalive,
                               idle_in_transaction=max(1.0, lease_ttl))  # fmt: skip
        self.leases = Leases(self.log, ttl=lease_ttl)
        self.inbox = Inbox(self.log)
        self.poll_interval = poll_interval
        self.runtime = Runtime(agent, self.log, router=self)
        #: Delivers the sessions other workers run to this worker's clients of them.
        self.follower = Follower(
            self.runtime, self.log, self._listen_to_records, poll_interval=poll_interval, grace=2 * poll_interval
        )
        # One taker task per session with mail to take; a session wanted again while its taker runs is
        # taken once more after (its new message may have missed the taker's read of the inbox).
        self._takers: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._polled: set[str] = set()
        # Sessions this worker gave up lately because their clients are on other workers, and when: their
        # mail is left to the worker the client is on (see _chosen_for) for a poll interval.
        self._given_up: dict[str, float] = {}
        self._peers: list[str] = []  # the live workers, refreshed with each heartbeat and when one comes or goes
        # One refresh of the peers at a time; asked for while one runs, one more runs after it (see _peers_stale).
        self._refreshing: asyncio.Task[None] | None = None
        self._peers_stale_since_read = False
        self._tasks: list[asyncio.Task[None]] = []
        self._stop_listening: Any = None
        self._said_replaced = False  # see _heartbeats
        self._repolling: asyncio.Task[None] | None = None  # a poll after the listener reconnected

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the log, register, start the agent (its platforms too) and the worker's loops."""
        # First, before anything is opened: a platform that cannot serve many workers (the terminal) says
        # so here. The other workers on this host listen on the same ports.
        for platform in self.agent.platforms:
            platform.share_with_workers()
        await self.log.start()
        channels = self.log.channels
        # Listening before registering, and listing the live workers after: a worker starting at the same
        # time is either heard registering or listed. Not the records channel: a worker follows other
        # workers' records only while a client of theirs is connected here (the follower listens to them
        # then: each notification costs a wake-up).
        try:
            self._stop_listening = await self.inbox.listen(
                self._notified,
                channels=(channels.inbox, channels.workers),
                on_reconnect=self._listening_again,
            )
            await self.leases.register()  # refused if a live worker has this id
        except BaseException:
            await self._abandon_start(registered=False)
            raise
        try:
            await self._list_peers_at_start()
            await self.agent.start(self.runtime)  # fails if a platform cannot listen (its port is taken)
        except BaseException:
            await self._abandon_start(registered=True)
            raise
        self._tasks = [
            asyncio.create_task(self._heartbeats(), name="baf-worker-heartbeat"),
            asyncio.create_task(self._poll(), name="baf-worker-poll"),  # looks for waiting work at once
            asyncio.create_task(self.follower.run(), name="baf-worker-follower"),
        ]

    async def _abandon_start(self, registered: bool) -> None:
        """A start that failed: leave nothing open, and no row that counts this worker as live."""
        if self._stop_listening is not None:
            await self._stop_listening()
            self._stop_listening = None
        if self._refreshing is not None:  # a worker heard starting meanwhile: no read of a closed log
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a failed listing raised already
                await self._refreshing
        if registered:
            with contextlib.suppress(Exception):  # the database may be away: a dead row expires after lease_ttl
                await asyncio.wait_for(self.leases.release_all({}), 10)
        await self.log.close()

    async def stop(self) -> None:
        """Stop the loops and the agent (steps finish, the log is flushed), then give the leases up so
        other workers can take the sessions at once."""
        tasks = [*self._tasks, *self._takers.values()]
        if self._repolling is not None:
            tasks.append(self._repolling)
        self._tasks = []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._stop_listening is not None:
            await self._stop_listening()
            self._stop_listening = None
        if self._refreshing is not None:  # no notification starts another now (nor a heartbeat)
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refreshing
        await self.agent.stop()
        # Read after the runtime stopped: it gave up the leases of the sessions it dropped before closing
        # the log, and may have taken one more while its steps finished.
        await self.leases.release_all(self.log.fenced())

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the runtime's router -------------------------------------------------------------------------

    async def claim(self, session_id: str) -> bool:
        """Take the session's lease if no live worker holds it. A session this worker followed is caught
        up first: its clients here get what the previous owner wrote, then what this worker writes.

        Mail waiting for the session (forwarded while another worker held it, which died before taking it)
        is taken before this returns, unless the caller is the session's taker itself: a message this
        worker's own client sends now is recorded after it, in the order they came."""
        if session_id in self.log.fenced():
            return True
        if await self.leases.acquire(session_id) is None:
            return False
        await self.follower.finish(session_id)
        if asyncio.current_task() is self._takers.get(session_id) or not await self.inbox.pending(session_id):
            return True
        self._want(session_id)
        taker = self._takers.get(session_id)
        if taker is None:  # not serving yet, or stopping: the poll takes the mail
            return True
        await asyncio.shield(taker)
        # Its taking may have given the session up again (its mail came from a client on another worker):
        # claimed once more then, after that release, through the runtime, which waits for it.
        return await self.runtime.claim(session_id)

    async def forward(self, session_id: str, data: dict[str, Any], platform: Platform | None) -> None:
        """Put the message in the inbox; its owner is notified and takes it."""
        await self.inbox.post(session_id, data)

    def release(self, session_id: str) -> Coroutine[Any, Any, None]:
        """Give the session's lease up: nothing more is appended to it here from this call on (so a message
        for it is claimed anew), the lease row is expired when the coroutine returned runs."""
        return self.leases.release(session_id)

    def follow(self, session_id: str) -> None:
        """Keep ``session_id`` (another worker runs it) current for this worker's clients of it."""
        self.follower.follow(session_id)

    async def _listen_to_records(self, on_session: Callable[[str], None]) -> Callable[[], Awaitable[None]]:
        """Listen to the records channel (every commit's session id); return an async ``stop()``."""
        return await self.inbox.listen(
            lambda _channel, session_id: on_session(session_id), (self.log.channels.records,), self.follower.all_due
        )

    # -- loops ----------------------------------------------------------------------------------------

    def _notified(self, channel: str, payload: str) -> None:
        channels = self.log.channels  # known from the log's start on: this listens only once started
        if channel == channels.inbox:
            self._want(payload)  # a session id
        elif channel == channels.workers and self._stop_listening is not None and payload != self.worker_id:
            self._peers_stale()

    def _listening_again(self) -> None:
        """The listening connection was lost and is back: what was notified meanwhile was lost with it.
        Look for waiting mail now rather than at the next poll, and list the live workers again."""
        self._peers_stale()
        if self._tasks and (self._repolling is None or self._repolling.done()):  # started and not stopping
            self._repolling = asyncio.create_task(self._poll_once(), name="baf-worker-repoll")

    def _peers_stale(self) -> asyncio.Task[None]:
        """The list of live workers may have changed: read it again, soon. Refreshes are coalesced: a burst
        of notifications (many workers starting or stopping at once) costs one read, or two when it comes
        while a read is under way, instead of one read per notification on every worker. None is missed:
        a change told of after a read began is read by the next one, which begins once that read ends."""
        self._peers_stale_since_read = True
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh_peers(), name="baf-worker-peers")
        return self._refreshing

    async def _list_peers_at_start(self) -> None:
        """List the live workers, or raise ``LogStorageError``: a worker that started without them would take
        every free session it is told of, as if it were alone, until its first heartbeat. Through the one
        refresh, so that a refresh a notification started meanwhile is not overtaken by an older read."""
        if self._refreshing is not None and not self._refreshing.done():
            with contextlib.suppress(Exception):  # one a notification started: it says if it failed
                await self._refreshing
        self._peers_stale_since_read = True
        self._refreshing = asyncio.create_task(self._refresh_peers(strict=True), name="baf-worker-peers")
        try:
            await self._refreshing
        except Exception as exc:
            raise LogStorageError(
                redact_dsn(self.log.dsn), f"worker {self.worker_id}: cannot list the live workers at start: {exc}"
            ) from exc

    async def _refresh_peers(self, strict: bool = False) -> None:
        """Read the live workers until no notification came during the read; ``strict``: raise if a read
        fails (at start), else say so and keep the last list (the next heartbeat reads it again)."""
        while self._peers_stale_since_read:
            self._peers_stale_since_read = False
            try:
                self._peers = await self.leases.live_workers()
            except Exception as exc:
                if strict:
                    raise
                if isinstance(exc, LogClosedError):
                    # The worker is stopping: a start that failed (a platform that could not listen, a
                    # Ctrl-C) closed the log before the listener stopped, and a worker came or went meanwhile.
                    return
                logger.warning("worker %s: cannot list the live workers: %s", self.worker_id, exc)

    def _want(self, session_id: str, polled: bool = False) -> None:
        """Take ``session_id``'s waiting mail soon, without waiting for other sessions' takes. ``polled``: the
        poll found it (a notification was lost, or the worker chosen for it did not take it)."""
        if polled:
            self._polled.add(session_id)
        if session_id in self._takers:
            self._again.add(session_id)
        elif self._tasks:  # started and not stopping
            self._takers[session_id] = asyncio.create_task(self._taker(session_id), name="baf-worker-take")

    async def _taker(self, session_id: str) -> None:
        try:
            while True:
                self._again.discard(session_id)
                polled = session_id in self._polled
                self._polled.discard(session_id)
                await self._take_logged(session_id, polled)
                if session_id not in self._again:
                    return
        finally:
            self._takers.pop(session_id, None)

    async def _heartbeats(self) -> None:
        interval = self.leases.ttl / 3
        while True:
            await asyncio.sleep(interval)
            try:
                lost = await self.leases.heartbeat()
            except Exception as exc:  # the database is away: appends are fenced anyway, retry next time
                logger.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)
                continue
            self._peers_stale()  # workers that died stop counting (through the one refresh, never two at once)
            if self.leases.replaced and not self._said_replaced:
                self._said_replaced = True
                logger.error(
                    "worker %s: another process took this worker's id over (this one missed its heartbeats for "
                    "longer than lease_ttl: it was paused, or cut from the database); it gave its %d sessions up "
                    "and runs none from now on (their messages go to the other workers): restart it",
                    self.worker_id, len(lost),
                )  # fmt: skip
            for session_id in lost:
                logger.warning("worker %s: lost session %s to another worker", self.worker_id, session_id)
                self.runtime.drop(session_id)
                await self._follow_if_watched(session_id)

    async def _follow_if_watched(self, session_id: str) -> None:
        """A session this worker lost: its clients here follow it from the log from now on."""
        platform = next((p for p in self.agent.platforms if p.has_client(session_id)), None)
        if platform is None:
            return
        try:
            await self.runtime.follow(session_id, platform)
        except LogError as exc:  # the database is away: the client gets it on its next message or reconnect
            logger.warning("worker %s: cannot follow session %s: %s", self.worker_id, session_id, exc)

    async def _poll(self) -> None:
        """Every ``poll_interval``, look for what notifications missed and for sessions whose owner died."""
        while True:
            await self._poll_once()
            now = asyncio.get_running_loop().time()
            self._given_up = {s: at for s, at in self._given_up.items() if now - at < self.poll_interval}
            await asyncio.sleep(self.poll_interval)

    async def _poll_once(self) -> None:
        try:
            for session_id in await self._orphans():
                self._want(session_id, polled=True)
        except Exception as exc:
            logger.warning("worker %s: poll failed: %s", self.worker_id, exc)

    async def _take_logged(self, session_id: str, polled: bool) -> None:
        try:
            await self._take(session_id, polled)
        except LogError as exc:  # a lease lost meanwhile, the database away: the next poll retries
            logger.warning("worker %s: session %s: %s", self.worker_id, session_id, exc)
        except Exception:  # a bug: said once with its traceback (not as a task nobody awaited); the poll retries
            log_exception(logger, self.agent.redactor, "worker %s: taking session %s's mail failed", self.worker_id,
                          session_id)  # fmt: skip

    def _chosen_for(self, session_id: str) -> bool:
        """Whether this worker takes the mail of ``session_id``, which no worker holds, as soon as it is told
        of it: it does if a client of the session is connected here (its messages then start here), and
        not if it gave the session up lately because its clients are elsewhere (see _take); otherwise if
        it is the one the rendezvous hash picks among the live workers."""
        if self._has_client(session_id):
            return True
        given_up = self._given_up.get(session_id)
        if given_up is not None:
            if asyncio.get_running_loop().time() - given_up < self.poll_interval:
                return False
            del self._given_up[session_id]
        return self._hash_picks(session_id)

    def _last_resort(self, session_id: str) -> bool:
        """Whether this worker gave ``session_id`` up lately and the rendezvous hash picks it: then no worker
        takes the session's mail at once unless a client of it is connected there (the one its client was
        on may have lost it), so this one takes it after a moment (``DEFER_SECONDS``) rather than leave it
        to the poll. A worker with a client of it claims it first."""
        return session_id in self._given_up and self._hash_picks(session_id)

    def _hash_picks(self, session_id: str) -> bool:
        """Whether this worker is the one the rendezvous hash picks for ``session_id`` among the live ones."""
        peers = self._peers
        if len(peers) < 2:
            return True
        key = session_id.encode()
        chosen = max(peers, key=lambda peer: hashlib.blake2b(peer.encode() + b"\0" + key, digest_size=8).digest())
        return chosen == self.worker_id

    async def _orphans(self) -> list[str]:
        """Sessions to take: waiting messages of sessions no live worker holds (or this one does), and
        unfinished sessions no live worker holds (their owner died). A session whose taker is running is
        left to it."""
        found = await self.leases.unowned_with_mail()
        found += await self.inbox.sessions_with_mail(list(self.log.fenced()))
        found += await self.leases.unowned_unfinished()
        return [session_id for session_id in dict.fromkeys(found) if session_id not in self._takers]

    async def _take(self, session_id: str, polled: bool = False) -> None:
        """Own ``session_id`` (if free) and move its waiting messages into its log, in arrival order."""
        # Called by the session's one taker task (see _want), so never twice at once for a session.
        try:
            self.runtime.check_session_id(session_id)  # before a lease stores it
        except SessionIdError as exc:
            # Mail no session can take (posted by other code, or by hand): taken out of the inbox, said once.
            dropped = await self.inbox.discard(session_id)
            if dropped:  # else a notification with no row behind it (NOTIFY needs no privilege)
                logger.error("worker %s: %d inbox message(s) were deleted: %s", self.worker_id, dropped, exc)
            return
        if session_id not in self.log.fenced():
            if not self._chosen_for(session_id):
                if not polled and not self._last_resort(session_id):
                    return  # notified: the chosen worker takes it (the poll stands in if it does not)
                await asyncio.sleep(DEFER_SECONDS)  # the chosen worker first; if it still does not, this one
            elif not polled and not await self.inbox.pending(session_id):
                # A notification with no message behind it (taken already, or sent by hand: NOTIFY needs no
                # privilege on baf's tables) must not make this worker own, start and run a session.
                return
            if not await self.runtime.claim(session_id):  # after a release of it under way, if any
                return  # a live worker owns it: its own notification or poll takes the mail
        await self.runtime.get_or_create(session_id)  # loads it, resuming an interrupted step
        messages = await self.inbox.pending(session_id)
        if session_id not in self.log.fenced():
            # Given up meanwhile (its clients are elsewhere, see below) or lost: the worker that holds or
            # claims it next takes its mail (a release announces mail left waiting).
            return
        for message in messages:
            await self.runtime.receive_forwarded(session_id, message.id, message.payload, message.error)
        if any(_from_a_client(message) for message in messages) and not self._has_client(session_id):
            # Its client is on another worker (it reconnected there, or a load balancer sent it there), which
            # forwarded the message: give the session up once these are handled, so that its next message is
            # taken where it arrives rather than come through the inbox and be followed back, round trips
            # each time. Mail from elsewhere (no client waits for it anywhere) keeps the session here: its
            # next message comes through the inbox too, and this worker takes it at once.
            self._given_up[session_id] = asyncio.get_running_loop().time()
            self.runtime.let_go(session_id)

    def _has_client(self, session_id: str) -> bool:
        """Whether a client of ``session_id`` is connected to one of this worker's platforms."""
        return any(platform.has_client(session_id) for platform in self.agent.platforms)
