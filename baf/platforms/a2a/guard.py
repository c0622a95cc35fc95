"""Who may call the A2A server: an ASGI layer in front of the SDK's routes that refuses, before anything
is read or recorded,

- a request with two ``Host``, ``Origin``, ``Authorization`` or ``Content-Type`` headers (400);
- a ``Host`` that does not name the server (403): DNS rebinding, where another site's name is made to
  resolve to this machine so that its pages may read the answers;
- an ``Origin`` not allowed (403): a page on another site posting to the server (a browser sends
  ``Content-Type: text/plain`` across sites without asking first, and the SDK would read it as JSON);
  server-to-server clients send no ``Origin`` and are not origin-checked;
- without the bearer token, when the platform has an ``auth_token`` (401), except for the agent card,
  which tells clients that they need one;
- a ``POST`` whose ``Content-Type`` is not JSON (415).

A browser page on an origin listed in ``allowed_origins`` gets the CORS headers it needs (the preflight
is answered here), so that listing an origin lets its pages call the agent. Refusals are JSON-RPC error
objects (``id`` null), so JSON-RPC clients read them as they read any error.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

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


class CallerGuard:
    """Wraps the A2A ASGI app with the checks above.

    Args:
        app: The SDK's Starlette app.
        bound_host, port: Where the server listens (its own name and port for the ``Host`` check).
        allowed_hosts, allowed_origins, auth_token: As for :class:`~baf.platforms.a2a.A2APlatform`.
        public_names: Host names the server is reached by behind a proxy (any port).
        redactor: Redacts what a failing ``auth_token`` function's traceback shows.
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
    ) -> None:
        self.app = app
        self.bound_host = bound_host
        self.port = port
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = allowed_origins
        self.auth_token = auth_token
        self.public_names = tuple(public_names)
        self.redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, list[str]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), []).append(value.decode("latin-1"))
        duplicated = next((name for name in _SINGLE_HEADERS if len(headers.get(name, ())) > 1), None)
        if duplicated is not None:
            await _refuse(send, HTTPStatus.BAD_REQUEST, f"duplicate {duplicated.decode().title()} header")
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
            await _refuse(send, HTTPStatus.FORBIDDEN, "host not allowed")
            return
        if not origin_allowed(origin, host, self.allowed_origins):
            await _refuse(send, HTTPStatus.FORBIDDEN, "origin not allowed")
            return
        # An origin allowed by name (not the server's own) is another site's page: it needs CORS headers.
        cors = origin if origin is not None and self.allowed_origins is not None else None
        if cors is not None and method == "OPTIONS" and b"access-control-request-method" in headers:
            await _preflight(send, cors, headers.get(b"access-control-request-headers", [""])[0])
            return
        is_card = method in ("GET", "HEAD") and scope["path"] == AGENT_CARD_WELL_KNOWN_PATH
        if not is_card and not token_accepted(
            bearer_token(headers.get(b"authorization", [""])[0]), self.auth_token, logger, self.redactor
        ):
            await _refuse(
                send, HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token", [(b"www-authenticate", b"Bearer")]
            )
            return
        if method == "POST":
            media_type = headers.get(b"content-type", [""])[0].split(";", 1)[0].strip().lower()
            if not _JSON_TYPE.match(media_type):
                await _refuse(
                    send, HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "the body must be JSON (Content-Type: application/json)"
                )
                return
        if cors is None:
            await self.app(scope, receive, send)
            return
        allow_origin = cors

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_cors_headers(allow_origin)]
            await send(message)

        await self.app(scope, receive, send_with_cors)


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


async def _refuse(send: Send, status: HTTPStatus, reason: str, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    logger.debug("A2A request refused: %s (%d)", reason, status.value)
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": _INVALID_REQUEST, "message": f"{reason} ({status.phrase})"}}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status.value, "headers": headers})
    await send({"type": "http.response.body", "body": body})
