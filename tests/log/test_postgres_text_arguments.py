"""The PostgreSQL group statement takes its lists of text as one text argument each (names as a JSON array,
the records' data joined by U+001E, see baf.log.postgres_commit): whatever a session id, a kind or the data
holds, it is stored exactly, in one group, and fencing and the inbox still refuse what they refused.
Against a real PostgreSQL server (see tests/pg_cluster.py)."""

from __future__ import annotations

import asyncio
import math
import struct
from collections.abc import AsyncIterator

import asyncpg
import pytest

from baf.errors import LeaseLostError, LogError
from baf.log import Record
from baf.log.postgres import PostgresLog, encode_row
from baf.log.postgres_inbox import Inbox
from baf.log.postgres_leases import Leases
from baf.log.record import MAX_TS, RecordKind

# Every character the two encodings give a meaning to, and text that looks like their syntax.
AWKWARD = [
    "plain",
    'quote"back\\slash',
    "brackets[]{}(),;",
    "separator\x1einside\x1e",
    "control\n\t\r\x01\x1f",
    "unicode é 中文 🦜",
    '["a", {"b": 1}]',
    "{a,b}",
    "NULL",
    " padded ",
    "\\u0041",
]

DATA = {
    "separator": "a\x1eb",
    "controls": "\x00\x01\n\x1f",  # JSON escapes them: the data's text still holds none raw
    "quotes": 'say "hi" \\ [x] {y}',
    "unicode": "é 中文 🦜",
    "numbers": [2**63 - 1, -(2**63), 0.1, 1e300, -0.0],
    "nested": {"list": [[], {}, None, True]},
}


@pytest.fixture
async def worker(postgres_dsn: str) -> AsyncIterator[PostgresLog]:
    log = PostgresLog(postgres_dsn, worker_id="worker-a")
    await log.start()
    try:
        yield log
    finally:
        await log.close()


async def stored_rows(dsn: str) -> dict[tuple[str, int], tuple[str, str, bytes, int]]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch("SELECT session_id, seq, kind, data, ts, version FROM baf_records")
    finally:
        await connection.close()
    return {(r[0], r[1]): (r[2], r[3], struct.pack("<d", r[4]), r[5]) for r in rows}


async def test_any_session_id_kind_and_data_is_stored_exactly_in_one_group(worker: PostgresLog) -> None:
    leases = Leases(worker)
    for name in AWKWARD:
        assert await leases.acquire(name) is not None
    inbox_ids = {name: await Inbox(worker).post(name, {"text": name}) for name in AWKWARD}
    times = [5e-324, 0.1, MAX_TS, 1795734534.6810398]
    batches = [
        [
            Record(name, 1, RecordKind.SESSION_STARTED, {"agent": name}, times[i % 4], 2),
            Record(name, 2, RecordKind.MESSAGE_RECEIVED, {"text": name, **DATA}, times[(i + 1) % 4], 2),
            Record(name, 3, AWKWARD[(i + 1) % len(AWKWARD)], DATA, times[(i + 2) % 4], 2),
        ]
        for i, name in enumerate(AWKWARD)
    ]
    # Queued together: one group, one statement (consuming each session's inbox row too).
    await asyncio.gather(*(worker.append_consuming(b, b[0].session_id, [inbox_ids[b[0].session_id]]) for b in batches))

    stored = await stored_rows(worker.dsn)
    expected = {
        (r.session_id, r.seq): (r.kind, encode_row(r)[3], struct.pack("<d", r.ts), r.version)
        for batch in batches
        for r in batch
    }
    assert stored == expected  # the data's text as encoded, the times to the bit
    for batch in batches:
        assert await worker.read(batch[0].session_id) == batch
    assert sorted(await worker.sessions()) == sorted(AWKWARD)
    assert sorted(await worker.unfinished_sessions()) == sorted(AWKWARD)  # the work index, per name
    for name in AWKWARD:
        assert await Inbox(worker).pending(name) == []


