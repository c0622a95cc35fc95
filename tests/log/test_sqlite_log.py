"""What the SQLite store does beyond the shared contract: files, corruption, PRAGMAs, group commit."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from baf.errors import CorruptRecordError, LogClosedError, LogConflictError, LogError, LogStorageError
from baf.log import Record, SQLiteLog
from baf.log.record import CURRENT_VERSION
from baf.log.sqlite import SCHEMA


def rec(session_id: str, seq: int, **data: Any) -> Record:
    return Record(session_id, seq, "note", data or {"seq": seq}, ts=1000.0 + seq)


async def pragma(log: SQLiteLog, name: str) -> Any:
    """Read a PRAGMA on the store's writer connection (on the loop, where the writer task uses it)."""
    await log.start()
    writer = log._writer.connection if log._writer is not None else None
    assert writer is not None
    row = writer.execute(f"PRAGMA {name}").fetchone()
    assert row is not None
    return row[0]


def raw_execute(path: Path, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Change the file behind the store's back, as another tool (or bit rot) would."""
    connection = sqlite3.connect(path)
    try:
        with connection:
            connection.execute(sql, params)
    finally:
        connection.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "log.db"


async def test_records_survive_close_and_reopen(db: Path) -> None:
    async with SQLiteLog(db) as log:
        await log.append([rec("b", 1), rec("a", 1)])
        await log.append([rec("b", 2, text="é😀")])
    async with SQLiteLog(db) as log:
        assert await log.sessions() == ["b", "a"]
        assert await log.read("b") == [rec("b", 1), rec("b", 2, text="é😀")]
        with pytest.raises(LogConflictError):
            await log.append([rec("a", 1)])
        await log.append([rec("a", 2)])
        assert [r.seq for r in await log.read("a")] == [1, 2]


async def test_close_commits_what_is_queued(db: Path) -> None:
    log = SQLiteLog(db)
    await log.start()
    tasks = [asyncio.create_task(log.append([rec(f"s{n}", 1)])) for n in range(50)]
    await asyncio.sleep(0)  # queued, not yet committed
    await log.close()
    await asyncio.gather(*tasks)
    async with SQLiteLog(db) as reopened:
        assert len(await reopened.sessions()) == 50


async def test_starts_on_first_use_and_creates_the_directory(tmp_path: Path) -> None:
    db = tmp_path / "a" / "b" / "log.db"
    log = SQLiteLog(db)
    try:
        await log.append([rec("s", 1)])
        assert await asyncio.to_thread(db.exists)
        assert await log.read("s") == [rec("s", 1)]
    finally:
        await log.close()


async def test_a_closed_store_refuses_calls_until_started_again(db: Path) -> None:
    log = SQLiteLog(db)
    await log.close()  # never started: nothing to close, but closed now
    with pytest.raises(LogClosedError):
        await log.append([rec("s", 1)])
    assert not await asyncio.to_thread(db.exists)  # a refused call did not open the file
    await log.start()
    try:
        await log.append([rec("s", 1)])
    finally:
        await log.close()


def test_a_store_can_be_used_from_one_event_loop_after_another(db: Path) -> None:
    # An agent started, stopped and started again under a new asyncio.run keeps its store object.
    log = SQLiteLog(db)

    async def use(seq: int) -> list[Record]:
        async with log:
            await asyncio.gather(log.append([rec("s", seq)]), log.append([rec(f"other{seq}", 1)]))
            return await log.read("s")

    assert asyncio.run(use(1)) == [rec("s", 1)]
    assert asyncio.run(use(2)) == [rec("s", 1), rec("s", 2)]


@pytest.mark.parametrize(
    ("durability", "synchronous", "busy_timeout", "autocheckpoint"), [("normal", 1, 0, 0), ("full", 2, 2500, 1000)]
)
async def test_durability_sets_synchronous(
    db: Path, durability: str, synchronous: int, busy_timeout: int, autocheckpoint: int
) -> None:
    # "normal" commits on the event loop: its writer never waits for a lock there (the worker thread
    # does, see test_a_writer_waits_busy_timeout_for_the_lock) and leaves checkpoints to the worker.
    async with SQLiteLog(db, durability=durability, busy_timeout=2.5) as log:  # type: ignore[arg-type]
        assert log.durability == durability
        assert await pragma(log, "synchronous") == synchronous
        assert await pragma(log, "journal_mode") == "wal"
        assert await pragma(log, "busy_timeout") == busy_timeout
        assert await pragma(log, "wal_autocheckpoint") == autocheckpoint


def test_bad_arguments_are_refused(db: Path) -> None:
    with pytest.raises(ValueError, match="durability must be one of 'normal', 'full'"):
        SQLiteLog(db, durability="extra")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="busy_timeout"):
        SQLiteLog(db, busy_timeout=-1)
    for path in (":memory:", ""):
        with pytest.raises(ValueError, match="MemoryLog"):
            SQLiteLog(path)


