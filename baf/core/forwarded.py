"""Messages a worker forwarded to the owner of their session, awaited until the log shows them handled.

A platform that waits for the answer to a message (A2A: a task ends when its message is handled) gets
from ``Runtime.receive`` a future that resolves once the message was handled. When the session's owner
is another worker, the message goes through the inbox and the worker follows the session
(``baf.serve.follower``): the message carries a mark of its own (``forwarded``: a random id, recorded
with it), so the view recognises its ``message_received`` record among the records it shows, and
resolves the future once the records show its step over, after the platform calls that showed that step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from baf.log.projection import SessionProjection
from baf.log.record import Record, RecordKind

__all__ = ["FORWARDED_KEY", "ForwardedMessages"]

#: The ``message_received`` field holding the mark of a forwarded message a platform waits on.
FORWARDED_KEY = "forwarded"


class ForwardedMessages:
    """The forwarded messages of one followed session that a platform waits on."""

    def __init__(self) -> None:
        self._by_mark: dict[str, asyncio.Future[None]] = {}
        self._by_seq: dict[int, asyncio.Future[None]] = {}

    def add(self, mark: str) -> asyncio.Future[None]:
        """A future for the message recorded with ``mark`` (:data:`FORWARDED_KEY`), resolved once it was
        handled."""
        future = self._by_mark.get(mark)
        if future is None:
            future = self._by_mark[mark] = asyncio.get_running_loop().create_future()
        return future

    def handled(self, records: Sequence[Record], projection: SessionProjection) -> list[asyncio.Future[None]]:
        """The futures whose messages ``records`` (just folded into ``projection``) show handled: recorded,
        their step started and over. They are forgotten here; the caller resolves them."""
        if not self._by_mark and not self._by_seq:
            return []
        for record in records:
            if record.kind == RecordKind.MESSAGE_RECEIVED:
                future = self._by_mark.pop(str(record.data.get(FORWARDED_KEY)), None)
                if future is not None:
                    self._by_seq[record.seq] = future
        done = [seq for seq in self._by_seq if seq not in projection.unstarted and projection.open_step != seq]
        return [self._by_seq.pop(seq) for seq in done]

    def release(self) -> None:
        """The session is no longer followed here (no client is left, or this worker runs it now): every
        future resolves, with what was shown so far."""
        for future in [*self._by_mark.values(), *self._by_seq.values()]:
            if not future.done():
                future.set_result(None)
        self._by_mark.clear()
        self._by_seq.clear()

    def __bool__(self) -> bool:
        return bool(self._by_mark or self._by_seq)
