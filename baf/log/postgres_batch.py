"""Many concurrent reads of one kind, one round trip: what a worker does when a burst of sessions arrives.

When a hundred sessions reach a worker at once, each is claimed, loaded and has its inbox read. One by one
that is three round trips per session, queued on a handful of pooled connections. A :class:`Coalescer`
runs such calls together instead: the calls made while a batch is on its way (or in the same turn of the
event loop) wait for it to finish and then go as the next batch, in one query for all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Coalescer(Generic[K, V]):
    """Runs ``run(keys)`` for the keys asked for together; ``run`` returns each key's value, or the exception
    that key's caller gets (one key's bad data fails only that call). An exception ``run`` raises fails
    every call of its batch."""

    def __init__(self, run: Callable[[list[K]], Awaitable[dict[K, V | BaseException]]]) -> None:
        self._run = run
        self._waiting: dict[K, list[asyncio.Future[V]]] = {}
        self._draining: asyncio.Task[None] | None = None

    async def get(self, key: K) -> V:
        """The value for ``key``, fetched with every other key asked for meanwhile."""
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        if self._draining is None:
            self._draining = asyncio.create_task(self._drain(), name="baf-postgres-batch")
        return await future

    async def _drain(self) -> None:
        batch: dict[K, list[asyncio.Future[V]]] = {}
        try:
            await asyncio.sleep(0)  # the calls made in this turn of the loop join the first batch
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                # A key whose every caller was cancelled meanwhile is left out (a post is not written).
                batch = {key: futures for key, futures in batch.items() if not all(f.done() for f in futures)}
                if not batch:
                    continue
                try:
                    results = await self._run(list(batch))
                except Exception as exc:
                    results = dict.fromkeys(batch, exc)
                for key, futures in batch.items():
                    outcome = results.get(key)
                    for future in futures:
                        if future.done():
                            continue  # its caller was cancelled
                        if isinstance(outcome, BaseException):
                            future.set_exception(outcome)
                        else:
                            future.set_result(outcome)  # type: ignore[arg-type]
                batch = {}
        finally:
            self._draining = None
            for futures in (*batch.values(), *self._waiting.values()):  # cancelled (the store closing)
                for future in futures:
                    future.cancel()
            if self._waiting:
                self._waiting = {}
