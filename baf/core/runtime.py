"""The runtime: runs an agent's definition over a session log (live sessions, mailboxes, recovery).

``Runtime(agent, log)`` is the running instance; :class:`~baf.core.agent.Agent` is only the definition.
``async with agent:`` and ``agent.run()`` are sugar for one runtime the agent owns; replay's re-run builds
its own over an in-memory log.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baf.core.engine import Resumption, find_resumption, run_step
from baf.core.events import Event, event_from_data
from baf.core.intent_routing import intent_threshold
from baf.core.live import LiveSession
from baf.core.machine import MachineModel, compile_machine
from baf.core.routing import SessionRouter
from baf.core.session import Session
from baf.core.stopping import Cut, StopControl
from baf.core.threadpool import DaemonThreadPool
from baf.core.writer import SessionWriter
from baf.errors import ConfigurationError, LogClosedError, LogError, SessionIdError
from baf.log import open_log
from baf.log.jsontext import json_copy
from baf.log.record import RecordKind
from baf.log.redaction import log_exception
from baf.log.store import SessionLog
from baf.reasoning.toolset import start_toolsets, stop_toolsets

if TYPE_CHECKING:
    from transitions.extensions.asyncio import AsyncMachine

    from baf.core.agent import Agent
    from baf.core.platform import Platform

__all__ = ["STOP_CANCEL_WAIT", "STOP_GRACE_PERIOD", "Runtime", "is_running"]

#: Seconds :meth:`Runtime.stop` lets running steps finish before it interrupts them.
STOP_GRACE_PERIOD = 10.0

#: Seconds :meth:`Runtime.stop` waits for interrupted steps to record their end. A body that catches
#: ``CancelledError`` and goes on would otherwise hold the stop forever.
STOP_CANCEL_WAIT = 3.0

logger = logging.getLogger("baf.runtime")

#: The runtimes started and not yet stopped, by the agent they run: its definition must not change
#: under them (see :func:`is_running`).
_RUNNING: weakref.WeakKeyDictionary[Agent, weakref.WeakSet[Runtime]] = weakref.WeakKeyDictionary()


def is_running(agent: Agent) -> bool:
    """Whether some runtime is running ``agent`` (started and not stopped)."""
    return bool(_RUNNING.get(agent))


@dataclass(slots=True)
class _Item:
    """One entry of a session's mailbox."""

    kind: str  # "start" | "event" | "check" | "resume"
    event: Event | None = None
    seq: int | None = None
    done: asyncio.Future[None] | None = None
    resume: Resumption | None = None


