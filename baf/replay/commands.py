"""What ``baf replay`` and ``baf export`` do; ``baf.cli`` only parses the arguments and calls these.

Everything printed or exported passes through a :class:`~baf.log.redaction.Redactor` built from the
environment: records are redacted when written, this also protects logs written before a key was set.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import secrets
import shutil
import sys
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

from baf.errors import SessionNotFoundError
from baf.log.record import Record, RecordKind
from baf.log.redaction import Redactor
from baf.log.store import SessionLog
from baf.replay.export import export_jsonl, export_otel, record_to_json
from baf.replay.interactive import run_interactive
from baf.replay.reading import follow, read_session, session_rows
from baf.replay.render import (
    DEFAULT_WIDTH,
    render_sessions,
    render_snapshot,
    render_timeline,
    visible,
    visible_json,
)
from baf.replay.state_at import state_at
from baf.replay.timeline import (
    ENGINE_KINDS,
    Entry,
    EntryFilter,
    EntryKind,
    TimelineBuilder,
    build_timeline,
    iter_timeline,
)

__all__ = ["ReplayOptions", "export_session", "replay", "report_unreadable", "run_export"]


@dataclass(slots=True)
class ReplayOptions:
    """The options of ``baf replay`` (see ``baf replay --help``)."""

    session: str | None = None
    kinds: frozenset[str] = frozenset()
    from_seq: int | None = None
    to_seq: int | None = None
    grep: str | None = None
    json: bool = False
    follow: bool = False
    at: int | None = None
    interactive: bool = False
    limit: int = 50
    expand: bool = False
    width: int = DEFAULT_WIDTH
    poll: float = 0.5
    stdin: TextIO = field(default_factory=lambda: sys.stdin)

    @property
    def entry_filter(self) -> EntryFilter:
        """The ``--kind``/``--from``/``--to``/``--grep`` filter."""
        return EntryFilter(self.kinds, self.from_seq, self.to_seq, self.grep)


def report_unreadable(rows: list[dict[str, Any]], command: str) -> int:
    """Print on stderr why each unreadable session of a listing could not be read; the exit status:
    2 if there was one (the listing shows the others, but the log is not sound), else 0."""
    errors = [row["unreadable"] for row in rows if row.get("unreadable") is not None]
    stderr = Console(stderr=True, highlight=False)
    redactor = Redactor.from_environment()  # an error names its session, whose id may hold a key
    for error in errors:
        stderr.print(Text(visible(redactor.redact_text(f"baf {command}: {error}")), style="red"), soft_wrap=True)
    return 2 if errors else 0


async def replay(log: SessionLog, options: ReplayOptions, console: Console, label: str = "log") -> int:
    """Run ``baf replay`` against an open log; returns the exit code."""
    redactor = Redactor.from_environment()
    if options.session is None:
        rows = await session_rows(log)
        render_sessions(console, rows, f"sessions in {label}")
        if rows:
            console.print(Text("pick one: baf replay LOG SESSION", style="dim"))
        return report_unreadable(rows, "replay")
    if options.follow:
        if options.from_seq is not None:
            after = max(0, options.from_seq - 1)
        else:
            records = await log.read(options.session)
            if not records:
                # Following a session before its first record is how one watches it start: wait for it.
                waiting = redactor.redact_text(f"waiting for session {options.session!r} to start (Ctrl-C to stop)")
                console.print(Text(visible(waiting), style="dim"))
            after = _tail_start(records, options)
        try:
            await follow(log, options.session, console, after_seq=after, poll=options.poll,
                         entry_filter=options.entry_filter, redactor=redactor, width=options.width)  # fmt: skip
        except KeyboardInterrupt:  # pragma: no cover - interactive only
            pass
        return 0
    if options.kinds and not await _kinds_known(log, options.session, options.kinds):
        return 2
    if options.at is None and not options.json and not options.interactive:
        return await _page(console, log, options, redactor)
    records = await read_session(log, options.session)
    if redactor.active:
        records = [redactor.redact_record(r) for r in records]
    if options.at is not None:
        # The records' session ids are redacted already; the id as typed is shown the same way.
        snapshot = state_at(redactor.redact_text(options.session), records, options.at)
        if options.json:
            console.file.write(visible_json(json.dumps(snapshot.to_dict(), ensure_ascii=False, default=str)) + "\n")
        else:
            render_snapshot(console, snapshot, options.width)
        return 0
    if options.json:
        keep = options.entry_filter
        for record in records:
            if _record_matches(record, keep):
                console.file.write(visible_json(json.dumps(record_to_json(record), ensure_ascii=False)) + "\n")
        return 0
    entries = _filtered(iter_timeline(records, bool(options.kinds & ENGINE_KINDS)), options.entry_filter)
    run_interactive(records, list(entries), options.stdin, console, redactor, options.width)
    return 0


#: What ``--kind`` accepts besides the kinds a session's records have: every kind baf writes, and the
#: timeline's entry kinds.
_KNOWN_KINDS: frozenset[str] = frozenset(
    {value for name, value in vars(RecordKind).items() if name.isupper() and isinstance(value, str)}
    | {value for name, value in vars(EntryKind).items() if name.isupper() and isinstance(value, str)}
    | ENGINE_KINDS
)


async def _kinds_known(log: SessionLog, session_id: str, kinds: frozenset[str]) -> bool:
    """Whether every ``--kind`` names a kind baf knows or one the session has (your own kinds); if not,
    say which are unknown and what the valid ones are, on stderr."""
    unknown = kinds - _KNOWN_KINDS
    if not unknown:
        return True
    present = {record.kind for record in await log.read(session_id)}
    unknown -= present
    if not unknown:
        return True
    names = ", ".join(repr(kind) for kind in sorted(unknown))
    valid = ", ".join(sorted(_KNOWN_KINDS | present))
    stderr = Console(stderr=True, highlight=False)
    stderr.print(Text(visible(f"baf replay: unknown --kind {names}; valid kinds: {valid}"), style="red"),
                 soft_wrap=True)  # fmt: skip
    return False


async def _page(console: Console, log: SessionLog, options: ReplayOptions, redactor: Redactor) -> int:
    """Print one page (``--limit`` entries; all with ``--limit 0``) of the timeline.

    Records are read, redacted and turned into entries a chunk at a time, only until the page is full:
    the first screen of a long session costs one screen, not the whole session.
    """
    assert options.session is not None
    builder = TimelineBuilder(bool(options.kinds & ENGINE_KINDS))
    page: list[Entry] = []
    last_seq = 0

    def take(entries: Iterable[Entry]) -> bool:
        """Add what the filter keeps; True once the page is full and one more entry is waiting."""
        for entry in _filtered(iter(entries), options.entry_filter):
            if options.limit and len(page) >= options.limit:
                return True
            page.append(entry)
        return False

    more = False
    to_seq = options.to_seq
    async for record in _records(log, options.session):
        last_seq = record.seq
        if take(builder.feed(redactor.redact_record(record) if redactor.active else record)):
            more = True
            break
        if to_seq is not None and record.seq > to_seq and builder.open_group is None:
            break  # past --to with no group open: nothing later can match
    if last_seq == 0:
        raise SessionNotFoundError(options.session)
    if not more:
        more = take(builder.finish())
    render_timeline(console, page, options.width, options.expand, options.grep)
    if more:
        console.print(Text(f"… more after #{page[-1].last_seq}: --from {page[-1].last_seq + 1} for the next page, "
                           "--limit 0 for all", style="dim"))  # fmt: skip
    elif not page:
        console.print(Text("no entries match", style="dim"))
    return 0


# Records per read of the paged view: a screen's worth of entries usually comes from far fewer.
_PAGE_CHUNK = 500


async def _records(log: SessionLog, session_id: str) -> AsyncIterator[Record]:
    """The session's records one by one, read ``_PAGE_CHUNK`` at a time."""
    async for chunk in log.read_chunks(session_id, size=_PAGE_CHUNK):
        for record in chunk:
            yield record


