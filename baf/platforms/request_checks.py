"""Who may call a platform that serves HTTP: the ``Host``, ``Origin`` and bearer-token checks shared by the
WebSocket platform (:mod:`baf.platforms.websocket`) and the A2A platform (:mod:`baf.platforms.a2a`).

- :func:`host_allowed` stops DNS rebinding: a page on another site whose name is made to resolve to this
  machine is same-origin with the server, but its requests carry that other name as ``Host``.
- :func:`origin_allowed` stops other sites' pages: a browser names the page's origin in ``Origin``; a
  client that sends none is not a browser and is not origin-checked.
- :func:`token_accepted` compares a bearer token in constant time, or asks a function.

Each takes header values, not a request object, so that servers built on different libraries share them.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

from baf.errors import ConfigurationError
from baf.log.redaction import Redactor, log_exception

__all__ = [
    "LOOPBACK_NAMES",
    "AuthToken",
    "bearer_token",
    "check_any_origin",
    "host_allowed",
    "origin_allowed",
    "token_accepted",
]

#: The names a loopback server answers to by default.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})

#: What an ``auth_token`` setting may be: a token, a function deciding on one, or none (no check).
AuthToken = str | Callable[[str], bool] | None


def host_allowed(
    host_header: str,
    *,
    bound_host: str,
    port: int,
    allowed_hosts: Sequence[str] | None,
    any_port_names: Iterable[str] = (),
) -> bool:
    """Whether ``host_header`` names this server.

    Args:
        host_header: The request's ``Host`` (empty: refused).
        bound_host: The interface the server listens on; its name counts as the server's own (not the
            wildcard addresses ``0.0.0.0`` and ``::``).
        port: The server's port: the default names count on it only.
        allowed_hosts: When given, the only names accepted (``"*"`` for any, ``"name:port"`` for one port).
        any_port_names: More default names, on any port (the host of a ``public_url`` behind a proxy).
    """
    host = host_header.strip().lower()
    if not host:
        return False
    if allowed_hosts is not None and "*" in allowed_hosts:
        return True
    name, _, port_text = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name:  # no port given: the scheme's default
        name, port_text = host, ""
    try:
        request_port = int(port_text) if port_text else 80
    except ValueError:
        return False
    if allowed_hosts is not None:
        allowed = {h.lower() for h in allowed_hosts}
        return name in allowed or f"{name}:{request_port}" in allowed
    if name in {n.lower() for n in any_port_names}:
        return True
    names = set(LOOPBACK_NAMES)
    if bound_host and bound_host not in ("0.0.0.0", "::"):
        names.add(f"[{bound_host.lower()}]" if ":" in bound_host else bound_host.lower())
    return name in names and request_port == port


def origin_allowed(origin: str | None, host_header: str, allowed_origins: Sequence[str] | None) -> bool:
    """Whether a request with this ``Origin`` (``None``: the header is absent) may be served.

    By default (``allowed_origins`` None) only the server's own origin, the one whose host and port are the
    request's ``Host``, is accepted; ``"*"`` in ``allowed_origins`` accepts any.
    """
    if origin is None:
        return True  # not a browser: the Origin check guards against other sites' pages only
    if allowed_origins is None:
        try:
            netloc = urlsplit(origin).netloc
        except ValueError:  # not a URL (an unclosed IPv6 bracket): no page's origin, refused
            return False
        return bool(host_header) and netloc.lower() == host_header.strip().lower()
    return "*" in allowed_origins or origin in allowed_origins


def check_any_origin(allowed_origins: Sequence[str] | None, auth_token: AuthToken) -> None:
    """Raise ``ConfigurationError`` for ``"*"`` in ``allowed_origins`` without an ``auth_token``: a page on
    any site the user visits could then drive the agent, its tools included, through the user's browser."""
    if allowed_origins is not None and "*" in allowed_origins and auth_token is None:
        raise ConfigurationError(
            'allowed_origins=["*"] lets a page on any site call the agent: give an auth_token too, or list the origins'
        )


def bearer_token(authorization: str) -> str:
    """The token of an ``Authorization: Bearer ...`` header (empty for another scheme or none)."""
    return authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""


def token_accepted(token: str, auth_token: AuthToken, logger: logging.Logger, redactor: Redactor | None) -> bool:
    """Whether ``token`` passes ``auth_token`` (always, when it is None). A function that raises refuses,
    its traceback logged through ``redactor``."""
    if auth_token is None:
        return True
    if not token:
        return False
    if callable(auth_token):
        try:
            return bool(auth_token(token))
        except Exception:
            log_exception(logger, redactor, "auth_token callback failed; refusing the request")
            return False
    return hmac.compare_digest(token.encode("utf-8"), auth_token.encode("utf-8"))
