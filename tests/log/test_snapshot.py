"""Snapshots: a snapshot record replaces an empty projection's state and must agree with a full fold."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from baf.errors import CorruptRecordError, CorruptSnapshotError
from baf.log.projection import SessionProjection, project
from baf.log.record import Record, RecordKind
from baf.log.snapshot import SNAPSHOT_FORMAT, seal, snapshot_data, state_digest


def history() -> list[Record]:
    return [
        Record("s", 1, RecordKind.SESSION_STARTED, {"agent": "a", "platform": "web", "initial_state": "idle"}, 10.0),
        Record("s", 2, RecordKind.STEP_STARTED, {"event_seq": None}, 10.5),
        Record("s", 3, RecordKind.STEP_FINISHED, {"event_seq": None}, 10.6),
        Record("s", 4, RecordKind.MESSAGE_RECEIVED, {"event": {"type": "text", "text": "hi"}, "text": "hi"}, 11.0),
        Record("s", 5, RecordKind.STEP_STARTED, {"event_seq": 4}, 12.0),
        Record("s", 6, RecordKind.TRANSITION, {"source": "idle", "dest": "busy"}, 13.0),
        Record("s", 7, RecordKind.VARIABLE_SET, {"name": "n", "value": {"deep": [1, 2.5, None]}}, 14.0),
        Record("s", 8, RecordKind.REPLY, {"text": "hello"}, 16.0),
        Record("s", 9, RecordKind.ERROR, {"message": "x"}, 17.0),
        Record("s", 10, RecordKind.STEP_FINISHED, {"event_seq": 4}, 18.0),
        Record(
            "s", 11, RecordKind.MESSAGE_RECEIVED, {"event": {"type": "text", "text": "again"}, "text": "again"}, 19.0
        ),
    ]


def snapshot_at(records: list[Record], data: dict[str, Any] | None = None) -> Record:
    seq = records[-1].seq + 1
    return Record("s", seq, RecordKind.SNAPSHOT, data or snapshot_data(project("s", records)), 20.0)


def test_loading_from_a_snapshot_gives_the_full_fold() -> None:
    records = history()
    snapshot = snapshot_at(records)
    after = Record("s", 13, RecordKind.REPLY, {"text": "later"}, 21.0)
    full = project("s", [*records, snapshot, after])
    loaded = project("s", [snapshot, after])
    assert loaded == full
    assert loaded.unstarted == {11: {"type": "text", "text": "again"}}  # a message still waiting
    assert (loaded.last_seq, loaded.first_ts, loaded.last_ts, loaded.errors) == (13, 10.0, 21.0, 1)
    one_by_one = SessionProjection("s")
    one_by_one.apply(snapshot)
    one_by_one.apply(after)
    assert one_by_one == full


def test_no_snapshot_while_a_step_is_open() -> None:
    with pytest.raises(ValueError, match="step is open"):
        snapshot_data(project("s", history()[:5]))


def test_the_digest_is_of_the_canonical_json() -> None:
    assert state_digest({"b": 1, "a": [1.5, "é"]}) == state_digest({"a": [1.5, "é"], "b": 1})
    assert state_digest({"a": 1}) != state_digest({"a": 2})
    assert state_digest({"big": 2**70}) == state_digest({"big": 2**70})  # beyond orjson: json's text


def damaged(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(snapshot_data(project("s", history())))
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d["state"].update(current_state="other"), "does not match its digest"),
        (lambda d: d.update(digest="0" * 64), "does not match its digest"),
        (lambda d: d.update(format=SNAPSHOT_FORMAT + 1), "format"),
        (lambda d: d.pop("state"), "no state"),
        (lambda d: d.update(seal({**d["state"], "errors": -1})), "errors should be"),
        (lambda d: d.update(seal({**d["state"], "history": [["user", "x"]]})), "history should be"),
        (lambda d: d.update(seal({k: v for k, v in d["state"].items() if k != "agent"})), "fields"),
        (lambda d: d.update(seal({**d["state"], "last_seq": 5})), "up to seq 5, not up to seq 11"),
    ],
)
def test_a_snapshot_failing_a_check_on_load_is_refused_naming_session_and_seq(change: Any, reason: str) -> None:
    snapshot = snapshot_at(history(), damaged(change))
    with pytest.raises(CorruptSnapshotError, match=reason) as caught:
        project("s", [snapshot])
    assert (caught.value.session_id, caught.value.seq) == ("s", 12)
    assert isinstance(caught.value, CorruptRecordError)
    # The same records, rebuilt without trusting snapshots.
    assert project("s", [*history(), snapshot], snapshots=False).last_seq == 12


def test_a_well_sealed_snapshot_that_disagrees_with_the_fold_is_refused_when_folded_through() -> None:
    wrong = project("s", history()).to_state()
    wrong["history"] = wrong["history"][:1]
    snapshot = snapshot_at(history(), seal(wrong))
    assert project("s", [snapshot]).history[0].text == "hi"  # the checks on load cannot know
    with pytest.raises(CorruptSnapshotError, match=r"disagrees with the fold.*history"):
        project("s", [*history(), snapshot])
    rebuilt = project("s", [*history(), snapshot], snapshots=False)
    assert [entry.text for entry in rebuilt.history] == ["hi", "hello", "again"]


def test_a_refused_snapshot_leaves_the_projection_as_it_was() -> None:
    projection = project("s", history())
    before = copy.deepcopy(projection)
    with pytest.raises(CorruptSnapshotError):
        projection.apply(snapshot_at(history(), damaged(lambda d: d.update(digest="x"))))
    assert projection == before


def _paused() -> list[Record]:
    """A step that held a tool call for approval (seq 8), then ended."""
    records = history()[:7]
    records.append(Record("s", 8, RecordKind.APPROVAL_REQUESTED,
                          {"step": 0, "call_id": "c1", "name": "pay", "arguments": "{}"}, 14.5))  # fmt: skip
    records.append(Record("s", 9, RecordKind.STEP_FINISHED, {"event_seq": 4}, 15.0))
    return records


def test_a_call_waiting_for_approval_is_kept_by_a_snapshot() -> None:
    records = _paused()
    snapshot = snapshot_at(records)
    loaded = project("s", [snapshot])
    assert loaded == project("s", [*records, snapshot])
    entry = loaded.approvals["c1"]
    # The paused invocation: its first record (after the transition at 6), the event it answers, where.
    assert (entry["since"], entry["event_seq"], entry["state"], entry["role"], entry["decided"]) == (
        7, 4, "busy", "body", False,
    )  # fmt: skip


def test_a_snapshot_from_before_approvals_loads_with_none_waiting() -> None:
    state = snapshot_data(project("s", history()))["state"]
    del state["approvals"]  # what an older baf wrote
    loaded = project("s", [snapshot_at(history(), seal(state))])
    assert loaded.approvals == {} and loaded.last_seq == 12  # the snapshot itself is seq 12
