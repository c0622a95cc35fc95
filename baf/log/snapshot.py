"""Projection snapshots: a session's folded state kept as a record, so a long session loads in bounded time.

A ``snapshot`` record (``RecordKind.SNAPSHOT``) at seq ``N`` holds the state of the fold of the
session's records ``1 .. N-1``: ``{"format": 1, "state": {...}, "digest": "<sha256>"}``. The runtime
writes one (``snapshot_data``) only between steps, never while a step is open. Loading a session reads
from its latest snapshot on (``SessionLog.read_for_load``) and folds: folding a snapshot into an empty
projection *replaces* its state with the snapshot's.

How a snapshot that is wrong is caught:

- **On load, cheaply** (cost: the size of the state, never the length of the history): the digest,
  a SHA-256 of the state's canonical JSON, must match (a changed byte, a hand edit, a truncated
  state); the state must have every field, each of the right type; its ``last_seq`` must be ``N - 1``
  (a snapshot describes exactly the records before it); its ``format`` must be the one this baf
  writes. Any failure raises ``CorruptSnapshotError`` naming session and seq.
- **When the fold passes through a snapshot** (a projection already holding records ``1 .. N-1``:
  ``project`` over all records, a replay, ``baf check``): the snapshot's state must *equal* the
  fold's, field by field; otherwise ``CorruptSnapshotError``. This also catches a snapshot that was
  wrong when it was written (its digest then matches).

A snapshot refused on load is not silently skipped: ``baf.log.store.load_projection`` logs an error
naming it and rebuilds the session from all its records, ignoring snapshots (``snapshots=False``).

A snapshot written by an older baf (an older record ``version``) is read through the upcasters, as
every record is; an upcaster that changes the state must return ``seal(new_state)`` so the digest
matches again. A snapshot whose ``format`` differs from ``SNAPSHOT_FORMAT`` without an upcaster is
refused, and the session rebuilt from records.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Final

import orjson

from baf.errors import CorruptSnapshotError
from baf.log.jsontext import json_copy

if TYPE_CHECKING:
    from baf.log.projection import SessionProjection

__all__ = ["SNAPSHOT_FORMAT", "checked_state", "seal", "snapshot_data", "state_digest"]

#: The shape of ``state`` this baf writes and reads.
SNAPSHOT_FORMAT: Final = 1

# Field -> what it must be; checked on every load, before the state is used.
_FIELDS: Final[dict[str, str]] = {
    "agent": "text or null",
    "platform": "text or null",
    "current_state": "text or null",
    "variables": "an object",
    "history": "a list of [role, text, seq]",
    "last_seq": "an integer >= 0",
    "first_ts": "a number or null",
    "last_ts": "a number or null",
    "errors": "an integer >= 0",
    "unstarted": "a list of [seq, event]",
    "held": "a list of [seq, event]",
    "open_step": "null",
    "started": "a boolean",
    "return_to": "text or null",
    "visiting": "text or null",
    "approvals": "an object of objects",
}
#: Fields a snapshot written by an older baf may lack, and the value they then have.
_ADDED_LATER: Final[dict[str, Any]] = {"approvals": {}}


# Fields a state holds only when set (so states written before them read as they are).
_OPTIONAL: Final[dict[str, str]] = {"start_held": "true", "deliveries": "a list of [text, seq]"}


def state_digest(state: dict[str, Any]) -> str:
    """SHA-256 (hex) of ``state`` as canonical JSON (sorted keys, no spaces).

    ``state`` must be made of JSON types only (as after a store's round trip), so that the writer and
    every reader encode it to the same text.
    """
    try:
        text = orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # integers beyond 64 bits, very deep nesting: the standard encoder's text instead
        text = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(text).hexdigest()


def seal(state: dict[str, Any]) -> dict[str, Any]:
    """The data of a snapshot record holding ``state``: the format, the state and its digest."""
    return {"format": SNAPSHOT_FORMAT, "state": state, "digest": state_digest(state)}


def snapshot_data(projection: SessionProjection) -> dict[str, Any]:
    """The data of a ``snapshot`` record for ``projection``, to append at seq ``projection.last_seq + 1``.

    Raises ``ValueError`` while a step is open: a snapshot is taken only between steps.
    """
    if projection.open_step is not None:
        raise ValueError(
            f"session {projection.session_id!r}: no snapshot while a step is open (step of event "
            f"seq {projection.open_step})"
        )
    # Made of JSON types only, as a reader will see it, so both compute the digest over the same text.
    return seal(json_copy(projection.to_state()))


def checked_state(session_id: str, seq: int, data: dict[str, Any]) -> dict[str, Any]:
    """The state a snapshot record at ``seq`` holds, after the checks on load (see the module docstring).

    Raises ``CorruptSnapshotError`` naming the session and seq.
    """

    def refuse(reason: str) -> CorruptSnapshotError:
        return CorruptSnapshotError(session_id, seq, f"snapshot {reason}; the session is rebuilt from its records")

    if data.get("format") != SNAPSHOT_FORMAT:
        raise refuse(f"has format {data.get('format')!r}, this baf reads format {SNAPSHOT_FORMAT}")
    state, digest = data.get("state"), data.get("digest")
    if not isinstance(state, dict) or not isinstance(digest, str):
        raise refuse("has no state or no digest")
    if state_digest(state) != digest:
        raise refuse("does not match its digest (changed after it was written)")
    missing = {name: value for name, value in _ADDED_LATER.items() if name not in state}
    if missing:  # a snapshot from before these fields: they hold what a fold without their records holds
        state = {**state, **json_copy(missing)}
    if set(state) - set(_OPTIONAL) != set(_FIELDS):
        raise refuse(f"has fields {sorted(state)}, expected {sorted(_FIELDS)}")
    for name, expected in (*_FIELDS.items(), *_OPTIONAL.items()):
        if name in state and not _fits(name, state[name]):
            raise refuse(f"field {name} should be {expected}, found {state[name]!r:.60}")
    if state["last_seq"] != seq - 1:
        raise refuse(f"describes the records up to seq {state['last_seq']}, not up to seq {seq - 1}")
    return state


def _fits(name: str, value: Any) -> bool:
    if name in ("agent", "platform", "current_state", "return_to", "visiting"):
        return value is None or isinstance(value, str)
    if name == "variables":
        return isinstance(value, dict)
    if name == "approvals":
        return isinstance(value, dict) and all(isinstance(entry, dict) for entry in value.values())
    if name in ("last_seq", "errors"):
        return type(value) is int and value >= 0
    if name in ("first_ts", "last_ts"):
        return value is None or (type(value) in (int, float))
    if name == "open_step":
        return value is None
    if name == "started":
        return type(value) is bool
    if name == "start_held":
        return value is True
    if name == "deliveries":
        return isinstance(value, list) and all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and type(e[1]) is int for e in value
        )
    if name == "history":
        return isinstance(value, list) and all(
            isinstance(e, list)
            and len(e) == 3
            and isinstance(e[0], str)
            and isinstance(e[1], str)
            and type(e[2]) is int
            for e in value
        )
    if name in ("unstarted", "held"):
        return isinstance(value, list) and all(
            isinstance(e, list) and len(e) == 2 and type(e[0]) is int and isinstance(e[1], dict) for e in value
        )
    return False
