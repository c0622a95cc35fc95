"""The session log: records, the store interface, the stores, and ``open_log`` to pick one by URL.

::

    async with open_log("sqlite:///var/agent.db?durability=full") as log:
        await log.append([Record("s1", 1, RecordKind.REPLY, {"text": "hi"})])
        records = await log.read("s1")
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from baf.log.memory import MemoryLog
from baf.log.record import CURRENT_VERSION, Record, RecordKind
from baf.log.sqlite import SQLiteLog
from baf.log.store import SessionLog
from baf.log.upcast import register_upcaster

# ``upcast`` (the function) is deliberately not imported here: the name would hide the
# ``baf.log.upcast`` module, which tests patch. Use ``baf.log.upcast.upcast``.

__all__ = [
    "CURRENT_VERSION",
    "MemoryLog",
    "Record",
    "RecordKind",
    "SQLiteLog",
    "SessionLog",
    "open_log",
    "register_upcaster",
]

_ACCEPTED = "sqlite:///relative/path.db, sqlite:////absolute/path.db, memory://, postgresql://user@host:port/database"
_POSTGRES_OPTIONS = ("pool_size", "read_only", "connect_timeout", "keepalive")
_SQLITE_OPTIONS = ("durability", "busy_timeout", "read_only")
# How ``read_only`` may be spelled in a query string.
_FLAGS = {"true": True, "1": True, "false": False, "0": False}


def open_log(url: str | SessionLog, **options: Any) -> SessionLog:
    """Return the (unstarted) store a URL names; a ``SessionLog`` instance is returned as it is.

    - ``sqlite:///relative/path.db``: a ``SQLiteLog`` at a path relative to the working directory;
    - ``sqlite:////absolute/path.db``: the same with an absolute path (four slashes);
    - ``memory://``: a new, empty ``MemoryLog``.

    SQLite options (``durability``, ``busy_timeout``, ``read_only``) may be given in the query string
    (``sqlite:///a.db?durability=full``, ``sqlite:///a.db?read_only=true``) or as keyword arguments; a
    keyword argument wins over the same option in the URL. Anything else raises ``ValueError``.
    ``read_only`` opens an existing log without ever changing it: see ``SQLiteLog``.

    - ``postgresql://user:password@host:port/database`` (or ``postgres://``): a ``PostgresLog`` (needs
      ``baf[postgres]``). Its options (``pool_size``, ``read_only``, ``connect_timeout``, ``keepalive``) are keyword
      arguments; the URL's query string goes to the server as asyncpg reads it (``sslmode``, settings).
    """
    if isinstance(url, SessionLog):
        if options:
            raise ValueError(f"options {sorted(options)} cannot be applied to an existing store {url!r}")
        return url
    if not isinstance(url, str):
        raise TypeError(f"open_log takes a URL string or a SessionLog, not {type(url).__name__}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.netloc or parts.path or parts.query or options:
            raise ValueError(f"{url!r}: memory:// takes no path and no options")
        return MemoryLog()
    if scheme == "sqlite":
        if not url[len("sqlite") :].startswith("://") or parts.fragment:
            raise ValueError(f"{url!r} is not a SQLite URL of the accepted forms ({_ACCEPTED}; '#' as %23)")
        if parts.netloc:
            raise ValueError(
                f"{url!r}: a SQLite URL has no host; use three slashes before a relative path "
                f"and four before an absolute one ({_ACCEPTED})"
            )
        # urlsplit leaves the leading "/" that ends "sqlite://"; what follows it is the path.
        path = unquote(parts.path[1:])
        if not path:
            raise ValueError(f"{url!r}: no database path ({_ACCEPTED})")
        merged: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False))
        merged.update(options)
        unknown = sorted(set(merged) - set(_SQLITE_OPTIONS))
        if unknown:
            raise ValueError(f"{url!r}: unknown option(s) {unknown}; SQLite accepts {list(_SQLITE_OPTIONS)}")
        if "busy_timeout" in merged and isinstance(merged["busy_timeout"], str):
            try:
                merged["busy_timeout"] = float(merged["busy_timeout"])
            except ValueError:
                raise ValueError(
                    f"{url!r}: busy_timeout must be a number of seconds, got {merged['busy_timeout']!r}"
                ) from None
        if isinstance(merged.get("read_only"), str):
            flag = _FLAGS.get(merged["read_only"].lower())
            if flag is None:
                raise ValueError(f"{url!r}: read_only must be true or false, got {merged['read_only']!r}")
            merged["read_only"] = flag
        return SQLiteLog(path, **merged)
    if scheme in ("postgresql", "postgres"):
        unknown = sorted(set(options) - set(_POSTGRES_OPTIONS))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}; PostgreSQL accepts {list(_POSTGRES_OPTIONS)}")
        from baf.log.postgres import PostgresLog  # asyncpg is an extra: imported only when asked for

        return PostgresLog(url, **options)
    from baf.log.postgres import redact_dsn  # a mistyped database URL may carry a password

    raise ValueError(f"unsupported log URL {redact_dsn(url)!r}; accepted: {_ACCEPTED}")