def _tail_start(records: list[Record], options: ReplayOptions) -> int:
    """Where ``--follow`` starts: so that about ``limit`` entries of history are shown first."""
    if not records or not options.limit:
        return 0
    entries = build_timeline(records)
    if len(entries) <= options.limit:
        return 0
    return entries[-options.limit].seq - 1


def _filtered(entries: Iterator[Entry], keep: EntryFilter) -> Iterator[Entry]:
    for entry in entries:
        if keep.to_seq is not None and entry.seq > keep.to_seq:
            return  # entries come in seq order: nothing later can match
        shown = keep.apply(entry)
        if shown is not None:
            yield shown


def _record_matches(record: Record, keep: EntryFilter) -> bool:
    """``--json``: the filter applied to records rather than entries."""
    if keep.from_seq is not None and record.seq < keep.from_seq:
        return False
    if keep.to_seq is not None and record.seq > keep.to_seq:
        return False
    if keep.kinds and record.kind not in keep.kinds:
        return False
    if keep.grep:
        return keep.grep.lower() in json.dumps(record.data, ensure_ascii=False).lower()
    return True


async def export_session(log: SessionLog, session_id: str, fmt: str, out: TextIO) -> int:
    """Run ``baf export``: write the session as ``jsonl`` or ``otel`` (OTLP/JSON) to ``out``."""
    redactor = Redactor.from_environment()
    records = await read_session(log, session_id, redactor)
    if fmt == "jsonl":
        export_jsonl(records, out)
    elif fmt == "otel":
        out.write(visible_json(json.dumps(export_otel(records), ensure_ascii=False)) + "\n")
    else:
        raise ValueError(f"unknown export format {fmt!r}; use jsonl or otel")
    return 0


