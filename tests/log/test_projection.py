"""The fold: ``apply``, ``apply_all`` and ``apply_fields`` give the same projection."""

from __future__ import annotations

from baf.log.projection import MAX_DELIVERIES, SessionProjection, project
from baf.log.record import Record, RecordKind
from baf.log.snapshot import snapshot_data


def records() -> list[Record]:
    return [
        Record("s", 1, RecordKind.SESSION_STARTED, {"agent": "a", "platform": None, "initial_state": "idle"}, 10.0),
        Record("s", 2, RecordKind.MESSAGE_RECEIVED, {"event": {"type": "text"}, "text": "hi"}, 11.0),
        Record("s", 3, RecordKind.STEP_STARTED, {"event_seq": 2}, 12.0),
        Record("s", 4, RecordKind.TRANSITION, {"source": "idle", "dest": "busy"}, 13.0),
        Record("s", 5, RecordKind.VARIABLE_SET, {"name": "n", "value": 1}, 14.0),
        Record("s", 6, "note", {"ignored": True}, 15.0),
        Record("s", 7, RecordKind.REPLY, {"text": "hello"}, 16.0),
        Record("s", 8, RecordKind.ERROR, {"message": "x"}, 17.0),
    ]


def test_apply_all_and_apply_fields_fold_as_apply_does() -> None:
    one_by_one = SessionProjection("s")
    for record in records():
        one_by_one.apply(record)
    assert (one_by_one.last_seq, one_by_one.first_ts, one_by_one.last_ts) == (8, 10.0, 17.0)
    assert (one_by_one.current_state, one_by_one.variables, one_by_one.errors) == ("busy", {"n": 1}, 1)
    assert project("s", records()) == one_by_one
    by_fields = SessionProjection("s")
    for r in records():
        by_fields.apply_fields(r.seq, r.ts, r.kind, r.data)
    assert by_fields == one_by_one


def test_folding_in_parts_is_folding_at_once() -> None:
    in_parts = SessionProjection("s").apply_all(records()[:3]).apply_all(records()[3:])
    assert in_parts == project("s", records())


def test_delivery_ids_are_remembered_bounded_and_kept_by_snapshots() -> None:
    count = MAX_DELIVERIES + 5
    folded = [Record("s", 1, RecordKind.SESSION_STARTED, {"initial_state": "idle"}, 1.0)] + [
        Record(
            "s", n + 2, RecordKind.MESSAGE_RECEIVED, {"event": {"type": "text"}, "text": "m", "delivery": f"d{n}"}, 2.0
        )
        for n in range(count)
    ]
    projection = project("s", folded)
    assert len(projection.deliveries) == MAX_DELIVERIES and "d0" not in projection.deliveries
    assert projection.deliveries[f"d{count - 1}"] == count + 1
    snapshot = Record("s", projection.last_seq + 1, RecordKind.SNAPSHOT, snapshot_data(projection), 3.0)
    assert project("s", [snapshot]).deliveries == projection.deliveries  # a load from the snapshot
    assert project("s", [*folded, snapshot]).deliveries == projection.deliveries  # checked against the fold
    # A session with none keeps no field: snapshots written before delivery ids existed still compare equal.
    assert "deliveries" not in project("s", records()).to_state()
