"""The names of a PostgreSQL log's notification channels, derived from a secret only baf's roles can read.

Workers wake each other with ``LISTEN/NOTIFY``, and PostgreSQL asks for no privilege to listen or to
notify: any role that can connect to the database may do both, on any channel it can name. Fixed names
(``baf_inbox``, ...) would let such a role hear every session id as it commits, and wake (or flood) every
worker at will. So each log's channel names are derived (HMAC-SHA256) from a random secret kept in
``baf_meta`` (key ``secret:channels``), made by the first store that opens the log for writing: only a
role that can read baf's tables learns them, and such a role can read the conversations anyway.

The names are not shown to roles without rights on baf's tables while in use: ``pg_stat_activity`` shows
another role's query as ``<insufficient privilege>``, ``pg_listening_channels()`` lists only the caller's
own channels, and a notification reaches only the listeners of its channel. They are shown to the roles
trusted with every connection's queries: superusers, members of ``pg_read_all_stats`` (and so of
``pg_monitor``) through ``pg_stat_activity`` and ``pg_stat_statements``, and whoever reads the server's log
when it logs statements (``log_statement = 'all'``). So a listening connection runs ``SELECT 1`` once it
listens: ``pg_stat_activity`` shows a connection's last statement, and an idle listener's is then that one.
Each log (schema) has its own secret, so two logs in one database do not wake each other's workers.

The secret is never rotated. Deleting its row makes the next writing store draw another one, and with it
other names: workers started before that notify and listen under the old names until they restart, so
workers of both kinds do not wake each other meanwhile (they still find the work at their polls).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from baf.errors import LogError

if TYPE_CHECKING:
    import asyncpg

__all__ = ["CHANNELS_SECRET", "Channels", "read_channels"]

#: The ``baf_meta`` key of the secret the channel names are derived from (hex text, like ``shared_secret``'s).
CHANNELS_SECRET: Final = "secret:channels"

# The secret's length in bytes (hex text in baf_meta, twice as many digits).
_SECRET_BYTES: Final = 32

# 128 bits of the HMAC in each name: "baf_records_" and 32 hex digits stay well within PostgreSQL's 63 bytes.
_DIGITS: Final = 32


@dataclass(frozen=True, slots=True)
class Channels:
    """A log's three notification channels; each notification's payload is an id."""

    #: Notified with a session id when a message for it enters the inbox.
    inbox: str
    #: Notified with a session id when records of it commit, for workers following the log.
    records: str
    #: Notified with a worker's id when it registers or leaves, so that the others refresh their peers.
    workers: str

    @classmethod
    def from_secret(cls, secret: bytes) -> Channels:
        """The channel names of the log whose channel secret is ``secret``."""
        return cls(*(_derive(secret, name) for name in ("inbox", "records", "workers")))


def _derive(secret: bytes, name: str) -> str:
    digest = hmac.new(secret, f"baf channel {name}".encode(), hashlib.sha256).hexdigest()
    return f"baf_{name}_{digest[:_DIGITS]}"


async def read_channels(connection: asyncpg.Connection, where: str) -> Channels | None:
    """The channels of the log ``connection`` reaches, from its secret in ``baf_meta``; ``None`` when the
    log has none yet (no baf of schema version 3 or later opened it for writing). ``LogError`` when the
    secret there is not 32 bytes of hex (changed by hand): deleting the row makes the next writer draw
    another."""
    value = await connection.fetchval("SELECT value FROM baf_meta WHERE key = $1", CHANNELS_SECRET)
    if value is None:
        return None
    if re.fullmatch(f"[0-9a-f]{{{2 * _SECRET_BYTES}}}", value) is None:
        raise LogError(
            f"{where}: the channel secret in baf_meta (key {CHANNELS_SECRET!r}) is not {_SECRET_BYTES} bytes of "
            f"hex; was it changed by hand? Delete that row (DELETE FROM baf_meta WHERE key = '{CHANNELS_SECRET}'): "
            "the next process that opens the log for writing makes another (restart the running workers then)"
        )
    return Channels.from_secret(value.encode())
