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
import uuid
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from baf.core.cache import SessionCache
from baf.core.engine import Resumption, find_resumption, run_step
from baf.core.events import Event, ReceiveTextEvent, event_from_data
from baf.core.forwarded import FORWARDED_KEY, ForwardedMessages
from baf.core.intent_routing import intent_threshold
from baf.core.live import LiveSession
from baf.core.machine import MachineModel, compile_machine
from baf.core.recovery import Recovery
from baf.core.routing import SessionRouter
from baf.core.session import Session
from baf.core.stopping import Cut, StopControl
from baf.core.threadpool import DaemonThreadPool
from baf.core.writer import SessionWriter
from baf.errors import (
    ConfigurationError,
    CorruptSnapshotError,
    LeaseLostError,
    LogClosedError,
    LogError,
    SessionIdError,
    SessionNotFoundError,
)
from baf.log import open_log
from baf.log.jsontext import encode_json, json_copy
from baf.log.projection import SessionProjection, project
from baf.log.record import RecordKind
from baf.log.redaction import log_exception
from baf.log.store import SessionLog, load_projection
from baf.reasoning.toolset import start_toolsets, stop_toolsets

if TYPE_CHECKING:
    from transitions.extensions.asyncio import AsyncMachine

    from baf.core.agent import Agent
    from baf.core.platform import Platform

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "INTERRUPTED_BY_RESTART_REPLY",
    "STOP_CANCEL_WAIT",
    "STOP_GRACE_PERIOD",
    "Runtime",
    "is_running",
]

#: What the user is told when a restart finds their request's step cut off by a crash and its body
#: cannot resume (it has no ``resume`` hook, see ``baf.core.engine``).
INTERRUPTED_BY_RESTART_REPLY = (
    "Your last request was interrupted (the agent restarted, or could not reach its log) and could not be "
    "finished. Please send it again."
)

#: Seconds :meth:`Runtime.stop` lets running steps finish before it interrupts them.
STOP_GRACE_PERIOD = 10.0

#: Seconds :meth:`Runtime.stop` waits for interrupted steps to record their end. A body that catches
#: ``CancelledError`` and goes on would otherwise hold the stop forever.
STOP_CANCEL_WAIT = 3.0

#: Records written to a session between two of its snapshots, by default.
DEFAULT_SNAPSHOT_EVERY = 1000

logger = logging.getLogger("baf.runtime")

#: The runtimes started and not yet stopped, by the agent they run: its definition must not change
#: under them (see :func:`is_running`).
_RUNNING: weakref.WeakKeyDictionary[Agent, weakref.WeakSet[Runtime]] = weakref.WeakKeyDictionary()


def is_running(agent: Agent) -> bool:
    """Whether some runtime is running ``agent`` (started and not stopped)."""
    return bool(_RUNNING.get(agent))


class _Default:
    """The type of :data:`DEFAULT`."""


