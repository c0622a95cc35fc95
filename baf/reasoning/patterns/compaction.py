"""Context compaction: keep a growing conversation under a token limit."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ContextCompactor", "estimate_tokens", "turn_start"]

_Messages = list[dict[str, Any]]


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A rough token count (about four characters a token): good enough to decide when to compact,
    without a tokenizer dependency."""
    return sum(len(json.dumps(m, ensure_ascii=False)) for m in messages) // 4 + 1


def turn_start(messages: list[dict[str, Any]], cut: int, floor: int = 0) -> int:
    """Where a kept tail may start: ``cut``, moved back (not below ``floor``) past tool messages.

    A tool message answers the assistant message before it that asked for it; a tail starting at a tool
    message would leave its results without their call (parallel calls: several results in a row). The
    one rule of where a conversation may be cut, shared by every compaction.
    """
    while cut > floor and messages[cut].get("role") == "tool":
        cut -= 1
    return cut


@dataclass(frozen=True, slots=True)
class ContextCompactor:
    """Compacts a conversation once it nears ``max_tokens``.

    When the estimate passes ``threshold * max_tokens``, the turns between the first message (the task)
    and the last ``keep_last`` messages are dropped (``mode="drop"``) or replaced by a summary written
    by the model (``mode="summarize"``, one extra call). Tool results are never separated from the
    assistant message that asked for them: the kept tail starts at a user or assistant message.
    """

    max_tokens: int
    threshold: float = 0.8
    keep_last: int = 6
    mode: Literal["drop", "summarize"] = "drop"

    def needs_compaction(self, messages: list[dict[str, Any]]) -> bool:
        """True when ``messages`` are near the limit and there is something old to remove."""
        return len(messages) > self.keep_last + 1 and estimate_tokens(messages) > self.threshold * self.max_tokens

    def split(self, messages: list[dict[str, Any]]) -> tuple[_Messages, _Messages, _Messages]:
        """``(head, old, tail)``: the task message, the turns to compact, the recent turns kept."""
        cut = turn_start(messages, max(1, len(messages) - self.keep_last), floor=1)
        return messages[:1], messages[1:cut], messages[cut:]

    @staticmethod
    def summary_message(summary: str, dropped: int) -> dict[str, Any]:
        """The message that stands in for compacted turns."""
        return {"role": "user", "content": f"[Summary of {dropped} earlier messages]\n{summary}"}
