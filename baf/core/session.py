"""The session: one conversation of an agent with one user, seen from a state body."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import contextvars
import copy
import functools
import logging
import threading
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar

from baf.core.events import Event
from baf.core.writer import SessionWriter
from baf.errors import LogClosedError, SessionVariableError
from baf.log.jsontext import json_copy
from baf.log.projection import ChatEntry, SessionProjection
from baf.log.record import Record, RecordKind

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.state import State
    from baf.core.transition import Transition
    from baf.platforms.base import Platform

__all__ = ["Delivery", "Session"]

logger = logging.getLogger("baf.session")

_MISSING: Any = object()

_T = TypeVar("_T")


def _retrieve_exception(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class Delivery:
    """What ``session.reply`` returns. Awaiting it waits until the reply is durable and delivered.

    Not awaiting it is fine: the reply is still committed and delivered in order, at the latest when
    the body returns.
    """

    __slots__ = ("_future",)

    def __init__(self, future: asyncio.Future[None] | None) -> None:
        self._future = future

    def __await__(self) -> Generator[Any, None, None]:
        if self._future is not None:
            yield from self._future.__await__()


class Session:
    """A conversation: its state, variables and history are a projection of its log records.

    Bodies receive the session. Sync bodies run in a worker thread; every method here is safe to call
    from them.
    """

    def __init__(self, agent: Agent, writer: SessionWriter, platform: Platform | None) -> None:
        self.agent = agent
        self.platform = platform
        #: The event being handled, or ``None`` while a state is entered without one.
        self.event: Event | None = None
        #: The seq of the ``message_received`` record of :attr:`event`.
        self.event_seq: int | None = None
        #: Set by the state machine when a transition fires (see ``baf.core.machine``).
        self.fired_transition: Transition | None = None
        self._writer = writer
        self._runtime = agent._require_runtime()
        self._loop = asyncio.get_running_loop()
        # Sends waiting for the next commit, each with the seq of the newest record when it was queued:
        # the record it delivers (a send is queued right after its record).
        self._outbox: deque[tuple[Callable[[], Awaitable[None]], int]] = deque()
        self._delivery_seq: int | None = None
        self._commit_lock = asyncio.Lock()
        self._in_step = False
        # Who interrupted the running step ("user", "stop"), set by the runtime before it cancels it.
        self._interrupted_by: str | None = None
        # What told it to stop now ("a second SIGTERM"), for the recorded message; None if unknown.
        self._interrupted_how: str | None = None
        #: The model object the ``transitions`` machine moves between states.
        self.machine_model: Any = None

    def __repr__(self) -> str:
        return f"Session({self.id!r}, state={self.projection.current_state!r})"

    # -- identity and state ---------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id."""
        return self._writer.projection.session_id

    @property
    def projection(self) -> SessionProjection:
        """The fold of this session's records (read-only by convention)."""
        return self._writer.projection

    @property
    def current_state(self) -> State:
        """The state the session is in."""
        return self.agent.get_state(self.projection.current_state or "")

    # -- variables ------------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """The value of variable ``key``, or ``default``. Containers come back as copies: ``set`` them
        again after a change, so the change is recorded."""
        value = self.projection.variables.get(key, _MISSING)
        if value is _MISSING:
            return default
        return copy.deepcopy(value) if isinstance(value, dict | list) else value

    def set(self, key: str, value: Any) -> None:
        """Set variable ``key``. The value must be JSON-serialisable; anything else is refused at once."""
        if not isinstance(key, str) or not key:
            raise SessionVariableError(f"variable names must be non-empty strings, got {key!r}")
        try:
            stored = json_copy(value)
        except (TypeError, ValueError) as exc:
            raise SessionVariableError(
                f"session variable {key!r} must be JSON-serialisable; got {type(value).__name__}: {exc}"
            ) from exc
        self._writer.record(RecordKind.VARIABLE_SET, {"name": key, "value": stored})
        self._variables_changed()

    def delete(self, key: str) -> None:
        """Remove variable ``key`` (no error if it is not set)."""
        if key in self.projection.variables:
            self._writer.record(RecordKind.VARIABLE_DELETED, {"name": key})
            self._variables_changed()

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self.projection.variables:
            raise KeyError(key)
        self.delete(key)

    def __contains__(self, key: object) -> bool:
        return key in self.projection.variables

    def _variables_changed(self) -> None:
        # Inside a step the engine checks automatic transitions when the body returns; outside one,
        # queue a check so condition transitions react without any polling.
        if not self._in_step:
            self._call_in_loop(self._runtime.request_check, self)

    # -- conversation ---------------------------------------------------------------------------

    def chat_history(self, n: int | None = None) -> list[ChatEntry]:
        """The conversation so far (user messages and replies), oldest first; the last ``n`` if given."""
        history = self.projection.history
        return list(history if n is None else history[-n:] if n > 0 else [])

    def reply(self, message: str) -> Delivery:
        """Send ``message`` to the user. The reply is recorded and made durable before it is sent."""
        text = str(message)
        return self._rich_reply({"text": text}, "reply", text)

    def reply_markdown(self, markdown: str) -> Delivery:
        """Send Markdown to be rendered (platforms without rich text get it as a plain reply)."""
        return self._rich_reply({"text": str(markdown), "format": "markdown"}, "reply_markdown", str(markdown))

    def reply_options(self, message: str, options: Sequence[str]) -> Delivery:
        """Offer choices (buttons where the platform has them)."""
        choices = [str(option) for option in options]
        data = {"text": str(message), "format": "options", "options": choices}
        return self._rich_reply(data, "reply_options", str(message), choices)

    def reply_file(self, name: str, content: bytes, mime_type: str = "", caption: str = "") -> Delivery:
        """Send a file. The bytes are recorded (base64) so the log holds what the user received."""
        data = {"text": caption or f"[file {name}]", "format": "file", "name": name, "mime_type": mime_type,
                "data": base64.b64encode(content).decode("ascii")}  # fmt: skip
        return self._rich_reply(data, "reply_file", name, content, mime_type, caption)

    def reply_image(self, content: bytes, mime_type: str = "image/png", caption: str = "") -> Delivery:
        """Send an image. The bytes are recorded (base64) so the log holds what the user received."""
        data = {"text": caption or "[image]", "format": "image", "mime_type": mime_type,
                "data": base64.b64encode(content).decode("ascii")}  # fmt: skip
        return self._rich_reply(data, "reply_image", content, mime_type, caption)

    def _rich_reply(self, data: dict[str, Any], method: str, *args: Any) -> Delivery:
        shown = self._redacted(args)  # the user sees what the log keeps: no secret, live or replayed

        async def deliver() -> None:
            if self.platform is not None:
                await getattr(self.platform, method)(self, *shown)

        if not self._in_loop_thread():
            # Recorded and queued for delivery in one step on the event loop: were the record made here
            # first, a platform reading history in between (read_delivered) could show the reply from
            # the log and then again when it is delivered.
            self._run_in_loop(functools.partial(self._record_and_deliver, data, deliver))
            return Delivery(None)
        self._writer.record(RecordKind.REPLY, data)
        return self.after_commit(deliver)

    async def _record_and_deliver(self, data: dict[str, Any], deliver: Callable[[], Awaitable[None]]) -> None:
        self._writer.record(RecordKind.REPLY, data)
        await self._enqueue_and_commit(deliver)


    # -- records and commits (used by the engine and the library) -------------------------------

    def record(self, kind: str, data: dict[str, Any]) -> Record:
        """Append a record of ``kind`` to the session log (durable at the next commit)."""
        return self._writer.record(kind, data)

    def after_commit(self, send: Callable[[], Awaitable[None]]) -> Delivery:
        """Run ``send()`` once everything recorded so far is durable, in order with other sends.

        A failing ``send`` is recorded as an error and does not stop the session.
        """
        if self._in_loop_thread():
            self._outbox.append((send, self.projection.last_seq))
            task = asyncio.ensure_future(self.commit())
            # The engine's own commit at the end of the step re-raises a failure; this one may go unawaited.
            task.add_done_callback(_retrieve_exception)
            return Delivery(task)
        self._run_in_loop(functools.partial(self._enqueue_and_commit, send, self.projection.last_seq))
        return Delivery(None)

    def queue_after_commit(self, send: Callable[[], Awaitable[None]]) -> None:
        """Like :meth:`after_commit`, without starting a commit: ``send`` runs at the next one."""
        self._outbox.append((send, self.projection.last_seq))

    def queue_platform_call(self, method: str, *args: Any) -> None:
        """Queue ``platform.<method>(session, *args)`` for the next commit, as :meth:`queue_after_commit`
        does; nothing if the platform has no such method (streaming is optional for a platform). The
        agent's secrets are redacted from ``args``, as from the records."""
        send = getattr(self.platform, method, None)
        if send is not None:
            self._outbox.append((functools.partial(send, self, *self._redacted(args)), self.projection.last_seq))

    def _redacted(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` with the agent's secrets replaced in strings, containers and dataclasses (a
        ``ReasoningStep``); bytes (a file's content) are passed on as they are."""
        redactor = self.agent.redactor
        if not redactor.active:
            return args
        return tuple(arg if isinstance(arg, bytes | bytearray) else redactor.redact(arg) for arg in args)

    async def _enqueue_and_commit(self, send: Callable[[], Awaitable[None]], seq: int | None = None) -> None:
        self._outbox.append((send, self.projection.last_seq if seq is None else seq))
        await self.commit()

    @property
    def delivery_seq(self) -> int | None:
        """While a platform call queued for after a commit runs (a reply, a streamed reasoning step, a
        task list, an error shown to the user): the seq of the record it delivers; ``None`` otherwise.
        Platforms put it on the wire, so that a client that reconnects can ask for what came after the
        last seq it saw (the log has the rest)."""
        return self._delivery_seq

    async def commit(self) -> None:
        """Make all records durable, then run the sends waiting for that, in order."""
        # acquire/release rather than ``async with``: two coroutine frames less, on every commit.
        lock = self._commit_lock
        await lock.acquire()
        try:
            # Only sends queued before this flush begins have their records in it; a send queued while
            # it runs waits for the next commit (its own, or the one that ends the step).
            ready = len(self._outbox)
            await self._writer.flush()
            for _ in range(ready):
                send, self._delivery_seq = self._outbox.popleft()
                try:
                    await send()
                except Exception as exc:
                    self.report_error("delivery to the platform failed", "platform", exc)
                    await self._writer.flush()
                finally:
                    self._delivery_seq = None
        finally:
            lock.release()

    async def flush(self) -> None:
        """Make all records durable without running pending sends."""
        await self._writer.flush()

    async def read_delivered(self, read: Callable[[int], Awaitable[Any]]) -> Any:
        """Await ``read(upto)`` between commits, when every record up to seq ``upto`` is durable and its
        send has run, and no send runs until ``read`` returns: a platform reading the log here and binding a
        client before it returns shows each record once, from the log (seq <= ``upto``) or live (later)."""
        while True:
            await self.commit()
            async with self._commit_lock:
                if self._outbox:
                    continue  # sends were queued meanwhile: deliver them first
                with self._writer._lock:
                    upto = self.projection.last_seq - len(self._writer._pending)
                await self._writer.flush()  # also waits for appends started outside the lock
                return await read(upto)

    @property
    def has_unflushed_records(self) -> bool:
        """Whether records are waiting for the next flush."""
        return self._writer.has_pending

    def record_error(self, source: str, exc: BaseException, **details: Any) -> Record:
        """Record an ``error`` caused by user code (``source``: body, tool, platform, condition ...)."""
        data: dict[str, Any] = {
            "source": source,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc)),
            **details,
        }
        return self._writer.record(RecordKind.ERROR, data)

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

    # -- threads --------------------------------------------------------------------------------

    async def run_sync(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Run the sync ``fn(*args, **kwargs)`` in one of the agent's worker threads and return its result.

        The engine runs sync bodies this way. The threads (at most ``max_body_threads``) are daemon
        threads: a call the agent gave up on when it stopped does not keep the process alive, as one in
        ``asyncio.to_thread`` would. The caller's context variables are copied into the thread, as
        ``asyncio.to_thread`` does.
        """
        return await self._run_in(self._runtime.executor, fn, *args, **kwargs)

    async def run_tool_sync(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """:meth:`run_sync` for a tool's sync function, in threads of their own (as many): a tool that
        timed out keeps its thread until it returns, and must not take one from sync bodies."""
        return await self._run_in(self._runtime.tool_executor, fn, *args, **kwargs)

    async def _run_in(self, executor: Executor, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    def _in_loop_thread(self) -> bool:
        return threading.get_ident() == self._runtime.loop_thread_id

    def _call_in_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._in_loop_thread():
            fn(*args)
        elif not self._writer.closed:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing left to tell
                self._loop.call_soon_threadsafe(fn, *args)

    def _run_in_loop(self, make: Callable[[], Awaitable[None]]) -> None:
        """From a worker thread: run ``make()`` on the event loop and wait for it.

        A body the runtime gave up on (the agent stopped) may still call the session from its thread:
        that raises ``LogClosedError`` there. The coroutine is only made on the loop, once it is known to
        run, so a loop that closed meanwhile leaves no coroutine un-awaited.
        """
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def start() -> None:
            if self._writer.closed:
                done.set_exception(self._closed_error())
                return
            task = asyncio.ensure_future(make())
            task.add_done_callback(functools.partial(_copy_outcome, done))

        if self._writer.closed:
            raise self._closed_error()
        try:
            self._loop.call_soon_threadsafe(start)
        except RuntimeError:  # the event loop is closed
            raise self._closed_error() from None
        done.result()

    def _closed_error(self) -> LogClosedError:
        return LogClosedError(f"session {self.id!r} is closed: the agent stopped; this was not recorded nor sent")

    def _close(self) -> None:
        """The runtime stopped: refuse new records (from a body thread it abandoned); flushing goes on."""
        self._writer.close()


def _copy_outcome(target: concurrent.futures.Future[None], task: asyncio.Future[None]) -> None:
    """Settle a worker thread's future with a loop task's outcome."""
    if task.cancelled():  # the loop is shutting down
        target.set_exception(LogClosedError("the agent stopped before this was recorded and sent"))
    elif (exc := task.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(None)

