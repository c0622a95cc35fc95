"""How ``PostgresLog`` commits a group of appends in one statement (one round trip), and what it must know
to do so.

The statement (:func:`group_statement`) checks the fences, registers new sessions, inserts the records,
deletes the inbox rows the appends consume, keeps the unfinished-work index and notifies the log's records
channel per session (delivered at commit; ``baf.log.postgres_channels``). Only the parts a group needs are
in its statement (a tool turn's append is an insert and a notification). Every write is conditioned on
``ok``, so that ``ok`` false means nothing was written:

- in a worker's store, every lease still has the epoch the append was fenced with, read under FOR KEY
  SHARE, which a takeover (SELECT ... FOR UPDATE first, see ``baf.log.postgres_leases``) waits for and
  which heartbeats (updates of no key column) do not;
- every inbox row to consume is still there, locked FOR UPDATE first: a row another transaction deleted
  is skipped by the lock (after waiting for it), so the count comes out short.

The work index's new statuses are computed here, in Python, from the statuses the writer knows
(:class:`Known`: from its own appends, and from loads, which read each session's row with its records); the
statement only stores them. A group whose sessions' statuses are not all known reads them first
(:func:`stored_work`), in the same transaction.

Its lists (session ids, kinds, the records' data, seqs, versions, epochs) go as one ``text`` argument each,
not as arrays: asyncpg tests every element of an array argument against abstract base classes
(``Iterable``, ``Sized``: a Python call each, ~2,000 instructions), more than encoding the whole record.
A list of names goes as a JSON array (unpacked by ``json_array_elements_text``);
integers as orjson writes them, comma-separated (``string_to_array`` and a cast); the data, JSON texts
themselves, joined by U+001E (:data:`DATA_SEPARATOR`), which no JSON text holds, unpacked by
``string_to_array`` at a fraction of what a JSON array costs the server. The times stay a ``float8[]``:
parsing their text would cost the server more than the checks cost the client (bench/README.md).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson

from baf.log.jsontext import decode_json
from baf.log.record import RecordKind
from baf.log.work import IDLE, WORK_KINDS, WorkStatus, work_after

if TYPE_CHECKING:
    import asyncpg

__all__ = ["DATA_SEPARATOR", "Batch", "Known", "Plan", "Refused", "Row", "Stored", "group_statement", "stored_work"]

#: A ``baf_records`` row: session_id, seq, kind, data (JSON text), ts, version.
Row = tuple[str, int, str, str, float, int]

#: Work statuses read from ``baf_work`` (idle when it has no row), with each session's last seq (None: none).
Stored = dict[str, tuple[WorkStatus, int | None]]

#: Joins the records' data texts into one argument: a control character, which JSON text never holds raw
#: (RFC 8259 escapes them in strings and allows none elsewhere), so splitting gives the texts back exactly.
DATA_SEPARATOR: Final = "\x1e"

#: How many sessions' work statuses a writer keeps (the least recently written are forgotten first).
KNOWN_LIMIT: Final = 50_000

# Locks the rows of the sessions whose statuses the writer does not know (an append of the same session
# elsewhere waits) and reads each one's last seq, so that the status read is known for its next appends.
_WORK_OF: Final = """
WITH w AS (SELECT session_id, status FROM baf_work WHERE session_id = ANY($1::text[]) FOR UPDATE)
SELECT u.s, w.status, (SELECT max(r.seq) FROM baf_records r WHERE r.session_id = u.s)
FROM unnest($1::text[]) AS u(s) LEFT JOIN w ON w.session_id = u.s
"""


@dataclass(slots=True)
class Batch:
    """One ``append`` waiting for the writer."""

    rows: list[Row]
    future: asyncio.Future[None]
    #: (session, epoch) leases the append must still hold when it commits (fencing), if this store is a worker's.
    fences: list[tuple[str, int]] | None = None
    #: Inbox rows (session, ids) this append consumes: deleted in its transaction, exactly once.
    consumes: tuple[str, list[int]] | None = None


class Refused(Exception):
    """The group statement wrote nothing (a lease, an inbox row): commit the appends one by one to see which."""


@functools.cache
def group_statement(
    fenced: bool, inbox: bool, records: bool, new_sessions: bool, work_gone: bool, work_set: bool
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The statement for a group with these parts, and the names and types of its arguments in order (see
    :meth:`Plan.statement`). It returns one row: ``ok``, the inbox ids deleted, the notifications sent."""
    names: list[str] = []
    casts: list[str] = []

    def arg(name: str, cast: str) -> str:
        names.append(name)
        casts.append(cast)
        return _placeholder(len(names), cast)

    ctes: list[str] = []
    checks: list[str] = []
    if fenced:
        ctes.append(
            "fence AS (SELECT l.session_id FROM baf_leases l "
            f"JOIN unnest({arg('fence_names', 'text[]')}, {arg('fence_epochs', 'bigint[]')}) AS f(s, e) "
            f"ON l.session_id = f.s AND l.epoch = f.e WHERE l.owner = {arg('owner', 'text')} FOR KEY SHARE OF l)"
        )
        checks.append(f"(SELECT count(*) FROM fence) = json_array_length(${names.index('fence_names') + 1}::json)")
    if inbox:
        pairs = f"unnest({arg('inbox_sessions', 'text[]')}, {arg('inbox_ids', 'bigint[]')}) AS c(s, id)"
        ctes.append(
            f"inbox AS MATERIALIZED (SELECT i.id FROM baf_inbox i JOIN {pairs} "
            "ON i.session_id = c.s AND i.id = c.id FOR UPDATE OF i)"
        )
        checks.append(f"(SELECT count(*) FROM inbox) = cardinality({_again(names, 'inbox_ids', 'bigint[]')})")
    when = ""
    if checks:
        ctes.append(f"ok AS (SELECT {' AND '.join(checks)} AS ok)")
        when = "(SELECT ok FROM ok)"
    if new_sessions:
        ctes.append(
            "new_sessions AS (INSERT INTO baf_sessions (session_id) "
            f"SELECT s FROM unnest({arg('new_sessions', 'text[]')}) WITH ORDINALITY AS u(s, n) "
            f"{_where(when)}ORDER BY n ON CONFLICT DO NOTHING)"
        )
    if records:
        columns = ", ".join(
            arg(name, cast)
            for name, cast in (
                ("session_ids", "text[]"), ("seqs", "bigint[]"), ("kinds", "text[]"), ("texts", "data"),
                ("tss", "float8[]"), ("versions", "int[]"),
            )
        )  # fmt: skip
        ctes.append(
            "written AS (INSERT INTO baf_records (session_id, seq, kind, data, ts, version) "
            f"SELECT * FROM unnest({columns}) {_where(when)})"
        )
    if inbox:
        ctes.append(
            "consumed AS (DELETE FROM baf_inbox i USING unnest("
            f"{_again(names, 'inbox_sessions', 'text[]')}, {_again(names, 'inbox_ids', 'bigint[]')}) AS c(s, id) "
            f"WHERE i.session_id = c.s AND i.id = c.id{' AND ' + when if when else ''} RETURNING i.id)"
        )
    if work_gone:
        ctes.append(
            f"work_gone AS (DELETE FROM baf_work WHERE session_id = ANY({arg('work_gone', 'text[]')})"
            f"{' AND ' + when if when else ''})"
        )
    if work_set:
        rows = f"{arg('work_names', 'text[]')}, {arg('work_statuses', 'text[]')}, {arg('work_unfinished', 'bool[]')}"
        ctes.append(
            "work_set AS (INSERT INTO baf_work (session_id, status, unfinished) "
            f"SELECT * FROM unnest({rows}) {_where(when)}"
            "ON CONFLICT (session_id) DO UPDATE SET status = EXCLUDED.status, unfinished = EXCLUDED.unfinished)"
        )
    if records:
        ctes.append(
            f"notified AS (SELECT pg_notify({arg('channel', 'text')}, s) FROM unnest({arg('notify', 'text[]')}) AS s "
            f"{_where(when)})"
        )
    result = ", ".join(
        (
            when or "true",
            "(SELECT array_agg(id) FROM consumed)" if inbox else "NULL::bigint[]",
            "(SELECT count(*) FROM notified)" if records else "0",
        )
    )
    return f"WITH {', '.join(ctes)} SELECT {result}", tuple(zip(names, casts, strict=True))


