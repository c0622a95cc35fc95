"""The live view of a reasoning loop in a chat: one message, edited in place as the steps come.

Telegram allows about one message per second in a chat (20 a minute in groups), and every edit counts,
so the view is redrawn at most once per ``interval`` seconds: steps that arrive in between are folded
into the next redraw, and the last one is always shown. The view is a handle on a message that was
already sent (its id), not session state: a restarted bot starts a new one with the next loop.
"""

from __future__ import annotations

import html
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from baf.platforms.telegram.markup import utf16_length

__all__ = ["StatusView"]

_TASK_MARKS = {"completed": "✅", "skipped": "⏭", "in_progress": "▶️", "pending": "▫️"}


@dataclass
class StatusView:
    """What one chat's status message shows, and where it is."""

    #: Step summaries kept (older ones scroll out).
    max_lines: int = 8
    message_id: int | None = None
    finished: bool = False
    #: Whether there is something not yet drawn.
    dirty: bool = True
    #: A redraw is queued or waiting for its slot.
    scheduled: bool = False
    #: Loop time of the last draw.
    drawn_at: float = float("-inf")
    lines: deque[str] = field(default_factory=deque)
    tasks: list[dict[str, Any]] = field(default_factory=list)

    def add_step(self, summary: str) -> None:
        """Append one step's summary line."""
        line = " ".join(summary.split())
        if len(line) > 200:
            line = line[:199] + "…"
        self.lines.append(line)
        while len(self.lines) > self.max_lines:
            self.lines.popleft()
        self.dirty = True

    def set_tasks(self, tasks: list[dict[str, Any]]) -> None:
        """Show this task-list snapshot."""
        self.tasks = [dict(task) for task in tasks]
        self.dirty = True

    def render(self) -> str:
        """The message text, in Telegram HTML (every summary and task escaped), within one message."""
        title = "✔️ <b>Done</b>" if self.finished else "⏳ <b>Working…</b>"
        parts = [title]
        for task in self.tasks[:20]:
            mark = _TASK_MARKS.get(str(task.get("status")), "▫️")
            parts.append(f"{mark} {html.escape(str(task.get('description', '')), quote=False)}")
        if self.tasks and self.lines:
            parts.append("")
        parts.extend(f"• {html.escape(line, quote=False)}" for line in self.lines)
        text = "\n".join(parts)
        while utf16_length(text) > 4000 and len(parts) > 1:
            parts.pop(1)
            text = "\n".join(parts)
        return text
