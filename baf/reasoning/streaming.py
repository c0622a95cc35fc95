"""Token streaming: a model turn's text, shown to the user while the model writes it.

When the model streams (``LLM.streams``, e.g. ``LLMOpenAI(stream=True)``) and the session has a platform,
the kernel's model turn (:class:`~baf.reasoning.turn.ModelTurns`) asks for the answer through
:meth:`~baf.llm.base.LLM.stream_with_tools` and hands each piece of text to a :class:`TextDeltas`,
which calls ``platform.reply_delta(session, run_id, text)`` at once.

What the log holds does not change: deltas are not records. The request is recorded and committed
before the model is asked (so every delta follows a durable request), and only the complete response is
recorded, after the stream ended. A stream that breaks off is retried by the model client; the retry's
text comes under a new ``run_id`` (a client replaces what it showed for the old one), and a turn that
fails for good records an error and never half a response. A response served from the log (a resumed
or re-run loop) is not streamed again: the reply that follows from it is delivered whole, as usual.

``run_id`` is ``"<seq>.<attempt>"``: the session's last seq when the model was asked (the turn's
``llm_request`` record; in a loop resumed after a crash, the record the restart wrote after it), and the
model client's attempt number (1, then 2, ... after a broken stream). It is unique within the session.

Secrets are redacted from deltas as from records. The end of the text that could be the beginning of a
secret is held back until the next piece shows whether it is one, so a secret split across two pieces
is still replaced whole; the rest is sent when the stream ends.

A platform whose ``reply_delta`` raises is reported once (an ``error`` record, source ``platform``) and
gets no more deltas of that turn; the turn itself goes on, and the final reply is delivered as usual.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from baf.log.redaction import Redactor

__all__ = ["TextDeltas"]

logger = logging.getLogger(__name__)


class TextDeltas:
    """Forwards one model turn's text to ``send(run_id, text)`` as it is written (see the module docstring).

    Args:
        send: ``platform.reply_delta`` bound to the session.
        request_seq: The session's last seq when the model was asked (normally the turn's ``llm_request``).
        redactor: The agent's redactor, if any.
        failed: Called with the exception when ``send`` raises (once; nothing more is sent afterwards).
    """

    __slots__ = ("_attempt", "_failed", "_held", "_redactor", "_request_seq", "_send", "_stopped")

    def __init__(
        self,
        send: Callable[[str, str], Awaitable[Any]],
        request_seq: int,
        redactor: Redactor | None = None,
        failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        self._send = send
        self._request_seq = request_seq
        self._redactor = redactor if redactor is not None and redactor.active else None
        self._failed = failed
        self._attempt = 1
        self._held = ""  # text not sent yet: it may be the start of a secret
        self._stopped = False

    @property
    def run_id(self) -> str:
        """The id the current attempt's text is sent under."""
        return f"{self._request_seq}.{self._attempt}"

    async def __call__(self, text: str, attempt: int) -> None:
        """Forward ``text``, a piece of attempt number ``attempt`` (a :data:`~baf.llm.base.TextSink`)."""
        if attempt != self._attempt:
            self._attempt, self._held = attempt, ""  # a retry starts the answer again
        if self._stopped or not text:
            return
        if self._redactor is None:
            await self._deliver(text)
            return
        pending = self._held + text
        shown = self._redactor.redact_text(pending)
        hold = self._redactor.unfinished_secret(pending)
        if hold and not shown.endswith(pending[-hold:]):
            hold = 0  # the end was itself replaced: nothing of it is waiting to be completed
        self._held = pending[len(pending) - hold :] if hold else ""
        ready = shown[: len(shown) - hold] if hold else shown
        if ready:
            await self._deliver(ready)

    async def finish(self) -> None:
        """The answer is complete: send what was held back."""
        held, self._held = self._held, ""
        if held and not self._stopped:
            assert self._redactor is not None  # only redaction holds text back
            await self._deliver(self._redactor.redact_text(held))

    async def _deliver(self, text: str) -> None:
        try:
            await self._send(self.run_id, text)
            # Let the platform's writers run: pieces read in one burst would otherwise all queue up
            # before any of them is sent (and a bounded send queue would take that for a stuck client).
            await asyncio.sleep(0)
        except Exception as exc:  # a platform's failure must not end the turn: the final reply still goes
            self._stopped = True
            if self._failed is not None:
                self._failed(exc)
            else:
                logger.warning("reply_delta failed; no more text of this answer is streamed: %r", exc)
