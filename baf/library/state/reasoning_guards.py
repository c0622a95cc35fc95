"""What the reasoning state shares with the patterns beyond the kernel: the budget, context compaction,
a typed final answer, and earlier turns' tool results in the conversation.

The loop (``baf.library.state.reasoning_state_library``) calls these; each is off unless configured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from baf.reasoning.patterns.compaction import ContextCompactor, estimate_tokens, turn_start

__all__ = [
    "COMPACTION_PROMPT",
    "TOOL_MEMORY_KEY",
    "Compaction",
    "budget_message",
    "compaction_details",
    "plan_compaction",
    "repair_message",
    "tool_exchange",
]

#: The session variable holding earlier invocations' tool calls and results (``memory_tool_results``).
TOOL_MEMORY_KEY = "reasoning_tool_memory"

COMPACTION_PROMPT = (
    "Summarise this earlier part of a conversation between a user, an assistant and its tools in a few "
    "sentences. Keep every fact, number, tool result and decision that later steps may need.\n\n{transcript}"
)


@dataclass(frozen=True, slots=True)
class Compaction:
    """Which messages a compaction removes: ``old`` (to summarise or drop) and what stays around them."""

    kept_before: list[dict[str, Any]]  # the user's request of this invocation, when it is not in the tail
    old: list[dict[str, Any]]
    tail: list[dict[str, Any]]

    def transcript(self) -> str:
        """The removed messages as text, for a summary."""
        lines = []
        for message in self.old:
            calls = message.get("tool_calls") or []
            shown = message.get("content") or ""
            if calls:
                called = ", ".join(c["function"]["name"] + c["function"]["arguments"] for c in calls)
                shown = f"{shown} [calls {called}]"
            lines.append(f"{message.get('role')}: {shown}")
        return "\n".join(lines)

    def messages(self, summary: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The conversation after the compaction, with ``summary`` standing in for the old messages."""
        return [*([summary] if summary is not None else []), *self.kept_before, *self.tail]


def plan_compaction(
    compactor: ContextCompactor, messages: list[dict[str, Any]], request: dict[str, Any]
) -> Compaction | None:
    """What to compact when ``messages`` pass the compactor's threshold, else ``None``.

    The last ``keep_last`` messages stay, and the tail starts where :func:`turn_start` allows: a result is
    never separated from the assistant message that asked for it, so calls and results stay paired.
    ``request`` (the user's message this invocation answers) always stays.
    """
    if not compactor.needs_compaction(messages):
        return None
    cut = turn_start(messages, max(0, len(messages) - compactor.keep_last))
    head, tail = messages[:cut], messages[cut:]
    kept = [m for m in head if m is request]
    old = [m for m in head if m is not request]
    if not old:
        return None
    return Compaction(kept, old, tail)


def compaction_details(plan: Compaction, compactor: ContextCompactor, before: list[dict[str, Any]],
                       after: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """The ``details`` of the ``compaction`` step."""
    return {"mode": compactor.mode, "removed": len(plan.old), "tokens_before": estimate_tokens(before),
            "tokens_after": estimate_tokens(after)}  # fmt: skip


def budget_message(reason: str) -> str:
    """The reply when the budget ends an invocation."""
    return f"I stopped before finishing ({reason}). Please narrow the request down, or raise the budget."


def repair_message(type_name: str, problem: str) -> str:
    """The message asking the model to fix an answer that is not a valid ``type_name``."""
    return (f"Your answer could not be read as {type_name}: {problem}\n"
            "Reply again with only the JSON object, and nothing else.")  # fmt: skip


def tool_exchange(messages: list[dict[str, Any]], request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls and results of this invocation (what ``memory_tool_results`` keeps): the
    assistant messages that called tools and the tool messages that answered them, after ``request``."""
    start = next((i for i, m in enumerate(messages) if m is request), -1) + 1
    return [m for m in messages[start:]
            if m.get("role") == "tool" or (m.get("role") == "assistant" and m.get("tool_calls"))]  # fmt: skip
