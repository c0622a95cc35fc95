"""What a record shows the user: the platform call it stands for, for delivery from the log.

The worker that runs a session delivers its replies as it records them (``LiveSession.commit``). Another
worker, whose platform has a client of that session connected, delivers the same records by reading them
from the log (``baf.serve.follower``): :func:`platform_call_of` turns each record back into the call the
owner made, with the same arguments, so a platform needs nothing to serve a session another worker runs.
Records are redacted when written, so what is delivered from them is too.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from baf.log.record import Record, RecordKind
from baf.reasoning.approval import ApprovalDecision, ApprovalExpiry, ApprovalRequest
from baf.reasoning.step import ReasoningStep

__all__ = ["platform_call_of"]


def platform_call_of(record: Record) -> tuple[str, tuple[Any, ...]] | None:
    """``(method, args)``: the ``Platform`` call that showed ``record`` to the user (``platform.method(
    session, *args)``; for a message the user sent, the call that showed it to the session's clients), or
    ``None`` for a record the user is not shown (a transition, a tool call, an
    error that stayed in the log, a reasoning step or task list recorded with ``streamed: false``). A
    reply whose stored fields do not make that call (a damaged file or image) is shown as its text."""
    data = record.data
    kind = record.kind
    if data.get("streamed") is False:  # recorded, not sent (a reasoning state with ``stream_steps=False``)
        return None
    if kind == RecordKind.REPLY:
        return _reply_call(data)
    if kind == RecordKind.MESSAGE_RECEIVED:
        text = data.get("text")
        if text is None:  # an event with nothing to show (an approval decision shows as its own record)
            return None
        client_message_id = data.get("client_message_id")
        mark = client_message_id if isinstance(client_message_id, str) else None
        return "reply_user_message", (str(text), mark)
    if kind == RecordKind.REASONING_STEP:
        return "reply_reasoning_step", (ReasoningStep.from_dict(data),)
    if kind == RecordKind.TASK_LIST:
        tasks = data.get("tasks")
        return "reply_task_list_update", (tasks if isinstance(tasks, list) else [],)
    if kind == RecordKind.APPROVAL_REQUESTED:
        request = ApprovalRequest(
            str(data.get("call_id", "")), str(data.get("name", "")), str(data.get("arguments", "")),
            int(data.get("step", 0) or 0),
        )  # fmt: skip
        return "reply_approval_request", (request,)
    if kind == RecordKind.APPROVAL_DECIDED:
        return "reply_approval_decision", (ApprovalDecision.from_record(record),)
    if kind == RecordKind.APPROVAL_EXPIRED:
        return "reply_approval_expired", (ApprovalExpiry.from_record(record),)
    if kind == RecordKind.ERROR:
        shown = data.get("shown")  # what the engine showed the user for a body that raised
        return ("reply_error", (shown,)) if isinstance(shown, str) else None
    return None


def _reply_call(data: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """The ``Session.reply*`` call a ``reply`` record was written by (``baf.core.session``)."""
    text = str(data.get("text", ""))
    fmt = data.get("format")
    if fmt == "markdown":
        return "reply_markdown", (text,)
    if fmt == "options":
        options = data.get("options")
        return "reply_options", (text, [str(o) for o in options] if isinstance(options, list) else [])
    if fmt in ("file", "image"):
        try:
            content = base64.b64decode(str(data.get("data", "")), validate=True)
        except (binascii.Error, ValueError):
            return "reply", (text,)
        mime_type = str(data.get("mime_type", ""))
        if fmt == "file":
            name = str(data.get("name", "file"))
            caption = "" if text == f"[file {name}]" else text  # the text stands in for a missing caption
            return "reply_file", (name, content, mime_type, caption)
        return "reply_image", (content, mime_type or "image/png", "" if text == "[image]" else text)
    return "reply", (text,)
