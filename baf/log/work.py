"""Unfinished work: which sessions a restarting runtime must touch, as one pure rule every store shares.

A session has **unfinished work** when its records show any of:

- a ``session_started`` record and no ``step_started`` after it: the initial state's body has not run;
- a ``message_received`` record whose seq no ``step_started`` has named as its ``event_seq`` yet: a
  message recorded but not handled;
- a ``step_started`` record with no ``step_finished`` after it: a step a crash interrupted
  (``step_resumed`` continues the same step, so it changes nothing here).

A fork's ``forked_from`` record *holds* the messages still unhandled at its cut (a debugging copy never
acts by itself), and the initial state's body if the cut is before the first step: they are not work
until a ``fork_continued`` record releases them.

This is the rule ``baf.core.runtime`` applies when it loads a session (``SessionProjection.started``,
``unstarted`` and ``open_step``), folded over only the kinds of ``WORK_KINDS``, so that a store can keep it
as an index updated in each append's transaction instead of folding every session at start-up. One
difference, on purpose: a session with records but no ``session_started`` (a log the runtime did not
write) is not work; the runtime writes ``session_started`` as every session's first record.

A store keeps, per session, the ``WorkStatus`` after its last record, and lists the sessions whose
status is ``unfinished``. A session it keeps nothing for has the empty status (``IDLE``), so a store
keeps rows only for sessions whose status is not ``IDLE`` (unfinished ones, and forks holding messages):
an append that leaves a session idle removes its row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from baf.log.record import RecordKind

__all__ = ["IDLE", "WORK_KINDS", "WorkStatus", "work_after", "work_of"]

#: The record kinds that can change a session's ``WorkStatus``; every other kind leaves it as it is.
WORK_KINDS: Final = frozenset(
    {
        RecordKind.SESSION_STARTED,
        RecordKind.MESSAGE_RECEIVED,
        RecordKind.STEP_STARTED,
        RecordKind.STEP_FINISHED,
        RecordKind.FORKED_FROM,
        RecordKind.FORK_CONTINUED,
    }
)


@dataclass(frozen=True, slots=True)
class WorkStatus:
    """What a session still has to do, after its records so far (see the module docstring)."""

    #: ``session_started`` recorded, no step started since.
    awaiting_start: bool = False
    #: The seq of the event whose step is open (0: a step without an event), or None.
    open_step: int | None = None
    #: Seqs of messages recorded but not yet handled.
    unhandled: frozenset[int] = frozenset()
    #: Seqs of messages a fork holds (not work until ``fork_continued`` releases them).
    held: frozenset[int] = frozenset()
    #: A fork cut before the first step holds the initial body too (``awaiting_start`` once released).
    start_held: bool = False

    @property
    def unfinished(self) -> bool:
        """Whether a restarting runtime has work to do for this session."""
        return self.awaiting_start or self.open_step is not None or bool(self.unhandled)

    def to_text(self) -> str:
        """A compact JSON text for a store's index (``from_text`` reads it back)."""
        return orjson.dumps(
            {
                "start": self.awaiting_start,
                "open": self.open_step,
                "unhandled": sorted(self.unhandled),
                "held": sorted(self.held),
                **({"start_held": True} if self.start_held else {}),  # rows of an older baf lack it
            }
        ).decode()

    @classmethod
    def from_text(cls, text: str | bytes) -> WorkStatus:
        """Read what ``to_text`` wrote; ``ValueError`` if it is not that."""
        try:
            value = orjson.loads(text)
            start, open_step, unhandled, held = value["start"], value["open"], value["unhandled"], value["held"]
            start_held = value.get("start_held", False)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a work status: {text!r:.80}") from exc
        if (
            not isinstance(start, bool)
            or not isinstance(start_held, bool)
            or not (open_step is None or type(open_step) is int)
        ):
            raise ValueError(f"not a work status: {text!r:.80}")
        for seqs in (unhandled, held):
            if not isinstance(seqs, list) or any(type(seq) is not int for seq in seqs):
                raise ValueError(f"not a work status: {text!r:.80}")
        return cls(start, open_step, frozenset(unhandled), frozenset(held), start_held)


#: The status of a session with nothing to do (and of a session with no records).
IDLE: Final = WorkStatus()


def work_after(status: WorkStatus, kind: str, seq: int, data: Mapping[str, Any]) -> WorkStatus:
    """The status after one more record (``kind``, ``seq``, ``data``); pure, ``status`` is unchanged.

    A ``step_started`` whose ``event_seq`` is not an integer (a damaged record) counts as a step without
    an event: the fold (``SessionProjection``) is the one that reports such a record as corrupt.
    """
    # Built field by field (awaiting_start, open_step, unhandled, held, start_held), not with
    # dataclasses.replace: a store folds this into every append holding one of WORK_KINDS, and replace()
    # cost three times the construction.
    awaiting_start, open_step, unhandled, held, start_held = (
        status.awaiting_start, status.open_step, status.unhandled, status.held, status.start_held,
    )  # fmt: skip
    if kind == RecordKind.MESSAGE_RECEIVED:
        return WorkStatus(awaiting_start, open_step, unhandled | {seq}, held, start_held)
    if kind == RecordKind.STEP_STARTED:
        event_seq = data.get("event_seq")
        if type(event_seq) is not int:
            event_seq = None
        if event_seq is not None:
            return WorkStatus(False, event_seq, unhandled - {event_seq}, held, False)
        return WorkStatus(False, 0, unhandled, held, False)
    if kind == RecordKind.STEP_FINISHED:
        return WorkStatus(awaiting_start, None, unhandled, held, start_held)
    if kind == RecordKind.SESSION_STARTED:
        return WorkStatus(True, open_step, unhandled, held, start_held)
    if kind == RecordKind.FORKED_FROM:
        return WorkStatus(False, open_step, frozenset(), held | unhandled, start_held or awaiting_start)
    if kind == RecordKind.FORK_CONTINUED:
        return WorkStatus(awaiting_start or start_held, open_step, unhandled | held, frozenset(), False)
    return status


def work_of(records: Iterable[tuple[str, int, Mapping[str, Any]]], status: WorkStatus = IDLE) -> WorkStatus:
    """Fold ``(kind, seq, data)`` triples, in seq order, into the status after them."""
    for kind, seq, data in records:
        if kind in WORK_KINDS:
            status = work_after(status, kind, seq, data)
    return status
