"""The unfinished-work rule (``baf.log.work``) is the runtime's: it agrees with the projection's fields."""

from __future__ import annotations

import random

import pytest

from baf.log.projection import project
from baf.log.record import Record, RecordKind
from baf.log.work import IDLE, WorkStatus, work_after, work_of


def test_a_turn_moves_the_status_through_each_state() -> None:
    status = work_after(IDLE, RecordKind.SESSION_STARTED, 1, {})
    assert status == WorkStatus(awaiting_start=True) and status.unfinished
    status = work_after(status, RecordKind.STEP_STARTED, 2, {"event_seq": None})
    assert status == WorkStatus(open_step=0) and status.unfinished
    status = work_after(status, RecordKind.STEP_FINISHED, 3, {})
    assert status == IDLE and not status.unfinished
    status = work_after(status, RecordKind.MESSAGE_RECEIVED, 4, {"event": {}})
    assert status.unhandled == {4} and status.unfinished
    status = work_after(status, RecordKind.STEP_STARTED, 5, {"event_seq": 4})
    assert status == WorkStatus(open_step=4)
    assert work_after(status, "note", 6, {"event_seq": 9}) is status  # other kinds change nothing


def test_a_fork_holds_its_messages_until_continued() -> None:
    status = work_of([(RecordKind.MESSAGE_RECEIVED, 1, {}), (RecordKind.FORKED_FROM, 2, {})])
    assert status == WorkStatus(held=frozenset({1})) and not status.unfinished
    status = work_after(status, RecordKind.FORK_CONTINUED, 3, {"seqs": [1]})
    assert status == WorkStatus(unhandled=frozenset({1})) and status.unfinished
    assert WorkStatus.from_text(WorkStatus(held=frozenset({4})).to_text()).held == {4}


def test_a_fork_cut_before_the_first_step_holds_the_initial_body_until_continued() -> None:
    status = work_of([(RecordKind.SESSION_STARTED, 1, {}), (RecordKind.FORKED_FROM, 2, {})])
    assert status == WorkStatus(start_held=True) and not status.unfinished
    assert WorkStatus.from_text(status.to_text()) == status
    assert "start_held" not in IDLE.to_text()  # rows without it (an older baf's) read as before
    status = work_after(status, RecordKind.FORK_CONTINUED, 3, {"seqs": []})
    assert status == WorkStatus(awaiting_start=True) and status.unfinished


def test_a_damaged_event_seq_counts_as_a_step_without_an_event() -> None:
    status = work_of([(RecordKind.MESSAGE_RECEIVED, 1, {}), (RecordKind.STEP_STARTED, 2, {"event_seq": "1"})])
    assert status == WorkStatus(open_step=0, unhandled=frozenset({1}))


def test_the_status_text_round_trips_and_refuses_anything_else() -> None:
    status = WorkStatus(True, 7, frozenset({3, 9}))
    assert WorkStatus.from_text(status.to_text()) == status
    for text in ("", "[]", '{"start": 1, "open": null, "unhandled": []}', '{"start": true}', "\xff"):
        with pytest.raises(ValueError, match="not a work status"):
            WorkStatus.from_text(text)


KINDS = [
    (RecordKind.MESSAGE_RECEIVED, lambda seqs: {"event": {"type": "text"}, "text": "m"}),
    (RecordKind.STEP_STARTED, lambda seqs: {"event_seq": random.choice([None, *seqs])}),
    (RecordKind.STEP_FINISHED, lambda seqs: {}),
    (RecordKind.REPLY, lambda seqs: {"text": "r"}),
    (RecordKind.FORKED_FROM, lambda seqs: {"session": "origin", "seq": 3}),
    (RecordKind.FORK_CONTINUED, lambda seqs: {"seqs": []}),
]


@pytest.mark.parametrize("seed", range(200))
def test_the_rule_is_what_the_runtime_reads_from_the_projection(seed: int) -> None:
    # The runtime resumes a session whose projection has not started, has an open step or has
    # unstarted messages (baf.core.runtime._load); for a session that begins with session_started
    # (as every session the runtime writes does), the work status says the same.
    random.seed(seed)
    records = [Record("s", 1, RecordKind.SESSION_STARTED, {"initial_state": "idle"})]
    for seq in range(2, random.randint(2, 12)):
        messages = [r.seq for r in records if r.kind == RecordKind.MESSAGE_RECEIVED]
        kind, make = random.choice(KINDS)
        records.append(Record("s", seq, kind, make(messages)))
    projection = project("s", records)
    expected = (
        (not projection.started and not projection.start_held)
        or projection.open_step is not None
        or bool(projection.unstarted)
    )
    status = work_of((r.kind, r.seq, r.data) for r in records)
    assert status.unfinished == expected
    assert status.open_step == projection.open_step
    assert status.unhandled == set(projection.unstarted)
    assert status.held == set(projection.held)
    assert status.start_held == projection.start_held
