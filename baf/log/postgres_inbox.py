"""The durable inbox: how a message reaches the worker that owns its session, exactly once, in order.

A message may arrive at any worker (its client is connected there). That worker writes it to
``baf_inbox`` and notifies the log's inbox channel with the session id (a name only roles that can read
baf's tables, or every connection's queries, can learn: ``baf.log.postgres_channels``). The owner reads the session's
waiting rows in arrival order (``pending``) and moves each into the session log with
``PostgresLog.append_consuming``, which deletes the row in the same transaction as it appends the
message's records. A crash before that commit leaves the row for the next owner; after it, the message is
in the log and the row is gone: consumed once.

Notifications only wake workers; a worker that missed one finds the rows on its next (slow) poll. A
listening connection that is lost (a server restart) is opened again, and the listener told so.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baf.log.jsontext import LoneSurrogateError, decode_json, encode_json
from baf.log.postgres_batch import Coalescer

if TYPE_CHECKING:
    import asyncpg

    from baf.log.postgres import PostgresLog

__all__ = ["RELISTEN_MAX_DELAY", "Inbox", "InboxMessage"]

logger = logging.getLogger("baf.log.postgres")

#: The longest wait (seconds) between two tries to listen again after a listening connection was lost.
RELISTEN_MAX_DELAY = 5.0

#: How many waiting messages of a session one read returns (the owner reads again after handling them).
_PENDING_LIMIT = 100
# The first waiting rows of each session, read through the (session_id, id) index and stopped at the limit:
# a session with 200,000 rows waiting costs what one with 100 does. (Numbering every waiting row of the
# sessions with a window function and keeping the first ones read them all: ~30 ms for 200,000.) Sorted by
# the sessions' places in the array, integers, not by their ids (text in the database's collation).
_PENDING_MANY = """
SELECT u.s, i.id, i.payload FROM unnest($1::text[]) WITH ORDINALITY AS u(s, n)
CROSS JOIN LATERAL (SELECT id, payload FROM baf_inbox WHERE session_id = u.s ORDER BY id LIMIT $2) AS i
ORDER BY u.n, i.id
"""

# The rows and their notifications, in one round trip (notifications are delivered when the rows commit;
# PostgreSQL folds a session's duplicates into one). Ids are drawn in the order the posts were made, so a
# session's messages are read back in that order; ``n`` tells each post its id.
_POST_MANY = """
WITH posts AS (
    SELECT nextval('baf_inbox_id_seq') AS id, s, p, n FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(s, p, n)
), posted AS (INSERT INTO baf_inbox (id, session_id, payload) SELECT id, s, p FROM posts)
SELECT n, id, pg_notify($3::text, s) FROM posts
"""


@dataclass(frozen=True, slots=True)
class InboxMessage:
    """One waiting message. ``payload`` is ``None`` when the row does not hold a JSON object; ``error``
    then says what is wrong with it (the owner records that as an error and consumes the row)."""

    id: int
    session_id: str
    payload: dict[str, Any] | None
    error: str | None = None


class Inbox:
    """The inbox of a started ``PostgresLog``."""

    def __init__(self, log: PostgresLog) -> None:
        self._log = log
        self._pending: Coalescer[str, list[InboxMessage]] = Coalescer(self._pending_many)
        self._posts: Coalescer[_Post, int] = Coalescer(self._post_many)
        self._posted = itertools.count()

    async def post(self, session_id: str, payload: dict[str, Any]) -> int:
        """Store a message for ``session_id`` durably and wake its owner; return the row's id. Posts made
        together (a burst of messages forwarded at once) share one statement, and keep their order."""
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be str, not {type(session_id).__name__}")
        if not session_id:
            raise ValueError("the empty session id cannot be stored: no session has it")
        if "\x00" in session_id or not _is_utf8(session_id):
            raise ValueError(f"session id {session_id!r} cannot be stored (NUL or invalid Unicode)")
        encoded = encode_json(payload)
        text = encoded.decode() if isinstance(encoded, bytes) else encoded
        if not isinstance(encoded, bytes) and not _is_utf8(text):  # json's output: NUL is escaped
            raise ValueError("the payload cannot be stored as text (invalid Unicode)")
        # Checked first: a value PostgreSQL refuses would fail every post of its statement.
        return await self._posts.get(_Post(next(self._posted), session_id, text))

    async def _post_many(self, posts: list[_Post]) -> dict[_Post, int | BaseException]:
        async with self._log.connection() as connection:  # one statement: its own transaction
            rows = await connection.fetch(
                _POST_MANY, [post.session_id for post in posts], [post.text for post in posts], self._log.channels.inbox
            )
        ids = {int(row[0]): int(row[1]) for row in rows}
        return {post: ids[n] for n, post in enumerate(posts, 1)}

    async def pending(self, session_id: str, limit: int = _PENDING_LIMIT) -> list[InboxMessage]:
        """The messages waiting for ``session_id``, oldest first (at most ``limit``). Reads asked for
        together (a burst of sessions reaching a worker) share one query."""
        if limit == _PENDING_LIMIT:
            return await self._pending.get(session_id)
        async with self._log.connection() as connection:
            rows = await connection.fetch(
                "SELECT id, payload FROM baf_inbox WHERE session_id = $1 ORDER BY id LIMIT $2", session_id, limit
            )
        return [_message(session_id, int(row[0]), row[1]) for row in rows]

    async def _pending_many(self, session_ids: list[str]) -> dict[str, list[InboxMessage] | BaseException]:
        async with self._log.connection() as connection:
            rows = await connection.fetch(_PENDING_MANY, session_ids, _PENDING_LIMIT)
        waiting: dict[str, list[InboxMessage] | BaseException] = {}
        found: dict[str, list[InboxMessage]] = {session_id: [] for session_id in session_ids}
        for row in rows:
            found[row[0]].append(_message(row[0], int(row[1]), row[2]))
        waiting.update(found)
        return waiting

    async def discard(self, session_id: str) -> int:
        """Delete every message waiting for ``session_id`` (an id no session may have: its mail can never be
        taken); return how many there were."""
        async with self._log.connection() as connection:
            deleted = await connection.fetch("DELETE FROM baf_inbox WHERE session_id = $1 RETURNING id", session_id)
        return len(deleted)

    async def sessions_with_mail(self, session_ids: list[str]) -> list[str]:
        """Which of ``session_ids`` have messages waiting (oldest first)."""
        if not session_ids:
            return []
        async with self._log.connection() as connection:
            rows = await connection.fetch(
                "SELECT session_id FROM baf_inbox WHERE session_id = ANY($1::text[]) "
                "GROUP BY session_id ORDER BY min(id)",
                session_ids,
            )
        return [row[0] for row in rows]

    async def listen(
        self,
        on_session: Callable[[str, str], None],
        channels: tuple[str, ...] | None = None,
        on_reconnect: Callable[[], None] | None = None,
    ) -> Callable[[], Any]:
        """Call ``on_session(channel, session_id)`` for every notification on ``channels``, names from
        ``PostgresLog.channels`` (by default the inbox and the records channels); return an async ``stop()``.
        One connection of its own, outside the pool. Listen only to what you use: every commit notifies the
        records channel, and each notification costs each listener a wake-up.

        A connection lost (the server restarted, the backend was terminated) is opened again, retrying with
        a growing delay (up to ``RELISTEN_MAX_DELAY`` seconds); notifications sent meanwhile are lost, so
        ``on_reconnect()`` is called once it listens again, for the caller to look for what they named.

        Without ``channels``, like the inbox's other calls, it starts a store never started (the names are
        read then), and raises ``LogClosedError`` once the store is closed."""

        def notified(_connection: Any, _pid: int, channel: str, payload: str) -> None:
            try:
                on_session(channel, payload)
            except Exception:
                logger.exception("an inbox listener failed")

        if channels is None:
            await self._log.ready()  # the names are read at start
        names = channels if channels is not None else (self._log.channels.inbox, self._log.channels.records)
        listening = _Listening()

        async def connect() -> asyncpg.Connection:
            connection: asyncpg.Connection = await self._log.open_connection()
            try:
                for channel in names:
                    await connection.add_listener(channel, notified)
                # pg_stat_activity shows a connection's last statement to the roles that see queries: this one
                # rather than a LISTEN naming a channel (baf.log.postgres_channels). Once per connection.
                await connection.execute("SELECT 1")
            except BaseException:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(connection.close(), 5)
                raise
            connection.add_termination_listener(lost)
            return connection

        def lost(connection: asyncpg.Connection) -> None:
            # Also called when stop() closes it, and for a connection replaced already: only the current
            # connection's loss, while listening, is reconnected.
            if listening.stopped or connection is not listening.connection:
                return
            if listening.reconnecting is not None and not listening.reconnecting.done():
                return  # heard twice (asyncpg calls its listeners soon after): a second one would leak a connection
            listening.reconnecting = asyncio.get_running_loop().create_task(relisten(), name="baf-relisten")

        async def relisten() -> None:
            delay = 0.1
            while True:
                try:
                    connection = await connect()
                except Exception as exc:  # anything but a cancel: the listener must come back, or stop()
                    logger.warning("cannot listen to %s again (retrying in %.1f s): %s", ", ".join(names), delay,
                                   exc)  # fmt: skip
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, RELISTEN_MAX_DELAY)
                    continue
                if listening.stopped:  # stop() came while this connected
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(connection.close(), 5)
                    return
                listening.connection = connection
                if not connection.is_closed():
                    break
                await asyncio.sleep(delay)  # lost again before its loss could be heard: try again
                delay = min(2 * delay, RELISTEN_MAX_DELAY)
            if on_reconnect is not None:
                try:
                    on_reconnect()
                except Exception:
                    logger.exception("an inbox listener failed")

        listening.connection = await connect()
        if listening.connection.is_closed():  # lost before its loss could be heard
            lost(listening.connection)

        async def stop() -> None:
            listening.stopped = True
            if listening.reconnecting is not None:
                listening.reconnecting.cancel()
                # Never raises: a worker stopping goes on to give its leases up.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await listening.reconnecting
            if listening.connection is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(listening.connection.close(), 5)

        return stop


@dataclass(slots=True)
class _Listening:
    """A listener's state: its current connection, the task opening a new one after a loss, if any."""

    connection: Any = None
    reconnecting: asyncio.Task[None] | None = None
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class _Post:
    """One ``post`` waiting for its statement (``number`` keeps two equal posts apart)."""

    number: int
    session_id: str
    text: str


def _is_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _message(session_id: str, row_id: int, text: str) -> InboxMessage:
    try:
        payload = decode_json(text)
    except LoneSurrogateError:  # JSON, but no log could store it: said as for a message sent so
        return InboxMessage(row_id, session_id, None, "it holds text that is not valid Unicode (a lone surrogate)")
    except (ValueError, RecursionError) as exc:
        return InboxMessage(row_id, session_id, None, f"inbox row {row_id} is not JSON: {exc}")
    if not isinstance(payload, dict):
        return InboxMessage(
            row_id, session_id, None, f"inbox row {row_id} holds {type(payload).__name__}, not a JSON object"
        )
    return InboxMessage(row_id, session_id, payload)
