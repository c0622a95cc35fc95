"""Inbound events: what platforms deliver to an agent.

Every event is recorded as a ``message_received`` record before any body runs, so each event class
knows how to turn itself into JSON (:meth:`Event.to_data`) and back (:func:`event_from_data`).
Subclasses are registered by their ``type_name``; a user subclass only needs dataclass fields that
JSON can carry.
"""

from __future__ import annotations

import base64
import dataclasses
import mimetypes
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from baf.core.intent import IntentPrediction

__all__ = [
    "ApprovalEvent",
    "Event",
    "ReceiveFileEvent",
    "ReceiveJSONEvent",
    "ReceiveTextEvent",
    "WildcardEvent",
    "event_from_data",
]

_EVENT_TYPES: dict[str, type[Event]] = {}


@dataclass
class Event:
    """Base of every inbound event. Subclass it (as a dataclass) for events of your own.

    ``session_id`` names the session the event is for; platforms set it.
    """

    session_id: str = ""
    #: What the intent classifier made of this message (set by the engine for a text message in a state
    #: that routes by intent; see ``baf.core.intent_routing``). Not part of the recorded event: the
    #: prediction has a record of its own.
    predicted_intent: IntentPrediction | None = field(default=None, init=False, repr=False, compare=False)
    #: The platform's id for this delivery (``telegram:<bot>:<update_id>``), for a platform whose source
    #: may deliver one message twice (after a crash, before it confirmed it). Recorded with the message;
    #: a second event with an id the session recorded lately is not recorded or handled again.
    delivery_id: str | None = field(default=None, init=False, repr=False, compare=False)
    #: The client's own id for this message (a browser tab's), recorded with it and passed back when the
    #: message is shown to the session's clients (``Platform.reply_user_message``): the client that sent
    #: it, which shows it already, recognizes it by this id, and every other client shows it.
    client_message_id: str | None = field(default=None, init=False, repr=False, compare=False)
    #: The name the event is recorded under. Defaults to the class name.
    type_name: ClassVar[str] = "event"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "type_name" not in cls.__dict__:
            cls.type_name = cls.__name__
        _EVENT_TYPES[cls.type_name] = cls

    def matches(self, pattern: type[Event]) -> bool:
        """Whether this event satisfies a ``when_event(pattern)`` transition."""
        return pattern is WildcardEvent or isinstance(self, pattern)

    def to_data(self) -> dict[str, Any]:
        """The JSON form recorded in the log."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init and f.name != "session_id"}
        return {"type": self.type_name, **fields}

    @property
    def text(self) -> str | None:
        """The text of the event as a conversation would show it, or ``None``."""
        return None


_EVENT_TYPES[Event.type_name] = Event


@dataclass
class WildcardEvent(Event):
    """Matches every event in ``when_event()``; never delivered itself."""

    type_name: ClassVar[str] = "wildcard"


@dataclass
class ReceiveTextEvent(Event):
    """A text message from the user."""

    message: str = ""
    type_name: ClassVar[str] = "text"

    @property
    def text(self) -> str | None:
        return self.message


@dataclass
class ReceiveJSONEvent(Event):
    """A structured (JSON object) message from the user."""

    payload: dict[str, Any] = field(default_factory=dict)
    type_name: ClassVar[str] = "json"

    @property
    def text(self) -> str | None:
        import json

        return json.dumps(self.payload, ensure_ascii=False)


@dataclass
class ReceiveFileEvent(Event):
    """A file sent by the user. ``data`` is base64 so the event can be recorded as JSON."""

    name: str = ""
    mime_type: str = ""
    data: str = ""
    caption: str = ""
    type_name: ClassVar[str] = "file"

    def __post_init__(self) -> None:
        if not self.mime_type:
            self.mime_type = mimetypes.guess_type(self.name)[0] or "application/octet-stream"

    @classmethod
    def from_bytes(cls, session_id: str, name: str, content: bytes, mime_type: str = "") -> ReceiveFileEvent:
        """Build the event from raw bytes."""
        return cls(session_id, name=name, mime_type=mime_type, data=base64.b64encode(content).decode("ascii"))

    @property
    def content(self) -> bytes:
        """The decoded file bytes."""
        return base64.b64decode(self.data)

    @property
    def text(self) -> str | None:
        return self.caption or f"[file {self.name}]"


@dataclass
class ApprovalEvent(Event):
    """A human's decision on a tool call that waits for approval (``docs/human_approval.md``).

    A platform sends it for the session it serves, naming the call (``call_id``, from the request it
    was shown through :meth:`~baf.core.platform.Platform.reply_approval_request`). ``approved`` runs
    the call; otherwise the model is told it was denied, with ``reason``. ``approver`` says who decided
    (recorded with the decision). It is an ordinary inbound event: recorded first, handled in the
    session's order, routed to the worker that owns the session. A decision for a call that does not
    wait in *this* session is refused (recorded as an error, shown to the sender); nothing runs.
    """

    call_id: str = ""
    approved: bool = False
    reason: str = ""
    approver: str = ""
    type_name: ClassVar[str] = "approval"


def event_from_data(session_id: str, data: dict[str, Any]) -> Event:
    """Rebuild an event from its recorded JSON form (inverse of :meth:`Event.to_data`)."""
    fields = dict(data)
    type_name = fields.pop("type", "event")
    cls = _EVENT_TYPES.get(type_name)
    if cls is None:
        raise ValueError(
            f"unknown event type {type_name!r} in session {session_id!r}; "
            "import the module that defines it before reading this log"
        )
    return cls(session_id=session_id, **fields)