@pytest.mark.parametrize("durability", ["normal", "full"])  # on the event loop / on the worker thread
async def test_group_commit_shares_transactions(db: Path, durability: str) -> None:
    from baf.log.sqlite_writer import _INLINE_COMMITS_PER_ROUND

    async with SQLiteLog(db, durability=durability) as log:  # type: ignore[arg-type]
        await asyncio.gather(*(log.append([rec(f"s{n}", 1), rec(f"s{n}", 2)]) for n in range(300)))
        # durability normal: the round's first appends commit alone, the rest of the burst as a group.
        alone = _INLINE_COMMITS_PER_ROUND if durability == "normal" else 0
        assert alone + 1 <= log.commits <= alone + 3
        assert len(await log.sessions()) == 300
        # Awaited one at a time there is nothing to group with: one commit each.
        before = log.commits
        for seq in range(3, 8):
            await log.append([rec("s0", seq)])
        assert log.commits == before + 5


async def test_a_second_store_on_the_same_file_cannot_overwrite(db: Path) -> None:
    async with SQLiteLog(db) as first, SQLiteLog(db) as second:
        await first.append([rec("s", 1, by="first")])
        with pytest.raises(LogConflictError) as caught:
            await second.append([rec("s", 2, by="second"), rec("s", 1, by="second")])
        assert (caught.value.session_id, caught.value.seq) == ("s", 1)
        await second.append([rec("s", 2, by="second")])
        assert [r.data["by"] for r in await first.read("s")] == ["first", "second"]
        assert await second.sessions() == ["s"]


async def test_reads_do_not_wait_for_a_writer(db: Path) -> None:
    async with SQLiteLog(db) as log:
        await log.append([rec("s", 1)])
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # holds the write lock, like a long transaction elsewhere
            other.execute(
                "INSERT INTO baf_records (session_id, seq, ts, kind, version, data) VALUES ('s', 2, 0, 'k', 1, '{}')"
            )
            # Sees the last commit, immediately, although the file is locked for writing.
            assert await asyncio.wait_for(log.read("s"), timeout=1) == [rec("s", 1)]
            assert await asyncio.wait_for(log.sessions(), timeout=1) == ["s"]
            other.execute("ROLLBACK")
        finally:
            other.close()


async def test_a_writer_waits_busy_timeout_for_the_lock(db: Path) -> None:
    async with SQLiteLog(db, busy_timeout=5) as log:
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")
            started = time.monotonic()
            await log.append([rec("s", 1)])  # waits for the lock instead of failing at once
            assert time.monotonic() - started >= 0.2
        finally:
            other.close()
        assert await log.read("s") == [rec("s", 1)]


async def test_a_failed_transaction_fails_its_appends_and_the_store_goes_on(db: Path) -> None:
    async with SQLiteLog(db, busy_timeout=0.1) as log:
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            results = await asyncio.gather(log.append([rec("a", 1)]), log.append([rec("b", 1)]), return_exceptions=True)
            # A baf error naming the file and the append's record, SQLite's own words kept as the cause.
            assert all(isinstance(result, LogStorageError) for result in results), results
            assert [(r.session_id, r.seq) for r in results] == [("a", 1), ("b", 1)]  # type: ignore[union-attr]
            assert all(str(db) in str(r) and "locked" in str(r) for r in results)
            assert all(isinstance(r.__cause__, sqlite3.OperationalError) for r in results)  # type: ignore[union-attr]
            other.execute("COMMIT")
        finally:
            other.close()
        await log.append([rec("a", 1)])
        assert await log.sessions() == ["a"]
        assert await log.read("b") == []