def _placeholder(number: int, cast: str) -> str:
    """Argument ``number`` as a value of type ``cast``, from the text :func:`_argument` makes of a list:
    ``text[]`` a JSON array, ``data`` (a ``text[]``) texts joined by ``DATA_SEPARATOR``, ``bigint[]`` and
    ``int[]`` integers joined by commas."""
    if cast == "text[]":
        return f"ARRAY(SELECT t FROM json_array_elements_text(${number}::json) WITH ORDINALITY AS a(t, n) ORDER BY n)"
    if cast == "data":
        return f"string_to_array(${number}::text, E'\\x1e')"
    if cast in ("bigint[]", "int[]"):
        return f"string_to_array(${number}::text, ',')::{cast}"
    return f"${number}::{cast}"


def _again(names: list[str], name: str, cast: str) -> str:
    """The placeholder of an argument already numbered."""
    return _placeholder(names.index(name) + 1, cast)


def _argument(cast: str, value: Any) -> Any:
    """``value`` as the argument :func:`_placeholder` unpacks into ``cast``. Names and texts are exact
    ``str`` and valid Unicode (the rows' checks), integers fit in 64 bits (the rows' checks bound seqs and
    versions; epochs and inbox ids are the database's own)."""
    if cast == "text[]":
        return orjson.dumps(value).decode()
    if cast == "data":
        return DATA_SEPARATOR.join(value)
    if cast in ("bigint[]", "int[]"):
        return orjson.dumps(value).decode()[1:-1]  # "[1,2]": its brackets off
    return value


