"""The projection: a session's state as a fold of its records.

The live runtime, a restart after a crash and replay all build session state with this one fold,
so there is no second source of truth. ``SessionProjection.apply`` must stay cheap: it runs for every
record the runtime writes and for every record a restart reads.

A ``snapshot`` record replaces the state of a projection that holds nothing yet (a load from the latest
snapshot on), and must equal the state of one that holds the records before it; see
``baf.log.snapshot`` for the checks and what happens when one fails.

A record of a kind the fold reads must have the fields it reads, of the right type; one that does not
(a hand-edited or damaged log) raises ``CorruptRecordError`` naming session and seq, rather than a bare
``KeyError`` or a silently wrong state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from baf.errors import CorruptRecordError, CorruptSnapshotError
from baf.log.record import Record, RecordKind
from baf.log.snapshot import checked_state

__all__ = ["ChatEntry", "SessionProjection", "project"]


@dataclass(frozen=True, slots=True)
class ChatEntry:
    """One line of the conversation: ``role`` is ``"user"`` or ``"assistant"``."""

    role: str
    text: str
    seq: int


@dataclass(slots=True)
class SessionProjection:
    """Everything the runtime knows about a session, rebuilt from its records."""

    session_id: str
    agent: str | None = None
    platform: str | None = None
    current_state: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    history: list[ChatEntry] = field(default_factory=list)
    last_seq: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    errors: int = 0
    #: Inbound events recorded but not yet started, by seq: what a restart must still process.
    unstarted: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: The seq of the event whose step started but has not finished (a crash interrupted it); 0 for a step
    #: without an event (the initial state's body at the session start, or a check of automatic transitions).
    open_step: int | None = None
    #: Inbound events a fork holds, by seq: recorded before its cut but not handled there. They wait for
    #: an explicit continuation (a ``fork_continued`` record): a debugging copy never acts by itself.
    held: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Whether the initial state's body has run (``session_started`` without a step yet).
    started: bool = False
    #: A fork cut before the session's first step holds the initial state's body too, until it is continued.
    start_held: bool = False
    #: The delivery ids of the latest messages that carried one (``Event.delivery_id``), with their seqs:
    #: a message delivered again is recognised. Bounded (``MAX_DELIVERIES``): a redelivery is of recent ones.
    deliveries: dict[str, int] = field(default_factory=dict)
    #: While a global state's component is visited: the state to return to, and the global state.
    return_to: str | None = None
    visiting: str | None = None
    #: Tool calls waiting for a human decision, by call id (``docs/human_approval.md``): each
    #: ``{"seq", "name", "arguments", "step", "decided", "since", "event_seq", "state", "role"}``, where
    #: ``seq`` is its ``approval_requested`` record and the last four say which paused invocation it
    #: belongs to (its first record, the event it answers, the state and the body that ran it). A call
    #: stays here, marked ``decided``, until every call held with it is decided too.
    approvals: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Only meaningful while a step is open, so snapshots (taken between steps) do not keep them:
    #: The seq of the first record of the body running now, and which body it is (``body`` or ``fallback``).
    body_since: int = field(default=0, compare=False)
    body_role: str = field(default="body", compare=False)
    #: The paused invocation this step continues (its calls were all decided), as an approvals entry.
    continuing: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def holding(self) -> bool:
        """Whether this fork holds work (messages, or its initial body) until it is continued."""
        return bool(self.held) or self.start_held

    def apply(self, record: Record) -> None:
        """Fold one record into the projection."""
        self.apply_fields(record.seq, record.ts, record.kind, record.data)

    def apply_fields(self, seq: int, ts: float, kind: str, data: dict[str, Any]) -> None:
        """Fold one record given by its fields, decoded and upcast as a store's ``read`` returns them.

        For a store that folds rows as it decodes them (``SessionLog.project``), without a ``Record``.
        A record the fold refuses (``CorruptRecordError``) leaves the projection as it was: the writer
        then has not taken its seq either.
        """
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, data, seq)  # first: each handler checks what it reads before it changes anything
        self.last_seq = seq
        if self.first_ts is None:
            self.first_ts = ts
        self.last_ts = ts

    def apply_all(self, records: Iterable[Record], *, snapshots: bool = True) -> SessionProjection:
        """Fold many records, as ``apply`` on each in turn; returns ``self`` for chaining.

        ``snapshots=False`` folds ``snapshot`` records as records of an unknown kind (they only move
        ``last_seq``): rebuilding a session from its records when a snapshot was refused.
        """
        # ``apply_fields`` inlined, with the handler table in a local: this loop runs for every record
        # a restart or a replay reads, and a method call per record would be a third of its cost.
        handlers = _HANDLERS if snapshots else _HANDLERS_WITHOUT_SNAPSHOTS
        for record in records:
            seq, ts = record.seq, record.ts
            handler = handlers.get(record.kind)
            if handler is not None:
                handler(self, record.data, seq)
            self.last_seq = seq
            if self.first_ts is None:
                self.first_ts = ts
            self.last_ts = ts
        return self

    def to_state(self) -> dict[str, Any]:
        """Everything but ``session_id``, as JSON-shaped values: what a snapshot record keeps."""
        return {
            "agent": self.agent,
            "platform": self.platform,
            "current_state": self.current_state,
            "variables": self.variables,
            "history": [[entry.role, entry.text, entry.seq] for entry in self.history],
            "last_seq": self.last_seq,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "errors": self.errors,
            "unstarted": [[seq, event] for seq, event in sorted(self.unstarted.items())],
            "held": [[seq, event] for seq, event in sorted(self.held.items())],
            "open_step": self.open_step,
            "started": self.started,
            "return_to": self.return_to,
            "visiting": self.visiting,
            "approvals": self.approvals,
            # Only when set: snapshots written before they existed read (and compare) as they are.
            **({"start_held": True} if self.start_held else {}),
            **({"deliveries": [[key, seq] for key, seq in self.deliveries.items()]} if self.deliveries else {}),
        }

    def _adopt(self, state: dict[str, Any]) -> None:
        """Take ``state`` (checked by ``baf.log.snapshot.checked_state``) as this projection's."""
        self.agent = state["agent"]
        self.platform = state["platform"]
        self.current_state = state["current_state"]
        self.variables = state["variables"]
        self.history = [ChatEntry(role, text, seq) for role, text, seq in state["history"]]
        self.last_seq = state["last_seq"]
        self.first_ts = None if state["first_ts"] is None else float(state["first_ts"])
        self.last_ts = None if state["last_ts"] is None else float(state["last_ts"])
        self.errors = state["errors"]
        self.unstarted = {seq: event for seq, event in state["unstarted"]}
        self.held = {seq: event for seq, event in state["held"]}
        self.open_step = state["open_step"]
        self.started = state["started"]
        self.start_held = state.get("start_held", False)
        self.deliveries = {key: seq for key, seq in state.get("deliveries", [])}
        self.return_to = state["return_to"]
        self.visiting = state["visiting"]
        self.approvals = {call_id: dict(entry) for call_id, entry in state["approvals"].items()}