@pytest.mark.parametrize(
    ("assignment", "reason"),
    [
        ("data = '{\"broken'", "data is not valid JSON"),
        ("data = '[1, 2]'", "data is an array, not a JSON object"),
        ("data = '\"text\"'", "data is a string, not a JSON object"),
        ("data = X'7B7D'", "data is a blob, not JSON text"),
        ("data = CAST(X'7BFF7D' AS TEXT)", "data is not valid UTF-8"),
        ("kind = X'00'", "kind is a blob, not text"),
        ("ts = 'yesterday'", "ts is text, not a number"),
        ("version = 'one'", "version is text, not an integer"),
        ("version = 0", "version 0 is not >= 1"),
    ],
)
async def test_corrupt_row_names_session_and_seq(db: Path, assignment: str, reason: str) -> None:
    async with SQLiteLog(db) as log:
        await log.append([rec("s", 1), rec("s", 2), rec("s", 3), rec("t", 1)])
    # Without its checksum, as a row written before schema 4: the checks below the checksum are what is tested.
    raw_execute(db, f"UPDATE baf_records SET {assignment}, checksum = NULL WHERE session_id = 's' AND seq = 2")
    async with SQLiteLog(db) as log:
        with pytest.raises(CorruptRecordError) as caught:
            await log.read("s")
        error = caught.value
        assert (error.session_id, error.seq) == ("s", 2)
        assert reason in error.reason
        assert "'s'" in str(error) and "seq 2" in str(error)
        # Only reads that include the row fail; nothing is skipped, nothing else is affected.
        assert await log.read("s", after_seq=2) == [rec("s", 3)]
        assert await log.read("t") == [rec("t", 1)]
        # The fold that reads as it goes is just as strict.
        with pytest.raises(CorruptRecordError) as caught:
            await log.project("s")
        assert (caught.value.session_id, caught.value.seq, caught.value.reason) == ("s", 2, error.reason)
        assert (await log.project("t")).last_seq == 1


@pytest.mark.parametrize("assignment", ["data = '{\"broken'", "data = CAST(X'7BFF7D' AS TEXT)", "version = 0"])
async def test_a_corrupt_row_far_into_a_long_session_is_named(db: Path, assignment: str) -> None:
    """``project`` fetches a long session in chunks: a bad row in a later chunk still fails by name."""
    async with SQLiteLog(db) as log:
        await log.append([rec("s", seq) for seq in range(1, 6001)])
    raw_execute(db, f"UPDATE baf_records SET {assignment}, checksum = NULL WHERE session_id = 's' AND seq = 5500")
    async with SQLiteLog(db) as log:
        for reading in (log.read("s"), log.project("s")):
            with pytest.raises(CorruptRecordError) as caught:
                await reading
            assert (caught.value.session_id, caught.value.seq) == ("s", 5500)


async def test_rows_off_the_fast_path_read_as_before(db: Path) -> None:
    """An integer ts and JSON only the standard parser reads (NaN) are valid rows, not corrupt ones."""
    async with SQLiteLog(db) as log:
        await log.append([rec("s", 1), Record("s", 2, "reply", {"text": "x", "score": float("inf")}, ts=5.0)])
    raw_execute(db, "UPDATE baf_records SET ts = 7, checksum = NULL WHERE seq = 1")  # as a tool may write
    async with SQLiteLog(db) as log:
        first, second = await log.read("s")
        assert (first.ts, type(first.ts)) == (7.0, float)
        assert second.data == {"text": "x", "score": float("inf")}
        folded = await log.project("s")
        assert (folded.first_ts, folded.last_ts, folded.history[0].text) == (7.0, 5.0, "x")


