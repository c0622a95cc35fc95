"""Reading sessions for replay: records, session summaries, and tailing a live log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rich.console import Console

from baf.errors import CorruptRecordError, SessionNotFoundError, UnknownRecordVersionError
from baf.log.record import Record
from baf.log.redaction import Redactor
from baf.log.store import SessionLog
from baf.replay.render import DEFAULT_WIDTH, entry_line, fit_columns, render_group_end, render_timeline
from baf.replay.timeline import EntryFilter, TimelineBuilder

__all__ = ["follow", "read_session", "session_rows"]


async def read_session(log: SessionLog, session_id: str, redactor: Redactor | None = None) -> list[Record]:
    """The session's records (redacted again on the way out if ``redactor`` is given).

    Raises ``LookupError`` if the log has no such session.
    """
    records = await log.read(session_id)
    if not records:
        raise SessionNotFoundError(session_id)
    if redactor is not None and redactor.active:
        records = [redactor.redact_record(r) for r in records]
    return records


async def session_rows(log: SessionLog) -> list[dict[str, Any]]:
    """One summary per session (id, agent, first/last activity, records, state, errors), by projection.

    A session with a record that cannot be read is still listed: its row has ``unreadable``, the error
    (naming the seq), and ``None`` for what could not be read. Ids are shown with the environment's
    secrets redacted (a log written before a key was set may hold one in an id)."""
    rows: list[dict[str, Any]] = []
    redactor = Redactor.from_environment()
    for session_id in await log.sessions():
        shown = redactor.redact_text(session_id)
        try:
            p = await log.project(session_id)
        except (CorruptRecordError, UnknownRecordVersionError) as exc:
            # One unreadable session must not hide the others: it is listed with what is wrong with it.
            rows.append({"session": shown, "agent": None, "first": None, "last": None, "records": None,
                         "state": None, "errors": None, "unreadable": exc})  # fmt: skip
            continue
        rows.append({"session": shown, "agent": p.agent, "first": p.first_ts, "last": p.last_ts,
                     "records": p.last_seq, "state": p.current_state, "errors": p.errors})  # fmt: skip
    return rows


async def follow(
    log: SessionLog,
    session_id: str,
    console: Console,
    *,
    after_seq: int = 0,
    poll: float = 0.5,
    stop: Callable[[], bool] = lambda: False,
    entry_filter: EntryFilter | None = None,
    redactor: Redactor | None = None,
    width: int = DEFAULT_WIDTH,
) -> int:
    """Print the session's timeline from ``after_seq`` on as records land, until ``stop()``; return the last seq.

    Another process writes the log, so there is nothing to wait on but the file: it is polled every
    ``poll`` seconds (a WAL reader never blocks the writer). A reasoning group is printed as it grows:
    its header when it starts, each child once complete, its footer when it finishes.
    """
    keep = entry_filter or EntryFilter()
    builder = TimelineBuilder()
    printed: dict[int, int] = {}  # group seq -> children printed so far (-1: header only)
    last = after_seq
    while True:
        for record in await log.read(session_id, last):
            last = record.seq
            if redactor is not None:
                record = redactor.redact_record(record)
            for entry in builder.feed(record):
                done = printed.pop(entry.seq, None)
                if done is None:
                    shown = keep.apply(entry)
                    if shown is not None:
                        render_timeline(console, [shown], width)
                    continue
                for child in entry.children[max(done, 0) :]:  # the rest of a group already under way
                    if keep.apply(child) is not None:
                        console.print(entry_line(child, 1, width, columns=fit_columns(console)), soft_wrap=True)
                render_group_end(console, entry)
        group = builder.open_group
        if group is not None:
            done = printed.setdefault(group.seq, -1)
            if done < 0:
                console.print(entry_line(group, 0, width, columns=fit_columns(console)), soft_wrap=True)
                done = 0
            while done < len(group.children) and group.children[done].status != "open":
                if keep.apply(group.children[done]) is not None:
                    child = group.children[done]
                    console.print(entry_line(child, 1, width, columns=fit_columns(console)), soft_wrap=True)
                done += 1
            printed[group.seq] = done
        if stop():
            return last
        await asyncio.sleep(poll)
