"""The request-scoped task list of a reasoning loop."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["TASK_STATUSES", "Task", "TaskList"]

TASK_STATUSES = ("pending", "in_progress", "completed", "skipped")
_OPEN = ("pending", "in_progress")
_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "skipped": "[-]"}


@dataclass(slots=True)
class Task:
    """One planned subtask. ``id`` is unique within its list and is how the model refers to it."""

    id: int
    description: str
    status: str = "pending"
    result: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)


class TaskList:
    """The tasks of one reasoning invocation. A final answer is accepted only when :meth:`all_resolved`.

    The first open task is marked ``in_progress``, so a UI shows what the loop is working on.
    """

    def __init__(self) -> None:
        self._tasks: list[Task] = []

    def __len__(self) -> int:
        return len(self._tasks)

    def add(self, description: str) -> Task:
        """Append a pending task and return it."""
        task = Task(len(self._tasks) + 1, description)
        self._tasks.append(task)
        self._mark_current()
        return task

    def get(self, task_id: int) -> Task | None:
        """The task with ``task_id``, or ``None``."""
        return next((t for t in self._tasks if t.id == task_id), None)

    def update(self, task_id: int, status: str, result: str = "") -> Task:
        """Set a task's status (and result); raises ``KeyError`` / ``ValueError`` on a bad id or status."""
        if status not in TASK_STATUSES:
            raise ValueError(f"unknown task status {status!r}; use one of {', '.join(TASK_STATUSES)}")
        task = self.get(task_id)
        if task is None:
            raise KeyError(task_id)
        task.status = status
        if result:
            task.result = result
        self._mark_current()
        return task

    def pending(self) -> list[Task]:
        """The tasks not yet completed or skipped."""
        return [t for t in self._tasks if t.status in _OPEN]

    def all(self) -> list[Task]:
        """Every task, in id order."""
        return list(self._tasks)

    def all_resolved(self) -> bool:
        """True when no task is open (also for an empty list: simple requests need no plan)."""
        return not self.pending()

    def to_prompt(self) -> str:
        """The list as a Markdown block for the system prompt."""
        if not self._tasks:
            return "No tasks yet."
        lines = []
        for t in self._tasks:
            result = f" — {t.result}" if t.result else ""
            lines.append(f"- {_MARK[t.status]} {t.id}. {t.description} ({t.status}){result}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in the session scratchpad."""
        return {"tasks": self.snapshot()}

    def snapshot(self) -> list[dict[str, Any]]:
        """The tasks as a list of dicts (what ``reply_task_list_update`` receives)."""
        return [t.to_dict() for t in self._tasks]

    @classmethod
    def from_snapshot(cls, tasks: list[dict[str, Any]]) -> TaskList:
        """Rebuild a list from :meth:`snapshot` output (used when reading the log)."""
        task_list = cls()
        task_list._tasks = [
            Task(int(t["id"]), str(t["description"]), str(t["status"]), str(t["result"])) for t in tasks
        ]
        return task_list

    def _mark_current(self) -> None:
        if any(t.status == "in_progress" for t in self._tasks):
            return
        first = next((t for t in self._tasks if t.status == "pending"), None)
        if first is not None:
            first.status = "in_progress"
