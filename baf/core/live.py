"""The runtime's side of a session: its writer, the sends waiting for a commit, and the step it handles.

Bodies see :class:`~baf.core.session.Session`, which has what a body needs and nothing else. The engine,
the runtime, the reasoning library and platforms work with the :class:`LiveSession` behind it: it
commits (makes records durable, then runs the sends waiting for that, in order), flushes, queues
platform calls, and holds the session's place in the state machine. Reach it from a ``Session`` with
:func:`~baf.core.session.runtime_side`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import threading
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar

from baf.core.delivery import platform_call_of
from baf.core.forwarded import ForwardedMessages
from baf.core.session import Delivery, Session
from baf.core.writer import SessionWriter
from baf.errors import LogClosedError
from baf.log.projection import SessionProjection
from baf.log.record import Record, RecordKind

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.events import Event
    from baf.core.platform import Platform
    from baf.core.runtime import Runtime
    from baf.core.transition import Transition

__all__ = ["LiveSession"]

logger = logging.getLogger("baf.session")

_T = TypeVar("_T")


#: At most this many replies wait for a platform to attach (see ``LiveSession.attach_platform``).
_PARKED_LIMIT = 1000


async def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _retrieve_exception(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class LiveSession:
    """One session as the runtime runs it. Created by the runtime when the session is loaded; dropped
    when it is evicted. Methods that record are safe to call from a sync body's worker thread."""

    def __init__(self, runtime: Runtime, writer: SessionWriter, platform: Platform | None) -> None:
        self.runtime = runtime
        self.agent: Agent = runtime.agent
        self.writer = writer
        #: The platform the session's replies go to (``None``: replies are recorded, not sent).
        self.platform = platform
        #: The session's last seq in the log when this runtime loaded it (0: it started here), and whether
        #: it then had work a restart takes up (a step to resume or close, messages not yet handled).
        self.loaded_upto = writer.projection.last_seq
        projection = writer.projection
        self.loaded_with_work = bool(self.loaded_upto) and (
            projection.open_step is not None or bool(projection.unstarted)
        )
        #: The event being handled, or ``None`` while a state is entered without one.
        self.event: Event | None = None
        #: The seq of the ``message_received`` record of :attr:`event`.
        self.event_seq: int | None = None
        #: Set by the state machine when a transition fires (see ``baf.core.machine``).
        self.fired_transition: Transition | None = None
        #: The model object the ``transitions`` machine moves between states.
        self.machine_model: Any = None
        #: The seq of the session's latest snapshot record (0: none) as far as this runtime knows.
        self.snapshot_seq = 0
        self._loop = asyncio.get_running_loop()
        # Sends waiting for the next commit, each with the seq of the record it delivers: the newest one
        # when it was queued (a send is queued right after its record).
        self._outbox: deque[tuple[Callable[[], Awaitable[None]], int | None]] = deque()
        self._delivery_seq: int | None = None
        self._commit_lock = asyncio.Lock()
        # Replies and error messages for this session's platform made while none was attached (a restart
        # handles recorded messages before the platform that serves the session asks for it): sent, in
        # order, once one is (see attach_platform). Bounded: the log keeps them all anyway.
        self._parked: deque[tuple[str, tuple[Any, ...], int | None]] = deque(maxlen=_PARKED_LIMIT)
        #: A followed session only: the messages this worker forwarded to its owner that a platform waits on.
        self.forwarded: ForwardedMessages | None = None
        #: What bodies, conditions, hooks and platforms are given.
        self.session = Session(self)

    def __repr__(self) -> str:
        return f"LiveSession({self.id!r}, state={self.projection.current_state!r})"

    @property
    def id(self) -> str:
        """The session id."""
        return self.writer.projection.session_id

    @property
    def projection(self) -> SessionProjection:
        """The fold of this session's records, current with what was recorded (durable or not)."""
        return self.writer.projection

    @property
    def in_step(self) -> bool:
        """Whether a step of this session is running (see :class:`~baf.core.stopping.StopControl`)."""
        return self.runtime.control.in_step(self.id)

    # -- records --------------------------------------------------------------------------------

    def record(self, kind: str, data: dict[str, Any]) -> Record:
        """Append a record of ``kind`` to the session log (durable at the next commit)."""
        return self.writer.record(kind, data)

    def record_error(self, source: str, exc: BaseException, **details: Any) -> Record:
        """Record an ``error`` caused by user code (``source``: body, tool, platform, condition ...)."""
        data: dict[str, Any] = {
            "source": source,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc)),
            **details,
        }
        return self.writer.record(RecordKind.ERROR, data)

    def report_error(self, what: str, source: str, exc: BaseException, **details: Any) -> Record:
        """:meth:`record_error`, then log ``what`` at ERROR level with the traceback as recorded: secrets
        redacted, as in the log (``logger.exception`` would print them). A session that can no longer
        record (``LogClosedError``) still logs it, redacted the same way, then raises."""
        try:
            error = self.record_error(source, exc, **details)
        except LogClosedError:
            shown = self.agent.redactor.redact_text("".join(traceback.format_exception(exc)))
            logger.error("session %s: %s (not recorded: the session is closed)\n%s", self.id, what, shown)
            raise
        logger.error("session %s: %s\n%s", self.id, what, error.data["traceback"])
        return error

    def variables_changed(self) -> None:
        """A variable was set or deleted. Inside a step the engine checks automatic transitions when the
        body returns; outside one, queue a check so condition transitions react without any polling."""
        if not self.in_step:
            self.call_in_loop(self.runtime.request_check, self)

    # -- commits and sends ----------------------------------------------------------------------

    def after_commit(self, send: Callable[[], Awaitable[None]]) -> Delivery:
        """Run ``send()`` once everything recorded so far is durable, in order with other sends.

        A failing ``send`` is recorded as an error and does not stop the session.
        """
        if self.in_loop_thread():
            self._outbox.append((send, self.projection.last_seq))
            task = asyncio.ensure_future(self.commit())
            # The engine's own commit at the end of the step re-raises a failure; this one may go unawaited.
            task.add_done_callback(_retrieve_exception)
            return Delivery(task)
        self.run_in_loop(functools.partial(self._enqueue_and_commit, send, self.projection.last_seq))
        return Delivery(None)

    def record_and_send(self, kind: str, data: dict[str, Any], send: Callable[[], Awaitable[None]]) -> Delivery:
        """Record ``data`` and run ``send()`` once it is durable (:meth:`after_commit`).

        From a worker thread both happen in one go on the event loop: were the record made in the thread
        first, a platform reading history in between (:meth:`read_delivered`) could show it from the
        log and then again when it is sent.
        """
        if not self.in_loop_thread():
            self.run_in_loop(functools.partial(self._record_and_send, kind, data, send))
            return Delivery(None)
        self.writer.record(kind, data)
        return self.after_commit(send)

    async def _record_and_send(self, kind: str, data: dict[str, Any], send: Callable[[], Awaitable[None]]) -> None:
        self.writer.record(kind, data)
        await self._enqueue_and_commit(send)

    def queue_after_commit(self, send: Callable[[], Awaitable[None]]) -> None:
        """Like :meth:`after_commit`, without starting a commit: ``send`` runs at the next one."""
        self._outbox.append((send, self.projection.last_seq))

    def queue_platform_call(self, method: str, *args: Any) -> None:
        """Queue ``platform.<method>(session, *args)`` for the next commit, as :meth:`queue_after_commit`
        does; nothing if the platform has no such method (streaming is optional for a platform). The
        agent's secrets are redacted from ``args``, as from the records."""
        if self.platform is None and method == "reply_error" and self.projection.platform is not None:
            shown = self.redacted(args)

            async def deliver_or_park() -> None:
                if self.platform is not None:
                    await self.platform.reply_error(self.session, *shown)
                else:
                    self.park(method, shown)

            self._outbox.append((deliver_or_park, self.projection.last_seq))
            return
        send = getattr(self.platform, method, None)
        if send is not None:
            self._outbox.append((functools.partial(send, self.session, *self.redacted(args)), self.projection.last_seq))

    def record_shown(self, kind: str, data: dict[str, Any], method: str, *args: Any) -> Record:
        """Record ``data`` and queue ``platform.<method>(session, *args)``, the call that shows it, for the
        next commit. ``args`` must show what ``data`` holds: they are sent as they are when the record holds
        ``data`` unchanged (it held no secret), else the call is made of the redacted record, as a follower
        makes it (:func:`~baf.core.delivery.platform_call_of`). Either way nothing is redacted twice: with
        a secret set, redacting a streamed reasoning step again cost 21,000 instructions (bench/ab_instructions.py)."""
        record = self.writer.record(kind, data)
        if record.data is not data:
            call = platform_call_of(record)
            if call is None:
                return record
            method, args = call
        send = getattr(self.platform, method, None)
        if send is not None:
            self._outbox.append((functools.partial(send, self.session, *args), record.seq))
        return record

    def show_received(self, record: Record) -> None:
        """Queue the call that shows the message just recorded as ``record`` to the session's clients
        (:meth:`~baf.core.platform.Platform.reply_user_message`: another tab of the same user sees it live)
        for the next commit, with its seq, in order with what the session shows after it."""
        call = platform_call_of(record)
        if call is not None:
            self.queue_platform_call(call[0], *call[1])

    def commit_soon(self) -> None:
        """Start a :meth:`commit` without waiting for it: the sends queued so far run once it is done."""
        asyncio.ensure_future(self.commit()).add_done_callback(_retrieve_exception)

    def park(self, method: str, args: tuple[Any, ...]) -> None:
        """Keep ``platform.<method>(session, *args)`` (a reply, an error message; redacted) for the
        platform this session has but that is not attached yet: :meth:`attach_platform` sends it."""
        self._parked.append((method, args, self._delivery_seq))

    def attach_platform(self, platform: Platform) -> None:
        """Serve this session on ``platform`` from now on. Replies and error messages made while it had
        no platform (a restart handling recorded messages before the platform asked for the session)
        are sent to it first, in order, before what is queued for delivery now (that came later)."""
        self.platform = platform
        if not self._parked:
            return
        parked = [(getattr(platform, method, None), args, seq) for method, args, seq in self._parked]
        self._parked.clear()
        self._outbox.extendleft(
            (functools.partial(send, self.session, *args), seq)
            for send, args, seq in reversed(parked)
            if send is not None
        )
        self.commit_soon()

    def redacted(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` with the agent's secrets replaced in strings, containers and dataclasses (a
        ``ReasoningStep``); bytes (a file's content) are passed on as they are."""
        redactor = self.agent.redactor
        if not redactor.active:
            return args
        return tuple(arg if isinstance(arg, bytes | bytearray) else redactor.redact(arg) for arg in args)

    async def _enqueue_and_commit(self, send: Callable[[], Awaitable[None]], seq: int | None = None) -> None:
        self._outbox.append((send, self.projection.last_seq if seq is None else seq))
        await self.commit()

    def show_recorded(self, records: Sequence[Record]) -> int:
        """Fold ``records``, which another worker wrote to this session (the next ones in the log), and
        queue the platform calls that show them (``baf.core.delivery``) for the next :meth:`commit`, each
        with its record's seq: a session this runtime follows rather than runs delivers them so, in order,
        exactly once. Records already folded are skipped; returns how many were new."""
        shown = 0
        projection = self.projection
        for record in records:
            if record.seq <= projection.last_seq:
                continue
            projection.apply(record)
            shown += 1
            call = platform_call_of(record)
            if call is None or self.platform is None:
                continue
            send = getattr(self.platform, call[0], None)
            if send is not None:
                self._outbox.append((functools.partial(send, self.session, *call[1]), record.seq))
        if self.forwarded:
            # After the calls that showed the message's step, in the same order.
            for future in self.forwarded.handled(records, projection):
                self._outbox.append((functools.partial(_resolve, future), None))
        return shown

    @property
    def delivery_seq(self) -> int | None:
        """While a send queued for after a commit runs (a reply, a streamed reasoning step, a task list, an
        error shown to the user): the seq of the record it delivers; ``None`` otherwise. Platforms put it on
        the wire, so a client that reconnects can ask for what came after the last seq it saw."""
        return self._delivery_seq

    async def commit(self) -> None:
        """Make all records durable, then run the sends waiting for that, in order."""
        # acquire/release rather than ``async with``: two coroutine frames less on every commit, ~1.4 % of a
        # reasoning turn on the memory log (bench/README.md, "Plain versions").
        lock = self._commit_lock
        await lock.acquire()
        try:
            # Only sends queued before this flush begins have their records in it; a send queued while
            # it runs waits for the next commit (its own, or the one that ends the step).
            ready = len(self._outbox)
            await self.writer.flush()
            for _ in range(ready):
                send, self._delivery_seq = self._outbox.popleft()
                try:
                    await send()
                except Exception as exc:
                    self.report_error("delivery to the platform failed", "platform", exc)
                    await self.writer.flush()
                finally:
                    self._delivery_seq = None
        finally:
            lock.release()

    async def flush(self) -> None:
        """Make all records durable without running pending sends."""
        await self.writer.flush()

    async def read_delivered(self, read: Callable[[int], Awaitable[Any]]) -> Any:
        """Await ``read(upto)`` between commits, when every record up to seq ``upto`` is durable and its
        send has run, and no send runs until ``read`` returns: a platform reading the log here and binding a
        client before it returns shows each record once, from the log (seq <= ``upto``) or live (later)."""
        while True:
            await self.commit()
            async with self._commit_lock:
                if self._outbox:
                    continue  # sends were queued meanwhile: deliver them first
                upto = self.writer.flushed_upto()
                await self.writer.flush()  # also waits for appends started outside the lock
                return await read(upto)

    @property
    def has_unflushed_records(self) -> bool:
        """Whether records are waiting for the next flush."""
        return self.writer.has_pending

    @property
    def settled(self) -> bool:
        """Every record durable, no append under way, no send waiting: dropping it loses nothing."""
        return self.writer.settled and not self._outbox and not self._commit_lock.locked()

    # -- threads --------------------------------------------------------------------------------

    async def run_sync(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Run the sync ``fn(*args, **kwargs)`` in one of the runtime's body threads (see
        :meth:`Session.run_sync`)."""
        return await self._run_in(self.runtime.executor, fn, *args, **kwargs)

    async def run_tool_sync(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Run a tool's sync function in the runtime's tool threads (see :meth:`Session.run_tool_sync`)."""
        return await self._run_in(self.runtime.tool_executor, fn, *args, **kwargs)

    async def _run_in(self, executor: Executor, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on the runtime's event loop thread (not in a body's worker thread)."""
        return threading.get_ident() == self.runtime.loop_thread_id

    def call_in_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` on the event loop: now if already there, else soon (without waiting)."""
        if self.in_loop_thread():
            fn(*args)
        elif not self.writer.closed:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing left to tell
                self._loop.call_soon_threadsafe(fn, *args)

    def run_in_loop(self, make: Callable[[], Awaitable[None]]) -> None:
        """From a worker thread: run ``make()`` on the event loop and wait for it.

        A body the runtime gave up on (the agent stopped) may still call the session from its thread:
        that raises ``LogClosedError`` there. The coroutine is only made on the loop, once it is known to
        run, so a loop that closed meanwhile leaves no coroutine un-awaited.
        """
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def start() -> None:
            if self.writer.closed:
                done.set_exception(self._closed_error())
                return
            task = asyncio.ensure_future(make())
            task.add_done_callback(functools.partial(_copy_outcome, done))

        if self.writer.closed:
            raise self._closed_error()
        try:
            self._loop.call_soon_threadsafe(start)
        except RuntimeError:  # the event loop is closed
            raise self._closed_error() from None
        done.result()

    def _closed_error(self) -> LogClosedError:
        return LogClosedError(f"session {self.id!r} is closed: the agent stopped; this was not recorded nor sent")

    def drop_unflushed(self) -> None:
        """Forget the records not handed to a flush yet (:meth:`SessionWriter.drop_unflushed`) and the
        sends queued for them: a send must not run without its record in the log. A commit already queued
        (a reply's) then runs only the sends whose records it made durable."""
        kept = self.writer.drop_unflushed()
        # A commit under way counted only sends queued before its flush took their records: all kept, first.
        sends = [item for item in self._outbox if item[1] is None or item[1] <= kept]
        self._outbox.clear()
        self._outbox.extend(sends)

    def close(self, because: str = "the agent stopped") -> None:
        """Refuse new records (from a body thread the runtime abandoned, or a caller still holding the
        session after it was dropped from memory); flushing goes on."""
        self.writer.close(because)


def _copy_outcome(target: concurrent.futures.Future[None], task: asyncio.Future[None]) -> None:
    """Settle a worker thread's future with a loop task's outcome."""
    if task.cancelled():  # the loop is shutting down
        target.set_exception(LogClosedError("the agent stopped before this was recorded and sent"))
    elif (exc := task.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(None)
