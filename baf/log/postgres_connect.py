"""TCP keepalive on baf's PostgreSQL connections, so that a connection whose other end is gone is noticed.

A network cut without a reset (a host lost, a firewall or NAT dropping the flow, a cable pulled) leaves a
connection **half-open**: neither end is told, and by default the kernel probes an idle connection only
after two hours. On the client side, a worker's listener would hear no notification for that long, and an
append sent into it would wait for the kernel's retransmissions (about fifteen minutes) before failing. On
the server side, the backend of a client that is gone keeps what it holds: a plain process's writer lock
(``baf.log.postgres_lock``), the row locks of a transaction in flight.

So every connection a ``PostgresLog`` opens (the writer's, the reading pool's, the listeners', the one a
stopping worker gives its leases up on) gives up on a peer that has been silent for ``keepalive`` seconds
(default :data:`KEEPALIVE_SECONDS`), on both ends:

- its own socket: ``SO_KEEPALIVE`` with ``TCP_KEEPIDLE`` a third of it, ``TCP_KEEPINTVL`` a sixth and
  ``TCP_KEEPCNT`` probes to fill the rest (an idle connection), and ``TCP_USER_TIMEOUT`` (Linux: data
  sent and not acknowledged for that long). The connection then fails, and baf reconnects as after a
  server restart;
- the server's end, through the connection's settings: ``tcp_keepalives_idle``, ``tcp_keepalives_interval``,
  ``tcp_keepalives_count`` and ``tcp_user_timeout`` (PostgreSQL 12 or newer), so that the server ends the
  backend and releases its locks. A URL that sets one of them itself (``?tcp_keepalives_idle=60``) keeps
  its value.

A connection over a Unix socket has no network to lose: the server ignores these settings there, and the
socket options are left alone. ``keepalive=None`` leaves the operating system's and the server's settings.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    import asyncpg

__all__ = ["KEEPALIVE_SECONDS", "Keepalive", "set_socket_keepalive", "settings_in_url"]

#: How long (seconds) a connection whose other end went silent lasts, by default.
KEEPALIVE_SECONDS: Final = 30.0


@dataclass(frozen=True, slots=True)
class Keepalive:
    """The keepalive of a connection given up after ``seconds`` of silence from the other end."""

    seconds: float

    def __post_init__(self) -> None:
        if not 1 <= self.seconds < math.inf:  # written so that nan fails too
            raise ValueError(f"keepalive must be a finite number of seconds, at least 1, got {self.seconds!r}")

    @property
    def idle(self) -> int:
        """Seconds of an idle connection before the first probe."""
        return max(1, round(self.seconds / 3))

    @property
    def interval(self) -> int:
        """Seconds between two probes."""
        return max(1, round(self.seconds / 6))

    @property
    def count(self) -> int:
        """Probes unanswered before the connection is given up (they fill what ``idle`` leaves)."""
        return max(1, math.ceil((self.seconds - self.idle) / self.interval))

    @property
    def user_timeout_ms(self) -> int:
        """Milliseconds sent data may stay unacknowledged (``TCP_USER_TIMEOUT``)."""
        return round(self.seconds * 1000)

    def server_settings(self, dsn: str) -> dict[str, str]:
        """The server's side of it, as connection settings; those the URL ``dsn`` sets itself are left out
        (asyncpg passes a URL's unknown query keys as settings, and explicit settings would override them)."""
        settings = {
            "tcp_keepalives_idle": str(self.idle),
            "tcp_keepalives_interval": str(self.interval),
            "tcp_keepalives_count": str(self.count),
            "tcp_user_timeout": str(self.user_timeout_ms),
        }
        given = settings_in_url(dsn)
        return {key: value for key, value in settings.items() if key not in given}


def settings_in_url(dsn: str) -> set[str]:
    """The names of the connection settings the URL ``dsn`` sets itself (asyncpg passes a URL's unknown
    query keys as settings, and explicit settings would override them)."""
    return {key for key, _ in parse_qsl(urlsplit(dsn).query, keep_blank_values=True)}


def set_socket_keepalive(connection: asyncpg.Connection, keepalive: Keepalive) -> bool:
    """Set the keepalive options on ``connection``'s own socket; ``False`` when it has none to set (a Unix
    socket, or a driver that does not show its socket)."""
    # asyncpg has no public accessor for its transport; the attribute has been there since its first release.
    transport: Any = getattr(connection, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", keepalive.idle),
        ("TCP_KEEPINTVL", keepalive.interval),
        ("TCP_KEEPCNT", keepalive.count),
        ("TCP_USER_TIMEOUT", keepalive.user_timeout_ms),
    ):
        option = getattr(socket, name, None)  # not every platform has each (macOS: no TCP_USER_TIMEOUT)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
    return True
