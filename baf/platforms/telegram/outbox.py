"""Sending to Telegram without making the agent wait: one ordered queue per chat, flood limits honoured.

A reply reaches the platform on the agent's delivery path, which must never wait on the network
(``docs/writing_a_platform.md``). Each send is queued for its chat and the call returns; a task per
chat sends them in order. When Telegram answers 429 with ``retry_after``, that chat's sender sleeps
that long and tries the same call again, up to ``max_retries`` times; a network error is retried the
same way with a short backoff. A call Telegram refuses (400, 403) is logged and dropped: retrying
would not change the answer.

The queue is the only per-chat data kept, and only while something is waiting to be sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram.exceptions import TelegramAPIError, TelegramNetworkError, TelegramRetryAfter, TelegramServerError

from baf.wording import counted

__all__ = ["ChatOutbox"]

logger = logging.getLogger("baf.platforms.telegram")

#: A send: makes the Bot API call when awaited.
Send = Callable[[], Awaitable[Any]]


class ChatOutbox:
    """Ordered, non-blocking sends per chat, with 429 ``retry_after`` honoured.

    Args:
        max_retries: Attempts after the first for one call (429s and network errors); then it is dropped
            with an error in the log.
        max_retry_after: A ``retry_after`` longer than this many seconds is not waited for: the call is
            dropped at once (a chat that is blocked for minutes must not hold its queue that long).
        max_queued: Sends waiting per chat; one more is dropped with a warning.
    """

    def __init__(self, max_retries: int = 5, max_retry_after: float = 60.0, max_queued: int = 1000) -> None:
        self.max_retries = max_retries
        self.max_retry_after = max_retry_after
        self.max_queued = max_queued
        self._queues: dict[int, deque[tuple[str, Send]]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}

    def put(self, chat_id: int, what: str, send: Send) -> None:
        """Queue ``send`` for ``chat_id`` (``what`` names it in the log) and return at once."""
        queue = self._queues.setdefault(chat_id, deque())
        if len(queue) >= self.max_queued:
            logger.warning("chat %s: %d sends are waiting; dropped %s", chat_id, len(queue), what)
            return
        queue.append((what, send))
        sender = self._senders.get(chat_id)
        if sender is None or sender.done():
            self._senders[chat_id] = asyncio.ensure_future(self._drain(chat_id))

    async def _drain(self, chat_id: int) -> None:
        queue = self._queues[chat_id]
        try:
            while queue:
                what, send = queue[0]
                await self._send(chat_id, what, send)
                queue.popleft()
        finally:
            if not queue:
                self._queues.pop(chat_id, None)
                self._senders.pop(chat_id, None)

    async def _send(self, chat_id: int, what: str, send: Send) -> None:
        attempt = 0
        while True:
            try:
                await send()
                return
            except TelegramRetryAfter as exc:
                wait = float(exc.retry_after)
                problem = f"429, retry after {exc.retry_after} s"
            except (TelegramNetworkError, TelegramServerError) as exc:
                wait = min(2.0**attempt, 30.0)
                problem = f"{type(exc).__name__}: {exc}"
            except TelegramAPIError as exc:
                logger.error("chat %s: Telegram refused %s: %s", chat_id, what, exc.message)
                return
            except Exception:
                # Not Telegram's answer (a bug in a send): dropped, so the sends behind it still go out.
                logger.exception("chat %s: %s failed", chat_id, what)
                return
            attempt += 1
            if attempt > self.max_retries or wait > self.max_retry_after:
                tries = counted(attempt, "attempt")
                logger.error("chat %s: gave up on %s after %s (%s)", chat_id, what, tries, problem)
                return
            logger.warning("chat %s: %s for %s; trying again in %g s", chat_id, problem, what, wait)
            await asyncio.sleep(wait)

    async def drain(self, timeout: float) -> None:  # noqa: ASYNC109 - a grace period, like Runtime.stop
        """Wait up to ``timeout`` seconds for every queued send, then cancel what is left."""
        senders = [task for task in self._senders.values() if not task.done()]
        if senders:
            await asyncio.wait(senders, timeout=timeout)
        await self.close()

    async def close(self) -> None:
        """Cancel every sender; queued sends are dropped."""
        senders = list(self._senders.values())
        for task in senders:
            task.cancel()
        for task in senders:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._queues.clear()
        self._senders.clear()
