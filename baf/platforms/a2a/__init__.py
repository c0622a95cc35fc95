"""Serve an agent over the Agent2Agent protocol (the ``a2a`` extra: ``pip install -e ".[a2a]"`` in a clone).

::

    agent.use_a2a_platform("127.0.0.1", 9000, description="Answers questions about the catalogue")
    agent.run()

Other agents (any A2A client, or a baf agent with ``agent.add_a2a_agent(url, name=...)``) find it by its
**agent card** at ``http://HOST:PORT/.well-known/agent-card.json``: the agent's name, the description,
one skill per baf skill the agent has (or one ``chat`` skill), text and JSON in and out, streaming. They
talk to it with JSON-RPC at ``http://HOST:PORT/`` (A2A 1.0; 0.3 clients are served too).

An A2A **context** is a baf session (``a2a-<context id>``); a **task** is one message to it, handled as
the session's mailbox handles any message. Reasoning steps and task lists stream as ``working`` status
updates, replies arrive as artifacts, and the task ends ``completed`` (or ``failed`` with the error the
user would have seen, or ``input-required`` while a tool call waits for approval; a data part
``{"approval": {...}}`` decides it). See :mod:`baf.platforms.a2a.executor` for the mapping.

With many workers (``baf serve``), a task whose session another worker runs is carried out there: the
message goes through the inbox, and this worker, whose client waits for the task, follows the session's
log and publishes what it shows until the message is handled (:meth:`A2APlatform.has_client`).

Who may call, and how much, is checked before anything is read (:mod:`baf.platforms.a2a.guard`): requests
open at once and per second are bounded per address and in all (``limits``), the ``Host`` must name the
server (``allowed_hosts``, against DNS rebinding), a browser's ``Origin`` must be allowed
(``allowed_origins``; clients that send none are not browsers), a ``POST`` must be JSON and at most
``max_body_size`` bytes, and with an ``auth_token`` every request but the card's must carry it as a bearer
token.

The SDK keeps the task objects it serves to ``GetTask`` in memory, the newest ``max_tasks`` of them;
the conversation itself is in the baf log, and survives a restart as any session does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from baf.errors import MissingExtraError

try:  # first, so that a missing extra is named with its pip command rather than a bare ModuleNotFoundError
    import a2a.server  # noqa: F401
    import uvicorn
except ImportError as exc:
    raise MissingExtraError("A2APlatform (a2a-sdk, uvicorn)", "a2a") from exc

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
)
from starlette.applications import Starlette

from baf.core.platform import Platform
from baf.errors import ConfigurationError
from baf.platforms.a2a.executor import SESSION_PREFIX, SessionExecutor, TaskRoute
from baf.platforms.a2a.guard import CallerGuard
from baf.platforms.limits import ClientLimits
from baf.platforms.request_checks import check_any_origin

if TYPE_CHECKING:
    from baf.core.session import Session
    from baf.reasoning.approval import ApprovalRequest

__all__ = ["SESSION_PREFIX", "A2APlatform"]

logger = logging.getLogger("baf.platforms.a2a")


class A2APlatform(Platform):
    """Serves the agent as an A2A server on ``host``:``port`` (0: a free port, see :attr:`port`).

    Args:
        host, port: Where to listen.
        description: The agent card's description (what other agents read to decide to ask this one).
        public_url: The URL other agents use, when it is not ``http://host:port/`` (behind a proxy).
        version: The agent card's version.
        max_tasks: Task objects the SDK keeps for ``GetTask``; older ones are dropped.
        allowed_hosts: Accepted ``Host`` header names, against DNS rebinding (``"*"`` for any; ``"name:port"``
            for one port only); when given, the only ones. Default: ``localhost``, ``127.0.0.1``, ``[::1]``
            and ``host`` on the server's port, and the host of ``public_url`` on any port.
        allowed_origins: Browser origins allowed to call; they get CORS headers. Default: none but the
            server's own. Clients that send no ``Origin`` (not browsers) are not origin-checked. ``["*"]``
            allows any page on any site (``Access-Control-Allow-Origin: *``, without credentials) and so
            needs an ``auth_token``: without one, every site the user visits could drive the agent.
        auth_token: A bearer token every request but the agent card's must carry (``Authorization: Bearer
            ...``), or a function deciding on a token; the card then names the scheme. Default: none.
        limits: Requests a client may make (a :class:`~baf.platforms.limits.ClientLimits`, whose
            "connections" are requests being served here): ``max_connections`` open at once in all (503
            beyond), ``max_connections_per_address`` open at once from one address and
            ``messages_per_second_per_address`` a second (429 beyond, with ``Retry-After``). Its
            per-connection and new-session limits do not apply: each request is a connection of its own.
        max_body_size: The longest request body, in bytes (413 beyond, refused before it is read whole).
            Default 8 MiB: the longest text a task takes (1,000,000 characters, 4 MB at most in UTF-8) fits.
    """

    name = "a2a"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9000,
        *,
        description: str | None = None,
        public_url: str | None = None,
        version: str = "1.0.0",
        max_tasks: int = 10_000,
        allowed_hosts: Sequence[str] | None = None,
        allowed_origins: Sequence[str] | None = None,
        auth_token: str | Callable[[str], bool] | None = None,
        limits: ClientLimits | None = None,
        max_body_size: int = 8 * 1024 * 1024,
    ) -> None:
        super().__init__()
        check_any_origin(allowed_origins, auth_token)
        if isinstance(max_body_size, bool) or not isinstance(max_body_size, int) or max_body_size < 1:
            raise ConfigurationError(f"max_body_size must be a positive number of bytes, got {max_body_size!r}")
        self.host = host
        #: The port (the real one once started, if 0 was asked).
        self.port = port
        self.description = description
        self.public_url = public_url
        self.version = version
        self.max_tasks = max_tasks
        self.allowed_hosts = list(allowed_hosts) if allowed_hosts is not None else None
        self.allowed_origins = list(allowed_origins) if allowed_origins is not None else None
        self.auth_token = auth_token
        self.limits = limits if limits is not None else ClientLimits()
        self.max_body_size = max_body_size
        #: The task each session's output goes to, while one runs (the only per-session data kept).
        self.routes: dict[str, TaskRoute] = {}
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None
        #: Whether the listening socket shares its port (``SO_REUSEPORT``) with other worker processes.
        self.reuse_port = False

    @property
    def url(self) -> str:
        """The URL other agents reach this one at."""
        return self.public_url or f"http://{self.host}:{self.port}/"

    def agent_card(self) -> AgentCard:
        """The card served at ``/.well-known/agent-card.json``."""
        agent = self.agent
        if agent is None:
            raise ConfigurationError("the A2A platform is not attached to an agent")
        description = self.description or f"The baf agent '{agent.name}'."
        skills = [
            AgentSkill(id=skill.name, name=skill.name, description=skill.description or skill.name, tags=["baf"])
            for skill in agent.skills.values()
        ] or [AgentSkill(id="chat", name=agent.name, description=description, tags=["chat"])]
        security: dict[str, Any] = {}
        if self.auth_token is not None:
            security = {
                "security_schemes": {
                    "bearer": SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
                },
                "security_requirements": [SecurityRequirement(schemes={"bearer": StringList()})],
            }
        return AgentCard(
            name=agent.name,
            description=description,
            version=self.version,
            supported_interfaces=[AgentInterface(url=self.url, protocol_binding="JSONRPC", protocol_version="1.0")],
            capabilities=AgentCapabilities(streaming=True),
            default_input_modes=["text/plain", "application/json"],
            default_output_modes=["text/plain", "application/json"],
            skills=skills,
            **security,
        )

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on ``host:port`` and serve the card and the JSON-RPC endpoint."""
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise ConfigurationError(f"the A2A platform cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = sock.getsockname()[1]
        card = self.agent_card()
        handler = DefaultRequestHandler(
            agent_executor=SessionExecutor(self), task_store=_RecentTasks(self.max_tasks), agent_card=card
        )
        app = Starlette(
            routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)]
        )
        guarded = CallerGuard(
            app,
            bound_host=self.host,
            port=self.port,
            allowed_hosts=self.allowed_hosts,
            allowed_origins=self.allowed_origins,
            auth_token=self.auth_token,
            public_names=[name] if self.public_url and (name := urlsplit(self.public_url).hostname) else [],
            redactor=self.agent.redactor if self.agent is not None else None,
            limits=self.limits,
            max_body_size=self.max_body_size,
        )
        config = uvicorn.Config(guarded, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._serving = asyncio.ensure_future(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._serving.done():
                sock.close()
                self._serving.result()  # raises what stopped it
                raise ConfigurationError(f"the A2A platform stopped at once on {self.host}:{self.port}")
            await asyncio.sleep(0.01)
        logger.info("A2A agent %r listening on %s", card.name, self.url)

    async def stop(self) -> None:
        """Stop serving (open streams end). Safe to call twice."""
        server, serving = self._server, self._serving
        self._server = self._serving = None
        if server is not None and serving is not None:
            server.should_exit = True
            try:
                await asyncio.wait_for(serving, 5.0)
            except TimeoutError:
                server.force_exit = True
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving

    def share_with_workers(self) -> None:
        """Share the port with the other worker processes of ``baf serve`` on this host (``SO_REUSEPORT``)."""
        self.reuse_port = True

    def has_client(self, session_id: str) -> bool:
        """Whether a task of ``session_id`` runs here now: its client waits for what the session shows
        (a streaming request, or a blocking one), so a worker that does not run the session follows it."""
        return session_id in self.routes

    # -- outbound: into the running task's queue ----------------------------------------------------

    def _route(self, session: Session, kind: str, payload: Any) -> None:
        route = self.routes.get(session.id)
        if route is None:
            # No task is waiting (a reply after its task ended): the log keeps it.
            logger.debug("session %s: no A2A task is waiting for a %s", session.id, kind)
            return
        route.items.put_nowait((kind, payload))

    async def reply(self, session: Session, message: str) -> None:
        """Add the reply to the running task as a text artifact."""
        self._route(session, "reply", message)

    async def reply_error(self, session: Session, message: str) -> None:
        """The running task will end ``failed`` with this message."""
        self._route(session, "error", message)

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        """Stream the step as a ``working`` status update."""
        self._route(session, "step", step.to_dict() if hasattr(step, "to_dict") else dict(step))

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        """Stream the task list as a ``working`` status update."""
        self._route(session, "tasks", [dict(task) for task in tasks])

    async def reply_approval_request(self, session: Session, request: ApprovalRequest) -> None:
        """The running task ends ``input-required``, describing the call (see the executor)."""
        self._route(session, "approval", request.to_dict())

    async def reply_options(self, session: Session, message: str, options: Sequence[str]) -> None:
        """An artifact with the text and the options as data."""
        self._route(session, "options", (message, [str(option) for option in options]))

    async def reply_file(
        self, session: Session, name: str, content: bytes, mime_type: str = "", caption: str = ""
    ) -> None:
        """An artifact with the file as a raw part."""
        self._route(session, "file", (name, content, mime_type, caption))

    async def reply_image(
        self, session: Session, content: bytes, mime_type: str = "image/png", caption: str = ""
    ) -> None:
        """An artifact with the image as a raw part."""
        extension = mime_type.rsplit("/", 1)[-1] if "/" in mime_type else "png"
        self._route(session, "file", (f"image.{extension}", content, mime_type, caption))


class _RecentTasks(InMemoryTaskStore):
    """The SDK's in-memory task store, holding the newest ``limit`` tasks only (each keeps its history).

    The server does not tell callers apart (one ``auth_token`` at most), so every task has the same
    owner: any request's context may delete an old one."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit
        self._order: OrderedDict[str, None] = OrderedDict()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await super().save(task, context)
        self._order[task.id] = None
        self._order.move_to_end(task.id)
        while len(self._order) > self._limit:
            oldest, _ = self._order.popitem(last=False)
            await super().delete(oldest, context)
