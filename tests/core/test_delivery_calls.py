"""``platform_call_of``: each record the user was shown turns back into the platform call that showed it,
with the same arguments (what a worker following the log delivers)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from baf.core.delivery import platform_call_of
from baf.log.record import Record, RecordKind
from baf.reasoning.approval import ApprovalDecision, ApprovalExpiry, ApprovalRequest
from baf.reasoning.step import ReasoningStep


def record(kind: str, data: dict[str, Any]) -> Record:
    return Record(session_id="s", seq=7, kind=kind, data=data)


PNG = b"\x89PNG fake"


@pytest.mark.parametrize(
    ("kind", "data", "call"),
    [
        (RecordKind.REPLY, {"text": "hi"}, ("reply", ("hi",))),
        (RecordKind.REPLY, {"text": "**hi**", "format": "markdown"}, ("reply_markdown", ("**hi**",))),
        (RecordKind.REPLY, {"text": "pick", "format": "options", "options": ["a", "b"]},
         ("reply_options", ("pick", ["a", "b"]))),
        (RecordKind.REPLY, {"text": "[file r.txt]", "format": "file", "name": "r.txt", "mime_type": "text/plain",
                            "data": base64.b64encode(b"abc").decode()},
         ("reply_file", ("r.txt", b"abc", "text/plain", ""))),
        (RecordKind.REPLY, {"text": "a chart", "format": "image", "mime_type": "image/png",
                            "data": base64.b64encode(PNG).decode()},
         ("reply_image", (PNG, "image/png", "a chart"))),
        (RecordKind.REPLY, {"text": "[image]", "format": "image", "mime_type": "image/png", "data": "not base64!"},
         ("reply", ("[image]",))),
        (RecordKind.REASONING_STEP, {"kind": "tool_call", "step": 1, "summary": "look", "details": {"x": 1}},
         ("reply_reasoning_step", (ReasoningStep("tool_call", 1, "look", {"x": 1}),))),
        (RecordKind.TASK_LIST, {"tasks": [{"id": 1}]}, ("reply_task_list_update", ([{"id": 1}],))),
        (RecordKind.ERROR, {"source": "body", "shown": "Oops"}, ("reply_error", ("Oops",))),
        # A message the user sent: shown to the session's clients, with the id its client gave it.
        (RecordKind.MESSAGE_RECEIVED, {"text": "hi", "event": {}}, ("reply_user_message", ("hi", None))),
        (RecordKind.MESSAGE_RECEIVED, {"text": "hi", "event": {}, "client_message_id": "m1"},
         ("reply_user_message", ("hi", "m1"))),
        (RecordKind.APPROVAL_REQUESTED, {"step": 2, "call_id": "c1", "name": "pay", "arguments": "{}"},
         ("reply_approval_request", (ApprovalRequest("c1", "pay", "{}", 2),))),
    ],
)  # fmt: skip
def test_a_shown_record_is_the_call_that_showed_it(kind: str, data: dict[str, Any], call: tuple[str, Any]) -> None:
    assert platform_call_of(record(kind, data)) == call


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        (RecordKind.MESSAGE_RECEIVED, {"text": None, "event": {"type": "approval"}}),  # shown as its decision
        (RecordKind.ERROR, {"source": "tool", "message": "boom"}),  # stayed in the log
        (RecordKind.TRANSITION, {"source": "a", "dest": "b"}),
        (RecordKind.VARIABLE_SET, {"name": "x", "value": 1}),
        # Recorded by a reasoning state built with ``stream_steps=False``: its owner did not show them.
        (RecordKind.REASONING_STEP, {"kind": "tool_call", "step": 1, "summary": "look", "streamed": False}),
        (RecordKind.TASK_LIST, {"tasks": [{"id": 1}], "streamed": False}),
    ],
)
def test_a_record_the_user_was_not_shown_is_no_call(kind: str, data: dict[str, Any]) -> None:
    assert platform_call_of(record(kind, data)) is None


def test_a_decision_and_an_expiry_are_the_calls_that_showed_them_with_their_time() -> None:
    decided = Record("s", 9, RecordKind.APPROVAL_DECIDED, {
        "call_id": "c1", "name": "pay", "approved": False, "reason": "no", "by": "alice", "request_seq": 4, "since": 3,
    }, ts=1700000000.5)  # fmt: skip
    assert platform_call_of(decided) == (
        "reply_approval_decision", (ApprovalDecision("c1", "pay", False, "no", "alice", 1700000000.5),),
    )  # fmt: skip
    expired = Record("s", 10, RecordKind.APPROVAL_EXPIRED, {"call_ids": ["c1", "c2"], "reason": "moved on"}, ts=17.0)
    assert platform_call_of(expired) == ("reply_approval_expired", (ApprovalExpiry(("c1", "c2"), "moved on", 17.0),))