async def test_records_that_sqlite_would_refuse_fail_alone(db: Path) -> None:
    async with SQLiteLog(db) as log:
        bad_batches: list[list[Record]] = [
            [Record("s", 1, "k", {"text": "lone \ud800 surrogate"})],
            [Record("s", 1, "k", {}, ts=float("nan"))],
            [Record(42, 1, "k", {})],  # type: ignore[arg-type]
            [Record("s", 1, "k", {}, version=2**63)],
            [Record("s", 1, "k", ["not", "a", "dict"])],  # type: ignore[arg-type]
        ]
        results = await asyncio.gather(
            *(log.append(batch) for batch in bad_batches), log.append([rec("good", 1)]), return_exceptions=True
        )
        assert all(isinstance(result, TypeError | ValueError) for result in results[:-1]), results
        assert results[-1] is None
        assert await log.sessions() == ["good"]


async def test_an_append_cancelled_before_the_writer_took_it_is_dropped(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import baf.log.sqlite_writer as sqlite_module

    monkeypatch.setattr(sqlite_module, "_INLINE_COMMITS_PER_ROUND", 1)  # the second append of a round queues
    async with SQLiteLog(db) as log:
        first = asyncio.create_task(log.append([rec("first", 1)]))  # commits by itself, at once
        task = asyncio.create_task(log.append([rec("s", 1)]))  # arrives with it: queued for the writer
        await asyncio.sleep(0)  # both have run up to their commit; the writer has not run yet
        assert first.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await log.append([rec("other", 1)])  # the writer has passed the cancelled batch by now
        assert await log.read("s") == []
        assert await log.sessions() == ["first", "other"]


async def test_a_lone_append_commits_at_once_and_appends_arriving_together_share_a_commit(db: Path) -> None:
    from baf.log.sqlite_writer import _INLINE_COMMITS_PER_ROUND

    async with SQLiteLog(db) as log:
        before = log.commits
        append = asyncio.ensure_future(log.append([rec("alone", 1)]))
        await asyncio.sleep(0)  # one step of the task: committed without waiting for the writer task
        assert append.done() and log.commits == before + 1

        async def twice() -> None:  # one session committing twice in a row: both at once, no hand-off
            await log.append([rec("alone", 2)])
            await log.append([rec("alone", 3)])

        both = asyncio.ensure_future(twice())
        await asyncio.sleep(0)
        assert both.done() and log.commits == before + 3
        before = log.commits
        await asyncio.gather(*(log.append([rec(f"s{n}", 1)]) for n in range(50)))
        assert log.commits == before + 50  # a few sessions together: each commits by itself, no wait
        # A burst: the round's first appends commit by themselves, the others share a group commit.
        before = log.commits
        await asyncio.gather(*(log.append([rec(f"b{n}", 1)]) for n in range(500)))
        assert before + _INLINE_COMMITS_PER_ROUND + 1 <= log.commits <= before + _INLINE_COMMITS_PER_ROUND + 2
        assert len(await log.sessions()) == 551 and len(await log.read("alone")) == 3


async def test_appends_wait_while_the_worker_holds_the_connection(db: Path) -> None:
    # While one group waits on the worker thread for a lock another process holds, later appends must
    # queue behind it instead of using the connection from the event loop at the same time.
    async with SQLiteLog(db, busy_timeout=5) as log:
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            waiting = asyncio.create_task(log.append([rec("a", 1)]))
            await asyncio.sleep(0.05)  # on the worker now, waiting for the lock
            later = [asyncio.create_task(log.append([rec("b", seq)])) for seq in (1, 2)]
            await asyncio.sleep(0.05)
            assert not waiting.done() and not any(task.done() for task in later)
            other.execute("COMMIT")
            await asyncio.wait_for(asyncio.gather(waiting, *later), timeout=5)
        finally:
            other.close()
        assert [r.seq for r in await log.read("b")] == [1, 2] and len(await log.read("a")) == 1


async def test_a_stopped_writer_fails_appends_instead_of_hanging(db: Path) -> None:
    async with SQLiteLog(db) as log:
        writer_task = log._writer._task
        assert writer_task is not None
        writer_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writer_task
        with pytest.raises(LogClosedError):
            await log.append([rec("s", 1)])
        await log.start()  # a new writer
        await log.append([rec("s", 1)])
        assert await log.read("s") == [rec("s", 1)]


@pytest.mark.parametrize("use", ["append", "start only"])
def test_a_store_left_open_does_not_keep_the_process_alive(db: Path, use: str) -> None:
    # asyncio.run cancels the writer task when it ends; the connections (and their threads) must go.
    # With "start only" the task is cancelled before its first step, so its own cleanup never runs.
    log = SQLiteLog(db)

    async def forget_to_close() -> None:
        await (log.append([rec("s", 1)]) if use == "append" else log.start())

    asyncio.run(forget_to_close())
    assert log._writer is None and log._reader is None
    with pytest.raises(LogClosedError):
        asyncio.run(log.read("s"))


async def test_a_file_from_a_newer_schema_is_refused(db: Path) -> None:
    async with SQLiteLog(db) as log:
        await log.append([rec("s", 1)])
    raw_execute(db, "UPDATE baf_meta SET value = '99' WHERE key = 'schema_version'")
    log = SQLiteLog(db)
    with pytest.raises(LogError, match="schema version '99'"):
        await log.start()
    await log.close()


def make_foreign(path: Path) -> None:
    raw_execute(path, "CREATE TABLE users (name TEXT)")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.mkdir(), r"^cannot open .*log\.db: it is a directory, not a log file$"),
        (lambda path: path.write_text("hello\n"), r"^not a baf log: .*log\.db is not a SQLite database$"),
        (make_foreign, r"^not a baf log: .*log\.db is a database with other tables \(users\) and no baf_meta"),
    ],
    ids=["directory", "text", "foreign"],
)
async def test_a_writer_refuses_what_is_not_a_log_with_a_one_line_log_error(db: Path, make: Any, message: str) -> None:
    make(db)

    def state() -> tuple[list[str], bytes | None]:
        return sorted(p.name for p in db.parent.iterdir()), db.read_bytes() if db.is_file() else None

    before = state()
    log = SQLiteLog(db)
    with pytest.raises(LogError, match=message) as caught:
        await log.start()
    await log.close()
    assert "\n" not in str(caught.value)
    # Left as it was: no baf tables added to another program's database, no WAL switch, no new files.
    assert state() == before


