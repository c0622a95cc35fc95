"""The names of a PostgreSQL log's notification channels, derived from a secret only baf's roles can read.

Workers wake each other with ``LISTEN/NOTIFY``, and PostgreSQL asks for no privilege to listen or to
notify: any role that can connect to the database may do both, on any channel it can name. Fixed names
(``baf_inbox``, ...) would let such a role hear every session id as it commits, and wake (or flood) every
worker at will. So each log's channel names are derived (HMAC-SHA256) from a random secret kept in
``baf_meta`` (key ``secret:channels``), made by the first store that opens the log for writing: only a
role that can read baf's tables learns them, and such a role can read the conversations anyway.

The names are not shown to other roles while in use: ``pg_stat_activity`` shows another role's query as
``<insufficient privilege>``, ``pg_listening_channels()`` lists only the caller's own channels, and a
notification reaches only the listeners of its channel. Each log (schema) has its own secret, so two logs
in one database no longer wake each other's workers.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Final

__all__ = ["CHANNELS_SECRET", "Channels"]

#: The ``baf_meta`` key of the secret the channel names are derived from (hex text, like ``shared_secret``'s).
CHANNELS_SECRET: Final = "secret:channels"

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
