"""The session: one conversation of an agent with one user, seen from a state body."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from baf.errors import SessionVariableError
from baf.log.jsontext import json_copy
from baf.log.projection import ChatEntry
from baf.log.record import Record, RecordKind

if TYPE_CHECKING:
    import asyncio

    from baf.core.agent import Agent
    from baf.core.events import Event
    from baf.core.live import LiveSession
    from baf.core.platform import Platform
    from baf.core.state import State

__all__ = ["Delivery", "Session", "runtime_side"]

_MISSING: Any = object()

_T = TypeVar("_T")


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

    Bodies, transition conditions, step hooks, tools and platforms receive the session. It offers what
    a body works with: the variables (``get``/``set``/``delete``/``session[key]``), the conversation
    (:meth:`chat_history`, :meth:`reply` and its richer forms), the log (:meth:`record`,
    :meth:`record_error`), the event being handled, the current state, the platform and the agent's
    definition. It also runs blocking code in the agent's threads (:meth:`run_sync`,
    :meth:`run_tool_sync`): a sync call made there is abandoned when the agent is told to stop now,
    where one in ``asyncio.to_thread`` would hold the process. Commits, flushes and queued sends belong to
    the runtime (:func:`runtime_side`). Sync bodies run in a worker thread; every method here is safe to
    call from them.
    """

    __slots__ = ("_live",)

    def __init__(self, live: LiveSession) -> None:
        self._live = live

    def __repr__(self) -> str:
        return f"Session({self.id!r}, state={self._live.projection.current_state!r})"

    # -- identity and state ---------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id."""
        return self._live.id

    @property
    def agent(self) -> Agent:
        """The agent's definition (its states, tools, skills, workspaces, properties)."""
        return self._live.agent

    @property
    def platform(self) -> Platform | None:
        """The platform the session talks on (``None``: replies are recorded, not sent)."""
        return self._live.platform

    @property
    def event(self) -> Event | None:
        """The event being handled, or ``None`` while a state is entered without one."""
        return self._live.event

    @property
    def current_state(self) -> State:
        """The state the session is in."""
        return self._live.agent.get_state(self._live.projection.current_state or "")

    # -- variables ------------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """The value of variable ``key``, or ``default``. Containers come back as copies: ``set`` them
        again after a change, so the change is recorded."""
        value = self._live.projection.variables.get(key, _MISSING)
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
        self._live.record(RecordKind.VARIABLE_SET, {"name": key, "value": stored})
        self._live.variables_changed()

    def delete(self, key: str) -> None:
        """Remove variable ``key`` (no error if it is not set)."""
        if key in self._live.projection.variables:
            self._live.record(RecordKind.VARIABLE_DELETED, {"name": key})
            self._live.variables_changed()

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self._live.projection.variables:
            raise KeyError(key)
        self.delete(key)

    def __contains__(self, key: object) -> bool:
        return key in self._live.projection.variables

    # -- conversation ---------------------------------------------------------------------------

    def chat_history(self, n: int | None = None) -> list[ChatEntry]:
        """The conversation so far (user messages and replies), oldest first; the last ``n`` if given."""
        history = self._live.projection.history
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
        live = self._live
        shown = live.redacted(args)  # the user sees what the log keeps: no secret, live or replayed

        async def deliver() -> None:
            if live.platform is not None:
                await getattr(live.platform, method)(self, *shown)
            elif live.projection.platform is not None:
                live.park(method, shown)  # the session has a platform, not attached yet

        return live.record_and_send(RecordKind.REPLY, data, deliver)

    # -- the log --------------------------------------------------------------------------------

    def record(self, kind: str, data: dict[str, Any]) -> Record:
        """Append a record of ``kind`` to the session log (durable at the next commit, at the latest
        when the body returns; before any reply it precedes is sent)."""
        return self._live.record(kind, data)

    def record_error(self, source: str, exc: BaseException, **details: Any) -> Record:
        """Record an ``error`` caught in user code (``source``: body, tool, platform, ...) with its
        traceback; the session goes on."""
        return self._live.record_error(source, exc, **details)

    # -- threads --------------------------------------------------------------------------------

    async def run_sync(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Run the sync ``fn(*args, **kwargs)`` in one of the agent's worker threads and return its result.

        The engine runs sync bodies this way. The threads (at most ``max_body_threads``) are daemon
        threads: a call the agent gave up on when it stopped does not keep the process alive, as one in
        ``asyncio.to_thread`` would. The caller's context variables are copied into the thread, as
        ``asyncio.to_thread`` does.
        """
        return await self._live.run_sync(fn, *args, **kwargs)

    async def run_tool_sync(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """:meth:`run_sync` for a tool's sync function, in threads of their own (as many): a tool that
        timed out keeps its thread until it returns, and must not take one from sync bodies."""
        return await self._live.run_tool_sync(fn, *args, **kwargs)


def runtime_side(session: Session) -> LiveSession:
    """The runtime's side of ``session``: commits, flushes, queued platform calls, the event's seq.

    For the reasoning library and platforms, which make records durable before an effect and stream to
    the platform; a body needs none of it (``await session.reply(...)`` waits for its reply's commit).
    """
    return session._live
