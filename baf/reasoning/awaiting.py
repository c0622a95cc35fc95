"""Awaiting a coroutine in the caller's task, with what a task of its own would give it: a time limit
(:func:`time_limited`) or a context of its own (:func:`in_own_context`).

The kernel awaits every tool call and model call through these. A task, or an ``asyncio.timeout`` armed
for a call that never waits, costs more than many a tool does (figures in the docstrings below), so both
step the awaited coroutine themselves and behave as the task or the timer would.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar, cast

__all__ = ["in_own_context", "time_limited"]

_T = TypeVar("_T")


def in_own_context(coroutine: Coroutine[Any, Any, _T]) -> Awaitable[_T]:
    """``coroutine`` to await in a copy of the current context, as if it ran in a task of its own: the
    context variables it sets stay its own.

    A task would do the same (``asyncio.create_task`` copies the context), but a task for the only call
    of a response (most turns) cost 43,000 instructions a turn (+6.6 % of the reasoning state's 648,000);
    stepping the coroutine in the copy, in the caller's task, costs 8,000 (+1.3 %; bench/ab_instructions.py,
    the three in one run).
    """
    return _InContext(coroutine, contextvars.copy_context())


def time_limited(awaitable: Awaitable[_T], timeout: float | None) -> Awaitable[_T]:
    """``awaitable`` to await with a time limit of ``timeout`` seconds from now (``None``: none): what
    ``async with asyncio.timeout(timeout): await awaitable`` does, ``TimeoutError`` included.

    The timer is armed only when the awaitable first waits, for the same deadline. A timer can only fire
    while it waits, so one that finishes without waiting (a tool that computes its answer) finishes as it
    would have under the timer, which cost 33,000 instructions of a ~640,000-instruction reasoning turn
    for nothing (``bench/ab_instructions.py``).
    """
    if timeout is None:
        return awaitable
    return _TimeLimited(awaitable, asyncio.get_running_loop().time() + timeout)


# The steps of an ``await``: what ``__await__`` returns (a coroutine's own, a future's, a generator).
_Steps = Generator[Any, Any, _T]


class _TimeLimited(Awaitable[_T]):
    """Runs an awaitable's first step; if it waits, the rest runs under ``asyncio.timeout_at(deadline)``."""

    __slots__ = ("awaitable", "deadline")

    def __init__(self, awaitable: Awaitable[_T], deadline: float) -> None:
        self.awaitable, self.deadline = awaitable, deadline

    def __await__(self) -> Generator[Any, Any, _T]:
        steps: _Steps[_T] = self.awaitable.__await__()
        try:
            waiting_on = steps.send(None)
        except StopIteration as stop:
            return cast(_T, stop.value)  # done without waiting: no timer could have fired
        # The timer is set before the task first waits: from here on, as if it had been set at the start.
        return (yield from _rest_in_time(steps, waiting_on, self.deadline).__await__())


async def _rest_in_time(steps: _Steps[_T], waiting_on: Any, deadline: float) -> _T:
    async with asyncio.timeout_at(deadline):
        return await _Resumed(steps, waiting_on)


class _Resumed(Awaitable[_T]):
    """The rest of an ``await`` whose first step was taken and is waiting on ``waiting_on``."""

    __slots__ = ("steps", "waiting_on")

    def __init__(self, steps: _Steps[_T], waiting_on: Any) -> None:
        self.steps, self.waiting_on = steps, waiting_on

    def __await__(self) -> Generator[Any, Any, _T]:
        steps, yielded = self.steps, self.waiting_on
        while True:
            try:
                value = yield yielded
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # cancellation (the timer's, or anyone's): the awaited one's to handle
                try:
                    yielded = steps.throw(exc)
                except StopIteration as stop:
                    return cast(_T, stop.value)
                continue
            try:
                yielded = steps.send(value)
            except StopIteration as stop:
                return cast(_T, stop.value)


class _InContext(Awaitable[_T]):
    """Awaits a coroutine, running each of its steps inside ``context`` (what a task does for its own)."""

    __slots__ = ("context", "coroutine")

    def __init__(self, coroutine: Coroutine[Any, Any, _T], context: contextvars.Context) -> None:
        self.coroutine, self.context = coroutine, context

    def __await__(self) -> Generator[Any, Any, _T]:
        run, send, throw = self.context.run, self.coroutine.send, self.coroutine.throw
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                yielded = run(send, value) if error is None else run(throw, error)
            except StopIteration as stop:
                return cast(_T, stop.value)
            value = error = None
            try:
                value = yield yielded  # a future for the task to wait on, as the coroutine asked
            except GeneratorExit:
                self.coroutine.close()  # closed unfinished: close the coroutine too, in no context of its own
                raise
            except BaseException as exc:  # cancellation, or an error the task throws in: the coroutine's
                error = exc