def _where(condition: str) -> str:
    return f"WHERE {condition} " if condition else ""


class Known:
    """What a writer knows of the sessions it wrote or loaded: the last seq and the work status after it.

    That status is the one ``baf_work`` holds as long as nobody else appended to the session since, and
    nobody else can have: the next append's first seq must follow the known last one, and if another writer
    had appended that seq, the primary key would refuse this append. So a known session's appends need no
    read of ``baf_work``, and the group goes in one statement. A session the writer knows is registered in
    ``baf_sessions`` too. Bounded: the least recently written sessions are forgotten (their next append reads).
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, WorkStatus]] = {}

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._entries

    def before(self, session_id: str, first_seq: int) -> WorkStatus | None:
        """The status before ``first_seq``, if known (``None``: read it)."""
        if first_seq == 1:
            return IDLE  # nothing was written before the first record
        entry = self._entries.get(session_id)
        if entry is None or entry[0] != first_seq - 1:
            return None
        return entry[1]

    def learn(self, plan: Plan) -> None:
        """Remember what ``plan`` committed."""
        entries = self._entries
        for session_id, status in plan.after.items():
            entries.pop(session_id, None)
            if status is not None:
                entries[session_id] = (plan.last_seq[session_id], status)
        while len(entries) > KNOWN_LIMIT:
            del entries[next(iter(entries))]

    def loaded(self, session_id: str, last_seq: int, status: str | None) -> None:
        """Learn a session's last seq and its ``baf_work`` row (``None``: none, idle), read in one snapshot
        (a load): the writer then needs no read before its next append, as if it had written them. A row it
        cannot read is not learnt (the next append reads it)."""
        try:
            work = IDLE if status is None else WorkStatus.from_text(status)
        except ValueError:
            self._entries.pop(session_id, None)
            return
        entries = self._entries
        entries.pop(session_id, None)
        entries[session_id] = (last_seq, work)
        while len(entries) > KNOWN_LIMIT:
            del entries[next(iter(entries))]

    def forget(self, session_ids: list[str]) -> None:
        """Know nothing more of ``session_ids`` (their next appends read ``baf_work``)."""
        for session_id in session_ids:
            self._entries.pop(session_id, None)


class Plan:
    """The arguments of the group statement for some appends, and the work statuses they lead to."""

    __slots__ = (
        "_before", "_first", "_work", "after", "columns", "consumed", "fences", "last_seq", "new_sessions",
        "sessions", "unknown",
    )  # fmt: skip

    def __init__(self, group: list[Batch], known: Known) -> None:
        rows = [row for batch in group for row in batch.rows]
        self.columns: list[list[Any]] = [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * 6
        self.fences: list[tuple[str, int]] = list(
            dict.fromkeys(pair for batch in group if batch.fences for pair in batch.fences)
        )
        self.consumed: list[tuple[str, int]] = [
            (batch.consumes[0], row_id) for batch in group if batch.consumes for row_id in batch.consumes[1]
        ]
        by_session: dict[str, list[Row]] = {}
        for row in rows:
            by_session.setdefault(row[0], []).append(row)
        self.sessions: list[str] = list(by_session)
        self.new_sessions: list[str] = [name for name in by_session if name not in known]
        self.last_seq: dict[str, int] = {}
        #: The status after the appends, per session written (``None``: not known, forget it).
        self.after: dict[str, WorkStatus | None] = {}
        self._before: dict[str, WorkStatus | None] = {}
        self._first: dict[str, int] = {}
        self._work: dict[str, list[Row]] = {}
        self.unknown: list[str] = []
        for name, session_rows in by_session.items():
            session_rows.sort(key=lambda row: row[1])
            first, last = session_rows[0][1], session_rows[-1][1]
            before = known.before(name, first)
            self._before[name] = before
            self._first[name] = first
            # Only a run of seqs without holes can be known afterwards (another writer may fill a hole).
            self.last_seq[name] = last if last - first + 1 == len(session_rows) else -1
            work = [row for row in session_rows if row[2] in WORK_KINDS]
            if work:
                self._work[name] = work
                if before is None:
                    self.unknown.append(name)
            self.after[name] = before if self.last_seq[name] > 0 else None

    def statement(self, owner: str | None, stored: Stored, channel: str) -> tuple[str, list[Any]]:
        """The group statement and its arguments; ``owner`` is the worker whose fences are checked (``None``:
        a store without leases), ``stored`` the statuses read for the unknown sessions, ``channel`` the
        log's records channel."""
        gone, kept = self.work_changes(stored)
        sql, arguments = group_statement(
            owner is not None, bool(self.consumed), bool(self.sessions), bool(self.new_sessions), bool(gone), bool(kept)
        )
        columns = self.columns
        values: dict[str, Any] = {
            "fence_names": [name for name, _ in self.fences],
            "fence_epochs": [epoch for _, epoch in self.fences],
            "owner": owner,
            "inbox_sessions": [name for name, _ in self.consumed],
            "inbox_ids": [row_id for _, row_id in self.consumed],
            "new_sessions": self.new_sessions,
            "session_ids": columns[0],
            "seqs": columns[1],
            "kinds": columns[2],
            "texts": columns[3],
            "tss": columns[4],
            "versions": columns[5],
            "work_gone": gone,
            "work_names": [name for name, _ in kept],
            "work_statuses": [status.to_text() for _, status in kept],
            "work_unfinished": [status.unfinished for _, status in kept],
            "channel": channel,
            "notify": self.sessions,
        }
        return sql, [_argument(cast, values[name]) for name, cast in arguments]

    def work_changes(self, stored: Stored) -> tuple[list[str], list[tuple[str, WorkStatus]]]:
        """The sessions whose ``baf_work`` row goes (now idle) and the rows to write, given the statuses
        ``stored`` read for the unknown sessions (with their last seq)."""
        gone: list[str] = []
        kept: list[tuple[str, WorkStatus]] = []
        for name, work in self._work.items():
            before = self._before[name]
            exact = before is not None
            if before is None:
                before, last = stored.get(name, (IDLE, None))
                exact = last == self._first[name] - 1
            status = before
            for _, seq, kind, text, _ts, _version in work:
                data = decode_json(text) if kind == RecordKind.STEP_STARTED else _NO_DATA
                status = work_after(status, kind, seq, data)
            if status == IDLE and before != IDLE:
                gone.append(name)
            elif status != IDLE and status != before:
                kept.append((name, status))
            self.after[name] = status if exact and self.last_seq[name] > 0 else None
        return gone, kept


#: ``work_after`` reads the data of ``step_started`` records only.
_NO_DATA: Final[dict[str, Any]] = {}


async def stored_work(connection: asyncpg.Connection, sessions: list[str]) -> Stored:
    """The stored work statuses (idle when there is no row) and last seqs of ``sessions``, rows locked."""
    if not sessions:
        return {}
    rows = await connection.fetch(_WORK_OF, sessions)
    return {row[0]: (IDLE if row[1] is None else WorkStatus.from_text(row[1]), row[2]) for row in rows}
