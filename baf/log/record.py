"""The record: one immutable entry of a session log."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CURRENT_VERSION", "MAX_TS", "MIN_TS", "Record", "RecordKind", "build_record", "ts_problem"]

#: Schema version written by this baf. Older versions are read through upcasters (``baf.log.upcast``).
#: Version 2 gave model turns one shape for every loop (``baf.reasoning.turn``).
CURRENT_VERSION = 2

#: The earliest and latest record times (seconds since the epoch): years 1 to 9999, as ``datetime`` shows
#: them, a day inside either end. A store refuses to write a time outside them, and reads one as damage:
#: nothing that prints or exports a record could show it.
MIN_TS = -62135510400.0
MAX_TS = 253402128000.0


_NUMBERS = (int, float)  # a tuple made once: ``int | float`` in the call would build a union each time


def ts_problem(ts: object) -> str | None:
    """What is wrong with ``ts`` as a record's time (a number within ``MIN_TS``..``MAX_TS``), or ``None``."""
    if isinstance(ts, bool) or not isinstance(ts, _NUMBERS) or not MIN_TS <= ts <= MAX_TS:  # NaN: False
        return f"ts must be a finite number of seconds within the years 1 to 9999, not {ts!r}"
    return None


class RecordKind:
    """Names of the record kinds baf writes. Users may append kinds of their own."""

    SESSION_STARTED = "session_started"
    MESSAGE_RECEIVED = "message_received"
    TRANSITION = "transition"
    VARIABLE_SET = "variable_set"
    VARIABLE_DELETED = "variable_deleted"
    REPLY = "reply"
    ERROR = "error"
    STEP_STARTED = "step_started"
    STEP_FINISHED = "step_finished"
    #: A restart continues an interrupted step (its body is resumable): the step's records go on after it.
    STEP_RESUMED = "step_resumed"
    #: Written after the records a fork copied from another session: ``{session, seq}`` (``baf.replay.fork``).
    FORKED_FROM = "forked_from"
    #: The session's folded state (``baf.log.snapshot``), written between steps: a load starts from the
    #: latest one.
    SNAPSHOT = "snapshot"
    #: The user continued a fork: the messages it held (recorded before its cut, not handled there) are
    #: handled now. ``{seqs}`` lists them (``Agent.continue_session``, ``baf run ... --session``).
    FORK_CONTINUED = "fork_continued"
    # Written by the reasoning loop.
    LLM_REQUEST = "llm_request"
    LLM_RESPONSE = "llm_response"
    TOOL_RESULT = "tool_result"
    #: A step of a reasoning loop or pattern: ``{kind, step, summary, details}``, and ``streamed: false``
    #: when it was not sent to the platform (a state built with ``stream_steps=False``).
    REASONING_STEP = "reasoning_step"
    #: A task-list snapshot: ``{tasks}``, and ``streamed: false`` as for a reasoning step.
    TASK_LIST = "task_list"
    #: A tool call waits for a human decision: ``{step, call_id, name, arguments}`` (written by the
    #: tool-call runner; ``docs/human_approval.md``).
    APPROVAL_REQUESTED = "approval_requested"
    #: The decision on one: ``{call_id, name, approved, reason, by, request_seq, since}`` (written by the
    #: engine when an ``ApprovalEvent`` arrives; the record's ``ts`` says when).
    APPROVAL_DECIDED = "approval_decided"
    #: Requests dropped undecided because the conversation moved on: ``{call_ids, reason}``.
    APPROVAL_EXPIRED = "approval_expired"
    # Written by the pattern catalogue and by users: any other string is a valid kind too.


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of a session log.

    ``(session_id, seq)`` is unique; ``seq`` starts at 1 and has no gaps within a session.
    ``data`` is a JSON-serialisable dict whose shape depends on ``kind`` and ``version``.
    """

    session_id: str
    seq: int
    kind: str
    data: dict[str, Any]
    ts: float = field(default_factory=time.time)
    version: int = CURRENT_VERSION


# The slot descriptors the frozen ``__init__`` writes through ``object.__setattr__(self, name, value)``;
# bound once here, so ``build_record`` skips the name lookups and the generated ``__init__`` frame.
_new = object.__new__
_set_session_id = Record.__dict__["session_id"].__set__
_set_seq = Record.__dict__["seq"].__set__
_set_kind = Record.__dict__["kind"].__set__
_set_data = Record.__dict__["data"].__set__
_set_ts = Record.__dict__["ts"].__set__
_set_version = Record.__dict__["version"].__set__


def build_record(session_id: str, seq: int, kind: str, data: dict[str, Any], ts: float, version: int) -> Record:
    """``Record(session_id, seq, kind, data, ts, version)``, about twice as fast: for stores decoding many rows.

    The result is an ordinary ``Record``: the same slots hold the same values as after ``__init__``, so it
    is equal, frozen, picklable and works with ``dataclasses.replace``. Every field is required here.
    """
    record = _new(Record)
    _set_session_id(record, session_id)
    _set_seq(record, seq)
    _set_kind(record, kind)
    _set_data(record, data)
    _set_ts(record, ts)
    _set_version(record, version)
    return record
