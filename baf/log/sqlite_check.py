"""The SQLite log's storage checks for ``baf check``: what only the file itself can tell.

- SQLite's own ``PRAGMA integrity_check``: every page, index and constraint of the file (damaged
  pages, an index that disagrees with its table, text that is not UTF-8 where SQLite notices it);
- every session with records is listed in ``baf_sessions`` (else ``sessions()`` would hide it);
- how many records carry no checksum (written before schema version 4, or by a tool inserting rows
  itself): a note, not damage, since those are read without that check.

Runs on a read-only connection of its own (``mode=ro``), on a thread: it changes nothing.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Final
from urllib.parse import quote

__all__ = ["check_storage"]

# Lines of integrity_check output kept (it stops after this many problems).
_INTEGRITY_LINES: Final = 50


async def check_storage(path: Path, has_checksums: bool) -> list[tuple[bool, str]]:
    """``(is_damage, text)`` for what is wrong with the file at ``path`` (see the module docstring)."""
    return await asyncio.to_thread(_check, path, has_checksums)


def _check(path: Path, has_checksums: bool) -> list[tuple[bool, str]]:
    findings: list[tuple[bool, str]] = []
    connection = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    connection.text_factory = bytes  # text that is not UTF-8 must not stop the checks themselves
    try:
        try:
            rows = connection.execute(f"PRAGMA integrity_check({_INTEGRITY_LINES})").fetchall()
        except sqlite3.DatabaseError as exc:
            return [(True, f"SQLite cannot check the file: {exc}")]
        lines = [_text(row[0]) for row in rows]
        if lines != ["ok"]:
            findings.extend((True, f"SQLite integrity check: {line}") for line in lines)
        try:
            unlisted = connection.execute(
                "SELECT DISTINCT session_id FROM baf_records "
                "WHERE session_id NOT IN (SELECT session_id FROM baf_sessions) LIMIT 20"
            ).fetchall()
            findings.extend(
                (True, f"session {_text(sid)!r} has records but is not listed in baf_sessions") for (sid,) in unlisted
            )
            if has_checksums:
                (unchecked,) = connection.execute("SELECT count(*) FROM baf_records WHERE checksum IS NULL").fetchone()
            else:
                (unchecked,) = connection.execute("SELECT count(*) FROM baf_records").fetchone()
        except sqlite3.DatabaseError as exc:
            findings.append((True, f"SQLite cannot read the tables: {exc}"))
            return findings
        if unchecked:
            findings.append(
                (
                    False,
                    f"{unchecked:,} records have no checksum (written before schema version 4, or by a "
                    "tool): they are read without that check",
                )
            )
    finally:
        connection.close()
    return findings


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