def project(session_id: str, records: Iterable[Record], *, snapshots: bool = True) -> SessionProjection:
    """Build the projection of ``session_id`` from its records (``snapshots``: see ``apply_all``)."""
    return SessionProjection(session_id).apply_all(records, snapshots=snapshots)


def _corrupt(p: SessionProjection, seq: int, kind: str, field: str, value: Any, expected: str) -> NoReturn:
    found = "missing" if value is _MISSING else f"{type(value).__name__} {value!r:.60}"
    raise CorruptRecordError(p.session_id, seq, f"{kind} record: {field} should be {expected}, found {found}")


_MISSING: Any = object()

#: Delivery ids a projection remembers per session (the latest ones).
MAX_DELIVERIES = 256


def _session_started(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    initial = data.get("initial_state", _MISSING)
    if not isinstance(initial, str):
        _corrupt(p, seq, "session_started", "initial_state", initial, "a state name")
    p.agent = data.get("agent")
    p.platform = data.get("platform")
    p.current_state = initial


def _message_received(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    event = data.get("event", _MISSING)
    if not isinstance(event, dict):
        _corrupt(p, seq, "message_received", "event", event, "an object")
    text = data.get("text")
    if text is not None and not isinstance(text, str):
        text = str(text)  # older baf recorded whatever an event's text was; shown as text, not refused
    p.unstarted[seq] = event
    if text is not None:
        p.history.append(ChatEntry("user", text, seq))
    delivery = data.get("delivery")
    if isinstance(delivery, str):
        p.deliveries[delivery] = seq
        if len(p.deliveries) > MAX_DELIVERIES:
            del p.deliveries[next(iter(p.deliveries))]


def _step_started(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    event_seq = data.get("event_seq")
    if event_seq is not None:
        if not isinstance(event_seq, int) or isinstance(event_seq, bool):
            _corrupt(p, seq, "step_started", "event_seq", event_seq, "a seq or null")
        p.unstarted.pop(event_seq, None)
    p.open_step = event_seq if event_seq is not None else 0
    p.started = True
    # Until a transition: a step with an event runs the fallback body, one without the initial body.
    p.body_since, p.body_role, p.continuing = seq + 1, "fallback" if event_seq is not None else "body", None
    p.start_held = False


def _step_finished(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    p.open_step = None


def _transition(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    dest = data.get("dest", _MISSING)
    if not isinstance(dest, str):
        _corrupt(p, seq, "transition", "dest", dest, "a state name")
    if "return_to" in data or "visiting" in data:  # written when a global state is entered or left
        return_to, visiting = data.get("return_to", p.return_to), data.get("visiting", p.visiting)
        if return_to is not None and not isinstance(return_to, str):
            _corrupt(p, seq, "transition", "return_to", return_to, "a state name or null")
        if visiting is not None and not isinstance(visiting, str):
            _corrupt(p, seq, "transition", "visiting", visiting, "a state name or null")
        p.return_to, p.visiting = return_to, visiting
    p.current_state = dest
    p.body_since, p.body_role = seq + 1, "body"


def _variable_set(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    name = data.get("name", _MISSING)
    if not isinstance(name, str):
        _corrupt(p, seq, "variable_set", "name", name, "text")
    if "value" not in data:
        _corrupt(p, seq, "variable_set", "value", _MISSING, "present")
    p.variables[name] = data["value"]


def _variable_deleted(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    name = data.get("name", _MISSING)
    if not isinstance(name, str):
        _corrupt(p, seq, "variable_deleted", "name", name, "text")
    p.variables.pop(name, None)


def _reply(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    text = data.get("text", _MISSING)
    if not isinstance(text, str):
        _corrupt(p, seq, "reply", "text", text, "text")
    p.history.append(ChatEntry("assistant", text, seq))


def _forked_from(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    # Everything still waiting at the cut is held, whatever the record lists: a fork written by an older
    # baf (without "held") must not run a model or a tool by itself either.
    p.held.update(p.unstarted)
    p.unstarted.clear()
    if p.current_state is not None and not p.started:  # cut before the first step: its body waits too
        p.start_held = True


def _fork_continued(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    p.unstarted.update(p.held)
    p.held.clear()
    p.start_held = False


def _error(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    p.errors += 1


def _approval_requested(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    call_id, name = data.get("call_id", _MISSING), data.get("name", _MISSING)
    if not isinstance(call_id, str):
        _corrupt(p, seq, "approval_requested", "call_id", call_id, "text")
    if not isinstance(name, str):
        _corrupt(p, seq, "approval_requested", "name", name, "text")
    # Held while continuing a paused invocation: the invocation is still the one that began the pause.
    origin = p.continuing or {"since": p.body_since, "event_seq": p.open_step or 0, "state": p.current_state,
                              "role": p.body_role}  # fmt: skip
    p.approvals[call_id] = {"seq": seq, "name": name, "arguments": str(data.get("arguments", "")),
                            "step": data.get("step"), "decided": False, **origin}  # fmt: skip


def _approval_decided(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    call_id = data.get("call_id", _MISSING)
    if not isinstance(call_id, str):
        _corrupt(p, seq, "approval_decided", "call_id", call_id, "text")
    entry = p.approvals.get(call_id)
    if entry is None:
        return
    p.approvals[call_id] = {**entry, "decided": True}
    since = entry["since"]
    held_with = [key for key, other in p.approvals.items() if other["since"] == since]
    if all(p.approvals[key]["decided"] for key in held_with):
        # The last of the calls held together: this step continues their invocation.
        for key in held_with:
            del p.approvals[key]
        p.continuing = {name: entry[name] for name in ("since", "event_seq", "state", "role")}


def _approval_expired(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    call_ids = data.get("call_ids", _MISSING)
    if not isinstance(call_ids, list):
        _corrupt(p, seq, "approval_expired", "call_ids", call_ids, "a list of call ids")
    for call_id in call_ids:
        p.approvals.pop(call_id, None)


def _snapshot(p: SessionProjection, data: dict[str, Any], seq: int) -> None:
    state = checked_state(p.session_id, seq, data)
    if p.last_seq == 0 and p.first_ts is None:
        p._adopt(state)  # a load from this snapshot on
        return
    # The fold already holds the records before it: the snapshot must say the same.
    mine = p.to_state()
    if mine != state:
        differing = sorted(name for name in state if state[name] != mine.get(name))
        raise CorruptSnapshotError(
            p.session_id,
            seq,
            f"snapshot disagrees with the fold of the records before it (fields {', '.join(differing)}); "
            "the session is rebuilt from its records",
        )


_HANDLERS: dict[str, Callable[[SessionProjection, dict[str, Any], int], None]] = {
    RecordKind.SESSION_STARTED: _session_started,
    RecordKind.MESSAGE_RECEIVED: _message_received,
    RecordKind.STEP_STARTED: _step_started,
    RecordKind.STEP_FINISHED: _step_finished,
    RecordKind.TRANSITION: _transition,
    RecordKind.VARIABLE_SET: _variable_set,
    RecordKind.VARIABLE_DELETED: _variable_deleted,
    RecordKind.REPLY: _reply,
    RecordKind.ERROR: _error,
    RecordKind.FORKED_FROM: _forked_from,
    RecordKind.FORK_CONTINUED: _fork_continued,
    RecordKind.SNAPSHOT: _snapshot,
    RecordKind.APPROVAL_REQUESTED: _approval_requested,
    RecordKind.APPROVAL_DECIDED: _approval_decided,
    RecordKind.APPROVAL_EXPIRED: _approval_expired,
}
_HANDLERS_WITHOUT_SNAPSHOTS = {kind: handler for kind, handler in _HANDLERS.items() if kind != RecordKind.SNAPSHOT}
