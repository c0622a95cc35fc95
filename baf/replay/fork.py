"""Fork: a new session that starts as an old one stood at some record, and goes on live from there.

:func:`fork` copies a session's records up to ``at_seq`` into a new session of the same log and adds a
``forked_from`` record ``{session, seq}``. An agent then continues it like any session it finds in its
log: ``await agent.get_or_create_session(new_id)``, or ``agent.receive_message(new_id, ...)``.

A fork cut inside a step (after ``step_started``, before its ``step_finished``) would leave the step
open, and a restart rule would decide its fate. Instead the cut is made explicit: by default the fork
closes the step as interrupted (an ``error`` record saying so, then ``step_finished {interrupted}``),
and ``forked_from`` carries ``inside_step: true``; ``inside_step="refuse"`` raises ``ValueError``
naming the step boundaries around ``at_seq`` instead.

A debugging copy never acts by itself: messages recorded but not yet handled by ``at_seq`` are *held*
(listed in ``forked_from`` as ``held``), and so is the initial state's body of a fork cut before the
session's first step (``start_held``): the fork is a faithful prefix. Loading the fork does not run
them; the user continues it explicitly with ``await agent.continue_session(new_id)`` (or ``baf run
AGENT --session NEW_ID``, or by sending the fork a new message), which records ``fork_continued`` and
runs them in order (the initial body first).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Literal

from baf.log import Record, RecordKind, SessionLog, open_log
from baf.log.projection import project
from baf.replay.rerun import read_session

__all__ = ["fork"]


async def fork(
    log: str | SessionLog,
    session_id: str,
    at_seq: int,
    new_session_id: str | None = None,
    *,
    inside_step: Literal["close", "refuse"] = "close",
) -> str:
    """Copy ``session_id`` up to and including record ``at_seq`` into a new session; return its id.

    ``new_session_id`` defaults to ``"<session>@<seq>"`` (with ``#2``, ``#3`` ... if taken). ``log`` is a
    URL or a store; the fork is written to the same log.
    """
    if isinstance(log, str):
        async with open_log(log) as store:
            return await fork(store, session_id, at_seq, new_session_id, inside_step=inside_step)
    store = log
    records = await read_session(store, session_id)
    last = records[-1].seq
    if not 1 <= at_seq <= last:
        raise ValueError(f"session {session_id!r} has records 1..{last}; cannot fork at seq {at_seq}")
    kept = [r for r in records if r.seq <= at_seq]
    open_step = _open_step(kept)
    if open_step is not None and inside_step == "refuse":
        finished = next((r.seq for r in records[at_seq:] if r.kind == RecordKind.STEP_FINISHED), None)
        raise ValueError(
            f"seq {at_seq} is inside the step that starts at seq {open_step.seq} and ends at seq {finished}; "
            f"fork at seq {open_step.seq - 1} or {finished}, or pass inside_step='close'"
        )
    async with _opened(store) as writable:
        new_id = new_session_id or await _free_id(writable, f"{session_id}@{at_seq}")
        if await writable.read(new_id):
            raise ValueError(f"the log already has a session {new_id!r}")
        now = time.time()
        copied = [dataclasses.replace(r, session_id=new_id) for r in kept]
        origin: dict[str, object] = {"session": session_id, "seq": at_seq}
        if open_step is not None:
            origin["inside_step"] = True
            event_seq = open_step.data.get("event_seq")
            copied.append(Record(new_id, at_seq + 1, RecordKind.ERROR, {
                "source": "fork", "type": "ForkedInsideStep", "event_seq": event_seq,
                "message": f"forked at seq {at_seq}, inside this step; the step was closed as interrupted",
            }, now))  # fmt: skip
            closing = {"event_seq": event_seq, "interrupted": True, "interrupted_by": "fork"}
            copied.append(Record(new_id, at_seq + 2, RecordKind.STEP_FINISHED, closing, now))
        at_cut = project(new_id, copied)
        held = sorted(at_cut.unstarted)
        if held:
            origin["held"] = held
        if at_cut.current_state is not None and not at_cut.started:
            origin["start_held"] = True  # cut before the first step: the initial body waits too
        copied.append(Record(new_id, copied[-1].seq + 1, RecordKind.FORKED_FROM, origin, now))
        await writable.append(copied)
    return new_id


def _open_step(records: list[Record]) -> Record | None:
    """The ``step_started`` record of the step still open at the end of ``records``, if any."""
    opened: Record | None = None
    for record in records:
        if record.kind == RecordKind.STEP_STARTED:
            opened = record
        elif record.kind == RecordKind.STEP_FINISHED:
            opened = None
    return opened


async def _free_id(store: SessionLog, base: str) -> str:
    candidate, number = base, 1
    while await store.read(candidate):
        number += 1
        candidate = f"{base}#{number}"
    return candidate


class _opened:
    """Use ``store`` open: start it for the duration if reading it says it is closed."""

    def __init__(self, store: SessionLog) -> None:
        self.store = store
        self.started = False

    async def __aenter__(self) -> SessionLog:
        from baf.errors import LogClosedError

        try:
            await self.store.sessions()
        except LogClosedError:
            await self.store.start()
            self.started = True
        return self.store

    async def __aexit__(self, *exc: object) -> None:
        if self.started:
            await self.store.close()
