"""Tool calls waiting for approval, in a Telegram chat: a message with Approve and Deny buttons.

The request is sent with an inline keyboard whose buttons carry ``baf-approval:<y|n>:<seq>``, where
``seq`` is the request's ``approval_requested`` record in the chat's session: Telegram allows 64 bytes of
callback data, which a model's call id may not fit, and the record says everything else (the call id,
the tool, the arguments). A press is checked against the log (:func:`request_fate`): a request that was
decided or expired meanwhile is answered as such and nothing is sent to the agent; otherwise the press
becomes an ``ApprovalEvent`` of that chat's session, which the engine checks once more. The message is
then edited to show what the log says was decided, by whom, and loses its buttons. A decision made
elsewhere, or an expiry, edits it the same way when it is delivered (``reply_approval_decision``,
``reply_approval_expired``).

Nothing here is session state: the buttons hold the seq, the log holds the rest.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from baf.log.record import Record, RecordKind
from baf.reasoning.approval import ApprovalRequest

__all__ = ["CALLBACK_PREFIX", "Fate", "button_data", "html_to_plain", "parse_button", "request_fate", "request_html"]

#: What the buttons' callback data starts with (a press of any other button is not an approval).
CALLBACK_PREFIX = "baf-approval"

_ARGUMENTS_SHOWN = 1500  # characters of the arguments shown (a message holds 4,096 UTF-16 units)


def button_data(approved: bool, seq: int) -> str:
    """The callback data of the Approve (``approved``) or Deny button of the request recorded at ``seq``."""
    return f"{CALLBACK_PREFIX}:{'y' if approved else 'n'}:{seq}"


def parse_button(data: str | None) -> tuple[bool, int] | None:
    """``(approved, seq)`` from a button's callback data; ``None`` if it is not an approval button."""
    prefix, _, rest = (data or "").partition(":")
    verdict, _, seq = rest.partition(":")
    if prefix != CALLBACK_PREFIX or verdict not in ("y", "n") or not seq.isdigit() or len(seq) > 18:
        return None
    return verdict == "y", int(seq)


@dataclass(frozen=True)
class Fate:
    """What became of a request: ``approved`` (``None``: it expired undecided), by whom, why."""

    approved: bool | None
    by: str = ""
    reason: str = ""

    def status(self) -> str:
        """The line the request's message ends with once decided (Telegram HTML; who and why escaped)."""
        if self.approved is None:
            return "⌛ <b>Expired</b>: the conversation moved on before a decision; the tool did not run."
        who = f" by {_escape(self.by)}" if self.by else ""
        because = f" ({_escape(self.reason)})" if self.reason else ""
        return f"✅ <b>Approved</b>{who}." if self.approved else f"❌ <b>Denied</b>{who}{because}."

    def notice(self) -> str:
        """The answer to a press that came after it (a short popup, plain text)."""
        if self.approved is None:
            return "This request expired when the conversation moved on; nothing was run."
        who = f" by {self.by}" if self.by else ""
        return f"This call was already {'approved' if self.approved else 'denied'}{who}."


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def request_html(request: ApprovalRequest, fate: Fate | None = None) -> str:
    """The request's message (Telegram HTML): the tool, its arguments, and whether it still waits.

    Written as HTML with every value escaped, not as Markdown for the reply renderer: the arguments and
    the call id come from the model, and a backtick in them would end their code block or span and let
    the rest render as links or bold text, in the very message a human reads to decide."""
    arguments = request.arguments
    if len(arguments) > _ARGUMENTS_SHOWN:
        arguments = arguments[:_ARGUMENTS_SHOWN] + " …"
    status = fate.status() if fate is not None else "Approve or deny it below; a new message cancels it."
    return (
        f"I would like to run the tool <code>{_escape(request.tool)}</code> with these arguments:\n\n"
        f'<pre><code class="language-json">{_escape(arguments)}</code></pre>\n\n'
        f"It needs your approval first (call <code>{_escape(request.call_id)}</code>). {status}"
    )


def html_to_plain(text: str) -> str:
    """What a user reads of ``text`` (HTML from :func:`request_html`): the fallback should Telegram refuse it."""
    return html.unescape(re.sub(r"<[^>]*>", "", text))


def request_fate(records: Sequence[Record], seq: int) -> tuple[ApprovalRequest | None, Fate | None]:
    """From a session's records from ``seq`` on: the request recorded at ``seq`` (``None`` if there is no
    ``approval_requested`` record there), and its decision or expiry if one was recorded."""
    if not records or records[0].seq != seq or records[0].kind != RecordKind.APPROVAL_REQUESTED:
        return None, None
    data = records[0].data
    request = ApprovalRequest(
        str(data.get("call_id", "")), str(data.get("name", "")), str(data.get("arguments", "")),
        int(data.get("step", 0) or 0),
    )  # fmt: skip
    for record in records[1:]:
        fate = _fate(record, request.call_id)
        if fate is not None:
            return request, fate
    return request, None


def _fate(record: Record, call_id: str) -> Fate | None:
    data: dict[str, Any] = record.data
    if record.kind == RecordKind.APPROVAL_DECIDED and data.get("call_id") == call_id:
        return Fate(bool(data.get("approved")), str(data.get("by") or ""), str(data.get("reason") or ""))
    if record.kind == RecordKind.APPROVAL_EXPIRED and call_id in (data.get("call_ids") or []):
        return Fate(None)
    return None