class Runtime:
    """Runs an agent's sessions over a session log: each handles its mailbox in order, sessions run
    concurrently.

    ``log`` is a URL or a :class:`~baf.log.SessionLog` (default: the agent's ``log``);
    ``max_body_threads`` bounds how many sync bodies (and as many sync tools) run at once in worker
    threads (default: the agent's). With a ``router`` (:mod:`baf.core.routing`) the runtime is one worker
    among many: it loads only the sessions the router lets it claim, forwards messages for the others to
    their owners, and takes forwarded ones with :meth:`receive_forwarded`. The engine-step hooks are the
    agent's (:meth:`Agent.add_hook`). Platforms are started by the agent's own runtime
    (``agent.start()``), which is where they deliver.
    """

    def __init__(
        self,
        agent: Agent,
        log: str | SessionLog | None = None,
        *,
        max_body_threads: int | None = None,
        router: SessionRouter | None = None,
    ) -> None:
        self.agent = agent
        #: Set when this runtime is one worker among many (``baf.serve``): see :mod:`baf.core.routing`.
        self.router = router
        self.log: SessionLog = open_log(log) if log is not None else agent.log
        self.hooks = agent.hooks
        threads = max_body_threads if max_body_threads is not None else agent.max_body_threads
        #: The thread running the event loop; bodies in worker threads reach the loop from elsewhere.
        self.loop_thread_id = threading.get_ident()
        #: Stopping, stopping now, and which sessions are in a step.
        self.control = StopControl()
        self._live: dict[str, LiveSession] = {}
        self._mailboxes: dict[str, deque[_Item]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._check_queued: set[str] = set()
        self._machine: AsyncMachine | None = None
        self._executor = DaemonThreadPool(max_workers=threads, thread_name_prefix="baf-body")
        # Sync tools get threads of their own: a tool that times out keeps its thread until it returns
        # (Python cannot stop it), and enough of those must not leave sync bodies without threads.
        self._tool_executor = DaemonThreadPool(max_workers=threads, thread_name_prefix="baf-tool")
        self._loading: dict[str, asyncio.Future[LiveSession]] = {}
        self._stopped = False
        self._toolsets_started = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the log, compile the state machine and bring back every session in the log.

        First every body that carries a ``check_agent(agent)`` hook (``reasoning_body`` does: tool names)
        is asked; one that raises ``ConfigurationError`` stops the start before the log is opened.
        """
        _ = self.agent.initial_state  # fail early with a clear message
        if self.agent.intents:
            intent_threshold(self.agent)  # a threshold out of range is a wiring error, not a per-message one
        self.loop_thread_id = threading.get_ident()
        self._machine = compile_machine(self.agent.states, self.agent.initial_state)
        # Toolsets (MCP servers) first: the checks below see their tools, and a resumed session may call them.
        await start_toolsets(self.agent.toolsets)
        self._toolsets_started = True
        try:
            for state in self.agent.states:
                for body in (state.body, state.fallback_body):
                    check = getattr(body, "check_agent", None)
                    if check is not None:  # a body's own start-up check (e.g. reasoning_body's tool names)
                        check(self.agent)
        except BaseException:
            self._toolsets_started = False
            await stop_toolsets(self.agent.toolsets)
            raise
        _RUNNING.setdefault(self.agent, weakref.WeakSet()).add(self)
        try:
            await self.log.start()
            if self.router is None:
                for session_id in await self.log.sessions():
                    await self._load(session_id)
            else:  # a worker: only the unfinished sessions no live worker holds (the rest wait for their owners)
                for session_id in await self.log.unfinished_sessions():
                    if await self.router.claim(session_id):
                        await self._get_live(session_id, None)
        except BaseException:
            await self.stop()
            raise
        # What exists now (modules, the machine, the sessions just rebuilt) lives as long as the agent:
        # move it out of the collector's way, so full collections stay cheap as sessions accumulate.
        gc.freeze()

    @property
    def sessions(self) -> Mapping[str, Session]:
        """The sessions in memory now, by id (a live read-only view)."""
        return _SessionsView(self._live)

    @property
    def executor(self) -> DaemonThreadPool:
        """The threads sync bodies run in (see :meth:`Session.run_sync`)."""
        return self._executor

    @property
    def tool_executor(self) -> DaemonThreadPool:
        """The threads sync tools run in (see :meth:`Session.run_tool_sync`)."""
        return self._tool_executor

    @property
    def busy(self) -> bool:
        """Whether a step is running or queued (what :meth:`stop` would wait for)."""
        return any(not worker.done() for worker in self._workers.values())

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` has begun, or :meth:`interrupt` was told a stop is about to begin."""
        return self.control.halting

    def interrupt(self, how: str | None = None, stop_pending: bool = False) -> None:
        """Cancel the running steps, each recorded as interrupted by the user. ``how`` says what asked,
        in the recorded message ("a second SIGTERM").

        While :meth:`stop` runs, or when ``stop_pending`` says one is about to begin (the first Ctrl-C
        asked for it), this also stops now: that stop does not wait out its grace period and starts no
        further step. Otherwise only the steps running now end: the runtime goes on, later (and
        queued) events still run, and a later stop is graceful as usual.

        A sync body's thread cannot be killed: it is abandoned. When stopping, what it records or replies
        afterwards fails with ``LogClosedError``; on a runtime that goes on, what it records still lands
        in its session, after the interrupted step. The same goes for a sync tool's thread (see
        :meth:`Session.run_tool_sync`)."""
        if self.control.stopping or stop_pending:
            self.control.set_stop_now(how)
        self._cancel_workers(Cut("user", how))

    def _cancel_workers(self, cut: Cut) -> None:
        going_on = not self.control.halting  # the workers then go on with their queued events (see _drain)
        for session_id, worker in self._workers.items():
            # Only a step still running is cancelled. One that is finishing (recording and committing its
            # end, delivering its replies, maybe its interruption) must not be cut: its reply would be
            # lost and its log left with an open step. Between steps, _drain checks stop_now instead.
            if not worker.done() and self.control.cut(session_id, cut):
                if going_on:
                    self.control.goes_on(worker)
                worker.cancel()

    async def stop(self, timeout: float = STOP_GRACE_PERIOD) -> None:  # noqa: ASYNC109 - a grace period
        """Let running steps finish (up to ``timeout`` seconds, or until :meth:`interrupt`), then
        interrupt what is left, flush and close the log.

        Interrupted steps get :data:`STOP_CANCEL_WAIT` seconds to record their end; one still running
        after that (its body caught the cancellation) is recorded as interrupted here, with a warning,
        and the stop goes on without it.
        """
        control = self.control
        if self._stopped:
            return
        self._stopped = True
        control.stopping = True
        if control.stop_now:
            self._cancel_workers(Cut("user", control.stop_now_how))  # interrupted just before the stop began
        else:
            await self._wait_for_workers(timeout, until_stop_now=True)
            if not control.stop_now:  # the grace period is over
                control.set_stop_now(None)
                self._cancel_workers(Cut("stop"))
        await self._wait_for_workers(STOP_CANCEL_WAIT)
        for session_id, worker in self._workers.items():
            live = self._live.get(session_id)
            if not worker.done() and live is not None:
                logger.warning("session %s: its step did not end when interrupted; stopping without it", session_id)
                if control.in_step(session_id):
                    # Closed here, as the engine would have; the session is closed next, so what the body
                    # records later fails and this stays the step's end.
                    cut = control.finish_step(session_id) or Cut("stop")
                    _close_interrupted_step(
                        live, live.event_seq, cut.by,
                        "the step did not end when it was interrupted (its body caught CancelledError)",
                    )  # fmt: skip
        # Whatever is still queued will not run in this process: release its waiters. The events are
        # recorded, so the next start handles them.
        for mailbox in self._mailboxes.values():
            for item in mailbox:
                if item.done is not None and not item.done.done():
                    item.done.cancel()
            mailbox.clear()
        for live in self._live.values():
            # An abandoned body thread may still call the session: nothing more may reach the log.
            live.close()
            try:
                await live.flush()
            except LogError:
                log_exception(logger, self.agent.redactor, "session %s: final flush failed", live.id)
        try:
            await self.log.close()
        finally:
            if self._toolsets_started:  # after the last step: nothing can call their tools any more
                self._toolsets_started = False
                await stop_toolsets(self.agent.toolsets)
        # Threads of abandoned bodies are daemons: they do not keep the process alive.
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._tool_executor.shutdown(wait=False, cancel_futures=True)
        _RUNNING.get(self.agent, weakref.WeakSet()).discard(self)

    async def _wait_for_workers(self, timeout: float, until_stop_now: bool = False) -> None:  # noqa: ASYNC109
        """Wait until no worker runs, for at most ``timeout`` seconds; with ``until_stop_now``, only
        until :meth:`interrupt` says to stop now. Workers started meanwhile are waited for too."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        stop_now = asyncio.ensure_future(self.control.wait_stop_now())
        try:
            while workers := [w for w in self._workers.values() if not w.done()]:
                remaining = deadline - loop.time()
                if remaining <= 0 or (until_stop_now and self.control.stop_now):
                    return
                waiting = [*workers, stop_now] if until_stop_now else workers
                await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_now.cancel()

    # -- sessions -------------------------------------------------------------------------------

    async def get_or_create(self, session_id: str, platform: Platform | None = None) -> Session:
        """The session ``session_id``; loaded from the log, or started fresh (its initial body queued)
        if the log has none."""
        return (await self._get_live(session_id, platform)).session

    def _check_session_id(self, session_id: str) -> None:
        """Refuse an id that is not a non-empty string, or that holds one of the agent's secrets: ids are
        keys, stored and shown as they are (records, leases, the inbox, the CLI, exports, the store's own
        debug log), where redaction cannot reach. The message does not repeat the id."""
        if not isinstance(session_id, str) or not session_id:
            raise SessionIdError(f"session ids must be non-empty strings, got {session_id!r}")
        if self.agent.redactor.redact_text(session_id) != session_id:
            raise SessionIdError(
                "this session id contains one of the agent's secrets; session ids are stored and shown "
                "unredacted, so it was refused and nothing was recorded"
            )

    async def _get_live(self, session_id: str, platform: Platform | None) -> LiveSession:
        self._check_session_id(session_id)
        live = self._live.get(session_id)
        if live is None:
            loading = self._loading.get(session_id)
            if loading is None:
                loading = asyncio.ensure_future(self._load(session_id, platform))
                self._loading[session_id] = loading
                loading.add_done_callback(lambda _: self._loading.pop(session_id, None))
            live = await asyncio.shield(loading)
        if platform is not None and live.platform is None:
            live.attach_platform(platform)
        return live

    async def _load(self, session_id: str, platform: Platform | None = None) -> LiveSession:
        # Folded as it is read: a long session is never held in memory as records. Only a step left
        # open by a crash needs them, to resume its body.
        projection = await self.log.project(session_id)
        records = await self.log.read(session_id) if projection.open_step is not None else []
        if platform is None and projection.platform is not None:
            platform = self.agent.find_platform(projection.platform)
        live = LiveSession(self, SessionWriter(self.log, projection, self.agent.redactor), platform)
        if projection.last_seq == 0:
            initial = self.agent.initial_state.name
            live.record(
                RecordKind.SESSION_STARTED,
                {"agent": self.agent.name, "platform": getattr(platform, "name", None), "initial_state": initial},
            )
        state_name = projection.current_state or self.agent.initial_state.name
        if state_name not in self.agent.state_names:
            raise ConfigurationError(
                f"session {session_id!r} is in state {state_name!r}, which agent {self.agent.name!r} no longer has"
            )
        live.machine_model = MachineModel()
        assert self._machine is not None, "the runtime is not started"
        self._machine.add_model(live.machine_model, initial=state_name)
        self._live[session_id] = live
        resumption = find_resumption(live.session, records) if projection.open_step is not None else None
        if resumption is not None:
            # A crash interrupted a resumable body (e.g. a reasoning loop): it goes on from its records.
            self._schedule(live, _Item("resume", resumption.event, resumption.event_seq, resume=resumption))
        elif projection.open_step is not None:
            # A crash interrupted this step. Its effects up to the crash are in the log; it is not
            # re-run, because the body may already have acted outside baf.
            _close_interrupted_step(
                live, projection.open_step or None, "crash",  # 0: a step without an event (see projection)
                "the process stopped while this step was running; the step was not resumed",
            )  # fmt: skip
        if not projection.started:
            self._schedule(live, _Item("start"))
        for seq, data in sorted(projection.unstarted.items()):
            self._schedule(live, _Item("event", event_from_data(session_id, data), seq))
        await live.flush()
        return live

    # -- mailboxes ------------------------------------------------------------------------------

    async def receive(self, event: Event, platform: Platform | None = None) -> asyncio.Future[None]:
        """Record ``event`` durably, queue it, and return a future that resolves once it is handled."""
        data = {"event": event.to_data(), "text": event.text}
        if data["text"] is not None and not isinstance(data["text"], str):
            # The fold reads it as the conversation's text: refused here, not found corrupt on a restart.
            raise ValueError(f"{type(event).__name__}.text must be a string or None, got {type(data['text']).__name__}")
        try:
            json_copy(data)  # json.dumps(allow_nan=False)'s verdict, at orjson's speed
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{type(event).__name__} cannot be recorded: its fields must be JSON ({exc})") from exc
        if self.router is not None and event.session_id not in self._live:
            self._check_session_id(event.session_id)  # before a lease or an inbox row stores it
            if not await self.router.claim(event.session_id):  # another worker owns it: its inbox takes it
                await self.router.forward(event.session_id, data, platform)
                forwarded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                forwarded.set_result(None)
                return forwarded
        live = await self._get_live(event.session_id, platform)
        if live.projection.held:
            # A new message to a fork is the user continuing it: what it held comes first, in order.
            self._release_held(live)
        record = live.record(RecordKind.MESSAGE_RECEIVED, data)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Queue before awaiting the flush, so the mailbox order is the record order.
        self._schedule(live, _Item("event", event, record.seq, done))
        try:
            await live.flush()
        except LogError as exc:
            done.cancel()  # the caller gets the error here, not through the future
            self._evict(live, exc)
            raise
        return done

    async def receive_forwarded(
        self, session_id: str, inbox_id: int, data: dict[str, Any] | None, error: str | None = None
    ) -> None:
        """Take a message another worker forwarded (inbox row ``inbox_id``) into the session this runtime
        owns: its ``message_received`` record and the row's deletion commit together, so it is handled
        exactly once. A row that is not a readable message (``data`` None, ``error`` says why) becomes an
        ``error`` record instead, consumed the same way: the session goes on."""
        live = await self._get_live(session_id, None)
        if data is None or not isinstance(data.get("event"), dict):
            live.record(RecordKind.ERROR, {"message": f"a malformed message was dropped: {error or 'no event'}",
                                           "error": "MalformedInboxMessage"})  # fmt: skip
            live.writer.consume_inbox(inbox_id)
            await live.flush()
            return
        event = event_from_data(session_id, data["event"])
        if live.projection.held:
            self._release_held(live)
        record = live.record(RecordKind.MESSAGE_RECEIVED, data)
        live.writer.consume_inbox(inbox_id)
        self._schedule(live, _Item("event", event, record.seq, None))
        try:
            await live.flush()
        except LogError as exc:
            self._evict(live, exc)
            raise

    def drop(self, session_id: str) -> None:
        """Forget ``session_id`` without writing to it again (a worker lost its lease): its running step is
        cancelled and what it had queued is failed. The new owner resumes it from the log."""
        live = self._live.get(session_id)
        if live is None:
            return
        live.close()
        worker = self._workers.get(session_id)
        if worker is not None and not worker.done():
            worker.cancel()
        self._evict(live, LogError(f"session {session_id!r}: this worker lost its lease"))

    async def continue_session(self, session_id: str) -> asyncio.Future[None]:
        """Handle the messages a fork holds (recorded before its cut, not handled there): record that the
        user continued it (``fork_continued``), queue them, and return a future that resolves once they
        are handled (at once if there were none)."""
        live = await self._get_live(session_id, None)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not live.projection.held:
            done.set_result(None)
            return done
        self._release_held(live, done)
        try:
            await live.flush()
        except LogError as exc:
            done.cancel()
            self._evict(live, exc)
            raise
        return done

    def _release_held(self, live: LiveSession, done: asyncio.Future[None] | None = None) -> None:
        """Record ``fork_continued`` and queue the held messages (the last one settles ``done``)."""
        held = sorted(live.projection.held.items())
        live.record(RecordKind.FORK_CONTINUED, {"seqs": [seq for seq, _ in held]})  # the fold releases them
        for index, (seq, data) in enumerate(held):
            last = index == len(held) - 1
            self._schedule(live, _Item("event", event_from_data(live.id, data), seq, done if last else None))

    async def wait_idle(self, session_id: str | None = None) -> None:
        """Return once the session (or every session) has nothing queued or running."""
        while True:
            ids = [session_id] if session_id is not None else list(self._workers)
            workers = [w for sid in ids if (w := self._workers.get(sid)) is not None and not w.done()]
            if not workers:
                return
            await asyncio.wait(workers)

    def request_check(self, live: LiveSession) -> None:
        """Queue a check of automatic transitions (a variable changed outside a step)."""
        if live.id not in self._check_queued:
            self._check_queued.add(live.id)
            self._schedule(live, _Item("check"))

    def _schedule(self, live: LiveSession, item: _Item) -> None:
        self._mailboxes.setdefault(live.id, deque()).append(item)
        worker = self._workers.get(live.id)
        if worker is None or worker.done():
            self._workers[live.id] = asyncio.ensure_future(self._drain(live))

    async def _drain(self, live: LiveSession) -> None:
        mailbox = self._mailboxes[live.id]
        # Told to stop now: start no further step (stop() releases what stays queued).
        while mailbox and not self.control.stop_now:
            # The item stays queued while it runs: ``_schedule`` must not start a second worker.
            item = mailbox[0]
            if item.kind == "check":
                self._check_queued.discard(live.id)
            try:
                await run_step(
                    live, item.event, item.seq, self.hooks,
                    enter_current=item.kind == "start", resume=item.resume,
                )  # fmt: skip
            except LogError as exc:
                _discard(mailbox, item)
                _settle(item, exc)
                if not (self.control.stopping and isinstance(exc, LogClosedError)):
                    self._evict(live, exc)  # closed by stop(): a body it gave up on ended late, nothing to reload
                return
            except BaseException as exc:
                # The engine contains user errors itself; anything reaching here is a framework bug or
                # a cancellation. Fail this item, keep serving the rest of the mailbox.
                _discard(mailbox, item)
                _settle(item, exc)
                if isinstance(exc, asyncio.CancelledError) and self.control.absorb(asyncio.current_task()):
                    continue  # interrupt() on a runtime that goes on: the queued events still run
                if not isinstance(exc, Exception):
                    raise
                log_exception(logger, self.agent.redactor, "session %s: step failed", live.id)
                continue
            _discard(mailbox, item)
            _settle(item, None)

    def _evict(self, live: LiveSession, exc: LogError) -> None:
        """The log refused a write: this in-memory session can no longer be trusted. Drop it, failing
        what it still had queued; the next use reloads it from what the log really holds."""
        logger.error("session %s: %s; reloading it from the log on next use", live.id, exc)
        if self._live.get(live.id) is not live:
            return  # already replaced by a reloaded session: leave that one alone
        mailbox = self._mailboxes.pop(live.id, deque())
        for item in mailbox:
            _settle(item, exc)
        mailbox.clear()  # the worker holding this deque stops after its current item
        del self._live[live.id]
        self._workers.pop(live.id, None)
        if self._machine is not None and live.machine_model is not None:
            self._machine.remove_model(live.machine_model)


class _SessionsView(Mapping[str, Session]):
    """The bodies' side of the live sessions, by id, read-only."""

    __slots__ = ("_live",)

    def __init__(self, live: Mapping[str, LiveSession]) -> None:
        self._live = live

    def __getitem__(self, session_id: str) -> Session:
        return self._live[session_id].session

    def __iter__(self) -> Iterator[str]:
        return iter(self._live)

    def __len__(self) -> int:
        return len(self._live)


def _close_interrupted_step(live: LiveSession, event_seq: int | None, interrupted_by: str, reason: str) -> None:
    """Record the end of a step the engine could not close itself: an ``error`` saying why, then its
    ``step_finished``, marked interrupted (``interrupted_by``: see ``baf.core.engine``)."""
    live.record_error("runtime", RuntimeError(reason), event_seq=event_seq, interrupted_by=interrupted_by)
    live.record(
        RecordKind.STEP_FINISHED, {"event_seq": event_seq, "interrupted": True, "interrupted_by": interrupted_by}
    )


def _discard(mailbox: deque[_Item], item: _Item) -> None:
    """Remove the finished head item, unless an eviction already emptied the mailbox."""
    if mailbox and mailbox[0] is item:
        mailbox.popleft()


def _settle(item: _Item, exc: BaseException | None) -> None:
    if item.done is None or item.done.done():
        return
    if exc is None:
        item.done.set_result(None)
    elif isinstance(exc, asyncio.CancelledError):
        item.done.cancel()
    else:
        item.done.set_exception(exc)