async def test_an_empty_file_becomes_a_new_log(db: Path) -> None:
    db.write_bytes(b"")  # noqa: ASYNC240 - a test's setup
    async with SQLiteLog(db) as log:
        await log.append([rec("s", 1)])
    async with SQLiteLog(db, read_only=True) as log:
        assert [r.seq for r in await log.read("s")] == [1]


async def test_rows_are_stored_as_documented(db: Path) -> None:
    async with SQLiteLog(db) as log:
        await log.append([Record("s", 1, "reply", {"text": "é", "n": [1, 2]}, ts=12.5)])
    connection = sqlite3.connect(db)
    try:
        row = connection.execute("SELECT session_id, seq, ts, kind, version, data FROM baf_records").fetchone()
    finally:
        connection.close()
    # Compact JSON, not ASCII-escaped: the file is readable with the sqlite3 shell.
    assert row == ("s", 1, 12.5, "reply", CURRENT_VERSION, '{"text":"é","n":[1,2]}')


async def test_a_group_larger_than_one_statement_is_still_one_atomic_append(tmp_path: Path) -> None:
    from baf.log.sqlite_commit import ROWS_PER_STATEMENT as _ROWS_PER_STATEMENT

    count = _ROWS_PER_STATEMENT + 10
    async with SQLiteLog(tmp_path / "big.db") as log:
        await log.append([Record("big", seq, "k", {"n": seq}) for seq in range(1, count + 1)])
        with pytest.raises(LogConflictError):
            # The last record conflicts: nothing of this batch may land.
            await log.append([Record("other", s, "k", {}) for s in range(1, count)] + [Record("big", 1, "k", {})])
        assert len(await log.read("big")) == count
        assert await log.read("other") == []


