"""The contract every ``SessionLog`` store passes, written once (needs pytest and pytest-asyncio).

Subclass it in a test module under a name pytest collects, and say how to make an empty store::

    from baf.testing.store_contract import SessionLogContract

    class TestMyStore(SessionLogContract):
        async def make_log(self, tmp_path: Path) -> SessionLog:
            return MyStore(tmp_path / "log")

Each test gets a fresh store from ``make_log``, started, and closes it afterwards. The tests carry their
own asyncio marks, so they run whatever mode the project sets for pytest-asyncio. The tests check the
numbered guarantees of ``baf.log.store`` (with the unfinished-work index and ``read_for_load``) plus the
lifecycle (``start``/``close`` idempotent, no use
after ``close`` until ``start`` reopens the store, with its records) and reading through
``baf.log.upcast``. A store must read through
``baf.log.upcast.upcast`` (looked up at call time): the upcasting tests swap its registry.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from baf.errors import (
    CorruptRecordError,
    CorruptSnapshotError,
    LogClosedError,
    LogConflictError,
    UnknownRecordVersionError,
)
from baf.log import upcast as upcast_module
from baf.log.projection import project
from baf.log.record import CURRENT_VERSION, Record, RecordKind
from baf.log.snapshot import seal, snapshot_data
from baf.log.store import SessionLog, load_projection

__all__ = ["SessionLogContract", "message", "rec", "started", "turn"]

#: A fixed timestamp with a fractional part, so a store that rounds ts is caught.
TS = 1_712_345_678.123456


def rec(
    session_id: str,
    seq: int,
    kind: str = "note",
    data: dict[str, Any] | None = None,
    *,
    ts: float = TS,
    version: int = CURRENT_VERSION,
) -> Record:
    """A record with predictable contents: by default ``data`` names its own session and seq."""
    if data is None:
        data = {"session": session_id, "seq": seq}
    return Record(session_id=session_id, seq=seq, kind=kind, data=data, ts=ts + seq, version=version)


class SessionLogContract(abc.ABC):
    """Tests that every ``SessionLog`` store must pass. Subclass as ``Test...`` and define ``make_log``."""

    # Every test is async: marked here, they run in pytest-asyncio's default strict mode too, without
    # the user's project having to set ``asyncio_mode = "auto"``.
    pytestmark = pytest.mark.asyncio

    @abc.abstractmethod
    async def make_log(self, tmp_path: Path) -> SessionLog:
        """Return a new, empty store; ``tmp_path`` is a fresh directory it may use."""

    @pytest_asyncio.fixture
    async def log(self, tmp_path: Path) -> AsyncIterator[SessionLog]:
        """A started, empty store, closed after the test."""
        store = await self.make_log(tmp_path)
        await store.start()
        try:
            yield store
        finally:
            await store.close()

    # -- 3. read returns what was appended, in seq order ----------------------------------------------

    async def test_new_log_is_empty(self, log: SessionLog) -> None:
        assert await log.sessions() == []
        assert await log.read("nobody") == []

    async def test_read_of_unknown_session_is_empty(self, log: SessionLog) -> None:
        await log.append([rec("known", 1)])
        assert await log.read("unknown") == []
        assert await log.read("know") == []  # a prefix is not a match

    async def test_round_trip_keeps_kind_data_ts_and_version(self, log: SessionLog) -> None:
        data = {
            "text": "héllo wörld — 日本語 — עברית — 😀👍🏽",
            "nested": {"list": [1, 2.5, -3, True, False, None, "x"], "deep": {"a": {"b": {"c": []}}}},
            "empty": {},
            'quote"and\\backslash': "line\nbreak\ttab\u0000nul",
            "big": 2**62,
            "float": 0.1,
        }
        records = [
            rec("sessiön-😀", 1, kind="message_received", data=data),
            rec("sessiön-😀", 2, kind="kind with spaces/ünicode", data={}),
        ]
        await log.append(records)
        assert await log.read("sessiön-😀") == records
        assert await log.sessions() == ["sessiön-😀"]

    async def test_large_batch_and_large_data(self, log: SessionLog) -> None:
        records = [rec("big", seq, data={"blob": "x" * 10_000, "seq": seq}) for seq in range(1, 501)]
        await log.append(records)
        assert await log.read("big") == records

    async def test_read_is_in_seq_order_whatever_the_append_order(self, log: SessionLog) -> None:
        await log.append([rec("s", 3)])
        await log.append([rec("s", 1), rec("s", 2)])
        await log.append([rec("s", 5), rec("s", 4)])
        assert [r.seq for r in await log.read("s")] == [1, 2, 3, 4, 5]

    async def test_read_after_seq(self, log: SessionLog) -> None:
        await log.append([rec("s", seq) for seq in range(1, 6)])
        assert [r.seq for r in await log.read("s", after_seq=2)] == [3, 4, 5]
        assert [r.seq for r in await log.read("s", after_seq=0)] == [1, 2, 3, 4, 5]
        assert await log.read("s", after_seq=5) == []
        assert await log.read("s", after_seq=99) == []

    async def test_a_missing_seq_is_corruption_naming_session_and_seq(self, log: SessionLog) -> None:
        await log.append([rec("s", 1), rec("s", 2), rec("s", 4), rec("s", 5), rec("t", 1)])
        for reading in (log.read("s"), log.read("s", after_seq=2), log.project("s"), log.read_for_load("s")):
            with pytest.raises(CorruptRecordError) as caught:
                await reading
            assert (caught.value.session_id, caught.value.seq) == ("s", 3)
            assert "missing" in caught.value.reason
        with pytest.raises(CorruptRecordError):
            [chunk async for chunk in log.read_chunks("s", size=2)]
        assert [r.seq for r in await log.read("s", after_seq=3)] == [4, 5]  # a read past the gap is whole
        assert await log.read("t") == [rec("t", 1)]
        await log.append([rec("s", 3)])
        assert [r.seq for r in await log.read("s")] == [1, 2, 3, 4, 5]

    async def test_sessions_are_kept_apart(self, log: SessionLog) -> None:
        await log.append([rec("a", 1), rec("b", 1), rec("a", 2)])
        assert await log.read("a") == [rec("a", 1), rec("a", 2)]
        assert await log.read("b") == [rec("b", 1)]

    async def test_stored_data_is_not_shared_with_the_caller(self, log: SessionLog) -> None:
        data: dict[str, Any] = {"items": [1, 2]}
        await log.append([rec("s", 1, data=data)])
        data["items"].append(3)
        first = await log.read("s")
        assert first[0].data == {"items": [1, 2]}
        first[0].data["items"].append(4)
        assert (await log.read("s"))[0].data == {"items": [1, 2]}

    async def test_empty_append_is_a_no_op(self, log: SessionLog) -> None:
        await log.append([])
        assert await log.sessions() == []

    # -- 5. sessions in order of first append -------------------------------------------------------

    async def test_sessions_in_order_of_first_record(self, log: SessionLog) -> None:
        await log.append([rec("b", 1)])
        await log.append([rec("a", 1), rec("c", 1)])
        await log.append([rec("b", 2), rec("d", 1), rec("a", 2)])
        assert await log.sessions() == ["b", "a", "c", "d"]

    # -- 1 and 2. atomic appends, unique keys, no overwrite -----------------------------------------

    async def test_conflict_names_the_record_and_writes_nothing(self, log: SessionLog) -> None:
        await log.append([rec("s", 1)])
        batch = [rec("s", 2), rec("other", 1), rec("s", 1, data={"new": True})]
        with pytest.raises(LogConflictError) as caught:
            await log.append(batch)
        assert (caught.value.session_id, caught.value.seq) == ("s", 1)
        assert await log.read("s") == [rec("s", 1)]
        assert await log.read("other") == []
        assert await log.sessions() == ["s"]

    async def test_conflict_never_overwrites(self, log: SessionLog) -> None:
        original = rec("s", 1, kind="original", data={"value": "first"})
        await log.append([original])
        for attempt in (rec("s", 1, kind="impostor", data={"value": "second"}), original):
            with pytest.raises(LogConflictError):
                await log.append([attempt])
        assert await log.read("s") == [original]

    async def test_duplicate_key_within_one_batch(self, log: SessionLog) -> None:
        with pytest.raises(LogConflictError) as caught:
            await log.append([rec("s", 1), rec("s", 2), rec("s", 1, data={"dup": True})])
        assert (caught.value.session_id, caught.value.seq) == ("s", 1)
        assert await log.read("s") == []
        assert await log.sessions() == []

    @pytest.mark.parametrize("seq", [0, -1])
    async def test_seq_below_one_is_rejected(self, log: SessionLog, seq: int) -> None:
        with pytest.raises(ValueError, match="seq"):
            await log.append([rec("s", 1), rec("s", seq)])
        assert await log.read("s") == []

    async def test_data_that_is_not_json_is_rejected(self, log: SessionLog) -> None:
        with pytest.raises(TypeError):
            await log.append([rec("s", 1), rec("s", 2, data={"when": object()})])
        assert await log.read("s") == []
        assert await log.sessions() == []

    async def test_log_still_works_after_a_refused_append(self, log: SessionLog) -> None:
        await log.append([rec("s", 1)])
        with pytest.raises(LogConflictError):
            await log.append([rec("s", 1)])
        await log.append([rec("s", 2)])
        assert [r.seq for r in await log.read("s")] == [1, 2]

    # -- concurrency --------------------------------------------------------------------------------

    async def test_concurrent_appends_from_many_sessions_all_land(self, log: SessionLog) -> None:
        sessions = [f"session-{n:03d}" for n in range(50)]
        appends = [
            log.append([rec(session, 2 * round_ + 1), rec(session, 2 * round_ + 2)])
            for round_ in range(4)
            for session in sessions
        ]
        assert len(appends) == 200
        await asyncio.gather(*appends)
        for session in sessions:
            assert await log.read(session) == [rec(session, seq) for seq in range(1, 9)]
        assert sorted(await log.sessions()) == sessions

    async def test_concurrent_conflicts_fail_only_the_conflicting_append(self, log: SessionLog) -> None:
        await log.append([rec("taken", 1)])
        good = [log.append([rec(f"good-{n}", 1), rec(f"good-{n}", 2)]) for n in range(20)]
        bad = log.append([rec("bad", 1), rec("taken", 1, data={"overwrite": True})])
        racers = [log.append([rec("race", 1, data={"racer": n})]) for n in range(2)]
        results = await asyncio.gather(*good, bad, *racers, return_exceptions=True)
        assert results[:20] == [None] * 20
        assert isinstance(results[20], LogConflictError)
        assert (results[20].session_id, results[20].seq) == ("taken", 1)
        race_results = results[21:]
        assert race_results.count(None) == 1  # exactly one racer wins; the other conflicts
        winner = race_results.index(None)
        assert isinstance(race_results[1 - winner], LogConflictError)
        for n in range(20):
            assert [r.seq for r in await log.read(f"good-{n}")] == [1, 2]
        assert await log.read("bad") == []
        assert await log.read("taken") == [rec("taken", 1)]
        assert [r.data for r in await log.read("race")] == [{"racer": winner}]

    # -- lifecycle ----------------------------------------------------------------------------------

    async def test_start_and_close_are_idempotent(self, log: SessionLog) -> None:
        await log.start()
        await log.start()
        await log.append([rec("s", 1)])
        await log.close()
        await log.close()

    async def test_calls_after_close_raise(self, log: SessionLog) -> None:
        await log.append([rec("s", 1)])
        await log.close()
        with pytest.raises(LogClosedError):
            await log.append([rec("s", 2)])
        with pytest.raises(LogClosedError):
            await log.read("s")
        with pytest.raises(LogClosedError):
            await log.sessions()
        with pytest.raises(LogClosedError):
            await log.project("s")

    async def test_start_after_close_reopens_with_the_records(self, log: SessionLog) -> None:
        await log.append([rec("s", 1), rec("t", 1)])
        await log.close()
        await log.start()
        assert await log.read("s") == [rec("s", 1)]
        assert await log.sessions() == ["s", "t"]
        await log.append([rec("s", 2)])
        assert [r.seq for r in await log.read("s")] == [1, 2]

    async def test_close_finishes_appends_already_made(self, log: SessionLog) -> None:
        tasks = [asyncio.create_task(log.append([rec(f"s{n}", 1)])) for n in range(20)]
        await asyncio.sleep(0)  # let every append reach the store
        await log.close()
        await asyncio.gather(*tasks)  # none failed

    # -- project: the fold of read ------------------------------------------------------------------

    async def test_project_is_the_fold_of_read(self, log: SessionLog) -> None:
        kinds: list[tuple[str, dict[str, Any]]] = [
            (RecordKind.SESSION_STARTED, {"agent": "a", "platform": "p", "initial_state": "idle"}),
            (RecordKind.MESSAGE_RECEIVED, {"event": {"type": "text"}, "text": "hi"}),
            (RecordKind.STEP_STARTED, {"event_seq": 2}),
            (RecordKind.TRANSITION, {"source": "idle", "dest": "busy"}),
            (RecordKind.VARIABLE_SET, {"name": "n", "value": [1, {"deep": None}]}),
            ("note", {"anything": "at all"}),
            (RecordKind.REPLY, {"text": "hello"}),
            (RecordKind.ERROR, {"message": "x"}),
            (RecordKind.VARIABLE_DELETED, {"name": "n"}),
            (RecordKind.STEP_FINISHED, {"event_seq": 2}),
        ]
        # Enough records to span several fetches of a store that folds in chunks.
        records = [rec("s", seq, *kinds[(seq - 1) % len(kinds)]) for seq in range(1, 5002)]
        for start in range(0, len(records), 1000):
            await log.append(records[start : start + 1000])
        await log.append([rec("other", 1, RecordKind.TRANSITION, {"dest": "elsewhere"})])
        folded = await log.project("s")
        assert folded == project("s", await log.read("s"))
        assert (folded.last_seq, folded.current_state, folded.errors) == (5001, "idle", 500)
        assert folded == project("s", records)
        assert await log.project("nobody") == project("nobody", [])

    # -- reading through upcasters ------------------------------------------------------------------

    async def test_old_records_are_upcast_on_read(self, log: SessionLog, monkeypatch: pytest.MonkeyPatch) -> None:
        # Pretend this baf is one version ahead of the records it wrote.
        newer = upcast_module.Upcasters(current_version=CURRENT_VERSION + 1)

        @newer.register("contract_renamed", from_version=CURRENT_VERSION)
        def rename_title(data: dict[str, Any]) -> dict[str, Any]:
            data["name"] = data.pop("title")
            return data

        monkeypatch.setattr(upcast_module, "UPCASTERS", newer)
        await log.append(
            [
                rec("s", 1, kind="contract_renamed", data={"title": "x"}),
                rec("s", 2, kind="contract_unchanged", data={"title": "y"}),
            ]
        )
        for _ in range(2):  # an upcaster mutating its input must not change the stored record
            first, second = await log.read("s")
            assert (first.data, first.version) == ({"name": "x"}, CURRENT_VERSION + 1)
            assert (second.data, second.version) == ({"title": "y"}, CURRENT_VERSION + 1)
            assert (first.kind, first.seq, first.ts) == ("contract_renamed", 1, TS + 1)

    # -- read_chunks: read, a chunk at a time ---------------------------------------------------------

    async def test_read_chunks_is_read_in_pieces(self, log: SessionLog) -> None:
        await log.append([rec("s", seq) for seq in range(1, 26)] + [rec("other", 1)])
        chunks = [chunk async for chunk in log.read_chunks("s", after_seq=3, size=10)]
        assert all(1 <= len(chunk) <= 10 for chunk in chunks)
        assert [r for chunk in chunks for r in chunk] == await log.read("s", after_seq=3)
        assert [chunk async for chunk in log.read_chunks("missing")] == []
        # A caller may stop after the first chunk; the store is fine afterwards.
        async for first in log.read_chunks("s", size=4):
            assert [r.seq for r in first] == [1, 2, 3, 4]
            break
        assert len(await log.read("s")) == 25
        with pytest.raises(ValueError, match="size"):
            async for _ in log.read_chunks("s", size=0):
                pass

    # -- 8. read_last: the end of a session ------------------------------------------------------------

    async def test_read_last_is_the_newest_records_before_a_seq(self, log: SessionLog) -> None:
        await log.append([rec("s", seq) for seq in range(1, 26)] + [rec("other", seq) for seq in range(1, 40)])
        everything = await log.read("s")
        assert await log.read_last("s", 4) == everything[-4:]
        assert await log.read_last("s", 4, before_seq=11) == everything[6:10]  # seqs 7 to 10
        assert await log.read_last("s", 100) == everything
        assert await log.read_last("s", 100, before_seq=3) == everything[:2]
        assert await log.read_last("s", 5, before_seq=1) == []
        assert await log.read_last("s", 5, before_seq=99) == everything[-5:]
        assert await log.read_last("missing", 5) == []
        with pytest.raises(ValueError, match="count"):
            await log.read_last("s", 0)

    async def test_read_last_finds_a_missing_seq_in_what_it_reads(self, log: SessionLog) -> None:
        await log.append([rec("s", 1), rec("s", 2), rec("s", 4), rec("s", 5)])
        with pytest.raises(CorruptRecordError) as caught:
            await log.read_last("s", 3)
        assert (caught.value.session_id, caught.value.seq) == ("s", 3)

    async def test_project_folds_upcast_records(self, log: SessionLog, monkeypatch: pytest.MonkeyPatch) -> None:
        newer = upcast_module.Upcasters(current_version=CURRENT_VERSION + 1)

        @newer.register(RecordKind.TRANSITION, from_version=CURRENT_VERSION)
        def rename_target(data: dict[str, Any]) -> dict[str, Any]:
            data["dest"] = data.pop("target")
            return data

        monkeypatch.setattr(upcast_module, "UPCASTERS", newer)
        await log.append([rec("s", 1, RecordKind.TRANSITION, {"target": "old-shape"})])
        await log.append([rec("s", 2, RecordKind.REPLY, {"text": "new shape"}, version=CURRENT_VERSION + 1)])
        folded = await log.project("s")
        assert folded.current_state == "old-shape"
        assert [entry.text for entry in folded.history] == ["new shape"]

    async def test_record_from_a_newer_baf_raises(self, log: SessionLog) -> None:
        await log.append([rec("s", 1), rec("s", 2, version=CURRENT_VERSION + 1)])
        with pytest.raises(UnknownRecordVersionError) as caught:
            await log.read("s")
        error = caught.value
        assert (error.session_id, error.seq, error.version) == ("s", 2, CURRENT_VERSION + 1)
        assert await log.read("s", after_seq=2) == []
        with pytest.raises(UnknownRecordVersionError) as caught:
            await log.project("s")
        assert (caught.value.session_id, caught.value.seq) == ("s", 2)

    # -- 6. the unfinished-work index -----------------------------------------------------------------

    async def test_unfinished_sessions_follow_each_step_of_a_turn(self, log: SessionLog) -> None:
        assert await log.unfinished_sessions() == []
        await log.append([started("s", 1)])
        assert await log.unfinished_sessions() == ["s"]  # the initial body has not run
        await log.append([rec("s", 2, RecordKind.STEP_STARTED, {"event_seq": None})])
        assert await log.unfinished_sessions() == ["s"]  # its step is open
        await log.append([rec("s", 3, RecordKind.STEP_FINISHED, {"event_seq": None})])
        assert await log.unfinished_sessions() == []
        await log.append([message("s", 4)])
        assert await log.unfinished_sessions() == ["s"]  # a message not handled yet
        await log.append([rec("s", 5, RecordKind.STEP_STARTED, {"event_seq": 4}), rec("s", 6, "note")])
        assert await log.unfinished_sessions() == ["s"]  # its step is open
        await log.append([rec("s", 7, RecordKind.STEP_FINISHED, {"event_seq": 4})])
        assert await log.unfinished_sessions() == []

    async def test_a_second_message_keeps_a_session_unfinished(self, log: SessionLog) -> None:
        await log.append([started("s", 1), *turn("s", 2), message("s", 5), message("s", 6)])
        await log.append([rec("s", 7, RecordKind.STEP_STARTED, {"event_seq": 5})])
        await log.append([rec("s", 8, RecordKind.STEP_FINISHED, {"event_seq": 5})])
        assert await log.unfinished_sessions() == ["s"]  # seq 6 still waits
        await log.append([rec("s", 9, RecordKind.STEP_STARTED, {"event_seq": 6})])
        await log.append([rec("s", 10, RecordKind.STEP_FINISHED, {"event_seq": 6})])
        assert await log.unfinished_sessions() == []

    async def test_only_sessions_with_work_are_listed_in_order_of_first_record(self, log: SessionLog) -> None:
        await log.append([rec("notes-only", 1), rec("notes-only", 2)])  # no session_started: not work
        await log.append([started("b", 1), *turn("b", 2)])  # finished
        await log.append([started("c", 1)])
        await log.append([started("a", 1), *turn("a", 2), message("a", 5)])
        await log.append([started("d", 1), *turn("d", 2)[:2]])  # step open
        assert await log.unfinished_sessions() == ["c", "a", "d"]

    async def test_a_refused_append_leaves_the_index_as_it_was(self, log: SessionLog) -> None:
        await log.append([started("s", 1), *turn("s", 2)])
        with pytest.raises(LogConflictError):
            await log.append([message("s", 5), rec("s", 4, RecordKind.STEP_FINISHED, {"event_seq": None})])
        with pytest.raises(TypeError):
            await log.append([message("s", 5), rec("s", 6, data={"when": object()})])
        assert await log.unfinished_sessions() == []
        await log.append([started("t", 1)])
        with pytest.raises(LogConflictError):
            await log.append([rec("t", 2, RecordKind.STEP_STARTED, {"event_seq": None}), started("t", 1)])
        assert await log.unfinished_sessions() == ["t"]

    async def test_the_index_agrees_with_folding_every_session(self, log: SessionLog) -> None:
        # Many sessions left at every point of a turn, appended concurrently: the index the store
        # keeps lists what the plain rule (SessionLog's scanning default) finds.
        steps = [started("x", 1), *turn("x", 2), message("x", 5)]
        steps.append(rec("x", 6, RecordKind.STEP_STARTED, {"event_seq": 5}))

        async def write(n: int) -> None:
            session = f"s{n:03d}"
            for record in steps[: n % (len(steps) + 1)]:
                await log.append([Record(session, record.seq, record.kind, record.data, record.ts)])

        await asyncio.gather(*(write(n) for n in range(60)))
        expected = await SessionLog.unfinished_sessions(log)
        assert await log.unfinished_sessions() == expected
        # Left after 1, 2, 3, 5 or 6 of the steps, a session has work; after none or 4 (a finished turn), not.
        assert expected == [f"s{n:03d}" for n in range(60) if n % (len(steps) + 1) in (1, 2, 3, 5, 6)]

    async def test_a_fork_holds_its_messages_until_continued(self, log: SessionLog) -> None:
        await log.append([started("f", 1), *turn("f", 2), message("f", 5)])
        await log.append([rec("f", 6, RecordKind.FORKED_FROM, {"session": "origin", "seq": 5, "held": [5]})])
        assert await log.unfinished_sessions() == []  # a debugging copy never acts by itself
        await log.append([rec("f", 7, RecordKind.FORK_CONTINUED, {"seqs": [5]})])
        assert await log.unfinished_sessions() == ["f"]

    async def test_the_index_survives_close_and_start(self, log: SessionLog) -> None:
        await log.append([started("s", 1), started("t", 1), *turn("t", 2)])
        await log.close()
        await log.start()
        assert await log.unfinished_sessions() == ["s"]
        await log.append([rec("s", 2, RecordKind.STEP_STARTED, {"event_seq": None})])
        await log.append([rec("s", 3, RecordKind.STEP_FINISHED, {"event_seq": None})])
        assert await log.unfinished_sessions() == []

    # -- 7. read_for_load and snapshots ---------------------------------------------------------------

    async def test_read_for_load_without_a_snapshot_is_read(self, log: SessionLog) -> None:
        await log.append([started("s", 1), *turn("s", 2)])
        assert await log.read_for_load("s") == await log.read("s")
        assert await log.read_for_load("nobody") == []

    async def test_read_for_load_starts_at_the_latest_snapshot(self, log: SessionLog) -> None:
        records = [started("s", 1), *turn("s", 2)]
        await log.append(records)
        first = project("s", records)
        await log.append([rec("s", 5, RecordKind.SNAPSHOT, snapshot_data(first))])
        more = [message("s", 6), rec("s", 7, RecordKind.STEP_STARTED, {"event_seq": 6})]
        more += [rec("s", 8, RecordKind.VARIABLE_SET, {"name": "n", "value": [1, 2]})]
        more += [rec("s", 9, RecordKind.STEP_FINISHED, {"event_seq": 6})]
        await log.append(more)
        folded = project("s", await log.read("s"))
        await log.append([rec("s", 10, RecordKind.SNAPSHOT, snapshot_data(folded)), message("s", 11)])
        # Another session's snapshots are not this one's.
        await log.append([started("other", 1), rec("other", 2, RecordKind.SNAPSHOT, {"not": "checked here"})])
        loaded = await log.read_for_load("s")
        assert [r.seq for r in loaded] == [10, 11]
        assert loaded == (await log.read("s"))[9:]
        assert project("s", loaded) == project("s", await log.read("s")) == await log.project("s")
        assert project("s", loaded).variables == {"n": [1, 2]}
        assert await load_projection(log, "s") == await log.project("s")

    async def test_a_snapshot_changed_after_writing_is_refused_and_the_session_rebuilt(
        self, log: SessionLog, caplog: pytest.LogCaptureFixture
    ) -> None:
        records = [started("s", 1), *turn("s", 2)]
        data = snapshot_data(project("s", records))
        data["state"]["current_state"] = "elsewhere"  # digest no longer matches
        await log.append([*records, rec("s", 5, RecordKind.SNAPSHOT, data), message("s", 6)])
        with pytest.raises(CorruptSnapshotError) as caught:
            project("s", await log.read_for_load("s"))
        assert (caught.value.session_id, caught.value.seq) == ("s", 5)
        rebuilt = await load_projection(log, "s")
        assert rebuilt == project("s", await log.read("s"), snapshots=False)
        assert rebuilt.current_state == "idle" and rebuilt.last_seq == 6
        assert "seq 5" in caplog.text and "rebuilding session 's'" in caplog.text

    async def test_a_snapshot_that_disagrees_with_the_fold_is_refused(self, log: SessionLog) -> None:
        records = [started("s", 1), *turn("s", 2)]
        state = project("s", records).to_state()
        state["variables"] = {"invented": True}
        await log.append([*records, rec("s", 5, RecordKind.SNAPSHOT, seal(state))])  # a valid digest
        with pytest.raises(CorruptSnapshotError, match=r"disagrees with the fold.*variables"):
            await log.project("s")
        assert project("s", await log.read("s"), snapshots=False).variables == {}

    async def test_a_snapshot_from_an_older_version_is_read_through_its_upcaster(
        self, log: SessionLog, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        newer = upcast_module.Upcasters(current_version=CURRENT_VERSION + 1)

        @newer.register(RecordKind.SNAPSHOT, from_version=CURRENT_VERSION)
        def rename_vars(data: dict[str, Any]) -> dict[str, Any]:
            state = data["state"]
            state["variables"] = state.pop("vars")
            return seal(state)

        monkeypatch.setattr(upcast_module, "UPCASTERS", newer)
        records = [started("s", 1), *turn("s", 2), rec("s", 5, RecordKind.VARIABLE_SET, {"name": "k", "value": 1})]
        old_state = project("s", records).to_state()
        old_state["vars"] = old_state.pop("variables")
        await log.append([*records, rec("s", 6, RecordKind.SNAPSHOT, seal(old_state)), message("s", 7)])
        loaded = project("s", await log.read_for_load("s"))
        assert (loaded.variables, loaded.last_seq) == ({"k": 1}, 7)
        assert loaded == await log.project("s")


def started(session_id: str, seq: int) -> Record:
    """A ``session_started`` record."""
    return rec(session_id, seq, RecordKind.SESSION_STARTED, {"agent": "a", "platform": None, "initial_state": "idle"})


def message(session_id: str, seq: int) -> Record:
    """A ``message_received`` record."""
    return rec(session_id, seq, RecordKind.MESSAGE_RECEIVED, {"event": {"type": "text", "text": "hi"}, "text": "hi"})


def turn(session_id: str, seq: int) -> list[Record]:
    """The initial body's step, started and finished: records ``seq`` .. ``seq + 2``."""
    return [
        rec(session_id, seq, RecordKind.STEP_STARTED, {"event_seq": None}),
        rec(session_id, seq + 1, RecordKind.TRANSITION, {"source": "idle", "dest": "idle"}),
        rec(session_id, seq + 2, RecordKind.STEP_FINISHED, {"event_seq": None}),
    ]
