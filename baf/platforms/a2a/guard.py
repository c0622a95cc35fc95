"""Who may call the A2A server, and how much: an ASGI layer in front of the SDK's routes that refuses,
before anything is read or recorded,

- a request beyond the limits of :class:`~baf.platforms.limits.ClientLimits` (counted per address as
  :func:`~baf.platforms.limits.address_key` says): more than ``max_connections_per_address`` requests open
  at once from one address, or more than ``messages_per_second_per_address`` a second (429, with
  ``Retry-After``); more than ``max_connections`` open in all (503, with ``Retry-After``). Every request
  counts, refused or not; a streaming request is open until its stream ends;
- a request with two ``Host``, ``Origin``, ``Authorization`` or ``Content-Type`` headers (400);
- a ``Host`` that does not name the server (403): DNS rebinding, where another site's name is made to
  resolve to this machine so that its pages may read the answers;
- an ``Origin`` not allowed (403): a page on another site posting to the server (a browser sends
  ``Content-Type: text/plain`` across sites without asking first, and the SDK would read it as JSON);
  server-to-server clients send no ``Origin`` and are not origin-checked;
- without the bearer token, when the platform has an ``auth_token`` (401), except for the agent card,
  which tells clients that they need one;
- a ``POST`` whose ``Content-Type`` is not JSON (415);
- a body longer than ``max_body_size`` bytes (413): refused on its ``Content-Length`` before a byte of it
  is read, or, sent in chunks, as soon as the chunks read pass the limit. The SDK gets the body only once
  it is whole and within the limit, so nothing of a refused request is recorded;
- a WebSocket (the server serves none); the server's own ``lifespan`` events pass.

A browser page on an origin listed in ``allowed_origins`` gets the CORS headers it needs (the preflight
is answered here), on refusals too, so that it sees the status rather than an opaque network error; with
``"*"`` listed, every origin gets ``Access-Control-Allow-Origin: *`` (never credentials). Refusals are
JSON-RPC error objects (``id`` null), so JSON-RPC clients read them as they read any error.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

from baf.platforms.limits import ClientLimits, RateLimiter
from baf.platforms.request_checks import AuthToken, bearer_token, host_allowed, origin_allowed, token_accepted

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    from baf.log.redaction import Redactor

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["CallerGuard"]

logger = logging.getLogger("baf.platforms.a2a")

# Headers a request may carry once: two would leave open which one the checks should believe.
_SINGLE_HEADERS = (b"host", b"origin", b"authorization", b"content-type")
# JSON, and JSON under a type of its own (application/a2a+json): a browser must ask (preflight) before
# sending either across sites, which no foreign origin passes.
_JSON_TYPE = re.compile(r"^application/(?:[a-z0-9.+-]+\+)?json$")
# JSON-RPC's code for a request the server will not take.
_INVALID_REQUEST = -32600
# A page reads only the response headers CORS lets it: these say when to try again and how to authenticate.
_EXPOSED = b"Retry-After, WWW-Authenticate"
# The WebSocket close code for a policy refusal; before the handshake the server answers it with a 403.
_POLICY_VIOLATION = 1008


class _ClientGone(Exception):
    """The client disconnected while its body was being read."""


class CallerGuard:
    """Wraps the A2A ASGI app with the checks above.

    Args:
        app: The SDK's Starlette app.
        bound_host, port: Where the server listens (its own name and port for the ``Host`` check).
        allowed_hosts, allowed_origins, auth_token: As for :class:`~baf.platforms.a2a.A2APlatform`.
        public_names: Host names the server is reached by behind a proxy (any port).
        redactor: Redacts what a failing ``auth_token`` function's traceback shows.
        limits: Requests open and per second, in all and per address (see the module docstring).
        max_body_size: The longest request body read, in bytes.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        bound_host: str,
        port: int,
        allowed_hosts: Sequence[str] | None,
        allowed_origins: Sequence[str] | None,
        auth_token: AuthToken,
        public_names: Sequence[str] = (),
        redactor: Redactor | None = None,
        limits: ClientLimits | None = None,
        max_body_size: int = 8 * 1024 * 1024,
    ) -> None:
        self.app = app
        self.bound_host = bound_host
        self.port = port
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = allowed_origins
        self.auth_token = auth_token
        self.public_names = tuple(public_names)
        self.redactor = redactor
        self.max_body_size = max_body_size
        #: The counts behind ``limits``: one "connection" of it is one request being served.
        self.limiter = RateLimiter(limits if limits is not None else ClientLimits())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":  # the server starting and stopping, not a caller
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": _POLICY_VIOLATION, "reason": "no WebSocket here"})
            return
        if kind != "http":
            raise ValueError(f"the A2A server serves HTTP only, not an ASGI {kind!r} connection")
        headers: dict[bytes, list[str]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), []).append(value.decode("latin-1"))
        cors = self._cors_origin(headers.get(b"origin", []))
        client = scope.get("client")
        limiter = self.limiter
        budget = limiter.connect(str(client[0]) if client else "")
        if budget is None:
            if limiter.full:
                reason = f"the server is serving {limiter.connections} requests, its limit; try again later"
                await _refuse(send, HTTPStatus.SERVICE_UNAVAILABLE, reason, cors, retry_after=1)
            else:
                reason = "too many requests from this address are open at once; try again later"
                await _refuse(send, HTTPStatus.TOO_MANY_REQUESTS, reason, cors, retry_after=1)
            return
        try:
            wait = budget.message()
            if wait:
                retry = max(1, math.ceil(wait))
                reason = f"too many requests per second from this address; try again in {retry} s"
                await _refuse(send, HTTPStatus.TOO_MANY_REQUESTS, reason, cors, retry_after=retry)
                return
            await self._checked(scope, receive, send, headers, cors)
        finally:
            limiter.disconnect(budget)

    def _cors_origin(self, origins: list[str]) -> str | None:
        """The ``Access-Control-Allow-Origin`` for a request from these origins, if it gets CORS headers:
        an origin allowed by name (the server's own needs none), or ``*`` when any is allowed."""
        if len(origins) != 1 or self.allowed_origins is None:
            return None
        if "*" in self.allowed_origins:
            return "*"
        return origins[0] if origins[0] in self.allowed_origins else None

    async def _checked(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, list[str]], cors: str | None
    ) -> None:
        """Serve the request if it passes the checks of the module docstring, else refuse it."""
        duplicated = next((name for name in _SINGLE_HEADERS if len(headers.get(name, ())) > 1), None)
        if duplicated is not None:
            reason = f"duplicate {duplicated.decode().title()} header"
            await _refuse(send, HTTPStatus.BAD_REQUEST, reason, cors)
            return
        host = headers.get(b"host", [""])[0]
        origin = headers.get(b"origin", [None])[0]
        method = scope["method"]
        if not host_allowed(
            host,
            bound_host=self.bound_host,
            port=self.port,
            allowed_hosts=self.allowed_hosts,
            any_port_names=self.public_names,
        ):
            await _refuse(send, HTTPStatus.FORBIDDEN, "host not allowed", cors)
            return
        if not origin_allowed(origin, host, self.allowed_origins):
            await _refuse(send, HTTPStatus.FORBIDDEN, "origin not allowed", cors)
            return
        if cors is not None and method == "OPTIONS" and b"access-control-request-method" in headers:
            await _preflight(send, cors, headers.get(b"access-control-request-headers", [""])[0])
            return
        is_card = method in ("GET", "HEAD") and scope["path"] == AGENT_CARD_WELL_KNOWN_PATH
        if not is_card and not token_accepted(
            bearer_token(headers.get(b"authorization", [""])[0]), self.auth_token, logger, self.redactor
        ):
            reason = "missing or wrong bearer token"
            await _refuse(send, HTTPStatus.UNAUTHORIZED, reason, cors, [(b"www-authenticate", b"Bearer")])
            return
        if method == "POST":
            media_type = headers.get(b"content-type", [""])[0].split(";", 1)[0].strip().lower()
            if not _JSON_TYPE.match(media_type):
                reason = "the body must be JSON (Content-Type: application/json)"
                await _refuse(send, HTTPStatus.UNSUPPORTED_MEDIA_TYPE, reason, cors)
                return
        try:
            body = await self._body(receive, headers.get(b"content-length", []))
        except _ClientGone:
            return
        if body is None:
            reason = f"the body is longer than {self.max_body_size:,} bytes, the limit"
            await _refuse(send, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, reason, cors)
            return
        read = False

        async def receive_read_body() -> Message:
            nonlocal read
            if read:
                return await receive()  # what comes after the body: the client disconnecting
            read = True
            return {"type": "http.request", "body": body, "more_body": False}

        if cors is None:
            await self.app(scope, receive_read_body, send)
            return
        allow_origin = cors

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_cors_headers(allow_origin)]
            await send(message)

        await self.app(scope, receive_read_body, send_with_cors)

    async def _body(self, receive: Receive, content_length: list[str]) -> bytes | None:
        """The whole body, or ``None`` when it is longer than ``max_body_size`` (read no further than that)."""
        if content_length and content_length[0].strip().isdigit() and int(content_length[0]) > self.max_body_size:
            return None  # said up front: refused before a byte is read
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_size:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]


async def _preflight(send: Send, origin: str, requested_headers: str) -> None:
    headers = [
        *_cors_headers(origin),
        (b"access-control-allow-methods", b"GET, POST"),
        (b"access-control-max-age", b"600"),
        (b"content-length", b"0"),
    ]
    if requested_headers:
        headers.append((b"access-control-allow-headers", requested_headers.encode("latin-1")))
    await send({"type": "http.response.start", "status": HTTPStatus.NO_CONTENT.value, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _refuse(
    send: Send,
    status: HTTPStatus,
    reason: str,
    cors: str | None = None,
    extra: Sequence[tuple[bytes, bytes]] = (),
    *,
    retry_after: int | None = None,
) -> None:
    """Answer with ``status`` and a JSON-RPC error saying ``reason``; with CORS headers for ``cors``, an
    allowed origin, so that its page can read the refusal."""
    logger.debug("A2A request refused: %s (%d)", reason, status.value)
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": _INVALID_REQUEST, "message": f"{reason} ({status.phrase})"}}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    if cors is not None:
        headers += [*_cors_headers(cors), (b"access-control-expose-headers", _EXPOSED)]
    await send({"type": "http.response.start", "status": status.value, "headers": headers})
    await send({"type": "http.response.body", "body": body})