async def test_a_lost_lease_on_an_awkward_name_still_refuses_only_its_append(worker: PostgresLog) -> None:
    lost, kept = 'lost "one"\x1e[]', "kept\x1e"
    for name in (lost, kept):
        assert await Leases(worker).acquire(name) == 1
    connection = await asyncpg.connect(worker.dsn)
    try:  # another worker took the lease over meanwhile
        await connection.execute("UPDATE baf_leases SET owner = 'worker-b', epoch = 2 WHERE session_id = $1", lost)
    finally:
        await connection.close()
    results = await asyncio.gather(
        worker.append([Record(lost, 1, "note", {}, 1.5, 1)]),
        worker.append([Record(kept, 1, "note", {}, 1.5, 1)]),
        return_exceptions=True,
    )
    assert isinstance(results[0], LeaseLostError) and results[0].session_id == lost
    assert results[1] is None
    assert await worker.read(lost) == []
    assert [r.seq for r in await worker.read(kept)] == [1]


async def test_an_inbox_row_consumed_already_under_an_awkward_name_refuses_only_its_append(
    worker: PostgresLog,
) -> None:
    name = 'inbox "x"\x1e{1,2}'
    assert await Leases(worker).acquire(name) == 1
    row_id = await Inbox(worker).post(name, {"text": "once"})
    await worker.append_consuming([Record(name, 1, "note", {"n": 1}, 1.5, 1)], name, [row_id])
    with pytest.raises(LogError, match="consumed already"):
        await worker.append_consuming([Record(name, 2, "note", {"n": 2}, 1.5, 1)], name, [row_id])
    assert [r.data for r in await worker.read(name)] == [{"n": 1}]


@pytest.mark.parametrize("ts", [math.nan, math.inf, -math.inf])
async def test_a_time_that_is_not_finite_is_refused_before_anything_is_sent(postgres_dsn: str, ts: float) -> None:
    async with PostgresLog(postgres_dsn) as log:
        with pytest.raises(TypeError, match="ts"):
            await log.append([Record("s", 1, "note", {}, ts, 1)])
        assert await log.read("s") == []


async def test_data_the_json_fallback_encodes_is_split_back_exactly(postgres_dsn: str) -> None:
    # A tuple is not what orjson's output decodes to (a list): json.dumps writes this one, which escapes
    # control characters as well.
    records = [
        Record("s", 1, "note", {"tuple": ("a\x1eb", "\x1e")}, 1.5, 2),
        Record("s", 2, "note", {"after": "\x1e"}, 1.5, 2),
    ]
    async with PostgresLog(postgres_dsn) as log:
        await asyncio.gather(
            log.append(records[:1]), log.append(records[1:]), log.append([Record("t", 1, "x", {}, 1.5, 2)])
        )
        stored = await stored_rows(postgres_dsn)
        assert stored[("s", 1)][1] == encode_row(records[0])[3] == '{"tuple":["a\\u001eb","\\u001e"]}'
        assert stored[("s", 2)][1] == encode_row(records[1])[3]
        assert [r.data for r in await log.read("s")] == [{"tuple": ["a\x1eb", "\x1e"]}, {"after": "\x1e"}]


async def test_a_version_no_column_holds_is_refused_for_its_append_alone(postgres_dsn: str) -> None:
    async with PostgresLog(postgres_dsn) as log:
        results = await asyncio.gather(
            log.append([Record("low", 1, "note", {}, 1.5, -(2**70))]),
            log.append([Record("fine", 1, "note", {}, 1.5, 2), Record("fine", 2, "note", {}, 1.5, 2)]),
            return_exceptions=True,
        )
        assert isinstance(results[0], ValueError) and "version" in str(results[0]) and "too small" in str(results[0])
        assert results[1] is None
        assert [r.seq for r in await log.read("fine")] == [1, 2]
        assert await log.read("low") == []
