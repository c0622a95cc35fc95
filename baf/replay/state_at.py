"""A session as it stood after one record: ``baf replay LOG SESSION --at SEQ``.

The state, variables and conversation come from :func:`baf.log.projection.project`, the fold the
runtime itself uses, applied to the records up to ``seq``: there is no second reading of the log.
What the projection does not keep (it is the runtime's state, and the runtime does not need it) is
the reasoning loop's task list; that is the last ``task_list`` snapshot up to ``seq``, and whether its
reasoning invocation was still running then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from baf.errors import RecordNotFoundError
from baf.log.projection import SessionProjection
from baf.log.record import Record, RecordKind
from baf.reasoning.step import ReasoningStepKind

__all__ = ["SessionSnapshot", "state_at"]


@dataclass(slots=True)
class SessionSnapshot:
    """What ``--at`` shows: the projection after ``seq``, plus the reasoning loop's position."""

    seq: int
    projection: SessionProjection
    #: The task list of the latest reasoning invocation at or before ``seq`` (empty if it did not plan).
    tasks: list[dict[str, Any]] = field(default_factory=list)
    #: The seq of the ``task_list`` record ``tasks`` comes from.
    tasks_seq: int | None = None
    #: Whether a reasoning invocation had started and not finished at ``seq``.
    reasoning_in_flight: bool = False
    #: The request that in-flight invocation is answering.
    reasoning_request: str | None = None
    #: The record at ``seq`` itself.
    record: Record | None = None

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-ready data (``baf replay --at SEQ --json``)."""
        p, record = self.projection, self.record
        return {
            "session_id": p.session_id,
            "seq": self.seq,
            "record": None if record is None else {"kind": record.kind, "ts": record.ts},
            "agent": p.agent,
            "state": p.current_state,
            "errors": p.errors,
            "step_running": p.open_step is not None,
            "events_waiting": sorted(p.unstarted),
            "events_held": sorted(p.held),
            "variables": p.variables,
            "tasks": self.tasks,
            "tasks_seq": self.tasks_seq,
            "reasoning_in_flight": self.reasoning_in_flight,
            "reasoning_request": self.reasoning_request,
            "conversation": [{"seq": c.seq, "role": c.role, "text": c.text} for c in p.history],
        }


def state_at(session_id: str, records: Iterable[Record], seq: int | None = None) -> SessionSnapshot:
    """Fold ``records`` up to and including ``seq`` (all of them when ``None``).

    Raises:
        RecordNotFoundError: ``seq`` is beyond the session's last record (also a ``LookupError``).
    """
    projection = SessionProjection(session_id)
    snapshot = SessionSnapshot(seq or 0, projection)
    for record in records:
        if seq is not None and record.seq > seq:
            break
        projection.apply(record)
        snapshot.record = record
        if record.kind == RecordKind.TASK_LIST:
            snapshot.tasks = list(record.data.get("tasks") or [])
            snapshot.tasks_seq = record.seq
        elif record.kind == RecordKind.REASONING_STEP:
            kind = record.data.get("kind")
            if kind == ReasoningStepKind.REASONING_STARTED:
                snapshot.reasoning_in_flight = True
                snapshot.tasks, snapshot.tasks_seq = [], None  # each invocation plans afresh
                snapshot.reasoning_request = (record.data.get("details") or {}).get("request")
            elif kind == ReasoningStepKind.REASONING_FINISHED:
                snapshot.reasoning_in_flight = False
    if seq is not None and projection.last_seq < seq:
        raise RecordNotFoundError(session_id, seq, projection.last_seq)
    snapshot.seq = projection.last_seq
    return snapshot