def run_export(log: SessionLog, session_id: str, fmt: str, output: str | None) -> int:
    """``export_session`` to a file (``-o``) or stdout, in its own event loop.

    The file appears (or replaces an earlier one) only once the export has succeeded: a failed one (no
    such session, a log that cannot be read, a full disk) leaves neither an empty nor a partial file.
    """

    async def go(out: TextIO) -> int:
        async with log:
            return await export_session(log, session_id, fmt, out)

    if output is None or output == "-":
        return asyncio.run(go(sys.stdout))
    with _output_file(output) as out:
        return asyncio.run(go(out))


@contextlib.contextmanager
def _output_file(output: str) -> Iterator[TextIO]:
    """The ``-o`` file, written under a temporary name in its folder and renamed to ``output`` once the
    block succeeds (a rename within a folder replaces the file at once); removed if the block fails.

    Something that is not a regular file (``-o /dev/stdout``, a named pipe) has nothing to replace and
    is written directly. Through a symbolic link, the file it points to is replaced, not the link.
    """
    target = Path(output)
    direct = target.exists() and not target.is_file() and not target.is_dir()
    final = target if direct else target.resolve()
    temp = final if direct else final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp")
    try:
        if final.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        # "x": a new file, with the permissions open() gives any new file (a temp file's would be 0600).
        out = temp.open("w" if direct else "x", encoding="utf-8")
    except OSError as exc:
        # Same type (the CLI reports these as usage errors), with a message that says which option is wrong.
        raise type(exc)(f"cannot write -o {output}: {exc.strerror or exc}") from None
    try:
        with out:
            yield out
        if not direct:
            if final.is_file():
                shutil.copymode(final, temp)  # a new export of the same file keeps its permissions
            os.replace(temp, final)
    except BaseException:
        if not direct:
            temp.unlink(missing_ok=True)
        raise