async def test_a_normal_store_keeps_its_wal_bounded_under_sustained_appends(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer turns SQLite's automatic checkpoint off (it would fsync inside a commit, on the event
    # loop), so the store must checkpoint itself. Appends here never pause, so background checkpoints
    # are always overtaken and the WAL never restarts by itself: only the blocking checkpoint that
    # follows a too-large report keeps it bounded (without it the WAL reaches ~44 MB, without any
    # checkpoint more). Limits scaled down so that a short run crosses them many times.
    import baf.log.sqlite_writer as sqlite_module

    monkeypatch.setattr(sqlite_module, "_CHECKPOINT_PAGES", 100)
    monkeypatch.setattr(sqlite_module, "_WAL_LIMIT_PAGES", 200)
    payload = "x" * 16_000
    async with SQLiteLog(db) as log:
        for seq in range(1, 1501):  # ~24 MB of records, one commit each
            await log.append([Record("s", seq, "note", {"p": payload})])
        wal_bytes = (await asyncio.to_thread(Path(f"{db}-wal").stat)).st_size
        assert wal_bytes < 6_000_000, wal_bytes
        assert [r.seq for r in await log.read("s", after_seq=1498)] == [1499, 1500]


@pytest.fixture
def held_checkpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Background checkpoints every 5 pages, each held until ``release`` is set (a slow fsync);
    ``started`` is set when the first begins. Yields ``(started, release)``."""
    import baf.log.sqlite_writer as sqlite_module

    monkeypatch.setattr(sqlite_module, "_CHECKPOINT_PAGES", 5)
    started, release = threading.Event(), threading.Event()
    checkpoint = sqlite_module._Checkpointer.checkpoint

    def held(self: Any) -> int:
        started.set()
        release.wait(10)
        return checkpoint(self)

    monkeypatch.setattr(sqlite_module._Checkpointer, "checkpoint", held)
    try:
        yield started, release
    finally:
        release.set()


async def append_until_a_checkpoint_starts(log: SQLiteLog, started: threading.Event) -> int:
    """Append ``s`` records up to the commit that starts a background checkpoint; the last seq.
    Waits until the worker runs it (on a loaded machine it may start late)."""
    seq = 0
    while log._writer is not None and not log._writer._checkpointing and seq < 100:
        seq += 1
        await log.append([rec("s", seq)])
        await asyncio.sleep(0)  # a new round: each append may commit on the loop
    assert await asyncio.to_thread(started.wait, 10), "no checkpoint started"
    return seq


async def test_appends_commit_while_a_background_checkpoint_runs(
    db: Path, held_checkpoint: tuple[threading.Event, threading.Event]
) -> None:
    # A checkpoint fsyncs the WAL and the database (milliseconds); appends must not wait for it.
    started, release = held_checkpoint
    async with SQLiteLog(db) as log:
        seq = await append_until_a_checkpoint_starts(log, started)
        for _ in range(20):  # the checkpoint is still held: these must commit anyway
            seq += 1
            await asyncio.wait_for(log.append([rec("s", seq)]), timeout=5)
            await asyncio.sleep(0)
        assert not release.is_set()
        assert len(await log.read("s")) == seq
        release.set()


async def test_commits_wait_for_a_background_checkpoint_too_many_pages_overtook(
    db: Path, held_checkpoint: tuple[threading.Event, threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkpoint held up (a slow fsync) while commits go on would let the WAL grow without bound:
    # once the pages committed since it began reach the WAL limit, appends wait for it.
    import baf.log.sqlite_writer as sqlite_module

    monkeypatch.setattr(sqlite_module, "_WAL_LIMIT_PAGES", 40)
    started, release = held_checkpoint
    async with SQLiteLog(db) as log:
        seq = await append_until_a_checkpoint_starts(log, started)
        overtaking, waiting = 0, None
        while waiting is None and overtaking < 60:
            seq += 1
            overtaking += 1
            append = asyncio.ensure_future(log.append([rec("s", seq)]))
            for _ in range(20):  # loop rounds, not time: a commit on the loop or by the writer takes a few
                await asyncio.sleep(0)
            if not append.done():  # held behind the checkpoint on the worker, however long it takes
                waiting = append
        # Pages are counted from the checkpoint's start, two per small append: the twentieth reaches
        # the limit of 40, so the next one waits.
        assert waiting is not None, "appends never waited for the overtaken checkpoint"
        assert overtaking == 21, overtaking
        release.set()
        await asyncio.wait_for(waiting, timeout=10)
        assert [r.seq for r in await log.read("s")] == list(range(1, seq + 1))


async def test_a_failed_background_checkpoint_is_logged_and_the_next_one_blocks(
    db: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Background checkpoints that keep failing must not let the WAL grow unseen: the failure is logged
    # and the next checkpoint runs between commits on the writer's connection, which copies the WAL.
    import baf.log.sqlite_writer as sqlite_module

    monkeypatch.setattr(sqlite_module, "_CHECKPOINT_PAGES", 20)

    def broken(self: Any) -> int:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_module._Checkpointer, "checkpoint", broken)
    blocking: list[int] = []
    checkpoint = sqlite_module.SQLiteWriter._checkpoint

    async def counted(self: sqlite_module.SQLiteWriter) -> None:
        blocking.append(1)
        await checkpoint(self)

    monkeypatch.setattr(sqlite_module.SQLiteWriter, "_checkpoint", counted)
    payload = "x" * 8_000
    with caplog.at_level("WARNING", logger="baf.log.sqlite"):
        async with SQLiteLog(db) as log:
            for seq in range(1, 41):
                await log.append([Record("s", seq, "note", {"p": payload})])
                await asyncio.sleep(0.001)  # the failed checkpoint reports back
            assert len(await log.read("s")) == 40
    assert "background checkpoint failed" in caplog.text
    assert blocking, "no checkpoint ran between commits after the background one failed"


async def test_a_large_group_commits_on_the_worker_thread(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import baf.log.sqlite_writer as sqlite_module

    threads: list[tuple[int, int]] = []  # (rows, thread) of each commit
    commit_group = sqlite_module.commit_group

    def spy(cursor: sqlite3.Cursor, batches: Any, registered: set[str], *rest: Any) -> Any:
        threads.append((sum(len(rows) for rows in batches), threading.get_ident()))
        return commit_group(cursor, batches, registered, *rest)

    monkeypatch.setattr(sqlite_module, "commit_group", spy)
    loop_thread = threading.get_ident()
    async with SQLiteLog(db) as log:
        await log.append([rec("small", 1)])
        await asyncio.sleep(0)
        big = [Record("big", seq, "note", {"text": "x" * 50_000}) for seq in range(1, 41)]  # 2 MB
        await log.append(big)
        assert len(await log.read("big")) == 40
    # A few bytes commit on the event loop; megabytes would hold it up, so they go to the worker.
    assert threads == [(1, loop_thread), (40, threads[1][1])] and threads[1][1] != loop_thread


async def test_a_task_appending_in_a_tight_loop_still_lets_other_tasks_run(db: Path) -> None:
    # Each append of an idle store may commit at once, without yielding; a few in a row, then the
    # writer task takes the next, so a migration-style loop of appends cannot hold the event loop.
    ticks = 0
    running = True

    async def ticker() -> None:
        nonlocal ticks
        while running:
            ticks += 1
            await asyncio.sleep(0)

    async with SQLiteLog(db) as log:
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = ticks
        for seq in range(1, 101):
            await log.append([rec("s", seq)])
        during = ticks - start
        running = False
        await task
        assert during >= 10, during
        assert [r.seq for r in await log.read("s")] == list(range(1, 101))


async def test_opening_waits_for_a_file_another_connection_is_writing(db: Path) -> None:
    # Switching a file to WAL needs it to itself; SQLite answers a conflict there with "locked" at once
    # rather than waiting busy_timeout, so two processes opening a new log together used to fail.
    other = sqlite3.connect(db, isolation_level=None)
    try:
        for statement in SCHEMA:  # a baf log in the default rollback-journal mode (another baf's tables)
            other.execute(statement)
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO baf_meta VALUES ('written_by', 'another tool')")
        asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")
        async with SQLiteLog(db, busy_timeout=5) as log:
            await log.append([rec("s", 1)])
            assert await log.read("s") == [rec("s", 1)]
    finally:
        other.close()
