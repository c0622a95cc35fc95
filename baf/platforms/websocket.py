"""A WebSocket server for agents, with a browser UI served from the same port.

Needs the ``web`` extra (``pip install -e ".[web]"`` in a clone of baf; it installs ``websockets``)::

    agent.add_platform(WebSocketPlatform(port=8765))   # then open http://localhost:8765/
    agent.run()

Protocol (version 1)
====================

Every frame is one JSON object (a text frame) with a ``type``. The WebSocket endpoint is ``/ws``.

Client → server:

``{"type": "hello"}``
    Start a new conversation. The server answers ``welcome`` with a fresh session id and its resume token.
``{"type": "hello", "resume": TOKEN, "after_seq": 0}`` (or ``{"type": "resume", "token": TOKEN}``; a
``resume`` without a ``token`` gets ``error`` ``bad_token``, never a new session)
    Continue the session the token was issued for; the server answers ``welcome`` then ``history``
    (records after ``after_seq``, default 0). The history is read while no reply is being sent and the
    connection is bound before any is again, so each record is shown once: in the history (its ``last_seq``
    covers it) or in a live frame after it. A token that does not verify gets
    ``error`` (``bad_token``) and the connection stays unbound; it may send ``hello`` again.
``{"type": "message", "text": "...", "id": ID}``
    A user message for the connection's session. Answers arrive as ``reply`` / ``reasoning_step`` /
    ``task_list`` / ``error`` frames. ``id`` (optional; 1 to 64 letters, digits, ``-`` or ``_``) is the
    client's own id for the message: it comes back in the ``user`` frame showing the message, so the
    client that sent it can tell it from a message of another tab.
``{"type": "approval", "call_id": ID, "approved": BOOL, "reason": "..."}``
    A decision on a tool call waiting for approval in the connection's session (``reason`` optional, for
    a denial). It becomes an :class:`~baf.core.events.ApprovalEvent` of that session, with the client's
    address as the approver; a call that does not wait in that session is refused with an ``agent``
    error frame (never acted on in another session).
``{"type": "reset"}``
    Leave the current session (its log is kept) and start a new one: answered with a new ``welcome``.
``{"type": "history", "after_seq": N}``
    The session's history after seq ``N``, read from the log: answered with ``history``. As for a resume,
    it is read between the session's sends, so a view redrawn from it shows each record once.

Server → client (every live ``user``, ``reply``, ``reasoning_step``, ``task_list``, ``approval_*`` and agent ``error``
frame carries ``seq``, the seq of the log record it shows: a client that reconnects sends the last seq it saw
as ``after_seq`` and gets exactly what came after, nothing twice and nothing missed):

``{"type": "welcome", "protocol": 1, "agent": NAME, "session_id": ID, "resume_token": TOKEN, "resumed": BOOL,
"examples": [...], "max_message_size": N}``
    ``examples``: what the platform suggests asking (``examples=``); the UI shows them in an empty chat.
    ``max_message_size``: the longest frame, in bytes, the server takes (the UI does not send a longer one).
``{"type": "user", "text": "...", "id": ID}``
    A message the user sent, once recorded (with its ``seq``, in order with the replies), sent to every
    connection of the session, so another tab or device shows it live. ``id`` is the one the message
    frame carried: the connection that sent it shows it already and should not show it twice. A message
    sent without an ``id`` (protocol 1 clients) is not echoed to the connection that sent it, which could
    not tell it from another tab's; the session's other connections get it, without an ``id``.
``{"type": "reply", "text": "...", "format": "markdown"}``
    Also ``{"type": "reply", "format": "file" | "image", "name", "mime_type", "data" (base64), "text"}`` and
    ``{"type": "reply", "format": "options", "text", "options": [...]}``.
``{"type": "reasoning_step", "step": {"kind", "step", "summary", "details"}}``
    ``kind`` ``reasoning_started`` opens a trace group and ``reasoning_finished`` closes it.
``{"type": "approval_request", "call_id": ID, "tool": NAME, "arguments": "JSON text", "step": N}``
    A tool call waits for a human decision (``docs/human_approval.md``): the UI shows it with Approve and
    Deny buttons, which send an ``approval`` frame.
``{"type": "approval_decision", "call_id": ID, "tool": NAME, "approved": BOOL, "reason": "...", "by": WHO, "at": T}``
    The call was decided (by any client of the session, or another channel): ``by`` is the approver
    (``web client ADDRESS`` for this UI), ``at`` the Unix time of the ``approval_decided`` record. Sent to
    every connection of the session, so another tab closes its card too.
``{"type": "approval_expired", "call_ids": [ID, ...], "reason": "...", "at": T}``
    The calls were dropped undecided: a new message arrived first.
``{"type": "reply_delta", "run_id": ID, "text": "..."}``
    A piece of an answer while the model writes it (a model that streams). Pieces with one ``run_id``
    belong to one answer, in order; a new ``run_id`` starts a new one (a later model turn, or a retry after
    the model's stream broke), superseding what the old one showed. Not a record: no ``seq``, and never in
    a ``history``. The complete answer follows as a ``reply`` (or an ``error``), which takes its place.
``{"type": "task_list", "tasks": [{"id", "description", "status", "result"}, ...]}``
    A full snapshot; ``status`` is ``pending``, ``in_progress``, ``completed`` or ``skipped``.
``{"type": "history", "after_seq": N, "last_seq": M, "truncated": BOOL, "items": [...]}``
    Items in log order, each with its ``seq`` and a ``type``: ``user`` (``text``, and ``id`` as in the
    live frame) / ``reply`` (``text``),
    ``reasoning_step`` (``step``), ``task_list`` (``tasks``), ``approval_request``, ``approval_decision``
    and ``approval_expired`` (each as its live frame), ``error`` (``message``: the errors that were
    shown live, as they were shown; a failed tool or model call shows as its step or reply). ``reply`` items carry
    the same ``format`` / ``options`` / ``name`` / ``mime_type`` / ``data`` as the live ``reply`` frame.
``{"type": "error", "code": CODE, "message": "...", "id": ID}``
    Codes: ``bad_json``, ``bad_frame``, ``unknown_type``, ``too_large``, ``binary``, ``no_session``,
    ``bad_token``, ``unavailable`` (the agent could not take the message: it was not recorded, so send
    it again later), ``busy`` (``max_pending_messages`` messages of this connection are still being
    handled, or a ``history`` is still being sent: the frame was not acted on; retry after an answer),
    ``internal`` (the server failed on the frame; the connection stays usable), ``agent`` (an error
    while handling a message, shown to the user), ``rate_limited`` (a limit of ``limits`` was reached:
    the frame was not acted on; the frame has ``retry_after``, the seconds to wait). An error refusing a
    ``message`` frame that carried a well-formed ``id`` has that ``id``: the message was not recorded (a
    client can mark it as not sent). The refusals made before a frame is read (``rate_limited``,
    ``too_large``, ``binary``) cannot name it and have no ``id``: they refuse the newest frame the
    connection sent, so the browser UI marks its newest message not yet shown as recorded as not sent.

Security
========

- Session ids are made by the server. The resume token is the id and the time it was issued, with an
  HMAC-SHA256 of both under the platform's ``secret`` (compared in constant time), so a client can only
  act on sessions it was given. Without a ``secret``, one is made once and kept beside a file-backed log
  (``baf.db.websocket-secret``, mode 0600; see :mod:`baf.platforms.secret_file`), so tokens, and with
  them the browsers' conversations, survive a restart; with a log that has no file (memory) it lives as
  long as the process. Whoever can read that file can resume any conversation of the log.
- A token expires ``resume_token_ttl`` seconds after it was issued (default 7 days; ``None``: never).
  Every ``welcome`` carries a fresh token, so a client that keeps coming back keeps its session, and a
  token copied once stops working. Tokens cannot be revoked one by one: rotate the ``secret`` to
  invalidate all of them. Keep the token like a password (the browser UI keeps it in
  ``sessionStorage``, so it ends with the tab).
- ``auth_token`` (optional) must be sent as ``Authorization: Bearer ...`` or as ``?access_token=...`` in
  the WebSocket URL (browsers cannot set headers on a WebSocket): otherwise HTTP 401.
- ``allowed_hosts``: the ``Host`` header of every request (UI files and the upgrade) must name this
  server, by default ``localhost``, ``127.0.0.1``, ``[::1]`` or ``host``, on its port; anything else gets
  HTTP 403. This stops DNS rebinding, where another site's name is made to resolve to this machine (its
  pages would pass the same-origin check, as their Origin and Host agree). List the public name(s) when
  serving behind a proxy or on another name.
- ``allowed_origins``: a browser's ``Origin`` must be listed (``"*"`` allows any, and only with an
  ``auth_token``: without one, a page on any site the user visits could drive the agent); by default only
  the server's own origin is accepted. Clients sending no ``Origin`` (non-browsers) are not origin-checked.
- Frames longer than ``max_message_size`` bytes get ``error`` (``too_large``) and are dropped; frames
  longer than ``4 * max_message_size`` close the connection (code 1009) before they are read whole.
- Frames that are not valid JSON (also too deeply nested), seqs past 2**63-1 and texts with lone
  surrogates get an error frame; a failure while handling a frame gets ``internal``: none closes the
  connection.
- ``limits`` (a :class:`~baf.platforms.limits.ClientLimits`) bounds connections in all and per network
  address (beyond them the upgrade gets HTTP 503), new sessions per minute and frames per second, per
  connection and per address (beyond them: ``error`` ``rate_limited``, the frame not acted on). Every
  loopback address counts as one address, and an IPv6 address by its ``/64``
  (:func:`~baf.platforms.limits.address_key`).
- Requests with two ``Host``, ``Origin``, ``Authorization`` or ``Upgrade`` headers get HTTP 400.
- A connection may have ``max_pending_messages`` events (messages and approval decisions) accepted and not yet
  handled; more are refused with ``busy`` before they are recorded, so no client can grow a session's mailbox
  without bound.
- Each connection has a send queue of ``send_queue_size`` frames and ``max_queued_bytes`` bytes; a
  ``history`` frame holds the newest items that fit half that, and a connection gets one at a time.
  Delivery only enqueues, so the agent never waits for a client; a client whose queue is full (it
  stopped reading) is disconnected and a ``delivery_dropped`` record is written to the session log (by the
  worker that runs the session; a ``baf serve`` worker that only follows it for this client logs it). It
  can resume later and get its history.
- Under ``baf serve`` a client may be connected to a worker that does not run its session: that worker
  delivers the session's records by following the log (``baf.serve.follower``), each frame with its
  ``seq`` as above; every worker shares the port (``SO_REUSEPORT``) and the resume-token secret (kept in
  the PostgreSQL log).

The platform holds no session state beyond which connections are bound to which session id.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from baf.core.events import ApprovalEvent, ReceiveTextEvent
from baf.core.platform import Platform
from baf.core.session import runtime_side
from baf.errors import ConfigurationError, LogClosedError, MissingExtraError
from baf.log.record import Record, RecordKind
from baf.log.redaction import Redactor, log_exception
from baf.platforms.limits import ClientLimits, ConnectionBudget, RateLimiter
from baf.platforms.request_checks import (
    bearer_token,
    check_any_origin,
    host_allowed,
    origin_allowed,
    token_accepted,
)
from baf.platforms.secret_file import load_or_create_secret, secret_path_beside
from baf.reasoning.approval import ApprovalDecision, ApprovalExpiry
from baf.wording import agreeing, counted

try:
    from websockets.asyncio.server import Server, ServerConnection, serve
    from websockets.datastructures import Headers, MultipleValuesError
    from websockets.exceptions import ConnectionClosed
    from websockets.http11 import Request, Response
except ImportError as exc:
    raise MissingExtraError("WebSocketPlatform (websockets)", "web") from exc

if TYPE_CHECKING:
    from baf.core.session import Session

__all__ = ["PROTOCOL_VERSION", "WebSocketPlatform", "history_items"]

logger = logging.getLogger("baf.platforms.websocket")

PROTOCOL_VERSION = 1
#: The record kind written when frames for a slow or dead client are dropped.
DELIVERY_DROPPED = "delivery_dropped"
_SESSION_PREFIX = "ws-"
_SESSION_ID = re.compile(r"^ws-[A-Za-z0-9_-]{16,64}$")
_TOKEN_ISSUED = re.compile(r"^[0-9a-f]{1,12}$")
_TOKEN_MAC = re.compile(r"^[A-Za-z0-9_-]{43}$")  # an HMAC-SHA256 in unpadded base64url
#: Messages without an id a connection may have waiting for their ``user`` frame (more are forgotten).
_MAX_UNMARKED = 64
_CLIENT_MESSAGE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOKEN_CONTEXT = b"baf.websocket.resume.v2:"
# How far in the future an issue time may lie (clocks of several servers sharing a secret drift).
_TOKEN_CLOCK_SKEW = 300.0
_MAX_SEQ = 2**63 - 1
# Headers a request may carry once: two would leave open which one the checks below should believe.
_SINGLE_HEADERS = ("Host", "Origin", "Authorization", "Upgrade")
_REPLY_FIELDS = ("format", "options", "name", "mime_type", "data")
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    # Vendored at pinned versions, with their licences beside them (web/vendor/README.md).
    "/vendor/marked.umd.js": ("vendor/marked.umd.js", "text/javascript; charset=utf-8"),
    "/vendor/purify.min.js": ("vendor/purify.min.js", "text/javascript; charset=utf-8"),
}


@dataclass(eq=False)
class _Client:
    """One connection: its socket, the session it is bound to, and its bounded send queue."""

    ws: ServerConnection
    queue: asyncio.Queue[tuple[str, int, bool]]
    session_id: str | None = None
    writer: asyncio.Task[None] | None = None
    dropped: bool = False
    sent: int = field(default=0)
    #: Bytes of the frames in ``queue`` (what the writer has not sent yet).
    queued_bytes: int = 0
    #: A ``history`` frame is waiting in ``queue``; another request is refused until it is sent.
    history_queued: bool = False
    #: Messages accepted from this connection whose handling has not finished.
    pending: set[asyncio.Future[None]] = field(default_factory=set)
    #: Its share of ``limits``: frames per second and new sessions.
    budget: ConnectionBudget | None = None
    #: Texts of its messages sent without an ``id`` whose ``user`` frame has not come yet: that frame is
    #: not echoed to it (a client that gives no id could not tell it from another tab's message).
    unmarked: list[str] = field(default_factory=list)


class WebSocketPlatform(Platform):
    """Serves the JSON protocol above on ``ws://HOST:PORT/ws`` and, with ``ui=True``, the browser UI on
    ``http://HOST:PORT/``.

    Args:
        host: Interface to listen on. The default, loopback, is reachable only from this machine.
        port: TCP port; ``0`` picks a free one (read it from :attr:`port` after start).
        ui: Serve the browser UI (static files shipped in ``baf/platforms/web``).
        secret: Key for signing resume tokens. Default: one kept beside the agent's log file (made once,
            mode 0600), so tokens survive restarts; per process when the log has no file.
        resume_token_ttl: Seconds a resume token stays valid after it was issued (``None``: forever).
        auth_token: A bearer token every WebSocket client must present, or a function deciding on a token.
        allowed_origins: Browser origins allowed to connect (``["*"]`` for any, with an ``auth_token`` only);
            default: the server's own.
        max_message_size: Largest inbound frame, in bytes, the platform reads.
        send_queue_size: Frames queued per connection before a client that does not read is dropped.
        history_limit: Most history items sent in one ``history`` frame (the newest are kept).
        ping_interval: Seconds between keepalive pings (``None`` to disable); a dead peer is closed.
        close_timeout: Seconds to wait for a closing handshake.
        compression: ``"deflate"`` to compress frames; off by default, as it costs memory per connection.
        allowed_hosts: Accepted ``Host`` header names, against DNS rebinding (``"*"`` for any; ``"name:port"``
            for one port only). Default: ``localhost``, ``127.0.0.1``, ``[::1]`` and ``host``, on the
            server's port.
        max_pending_messages: Messages and approval decisions of one connection accepted but not yet handled;
            more get ``busy``.
        max_queued_bytes: Bytes queued per connection before a client that does not read is dropped; a
            ``history`` frame is also cut to half of it.
        limits: Connections, new sessions and frames per second a client may use (see
            :class:`~baf.platforms.limits.ClientLimits` for the defaults).
        examples: Questions to suggest; the browser UI shows them as buttons while the chat is empty.
        reuse_port: Listen with ``SO_REUSEPORT``, so that several processes share the port and the kernel
            spreads connections over them. ``baf serve`` sets it on its workers (see
            :meth:`~baf.core.platform.Platform.share_with_workers`); off otherwise, so a second copy of
            an agent on a taken port fails at start instead of sharing it unnoticed.
    """

    name = "websocket"

    def _redactor(self) -> Redactor | None:
        """The agent's redactor, for what is logged (None: the process-wide secrets alone)."""
        return self.agent.redactor if self.agent is not None else None

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        ui: bool = True,
        secret: bytes | str | None = None,
        resume_token_ttl: float | None = 7 * 24 * 3600,
        auth_token: str | Callable[[str], bool] | None = None,
        allowed_origins: Sequence[str] | None = None,
        max_message_size: int = 64 * 1024,
        send_queue_size: int = 256,
        history_limit: int = 1000,
        ping_interval: float | None = 20.0,
        close_timeout: float = 2.0,
        compression: str | None = None,
        allowed_hosts: Sequence[str] | None = None,
        max_pending_messages: int = 4,
        max_queued_bytes: int = 8 * 1024 * 1024,
        limits: ClientLimits | None = None,
        examples: Sequence[str] = (),
        reuse_port: bool = False,
    ) -> None:
        super().__init__()
        if min(max_message_size, send_queue_size, history_limit, max_pending_messages, max_queued_bytes) < 1:
            raise ValueError(
                "max_message_size, send_queue_size, history_limit, max_pending_messages and max_queued_bytes "
                "must be positive"
            )
        check_any_origin(allowed_origins, auth_token)
        self.host = host
        self._requested_port = port
        self.ui = ui
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        # Replaced at start by the secret kept beside the log, when there is a log file and no secret given.
        self._secret: bytes = secret if secret is not None else secrets.token_bytes(32)
        self._secret_given = secret is not None
        if resume_token_ttl is not None and (isinstance(resume_token_ttl, bool) or not resume_token_ttl > 0):
            raise ValueError(f"resume_token_ttl must be a positive number of seconds or None, got {resume_token_ttl!r}")
        self.resume_token_ttl = resume_token_ttl
        self.auth_token = auth_token
        self.allowed_origins = list(allowed_origins) if allowed_origins is not None else None
        self.max_message_size = max_message_size
        self.send_queue_size = send_queue_size
        self.history_limit = history_limit
        self.ping_interval = ping_interval
        self.close_timeout = close_timeout
        self.compression = compression
        self.allowed_hosts = list(allowed_hosts) if allowed_hosts is not None else None
        self.max_pending_messages = max_pending_messages
        self.max_queued_bytes = max_queued_bytes
        self.limits = limits if limits is not None else ClientLimits()
        self.examples = [str(example) for example in examples]
        self.reuse_port = reuse_port
        self._limiter = RateLimiter(self.limits)
        self._server: Server | None = None
        # The only per-session state: which connections show which session.
        self._routes: dict[str, set[_Client]] = {}
        self._clients: set[_Client] = set()
        # Flushes making ``delivery_dropped`` records durable (referenced until done: see _drop).
        self._flushes: set[asyncio.Future[None]] = set()

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port listened on (the real one once started, also when ``0`` was asked for)."""
        if self._server is not None:
            for sock in self._server.sockets:
                return int(sock.getsockname()[1])
        return self._requested_port

    @property
    def url(self) -> str:
        """The browser UI's URL (``http://host:port/``)."""
        host = "localhost" if self.host in ("127.0.0.1", "0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/"

    @property
    def ws_url(self) -> str:
        """The WebSocket endpoint's URL."""
        return f"ws://{self.host or '127.0.0.1'}:{self.port}/ws"

    @property
    def connection_count(self) -> int:
        """Open connections."""
        return len(self._clients)

    async def start(self) -> None:
        """Listen on ``host:port``."""
        if self._server is not None:
            return
        if not self._secret_given:
            self._secret = await self._kept_secret()
        try:
            self._server = await serve(
                self._handle,
                self.host,
                self._requested_port,
                process_request=self._process_request,
                # Read up to 4x the limit so a slightly oversize frame gets an error frame and the connection
                # lives on; anything bigger is refused by the library before it is buffered (close 1009).
                max_size=4 * self.max_message_size,
                ping_interval=self.ping_interval,
                close_timeout=self.close_timeout,
                compression=self.compression,
                server_header=None,
                reuse_port=self.reuse_port,
            )
        except OSError as exc:  # mostly: the port is taken, by another agent or a second copy of this one
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise ConfigurationError(f"websocket platform cannot listen on {self.host}:{self._requested_port}: "
                                     f"{reason}; stop whatever uses it or pick another port") from exc  # fmt: skip
        where = f"{self.ws_url} (browser UI: {self.url})" if self.ui else self.ws_url
        logger.info("websocket platform listening on %s", where)  # agent.run() shows baf's INFO lines

    async def _kept_secret(self) -> bytes:
        """The secret kept beside the log file the agent runs over, or in the log itself (PostgreSQL: the
        same for every worker, so a token one issued is good on the others), or this process's own."""
        if self.agent is None:
            return self._secret
        log = self.agent.runtime.log if self.agent.running else self.agent.log
        log_path = getattr(log, "path", None)
        if isinstance(log_path, os.PathLike | str):
            return await asyncio.to_thread(load_or_create_secret, secret_path_beside(log_path, "websocket"))
        shared = await log.shared_secret("websocket")
        return shared if shared is not None else self._secret

    def share_with_workers(self) -> None:
        """Share the port with the other worker processes of ``baf serve`` on this host (``SO_REUSEPORT``)."""
        self.reuse_port = True

    async def stop(self) -> None:
        """Close every connection and stop listening."""
        server, self._server = self._server, None
        if server is None:
            return
        for client in list(self._clients):
            if client.writer is not None:
                client.writer.cancel()
        server.close()
        await server.wait_closed()
        if self._flushes:  # before the agent closes its log
            await asyncio.wait(self._flushes)
        self._routes.clear()
        self._clients.clear()

    # -- HTTP: the UI, authentication and origin checks -----------------------------------------

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        duplicated = next((name for name in _SINGLE_HEADERS if len(request.headers.get_all(name)) > 1), None)
        if duplicated is not None:
            # Which of two Hosts (or Origins, or tokens) would count? Neither: refuse, and cheaply, since
            # anyone can send this over and over (the library logs one INFO line per rejected request).
            return _text_response(HTTPStatus.BAD_REQUEST, f"duplicate {duplicated} header\n")
        try:
            return self._check_request(connection, request)
        except MultipleValuesError as exc:  # any other header the checks read once, sent twice
            return _text_response(HTTPStatus.BAD_REQUEST, f"duplicate {exc.args[0] if exc.args else ''} header\n")
        except ValueError:  # a path no URL parser reads (an unclosed IPv6 bracket: GET //[/ws)
            return _text_response(HTTPStatus.BAD_REQUEST, "the request's path is not a URL path\n")

    def _check_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if not self._host_allowed(request):
            # A page on another name that resolves here (DNS rebinding) sends that name as Host.
            return _text_response(HTTPStatus.FORBIDDEN, "host not allowed\n")
        is_upgrade = "websocket" in request.headers.get("Upgrade", "").lower()
        if not is_upgrade:
            if self.ui and path in _STATIC:
                return self._static(request, *_STATIC[path])
            return _text_response(HTTPStatus.NOT_FOUND, "not found\n")
        if path != "/ws":
            return _text_response(HTTPStatus.NOT_FOUND, "the WebSocket endpoint is /ws\n")
        if not self._authorized(request):
            return _text_response(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token\n")
        if not self._origin_allowed(request):
            return _text_response(HTTPStatus.FORBIDDEN, "origin not allowed\n")
        refusal = self._limiter.refusal(_address(connection))
        if refusal is not None:
            return _text_response(HTTPStatus.SERVICE_UNAVAILABLE, f"too many connections: {refusal}\n")
        return None

    def _authorized(self, request: Request) -> bool:
        token = bearer_token(request.headers.get("Authorization", ""))
        if not token:  # browsers cannot set headers on a WebSocket: the token may come in the URL
            token = (parse_qs(urlsplit(request.path).query).get("access_token") or [""])[0]
        return token_accepted(token, self.auth_token, logger, self._redactor())

    def _host_allowed(self, request: Request) -> bool:
        return host_allowed(
            request.headers.get("Host", ""), bound_host=self.host, port=self.port, allowed_hosts=self.allowed_hosts
        )

    def _origin_allowed(self, request: Request) -> bool:
        return origin_allowed(request.headers.get("Origin"), request.headers.get("Host", ""), self.allowed_origins)

    def _static(self, request: Request, filename: str, content_type: str) -> Response:
        body = resources.files("baf.platforms.web").joinpath(filename).read_bytes()
        host = request.headers.get("Host", "")
        headers = Headers(
            [
                ("Content-Type", content_type),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
                ("X-Content-Type-Options", "nosniff"),
                ("Referrer-Policy", "no-referrer"),
                # The UI shows replies through a Markdown renderer and a sanitizer and never evaluates code;
                # the policy makes sure a mistake there still cannot load or run anything from elsewhere.
                (
                    "Content-Security-Policy",
                    f"default-src 'self'; connect-src 'self' ws://{host} wss://{host}; img-src 'self' data:; "
                    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
                ),
                ("Connection", "close"),
            ]
        )
        return Response(HTTPStatus.OK.value, HTTPStatus.OK.phrase, headers, body)

    # -- connections ----------------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        # Checked again here, counted from here: handshakes that passed the HTTP check together must not
        # add up past the bound.
        budget = self._limiter.connect(_address(ws))
        if budget is None:
            await ws.close(1013, "too many connections; try again later")
            return
        client = _Client(ws, asyncio.Queue(self.send_queue_size), budget=budget)
        client.writer = asyncio.ensure_future(self._write_loop(client))
        self._clients.add(client)
        try:
            async for raw in ws:
                await self._on_frame(client, raw)
        except ConnectionClosed:
            pass
        finally:
            self._limiter.disconnect(budget)
            self._unroute(client)
            self._clients.discard(client)
            if client.writer is not None:
                client.writer.cancel()

    async def _write_loop(self, client: _Client) -> None:
        """Drain the connection's queue. The only place that awaits the socket, so only it can block."""
        try:
            while True:
                frame, size, is_history = await client.queue.get()
                await client.ws.send(frame)
                client.queued_bytes -= size
                if is_history:
                    client.history_queued = False
                client.sent += 1
        except ConnectionClosed:
            pass
        except Exception as exc:  # the writer must not die silently and leave the client queueing forever
            log_exception(logger, self._redactor(), "websocket client %s: sending failed", client.ws.id)
            self._drop(client, self._session_of(client), f"sending failed ({type(exc).__name__})")

    def _session_of(self, client: _Client) -> Session | None:
        if self.agent is None or client.session_id is None:
            return None
        with contextlib.suppress(Exception):
            return self._shown_session(client.session_id)
        return None

    def _shown_session(self, session_id: str) -> Session | None:
        """The session if this process runs it, or follows it for its clients (another worker runs it)."""
        assert self.agent is not None
        runtime = self.agent.runtime
        session = runtime.sessions.get(session_id)
        if session is None and (followed := runtime.followed.get(session_id)) is not None:
            session = followed.session
        return session

    def has_client(self, session_id: str) -> bool:
        """Whether a connection here shows ``session_id``."""
        return session_id in self._routes

    def _enqueue(self, client: _Client, frame: str, session: Session | None = None, *, history: bool = False) -> None:
        """Queue a frame without waiting; a full queue means the client stopped reading: drop it."""
        if client.dropped:
            return
        size = len(frame.encode("utf-8"))
        if client.queued_bytes + size > self.max_queued_bytes:
            self._drop(client, session, f"send queue over {self.max_queued_bytes} bytes: the client is not reading")
            return
        try:
            client.queue.put_nowait((frame, size, history))
        except asyncio.QueueFull:
            self._drop(client, session, f"send queue full ({self.send_queue_size} frames): the client is not reading")
            return
        client.queued_bytes += size
        if history:
            client.history_queued = True

    def _drop(self, client: _Client, session: Session | None, reason: str) -> None:
        if client.dropped:
            return
        client.dropped = True
        pending = client.queue.qsize()
        # Nothing queued will be sent: let the frames go now rather than when the connection object does.
        while not client.queue.empty():
            client.queue.get_nowait()
        client.queued_bytes = 0
        self._unroute(client)
        if client.writer is not None:
            client.writer.cancel()
        # Abort rather than close: a closing handshake would wait on the very client that stopped reading.
        transport = getattr(client.ws, "transport", None)
        if transport is not None:
            transport.abort()
        logger.warning("websocket client %s of session %s dropped: %s", client.ws.id, client.session_id, reason)
        if session is not None:
            try:
                session.record(
                    DELIVERY_DROPPED,
                    {"platform": self.name, "connection": str(client.ws.id), "reason": reason, "frames": pending + 1},
                )
            except LogClosedError:  # another worker runs the session (this one follows it): logged only
                return
            # Durable now: an idle session's next commit may be far off, and a crash meanwhile would lose it.
            flush = asyncio.ensure_future(runtime_side(session).flush())
            self._flushes.add(flush)
            flush.add_done_callback(self._flushed)

    def _flushed(self, flush: asyncio.Future[None]) -> None:
        self._flushes.discard(flush)
        if not flush.cancelled() and (exc := flush.exception()) is not None:
            logger.warning("a delivery_dropped record could not be written: %s", exc)

    def _route(self, client: _Client, session_id: str) -> None:
        self._unroute(client)
        client.session_id = session_id
        self._routes.setdefault(session_id, set()).add(client)

    def _unroute(self, client: _Client) -> None:
        if client.session_id is None:
            return
        bound = self._routes.get(client.session_id)
        if bound is not None:
            bound.discard(client)
            if not bound:
                del self._routes[client.session_id]

    def _send(self, client: _Client, frame: dict[str, Any]) -> None:
        self._enqueue(client, json.dumps(frame, ensure_ascii=False))

    def _error(self, client: _Client, code: str, message: str, **extra: Any) -> None:
        self._send(client, {"type": "error", "code": code, "message": message, **extra})

    def _rate_limited(self, client: _Client, wait: float, what: str) -> None:
        retry = math.ceil(wait * 100) / 100
        self._error(client, "rate_limited", f"{what}; try again in {retry:g} s", retry_after=retry)

    # -- inbound frames -------------------------------------------------------------------------

    async def _on_frame(self, client: _Client, raw: str | bytes) -> None:
        wait = client.budget.message() if client.budget is not None else 0.0
        if wait:  # counted before anything is parsed: a flood of junk costs as little as can be
            self._rate_limited(client, wait, "too many frames per second; this one was ignored")
            return
        if isinstance(raw, bytes):
            self._error(client, "binary", "binary frames are not supported; send JSON text frames")
            return
        size = len(raw.encode("utf-8"))
        if size > self.max_message_size:
            self._error(client, "too_large", f"frame of {size} bytes exceeds the limit of {self.max_message_size}")
            return
        try:
            frame = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            self._error(client, "bad_json", f"frames must be JSON objects: {detail}")
            return
        if not isinstance(frame, dict):
            self._error(client, "bad_frame", "frames must be JSON objects with a 'type'")
            return
        kind = frame.get("type")
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            known = ", ".join(sorted(self._handlers))
            self._error(client, "unknown_type", f"unknown frame type {kind!r}; known types: {known}")
            return
        try:
            await handler(self, client, frame)
        except Exception as exc:  # a bug here must cost one frame, not the connection
            log_exception(
                logger, self._redactor(), "websocket client %s: handling a %r frame failed", client.ws.id, kind
            )
            # A message frame's refusal names it (when its id is well-formed), so the client marks it not sent.
            client_message_id = frame.get("id") if kind == "message" else None
            valid = isinstance(client_message_id, str) and _CLIENT_MESSAGE_ID.fullmatch(client_message_id)
            mark = {"id": client_message_id} if valid else {}
            self._error(client, "internal", f"the server failed on this frame ({type(exc).__name__})", **mark)

    async def _on_hello(self, client: _Client, frame: dict[str, Any]) -> None:
        is_resume = frame.get("type") == "resume"
        token = frame.get("token") if is_resume else frame.get("resume")
        if token is None and is_resume:
            # Asked to continue a session: silently starting another would look like lost history.
            self._error(client, "bad_token", "'resume' needs a 'token'; send hello for a new session")
            return
        if token is None:
            self._new_session(client)
            return
        session_id = self.verify_resume_token(token) if isinstance(token, str) else None
        if session_id is None:
            self._error(
                client,
                "bad_token",
                "the resume token is not valid or has expired; send hello without one for a new session",
            )
            return
        after = self._after_seq(client, frame)
        if after is None:
            return
        assert self.agent is not None
        # Loaded (or started) first, so its deliveries can be held while the history is read: a session
        # that is not in memory yet may be starting right now, for this client's own last message.
        session = await self.agent.get_or_create_session(session_id, self)
        await self._read_and_bind(client, session, after, welcome=True)

    def _after_seq(self, client: _Client, frame: dict[str, Any]) -> int | None:
        after = frame.get("after_seq", 0)
        if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= _MAX_SEQ:
            self._error(client, "bad_frame", f"'after_seq' must be an integer from 0 to {_MAX_SEQ}")
            return None
        return after

    async def _on_message(self, client: _Client, frame: dict[str, Any]) -> None:
        client_message_id = frame.get("id")
        if client_message_id is not None and not (
            isinstance(client_message_id, str) and _CLIENT_MESSAGE_ID.fullmatch(client_message_id)
        ):
            self._error(client, "bad_frame", "'id' must be 1 to 64 letters, digits, '-' or '_'")
            return
        # A refusal names the message it refuses, so the client can mark that one as not sent.
        mark = {"id": client_message_id} if client_message_id is not None else {}
        text = frame.get("text")
        if not isinstance(text, str) or not text.strip():
            self._error(client, "bad_frame", "a message needs a non-empty 'text' string", **mark)
            return
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # JSON escapes can spell lone surrogates, which no log can store
            self._error(client, "bad_frame", "'text' must be valid Unicode (no lone surrogates)", **mark)
            return
        if client.session_id is None:
            self._error(client, "no_session", "send hello first", **mark)
            return
        agent = self.agent
        assert agent is not None, "add the platform to an agent first"
        if self._busy(client, **mark):
            return
        try:
            # Returns once the message is durably recorded; handling goes on in the session's mailbox.
            event = ReceiveTextEvent(client.session_id, message=text)
            event.client_message_id = client_message_id
            if client_message_id is None:  # before: its user frame may be sent before receive_event returns
                client.unmarked = [*client.unmarked[-_MAX_UNMARKED + 1 :], text]
            done = await agent.receive_event(event, self)
        except Exception as exc:
            if client_message_id is None and text in client.unmarked:
                client.unmarked.remove(text)
            log_exception(logger, self._redactor(), "session %s: the agent could not take a message", client.session_id)
            self._error(client, "unavailable", f"the message was not accepted ({type(exc).__name__}); try again",
                        **mark)  # fmt: skip
            return
        if not done.done():
            client.pending.add(done)
            done.add_done_callback(_outcome_seen)

    def _busy(self, client: _Client, **mark: Any) -> bool:
        """Whether ``max_pending_messages`` events of this connection (messages, decisions) are still being
        handled; if so, the client is told ``busy``: the session's mailbox must not grow without bound."""
        client.pending = {done for done in client.pending if not done.done()}
        if len(client.pending) < self.max_pending_messages:
            return False
        pending = len(client.pending)
        waiting = f"{counted(pending, 'earlier message')} {agreeing(pending, 'is', 'are')}"
        self._error(client, "busy", f"{waiting} still being handled; send this one once answered", **mark)
        return True

    async def _on_approval(self, client: _Client, frame: dict[str, Any]) -> None:
        """A decision from the UI's Approve / Deny buttons: an ``ApprovalEvent`` of the connection's own
        session (a client cannot name another), checked again by the engine against what waits there."""
        call_id, approved, reason = frame.get("call_id"), frame.get("approved"), frame.get("reason", "")
        if not isinstance(call_id, str) or not call_id or len(call_id) > 200 or not isinstance(approved, bool):
            self._error(client, "bad_frame", "an approval needs a 'call_id' string and 'approved' true or false")
            return
        if not isinstance(reason, str) or len(reason) > 2000:
            self._error(client, "bad_frame", "'reason' must be a string of at most 2000 characters")
            return
        if client.session_id is None:
            self._error(client, "no_session", "send hello first")
            return
        if self._busy(client):  # a decision is an event in the session's mailbox, as a message is
            return
        assert self.agent is not None, "add the platform to an agent first"
        event = ApprovalEvent(client.session_id, call_id=call_id, approved=approved, reason=reason,
                              approver=f"web client {_address(client.ws)}")  # fmt: skip
        try:
            done = await self.agent.receive_event(event, self)
            if not done.done():
                client.pending.add(done)
            done.add_done_callback(_outcome_seen)
        except Exception as exc:
            log_exception(
                logger, self._redactor(), "session %s: the agent could not take a decision", client.session_id
            )
            self._error(client, "unavailable", f"the decision was not accepted ({type(exc).__name__}); try again")

    async def _on_reset(self, client: _Client, frame: dict[str, Any]) -> None:
        self._new_session(client)

    def _new_session(self, client: _Client) -> None:
        wait = client.budget.new_session() if client.budget is not None else 0.0
        if wait:
            self._rate_limited(client, wait, "too many new sessions from this client; resume one instead")
            return
        self._welcome(client, self._new_session_id(), resumed=False)

    async def _on_history(self, client: _Client, frame: dict[str, Any]) -> None:
        if client.session_id is None:
            self._error(client, "no_session", "send hello first")
            return
        if client.history_queued:
            self._error(client, "busy", "the previous history is still being sent; ask again once it arrived")
            return
        after = self._after_seq(client, frame)
        if after is None:
            return
        await self._send_history(client, after)

    async def _read_and_bind(self, client: _Client, session: Session, after: int, *, welcome: bool) -> None:
        """Queue the history of ``session`` after seq ``after`` (behind a ``welcome`` binding the client to
        it, if asked), read while no reply of the session is being sent: each record is then shown once, in
        this history (its ``last_seq`` covers it) or in a live frame after it, never in both nor in neither."""

        async def read_and_bind(upto: int) -> None:
            items, _ = await self._read_history(session.id, after, upto)
            if welcome:
                self._welcome(client, session.id, resumed=True)
            self._queue_history(client, after, items, last_seq=max(upto, after))

        await runtime_side(session).read_delivered(read_and_bind)

    _handlers: ClassVar[dict[str, Callable[[WebSocketPlatform, _Client, dict[str, Any]], Any]]] = {
        "hello": _on_hello,
        "resume": _on_hello,
        "message": _on_message,
        "approval": _on_approval,
        "reset": _on_reset,
        "history": _on_history,
    }

    def _welcome(self, client: _Client, session_id: str, *, resumed: bool) -> None:
        self._route(client, session_id)
        agent_name = self.agent.name if self.agent is not None else ""
        self._send(
            client,
            {
                "type": "welcome",
                "protocol": PROTOCOL_VERSION,
                "agent": agent_name,
                "session_id": session_id,
                "resume_token": self.resume_token(session_id),
                "resumed": resumed,
                "examples": self.examples,
                "max_message_size": self.max_message_size,
            },
        )

    async def _read_history(self, session_id: str, after: int, upto: int | None) -> tuple[list[dict[str, Any]], int]:
        """The history items of the records after seq ``after`` (to ``upto``; ``None``: to the end), and the
        newest seq read (``after`` if none).

        Only the newest ``history_limit`` items are sent, so the log is read from the end backwards, a
        page of records at a time (each twice the last), until one item more than that is found, or
        ``after`` is reached: a request costs what it shows, however long the session (bench/bench_history.py).
        """
        assert self.agent is not None
        # The runtime's log: a worker of ``baf serve`` runs the agent over the shared one, not the agent's own.
        log = self.agent.runtime.log
        before = None if upto is None else upto + 1
        page = self.history_limit + 1
        items: list[dict[str, Any]] = []
        newest = after
        while before is None or before - 1 > after:
            records = await log.read_last(session_id, page, before)
            wanted = [r for r in records if r.seq > after]
            if wanted and newest == after:
                newest = wanted[-1].seq
            items[:0] = history_items(wanted)
            if len(wanted) < page or len(items) > self.history_limit:
                break
            before = wanted[0].seq
            page *= 2
        return items, newest

    async def _send_history(self, client: _Client, after_seq: int) -> None:
        assert client.session_id is not None and self.agent is not None
        session = self._shown_session(client.session_id)
        if session is not None:
            # Replies may be streaming to this client: read between their sends, as a resume does.
            await self._read_and_bind(client, session, after_seq, welcome=False)
            return
        # Not in memory (nothing sent yet on a new session): no reply can be in flight.
        items, last_seq = await self._read_history(client.session_id, after_seq, None)
        self._queue_history(client, after_seq, items, last_seq)

    def _queue_history(self, client: _Client, after_seq: int, items: Sequence[dict[str, Any]], last_seq: int) -> None:
        # The newest items that fit both the item limit and half the byte budget of the send queue.
        budget = self.max_queued_bytes // 2
        kept: list[str] = []
        for item in reversed(items[-self.history_limit :]):
            encoded = json.dumps(item, ensure_ascii=False)
            budget -= len(encoded.encode("utf-8")) + 1
            if budget < 1024:  # room for the frame's own fields
                break
            kept.append(encoded)
        kept.reverse()
        head = json.dumps(
            {"type": "history", "after_seq": after_seq, "last_seq": last_seq, "truncated": len(kept) < len(items)},
            ensure_ascii=False,
        )
        self._enqueue(client, f'{head[:-1]}, "items": [{", ".join(kept)}]}}', history=True)

    # -- session ids and resume tokens ----------------------------------------------------------

    @staticmethod
    def _new_session_id() -> str:
        return _SESSION_PREFIX + secrets.token_urlsafe(18)

    def resume_token(self, session_id: str, issued_at: float | None = None) -> str:
        """A token that lets a client resume ``session_id``: ``ID.ISSUED.MAC``, the MAC over both.

        ``issued_at`` (Unix seconds, default now) is when its ``resume_token_ttl`` starts.
        """
        issued = format(int(time.time() if issued_at is None else issued_at), "x")
        return f"{session_id}.{issued}.{self._token_mac(session_id, issued)}"

    def verify_resume_token(self, token: str) -> str | None:
        """The session id ``token`` was issued for, or ``None`` if this secret did not issue it or it expired."""
        session_id, issued, mac = _split_token(token)
        if session_id is None or not hmac.compare_digest(self._token_mac(session_id, issued).encode(), mac.encode()):
            return None
        age = time.time() - int(issued, 16)
        if age < -_TOKEN_CLOCK_SKEW or (self.resume_token_ttl is not None and age > self.resume_token_ttl):
            return None
        return session_id

    def _token_mac(self, session_id: str, issued: str) -> str:
        message = _TOKEN_CONTEXT + f"{session_id}.{issued}".encode()
        mac = hmac.new(self._secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")

    # -- outbound: the Platform interface -------------------------------------------------------

    def _broadcast(self, session: Session, frame: dict[str, Any], skip: _Client | None = None) -> None:
        """Queue ``frame`` for every connection showing ``session`` (but ``skip``); never waits for a client."""
        clients = self._routes.get(session.id)
        if not clients:
            return  # nobody is watching: the log keeps it for their history
        seq = runtime_side(session).delivery_seq
        if seq is not None:  # the record this frame shows: a client resumes after the last one it saw
            frame["seq"] = seq
        encoded = json.dumps(frame, ensure_ascii=False)
        for client in list(clients):
            if client is not skip:
                self._enqueue(client, encoded, session)

    async def reply_user_message(self, session: Session, text: str, client_message_id: str | None) -> None:
        """Send a ``user`` frame to every connection of the session: another tab shows the message live;
        the one that sent it finds its ``id`` there."""
        frame: dict[str, Any] = {"type": "user", "text": text}
        if client_message_id is not None:
            frame["id"] = client_message_id
        skip: _Client | None = None
        if client_message_id is None:  # the connection that sent it without an id shows it already
            skip = next((c for c in self._routes.get(session.id, ()) if text in c.unmarked), None)
            if skip is not None:
                skip.unmarked.remove(text)
        self._broadcast(session, frame, skip=skip)

    async def reply(self, session: Session, message: str) -> None:
        """Send a (Markdown) text reply to the session's connections."""
        self._broadcast(session, {"type": "reply", "text": message, "format": "markdown"})

    async def reply_markdown(self, session: Session, markdown: str) -> None:
        """Send Markdown; the UI renders it (with marked, then sanitized by DOMPurify: no raw HTML, web links only)."""
        await self.reply(session, markdown)

    async def reply_error(self, session: Session, message: str) -> None:
        """Send an ``error`` frame (code ``agent``)."""
        self._broadcast(session, {"type": "error", "code": "agent", "message": message})

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        """Send a ``reasoning_step`` frame."""
        data = step.to_dict() if hasattr(step, "to_dict") else dict(step)
        self._broadcast(session, {"type": "reasoning_step", "step": data})

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        """Send a ``task_list`` frame (a full snapshot)."""
        self._broadcast(session, {"type": "task_list", "tasks": tasks})

    async def reply_approval_request(self, session: Session, request: Any) -> None:
        """Send an ``approval_request`` frame: the UI shows the call with Approve and Deny buttons."""
        self._broadcast(session, {"type": "approval_request", **request.to_dict()})

    async def reply_approval_decision(self, session: Session, decision: ApprovalDecision) -> None:
        """Send an ``approval_decision`` frame to every connection of the session (another tab too): the
        UI closes the card with who decided, as a reload shows it."""
        self._broadcast(session, {"type": "approval_decision", **decision.to_dict()})

    async def reply_approval_expired(self, session: Session, expiry: ApprovalExpiry) -> None:
        """Send an ``approval_expired`` frame: the UI closes the cards of the calls that expired."""
        self._broadcast(session, {"type": "approval_expired", **expiry.to_dict()})

    async def reply_delta(self, session: Session, run_id: str, text: str) -> None:
        """Send a ``reply_delta`` frame: a piece of an answer being written. Not a record, so no ``seq``."""
        clients = self._routes.get(session.id)
        if not clients:
            return  # nobody is watching: the final reply is in the log for their history
        encoded = json.dumps({"type": "reply_delta", "run_id": run_id, "text": text}, ensure_ascii=False)
        for client in list(clients):
            self._enqueue(client, encoded, session)

    async def reply_file(
        self, session: Session, name: str, content: bytes, mime_type: str = "", caption: str = ""
    ) -> None:
        """Send a file as base64 in a ``reply`` frame of format ``file``."""
        self._broadcast(session, _binary_reply("file", content, mime_type or "application/octet-stream", caption, name))

    async def reply_image(
        self, session: Session, content: bytes, mime_type: str = "image/png", caption: str = ""
    ) -> None:
        """Send an image as base64 in a ``reply`` frame of format ``image``."""
        self._broadcast(session, _binary_reply("image", content, mime_type, caption, "image"))

    async def reply_options(self, session: Session, message: str, options: Sequence[str]) -> None:
        """Send a ``reply`` frame of format ``options``: the UI shows a button per option."""
        self._broadcast(
            session, {"type": "reply", "format": "options", "text": message, "options": [str(o) for o in options]}
        )


def _outcome_seen(handled: asyncio.Future[None]) -> None:
    """Retrieve the outcome of a message's handling, which the platform does not wait for: a session
    dropped from memory with the message in its mailbox (a worker that lost its lease, a write the log
    refused) fails it, the message being recorded and handled where the session loads next; asyncio would
    otherwise log each such failure as an error nobody retrieved."""
    if not handled.cancelled():
        handled.exception()


def _split_token(token: str) -> tuple[str | None, str, str]:
    """``(session_id, issued, mac)`` of a well-formed token; ``session_id`` is None otherwise."""
    rest, _, mac = token.rpartition(".")
    session_id, _, issued = rest.rpartition(".")
    if not (_SESSION_ID.fullmatch(session_id) and _TOKEN_ISSUED.fullmatch(issued) and _TOKEN_MAC.fullmatch(mac)):
        return None, "", ""
    return session_id, issued, mac


def history_items(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The user-visible part of a session's records, as ``history`` frame items (see the protocol)."""
    items: list[dict[str, Any]] = []
    for record in records:
        data = record.data
        if data.get("streamed") is False:  # a step the agent did not stream (``stream_steps=False``)
            continue
        if record.kind == RecordKind.MESSAGE_RECEIVED:
            text = data.get("text")
            if text is not None:
                item = {"seq": record.seq, "type": "user", "text": text}
                if isinstance(data.get("client_message_id"), str):
                    item["id"] = data["client_message_id"]
                items.append(item)
        elif record.kind == RecordKind.REPLY:
            item = {"seq": record.seq, "type": "reply", "text": data.get("text", "")}
            # The same fields as the live frame, so a resumed view shows buttons, files and images again.
            item.update({key: data[key] for key in _REPLY_FIELDS if key in data})
            if item.get("format") == "image":
                item.setdefault("name", "image")
            items.append(item)
        elif record.kind == RecordKind.REASONING_STEP:
            items.append({"seq": record.seq, "type": "reasoning_step", "step": data})
        elif record.kind == RecordKind.TASK_LIST:
            items.append({"seq": record.seq, "type": "task_list", "tasks": data.get("tasks", [])})
        elif record.kind in _APPROVAL_ITEMS:
            items.append(_APPROVAL_ITEMS[record.kind](record))
        elif record.kind == RecordKind.ERROR:
            # Only the errors the user was shown live (a body or fallback that raised), with the text shown
            # then: a tool's or the model's failure reached the user as a step or an apology reply, and
            # tracebacks and exception texts stay in the log, not on the wire.
            shown = data.get("shown")
            if isinstance(shown, str):
                items.append({"seq": record.seq, "type": "error", "message": shown})
            elif data.get("source") in ("body", "fallback"):  # a log from before ``shown`` was recorded
                message = f"an error occurred ({data.get('source')}: {data.get('type', 'Error')})"
                items.append({"seq": record.seq, "type": "error", "message": message})
    return items


# The approval records as history items: a resumed view shows the request, and whether it was decided.
_APPROVAL_ITEMS: dict[str, Callable[[Record], dict[str, Any]]] = {
    RecordKind.APPROVAL_REQUESTED: lambda r: {
        "seq": r.seq, "type": "approval_request", "call_id": r.data.get("call_id"), "tool": r.data.get("name"),
        "arguments": r.data.get("arguments", ""), "step": r.data.get("step", 0),
    },
    # The same fields as the live frames (``reply_approval_decision`` / ``reply_approval_expired``).
    RecordKind.APPROVAL_DECIDED: lambda r: {
        "seq": r.seq, "type": "approval_decision", **ApprovalDecision.from_record(r).to_dict(),
    },
    RecordKind.APPROVAL_EXPIRED: lambda r: {
        "seq": r.seq, "type": "approval_expired", **ApprovalExpiry.from_record(r).to_dict(),
    },
}  # fmt: skip


def _binary_reply(fmt: str, content: bytes, mime_type: str, caption: str, name: str) -> dict[str, Any]:
    return {
        "type": "reply",
        "format": fmt,
        "name": name,
        "mime_type": mime_type,
        "text": caption,
        "data": base64.b64encode(content).decode("ascii"),
    }


def _address(connection: ServerConnection) -> str:
    """The client's network address (without the port): what the per-address limits count."""
    remote = connection.remote_address
    return str(remote[0]) if isinstance(remote, tuple) and remote else str(remote)


def _text_response(status: HTTPStatus, text: str) -> Response:
    body = text.encode("utf-8")
    headers = Headers(
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ]
    )
    return Response(status.value, status.phrase, headers, body)