#: "The agent's setting", where ``None`` means something else (``snapshot_every=None``: never).
DEFAULT = _Default()


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

    ``log`` is a URL or a :class:`~baf.log.SessionLog` (default: the agent's ``log``). The other
    settings default to the agent's:

    - ``max_body_threads``: how many sync bodies (and, apart, sync tools) run at once in worker threads;
    - ``max_sessions`` and ``idle_seconds``: sessions are a cache over the log (see
      :mod:`baf.core.cache`): loaded on first use, dropped when idle, least recently used first once
      more than ``max_sessions`` are held, and after ``idle_seconds`` unused;
    - ``snapshot_every``: after a step, once that many records were written since the session's latest
      snapshot, a ``snapshot`` record is written, so the session loads from it and the records after
      (``None``: never).

    Start-up loads only the sessions with unfinished work (``log.unfinished_sessions()``). With a
    ``router`` (:mod:`baf.core.routing`) the runtime is one worker among many: it loads only the sessions
    the router lets it claim, forwards messages for the others to their owners, and takes forwarded ones
    with :meth:`receive_forwarded`. The engine-step hooks are the agent's (:meth:`Agent.add_hook`).
    Platforms are started by the agent's own runtime (``agent.start()``), which is where they deliver.
    """

    def __init__(
        self,
        agent: Agent,
        log: str | SessionLog | None = None,
        *,
        max_body_threads: int | None = None,
        max_sessions: int | None = None,
        idle_seconds: float | None = None,
        snapshot_every: int | _Default | None = DEFAULT,
        router: SessionRouter | None = None,
    ) -> None:
        self.agent = agent
        #: Set when this runtime is one worker among many (``baf.serve``): see :mod:`baf.core.routing`.
        self.router = router
        self.log: SessionLog = open_log(log) if log is not None else agent.log
        self.hooks = agent.hooks
        threads = max_body_threads if max_body_threads is not None else agent.max_body_threads
        every = agent.snapshot_every if isinstance(snapshot_every, _Default) else snapshot_every
        if every is not None and every < 1:
            raise ValueError(f"snapshot_every must be >= 1 or None, got {every!r}")
        #: Records written since a session's latest snapshot before the next is taken (None: never).
        self.snapshot_every = every
        #: The thread running the event loop; bodies in worker threads reach the loop from elsewhere.
        self.loop_thread_id = threading.get_ident()
        #: Stopping, stopping now, and which sessions are in a step.
        self.control = StopControl()
        self._live = SessionCache(
            max_sessions if max_sessions is not None else agent.max_sessions,
            idle_seconds if idle_seconds is not None else agent.session_idle_seconds,
            self._at_rest,
            self._unload,
        )
        self._mailboxes: dict[str, deque[_Item]] = {}
        # Leases being given up (a worker's dropped sessions), by session: claimed again only after.
        self._releasing: dict[str, asyncio.Future[None]] = {}
        # Sessions being followed because an append found their lease lost (see _evict).
        self._following_lost: set[asyncio.Future[None]] = set()
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._check_queued: set[str] = set()
        self._machine: AsyncMachine | None = None
        self._executor = DaemonThreadPool(max_workers=threads, thread_name_prefix="baf-body")
        # Sync tools get threads of their own: a tool that times out keeps its thread until it returns
        # (Python cannot stop it), and enough of those must not leave sync bodies without threads.
        self._tool_executor = DaemonThreadPool(max_workers=threads, thread_name_prefix="baf-tool")
        self._loading: dict[str, asyncio.Future[LiveSession]] = {}
        # Sessions another worker runs that this one shows on its platforms (see follow()).
        self._followed: dict[str, LiveSession] = {}
        self._wanted: dict[str, int] = {}  # callers waiting for a session's load, by session id
        self._letting_go: set[str] = set()  # sessions to drop from memory once at rest (see let_go())
        self._stopped = False
        self._toolsets_started = False
        # Sessions dropped on a failed write come back once the log answers (see baf.core.recovery).
        self._recovery = Recovery(self._bring_back)
        # Steps cancelled because their session was dropped while they ran: its next load waits for them.
        self._dropped_steps: dict[str, asyncio.Task[None]] = {}

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
            # Only the sessions with unfinished work; a worker among many, only those no live worker holds
            # (the rest wait for their owners).
            for session_id in await self.log.unfinished_sessions():
                if self.router is None or await self.router.claim(session_id):
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
        """Let running steps finish (up to ``timeout`` seconds, or until :meth:`interrupt`), then cut what
        is left, flush and close the log. A step cut when the grace period ends is left open in the log, as a
        crash leaves it, for the next start to resume or close (see ``baf.core.engine``); one cut by
        :meth:`interrupt` is recorded as interrupted by the user.

        Cut steps get :data:`STOP_CANCEL_WAIT` seconds to end; one still running after that (its body
        caught the cancellation) is recorded as interrupted here, with a warning, and the stop goes on
        without it.
        """
        control = self.control
        if self._stopped:
            return
        self._stopped = True
        control.stopping = True
        await self._recovery.close()  # a session brought back now would start a step the stop then cuts
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
        self._live.close()
        following = list(self._following_lost)  # a follow started now would outlive the runtime
        for task in following:
            task.cancel()
        await asyncio.gather(*following, return_exceptions=True)
        self._followed.clear()  # views only: nothing of theirs is waiting to be written
        for live in self._live.values():
            # An abandoned body thread may still call the session: nothing more may reach the log.
            live.close()
            try:
                await live.flush()
            except LogError:
                log_exception(logger, self.agent.redactor, "session %s: final flush failed", live.id)
        if self._releasing:
            # Leases of sessions dropped just before the stop are being given up through the log's
            # connections: closed under them, the releases would fail (and say so once per session), and
            # the leases would stay held until they expire, delaying the sessions' takeover by other workers.
            await asyncio.wait(list(self._releasing.values()))  # a failure is logged by _released
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
        if the log has none.

        Under a router, a session another worker runs is not loaded here: what comes back is the session
        as this worker follows it (:meth:`follow`), read-only, kept current from the log and shown on
        ``platform``."""
        if self.router is not None and session_id not in self._live:
            self.check_session_id(session_id)
            if not await self.claim(session_id):
                return (await self.follow(session_id, platform)).session
        return (await self._get_live(session_id, platform)).session

    # -- sessions other workers run -------------------------------------------------------------

    @property
    def followed(self) -> Mapping[str, LiveSession]:
        """The sessions this runtime follows (another worker runs them), by id: a read-only view."""
        return MappingProxyType(self._followed)

    async def follow(self, session_id: str, platform: Platform | None = None) -> LiveSession:
        """Show ``session_id``, which another worker runs, on ``platform``: a read-only session folded from
        the log, which the router keeps current (``SessionRouter.follow``: it reads the records committed
        after the last one shown, :meth:`LiveSession.show_recorded`, and delivers them). Writing to it
        raises ``LogClosedError``; a platform reads and binds it as it would a session it runs
        (``read_delivered``). Only under a router."""
        if self.router is None:
            raise ConfigurationError("only a worker among many (a runtime with a router) follows sessions")
        live = self._followed.get(session_id)
        if live is None:
            projection, _ = await self._fold(session_id)
            live = self._followed.get(session_id)  # followed by another caller meanwhile
            if live is None:
                live = self._view(projection, platform)
        if platform is not None and live.platform is None:
            live.platform = platform
        self.router.follow(session_id)
        return live

    def unfollow(self, session_id: str) -> LiveSession | None:
        """Stop following ``session_id`` (no client of it is left here, or this runtime now runs it)."""
        live = self._followed.pop(session_id, None)
        if live is not None and live.forwarded is not None:
            live.forwarded.release()
        return live

    def _view(self, projection: SessionProjection, platform: Platform | None) -> LiveSession:
        live = LiveSession(self, SessionWriter(self.log, projection, self.agent.redactor), platform)
        live.close("another worker runs it; this worker only shows it (following the log)")
        self._followed[live.id] = live
        return live

    def check_session_id(self, session_id: str) -> None:
        """Refuse an id that is not a non-empty string, or that holds one of the agent's secrets: ids are
        keys, stored and shown as they are (records, leases, the inbox, the CLI, exports, the store's own
        debug log), where redaction cannot reach. The message does not repeat the id."""
        if not isinstance(session_id, str) or not session_id:
            raise SessionIdError(f"session ids must be non-empty strings, got {session_id!r}")
        if "\x00" in session_id or not (session_id.isascii() or _encodable(session_id)):
            # No store keeps it (PostgreSQL text holds no NUL, no store holds a lone surrogate): refused here,
            # not by the database in the middle of a lease or a commit shared with other sessions.
            raise SessionIdError("session ids must be valid Unicode without NUL characters; nothing was recorded")
        if self.agent.redactor.redact_text(session_id) != session_id:
            raise SessionIdError(
                "this session id contains one of the agent's secrets; session ids are stored and shown "
                "unredacted, so it was refused and nothing was recorded"
            )

    async def _get_live(self, session_id: str, platform: Platform | None) -> LiveSession:
        self.check_session_id(session_id)
        live = self._live.get(session_id)
        if live is not None:
            self._live.touch(live)
        else:
            # Wanted: the cache must not drop it between its load and this caller's use of it.
            self._wanted[session_id] = self._wanted.get(session_id, 0) + 1
            try:
                loading = self._loading.get(session_id)
                if loading is None:
                    loading = asyncio.ensure_future(self._load(session_id, platform))
                    self._loading[session_id] = loading
                    loading.add_done_callback(partial(self._loaded, session_id))
                live = await asyncio.shield(loading)
            finally:
                if self._wanted[session_id] == 1:
                    del self._wanted[session_id]
                else:
                    self._wanted[session_id] -= 1
        if platform is not None and live.platform is None:
            live.attach_platform(platform)
        return live

    def _loaded(self, session_id: str, loading: asyncio.Future[LiveSession]) -> None:
        self._loading.pop(session_id, None)
        if not loading.cancelled():
            loading.exception()  # retrieved: every caller may have been cancelled meanwhile (a stop)

    async def _load(self, session_id: str, platform: Platform | None = None) -> LiveSession:
        dropped = self._dropped_steps.pop(session_id, None)
        if dropped is not None and not dropped.done():
            # The step of the copy dropped from memory ends first: it must not act beside the one resumed now.
            await asyncio.wait([dropped], timeout=STOP_CANCEL_WAIT)
            if not dropped.done():
                logger.warning("session %s: a step of it dropped from memory did not end when cancelled; "
                               "loading it again beside that step", session_id)  # fmt: skip
        projection, snapshot_seq = await self._fold(session_id)
        # Only a step left open by a crash needs the records, to resume its body.
        records = await self.log.read(session_id) if projection.open_step is not None else []
        if platform is None and projection.platform is not None:
            platform = self.agent.find_platform(projection.platform)
        live = LiveSession(self, SessionWriter(self.log, projection, self.agent.redactor), platform)
        live.writer.observer = self.hooks.record_observer(live.session)
        live.snapshot_seq = snapshot_seq
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
        self._live.add(live)
        resumption = find_resumption(live.session, records) if projection.open_step is not None else None
        if resumption is not None:
            # A crash interrupted a resumable body (e.g. a reasoning loop): it goes on from its records.
            self._schedule(live, _Item("resume", resumption.event, resumption.event_seq, resume=resumption))
        elif projection.open_step is not None:
            # A crash interrupted this step. Its effects up to the crash are in the log; it is not
            # re-run, because the body may already have acted outside baf.
            # Whoever sent the event is told, so the request does not end in silence.
            _close_interrupted_step(
                live, projection.open_step or None, "crash",  # 0: a step without an event (see projection)
                "the process stopped while this step was running; the step was not resumed",
                tell_user=bool(projection.open_step),
            )  # fmt: skip
        if not projection.started and not projection.start_held:
            self._schedule(live, _Item("start"))
        for seq, data in sorted(projection.unstarted.items()):
            self._schedule(live, _Item("event", event_from_data(session_id, data), seq))
        try:
            await live.flush()
        except LogError as exc:
            self._evict(live, exc, said=True, reload=False)  # the caller gets the error (a recovery tries again)
            raise
        return live

    async def _fold(self, session_id: str) -> tuple[SessionProjection, int]:
        """The session's projection, from its latest snapshot and the records after it, and the seq of
        that snapshot (0: none). A snapshot its checks refuse is logged, and the session is folded from
        all its records (``load_projection``)."""
        records = await self.log.read_for_load(session_id)
        try:
            projection = project(session_id, records)
        except CorruptSnapshotError:
            return await load_projection(self.log, session_id), 0
        return projection, records[0].seq if records and records[0].kind == RecordKind.SNAPSHOT else 0

    def _at_rest(self, live: LiveSession) -> bool:
        """Whether ``live`` may be dropped from memory: nothing queued, running or loading, every record
        durable, no send waiting."""
        worker = self._workers.get(live.id)
        return (
            not self._mailboxes.get(live.id)
            and (worker is None or worker.done() or worker is asyncio.current_task())
            and live.id not in self._loading
            and live.id not in self._wanted
            and not live.in_step
            and live.settled
        )

    def _unload(self, live: LiveSession) -> None:
        """Drop ``live`` from memory (the cache let it go). A caller still holding it gets a clear
        ``LogClosedError`` on a write; the next use loads the session again."""
        live.close("it was dropped from memory while idle; get it again (agent.get_or_create_session)")
        self._letting_go.discard(live.id)
        self._mailboxes.pop(live.id, None)
        self._workers.pop(live.id, None)
        self._check_queued.discard(live.id)
        if self._machine is not None and live.machine_model is not None:
            self._machine.remove_model(live.machine_model)
        if self.router is not None:  # a worker gives the session up: any worker may take its next message
            if live.platform is not None and live.platform.has_client(live.id):
                # Followed from here on, from its last record (every one was delivered: it was at rest),
                # before the lease goes and another worker may write.
                self._view(live.projection, live.platform)
                self.router.follow(live.id)
            session_id = live.id
            releasing = asyncio.ensure_future(self.router.release(session_id))
            self._releasing[session_id] = releasing
            releasing.add_done_callback(lambda done: self._released(session_id, done))

    def _released(self, session_id: str, releasing: asyncio.Future[None]) -> None:
        if self._releasing.get(session_id) is releasing:
            del self._releasing[session_id]
        if not releasing.cancelled() and releasing.exception() is not None:
            # The lease then expires by itself: the session is only taken over later.
            logger.warning("releasing a dropped session's lease failed: %s", releasing.exception())

    async def claim(self, session_id: str) -> bool:
        """Under a router: ask it for ``session_id`` (not in memory here), ``True`` if this runtime may run
        it. A release of its lease still under way (it was just dropped) ends first: claimed before, the
        session would be loaded again under the lease being given up, and its appends refused once it is."""
        if self.router is None:
            return True
        releasing = self._releasing.get(session_id)
        if releasing is not None:
            await asyncio.wait([releasing])  # its failure is logged by _released
        return await self.router.claim(session_id)

    async def _snapshot_if_due(self, live: LiveSession) -> None:
        """After a step: write a snapshot if ``snapshot_every`` records were written since the last one."""
        every = self.snapshot_every
        if every is not None and live.projection.last_seq - live.snapshot_seq >= every and not live.writer.closed:
            live.snapshot_seq = live.writer.record_snapshot().seq
            await live.flush()

    # -- mailboxes ------------------------------------------------------------------------------

    async def receive(self, event: Event, platform: Platform | None = None) -> asyncio.Future[None]:
        """Record ``event`` durably, queue it, and return a future that resolves once it is handled."""
        return (await self._receive(event, platform))[1]

    async def _receive(
        self, event: Event, platform: Platform | None
    ) -> tuple[LiveSession | None, asyncio.Future[None]]:
        """:meth:`receive`, and the session that took the event (``None``: forwarded to its owner)."""
        data = {"event": event.to_data(), "text": event.text}
        if event.delivery_id is not None:
            data["delivery"] = event.delivery_id
        if event.client_message_id is not None:
            data["client_message_id"] = event.client_message_id
        if data["text"] is not None and not isinstance(data["text"], str):
            # The fold reads it as the conversation's text: refused here, not found corrupt on a restart.
            raise ValueError(f"{type(event).__name__}.text must be a string or None, got {type(data['text']).__name__}")
        try:
            json_copy(data)  # json.dumps(allow_nan=False)'s verdict, at orjson's speed
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{type(event).__name__} cannot be recorded: its fields must be JSON ({exc})") from exc
        if self.router is not None and event.session_id not in self._live:
            self.check_session_id(event.session_id)  # before a lease or an inbox row stores it
            if not await self.claim(event.session_id):  # another worker owns it: its inbox takes it
                return None, await self._forward(event, data, platform)
        live = await self._get_live(event.session_id, platform)
        recorded_at = live.projection.deliveries.get(event.delivery_id) if event.delivery_id is not None else None
        if recorded_at is not None:
            # Delivered again (its source did not hear it was taken, e.g. a crash before the platform
            # confirmed it): recorded once, at that seq, and handled there; nothing more to do.
            logger.info("session %s: delivery %s was recorded at seq %d; not taken again", live.id,
                        event.delivery_id, recorded_at)  # fmt: skip
            taken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            taken.set_result(None)
            return live, taken
        if live.projection.holding:
            # A new message to a fork is the user continuing it: what it held comes first, in order.
            self._release_held(live)
        record = live.record(RecordKind.MESSAGE_RECEIVED, data)
        live.show_received(record)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Queue before awaiting the flush, so the mailbox order is the record order.
        self._schedule(live, _Item("event", event, record.seq, done))
        try:
            await live.flush()
        except LogError as exc:
            done.cancel()  # the caller gets the error here, not through the future
            self._evict(live, exc)
            raise
        _show_now(live)
        return live, done

    async def _forward(self, event: Event, data: dict[str, Any], platform: Platform | None) -> asyncio.Future[None]:
        """Send ``event`` (recorded as ``data``) to the worker that owns its session; return a future that
        resolves once it is handled there when ``platform`` has a client waiting for the session's
        output (``baf.core.forwarded``), else at once."""
        assert self.router is not None, "only a worker among many forwards messages"
        handled: asyncio.Future[None] | None = None
        if platform is not None:
            # Followed before the owner can record the message: its replies come after the view.
            view = await self.follow(event.session_id, platform)
            if platform.has_client(event.session_id):
                # A mark the view recognises the message's record by (not a delivery id: those are kept
                # in the projection, for the dedup of redeliveries).
                data[FORWARDED_KEY] = uuid.uuid4().hex
                if view.forwarded is None:
                    view.forwarded = ForwardedMessages()
                handled = view.forwarded.add(data[FORWARDED_KEY])
        try:
            # Redacted as the owner's record of it will be: the inbox is a table of the database too, and
            # a row consumed stays in its files until vacuumed. The owner handles what it was given.
            await self.router.forward(event.session_id, self.agent.redactor.redact(data), platform)
        except BaseException:
            if handled is not None:
                handled.cancel()
            raise
        if handled is None:
            handled = asyncio.get_running_loop().create_future()
            handled.set_result(None)
        return handled

    async def receive_forwarded(
        self, session_id: str, inbox_id: int, data: dict[str, Any] | None, error: str | None = None
    ) -> None:
        """Take a message another worker forwarded (inbox row ``inbox_id``) into the session this runtime
        owns: its ``message_received`` record and the row's deletion commit together, so it is handled
        exactly once; a row taken already and not yet deleted is left alone. Into an idle session, they
        commit with the first records of the step the message starts (before any body acts); while a step
        runs, at once. Returns once that commit is over. A row that is not a readable message (``data``
        None, ``error`` says why) becomes an ``error`` record instead, consumed the same way: the session
        goes on. A session dropped from memory since the caller had it is claimed again first; if another
        worker holds it by now, the row is left for that worker."""
        if session_id not in self._live and not await self.claim(session_id):
            return
        live = await self._get_live(session_id, None)
        if live.writer.consuming(inbox_id):
            return  # taken already (a read of the inbox before its deletion committed found it again)
        event, problem = _forwarded_event(session_id, data)
        if event is None:
            live.record(RecordKind.ERROR, {"message": f"a malformed message was dropped: {error or problem}",
                                           "error": "MalformedInboxMessage"})  # fmt: skip
            live.writer.consume_inbox(inbox_id)
            await live.flush()
            return
        assert data is not None
        delivery = data.get("delivery")
        recorded_at = live.projection.deliveries.get(delivery) if isinstance(delivery, str) else None
        if recorded_at is not None:
            # Delivered again (forwarded twice, or also received here directly): the row is consumed and
            # nothing recorded, as :meth:`receive` does for a redelivery it takes itself.
            logger.info("session %s: delivery %s was recorded at seq %d; forwarded copy dropped", session_id,
                        delivery, recorded_at)  # fmt: skip
            live.writer.consume_inbox(inbox_id)
            await live.flush()
            return
        if live.projection.holding:
            self._release_held(live)
        idle = self._at_rest(live)
        record = live.record(RecordKind.MESSAGE_RECEIVED, data)
        live.show_received(record)
        live.writer.consume_inbox(inbox_id)
        self._schedule(live, _Item("event", event, record.seq, None))
        if idle:
            # The step this starts now commits the message, and the row's deletion, with its first records,
            # before any body can act (see baf.core.engine._run_body): one round trip less per message. The
            # row stays in the inbox until then; a crash before it leaves the message to the next owner.
            # Returning once that commit is over keeps the caller from reading the row again before it goes.
            await live.writer.consumed(inbox_id)
            _show_now(live)
            return
        try:
            await live.flush()  # a step is running: its next commit may be far off
        except LogError as exc:
            self._evict(live, exc)
            raise
        _show_now(live)

    def let_go(self, session_id: str) -> None:
        """Drop ``session_id`` from memory as soon as it is at rest (now, if it is), as the cache drops an
        idle session: nothing is lost, its next use loads it again. Under a router its lease is given up
        then, so another worker may take it (``SessionRouter.release``)."""
        live = self._live.get(session_id)
        if live is None:
            return
        if self._at_rest(live):
            self._live.let_go(live)
        else:
            self._letting_go.add(session_id)  # the end of its running step looks again (see _drain)

    def drop(self, session_id: str) -> None:
        """Forget ``session_id`` without writing to it again (a worker lost its lease): its running step is
        cancelled and what it had queued is failed. The new owner resumes it from the log."""
        live = self._live.get(session_id)
        if live is None:
            return
        live.close()
        # Dropping cancels its running step. Said by the caller, which found the lease lost (a worker's
        # heartbeat), and follows the session for its clients here: not said twice.
        self._evict(live, LogError(f"session {session_id!r}: this worker lost its lease"), said=True, reload=False)

    async def continue_session(self, session_id: str) -> asyncio.Future[None]:
        """Handle the messages a fork holds (recorded before its cut, not handled there): record that the
        user continued it (``fork_continued``), queue them, and return a future that resolves once they
        are handled (at once if there were none)."""
        live = await self._get_live(session_id, None)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not live.projection.holding:
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
        """Record ``fork_continued`` and queue what the fork held: the initial body if it was cut before
        the first step, then the messages (the last item settles ``done``)."""
        held = sorted(live.projection.held.items())
        start = live.projection.start_held
        live.record(RecordKind.FORK_CONTINUED, {"seqs": [seq for seq, _ in held]})  # the fold releases them
        if start:
            self._schedule(live, _Item("start", done=None if held else done))
        for index, (seq, data) in enumerate(held):
            last = index == len(held) - 1
            self._schedule(live, _Item("event", event_from_data(live.id, data), seq, done if last else None))

    async def receive_message(self, session_id: str, text: str, platform: Platform | None = None) -> Session:
        """Deliver a text message and wait until it, and everything it caused, has been handled.

        The session returned is the one that handled it; it reads as it was even if it was dropped from
        memory meanwhile (a write to it then raises ``LogClosedError``; get it again). Under a router, a
        message for a session another worker owns is forwarded to it: ``SessionNotFoundError`` (it is
        not here)."""
        live, done = await self._receive(ReceiveTextEvent(session_id, message=text), platform)
        await done
        if live is None:
            raise SessionNotFoundError(session_id, "this worker (another owns it; the message was forwarded there)")
        return live.session

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
        mailbox = self._mailboxes.get(live.id)
        if mailbox is None or self._live.get(live.id) is not live:
            # Evicted before this task began (the append of its first item was refused): nothing to run, and
            # a mailbox there now is a reloaded session's, which its own task drains.
            return
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
            try:
                await self._snapshot_if_due(live)
            except LogError as exc:
                self._evict(live, exc)
                return
        if not self.control.halting:
            if live.id in self._letting_go:
                self._letting_go.discard(live.id)
                if self._at_rest(live):
                    self._live.let_go(live)
                    return
            self._live.touch(live)
            self._live.trim()  # this session, now at rest, may go too if it is the least recently used

    def _evict(self, live: LiveSession, exc: LogError, said: bool = False, reload: bool = True) -> None:
        """The log refused a write: this in-memory session can no longer be trusted. Drop it, failing
        what it still had queued, and stop a step still running on it; it is loaded again from what the
        log really holds as soon as the log answers (``reload``; not for a session whose lease another
        worker holds now), or by its next use. ``said``: the caller told why already."""
        if not self._live.remove(live):
            return  # dropped already, or replaced by a reloaded session: leave that one alone
        lost = isinstance(exc, LeaseLostError)
        reloading = reload and not lost and not self.control.stopping
        if isinstance(exc, LeaseLostError):
            # Expected among workers (this one was paused, or cut from the database, past its lease), not a
            # bug: one line says it, no traceback. The worker holding the lease now goes on with the session.
            logger.warning(
                "session %s: %s, so nothing more of it is written here: this worker drops it, and the worker "
                "that holds its lease now goes on with it from what the log holds",
                live.id, exc.reason,
            )  # fmt: skip
        elif not said:
            then = "loading it again from the log as soon as the log answers" if reloading else "dropped from memory"
            logger.error("session %s: %s; %s", live.id, exc, then)
        self._letting_go.discard(live.id)
        mailbox = self._mailboxes.pop(live.id, deque())
        for item in mailbox:
            _settle(item, exc)
        mailbox.clear()  # the worker holding this deque stops after its current item
        worker = self._workers.pop(live.id, None)
        if worker is not None and not worker.done() and worker is not asyncio.current_task():
            # A step still runs on it (the refused write was another caller's): it can write nothing more (its
            # appends follow the refused one, and fail), and must not act beside the step a new load of the
            # session resumes, which waits for it to end (see _load). Cancelled, it ends without a word, left
            # open as a crash leaves it (see baf.core.engine), for that load to resume or close.
            worker.cancel()
            self._dropped_steps[live.id] = worker
            worker.add_done_callback(partial(self._dropped_step_ended, live.id))
        if self._machine is not None and live.machine_model is not None:
            self._machine.remove_model(live.machine_model)
        if reloading:
            self._recovery.schedule(live.id)
        platform = live.platform
        if lost and self.router is not None and platform and platform.has_client(live.id):
            # Another worker runs it now (this one was paused past its lease, and its append was the first to
            # find out, before a heartbeat could): its clients here follow it from the log from now on.
            following = asyncio.ensure_future(self._follow_lost(live.id, platform))
            self._following_lost.add(following)
            following.add_done_callback(self._following_lost.discard)

    def _dropped_step_ended(self, session_id: str, worker: asyncio.Task[None]) -> None:
        if self._dropped_steps.get(session_id) is worker:
            del self._dropped_steps[session_id]

    async def _bring_back(self, session_id: str) -> None:
        """Load ``session_id`` again after it was dropped on a failed write (``baf.core.recovery``):
        its open step resumes, its recorded messages are handled."""
        if self.control.stopping or session_id in self._live:
            return  # stopping; or used meanwhile, and loaded by that use
        if not await self.claim(session_id):
            return  # another worker holds it now, and resumes it
        await self._get_live(session_id, None)

    async def _follow_lost(self, session_id: str, platform: Platform) -> None:
        try:
            await self.follow(session_id, platform)
        except LogError as exc:  # the database is away: the client gets it on its next message or reconnect
            logger.warning("session %s: cannot follow it: %s", session_id, exc)


class _SessionsView(Mapping[str, Session]):
    """The bodies' side of the live sessions, by id, read-only."""

    __slots__ = ("_live",)

    def __init__(self, live: SessionCache) -> None:
        self._live = live

    def __getitem__(self, session_id: str) -> Session:
        live = self._live.get(session_id)
        if live is None:
            raise KeyError(session_id)
        return live.session

    def __iter__(self) -> Iterator[str]:
        return iter(self._live)

    def __len__(self) -> int:
        return len(self._live)


def _close_interrupted_step(
    live: LiveSession, event_seq: int | None, interrupted_by: str, reason: str, tell_user: bool = False
) -> None:
    """Record the end of a step the engine could not close itself: an ``error`` saying why, with
    ``tell_user`` a reply saying the request was not finished, then its ``step_finished``, marked
    interrupted (``interrupted_by``: see ``baf.core.engine``)."""
    live.record_error("runtime", RuntimeError(reason), event_seq=event_seq, interrupted_by=interrupted_by)
    if tell_user:
        live.session.reply(INTERRUPTED_BY_RESTART_REPLY)
    live.record(
        RecordKind.STEP_FINISHED, {"event_seq": event_seq, "interrupted": True, "interrupted_by": interrupted_by}
    )


def _show_now(live: LiveSession) -> None:
    """A message was recorded and is durable: show it to the session's clients connected here now
    (another tab of the sender's), not at the session's next commit, which a running step may hold back.
    A client connected to another worker gets it from the log (``baf.serve.follower``)."""
    has_client = getattr(live.platform, "has_client", None)  # a duck-typed platform may lack it
    if has_client is not None and has_client(live.id):
        live.commit_soon()


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


def _forwarded_event(session_id: str, data: dict[str, Any] | None) -> tuple[Event | None, str]:
    """The event of a forwarded message, or ``None`` and what is wrong with it. A message is recorded only
    as a worker forwards one (``{"event": event.to_data(), "text": event.text}``): a row holding anything
    else (a faulty or hostile peer's) would fail when handled, or on every load after (the fold reads its
    text), and block the messages behind it."""
    if data is None:
        return None, "not a JSON object"
    encoded = encode_json(data)  # bytes: orjson took it, so it holds no lone surrogate
    if not isinstance(encoded, bytes) and not _encodable(encoded):
        # A JSON escape can spell one (a worker never posts it: Inbox.post refuses it); recorded, the
        # message would fail its append on every try, and hold the session's later messages back for good.
        return None, "it holds text that is not valid Unicode (a lone surrogate)"
    fields = data.get("event")
    if not isinstance(fields, dict):
        return None, "no event"
    try:
        event = event_from_data(session_id, fields)
        same = event.to_data() == fields and event.text == data.get("text")
    except Exception as exc:  # an unknown type, unknown or missing fields, a text property that fails
        return None, f"its event cannot be rebuilt ({type(exc).__name__}: {exc})"
    if not same:
        return None, "its event and text are not what a worker forwards"
    if event.text is not None and not isinstance(event.text, str):  # as receive() refuses it
        return None, f"its text is {type(event.text).__name__}, not a string"
    delivery = data.get("delivery")
    if delivery is not None and not isinstance(delivery, str):
        return None, "its delivery id is not a string"
    client_message_id = data.get("client_message_id")
    if client_message_id is not None and not isinstance(client_message_id, str):
        return None, "its client message id is not a string"
    return event, ""


def _encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogates, which JSON escapes can spell)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
