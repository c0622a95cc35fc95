"""The built-in planning tools of the reasoning loop: ``add_tasks``, ``complete_task``, ``skip_task``.

They act on the task list of the reasoning invocation that is running them, found through a context
variable that the loop sets for each call, and report the task events they caused so the loop can stream
and record them in call order.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from baf.errors import ToolError
from baf.library.state.tasks import Task, TaskList
from baf.reasoning.step import ReasoningStepKind
from baf.reasoning.tool import Tool

__all__ = ["PLANNING_TOOLS", "PlanningCall", "add_tasks", "complete_task", "planning_call", "skip_task"]


@dataclass(slots=True)
class PlanningCall:
    """The task list a planning tool acts on, the task events one call produced, and the list as that
    call left it (later calls of the same turn may change the list before the loop streams it)."""

    task_list: TaskList
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    snapshot: list[dict[str, Any]] = field(default_factory=list)

    def report(self, kind: str, summary: str, task: Task) -> None:
        """Note a task event of this call and the list as it is now."""
        self.events.append((kind, summary, task.to_dict()))
        self.snapshot = self.task_list.snapshot()


planning_call: contextvars.ContextVar[PlanningCall] = contextvars.ContextVar("baf_planning_call")


async def add_tasks(descriptions: list[str]) -> str:
    """Plan a request that needs several steps: add one task per step, in the order you will do them.

    Args:
        descriptions: Short imperative descriptions, one per task.
    """
    call = planning_call.get()
    cleaned = [d.strip() for d in descriptions]
    if not cleaned:
        raise ToolError("add_tasks needs at least one description; no tasks were added")
    empty = [str(i + 1) for i, d in enumerate(cleaned) if not d]
    if empty:
        raise ToolError(f"description {', '.join(empty)} is empty; no tasks were added")
    added = [call.task_list.add(description) for description in cleaned]
    for task in added:
        call.report(ReasoningStepKind.TASK_ADDED, f"task {task.id} added: {task.description}", task)
    return "Added tasks: " + "; ".join(f"{t.id}. {t.description}" for t in added)


async def complete_task(task_id: int, result: str) -> str:
    """Mark a task completed once its work is done.

    Args:
        task_id: The id of the task.
        result: A short summary of what was found or done.
    """
    call = planning_call.get()
    task = _open_task(call.task_list, task_id)
    call.task_list.update(task.id, "completed", result)
    call.report(ReasoningStepKind.TASK_COMPLETED, f"task {task.id} completed: {task.description}", task)
    return f"Task {task.id} completed."


async def skip_task(task_id: int, reason: str) -> str:
    """Skip a task that cannot or need not be done, saying why.

    Args:
        task_id: The id of the task.
        reason: Why the task is skipped.
    """
    call = planning_call.get()
    task = _open_task(call.task_list, task_id)
    call.task_list.update(task.id, "skipped", reason)
    call.report(ReasoningStepKind.TASK_SKIPPED, f"task {task.id} skipped: {task.description}", task)
    return f"Task {task.id} skipped."


def _open_task(task_list: TaskList, task_id: int) -> Task:
    task = task_list.get(task_id)
    if task is None:
        known = ", ".join(str(t.id) for t in task_list.all()) or "none yet"
        raise ToolError(f"there is no task {task_id} (task ids: {known})")
    if task.status not in ("pending", "in_progress"):
        raise ToolError(f"task {task_id} is already {task.status}")
    return task


#: The planning tools by name; built once, their schemas are shared by every invocation.
PLANNING_TOOLS: dict[str, Tool] = {t.name: t for t in (Tool(add_tasks), Tool(complete_task), Tool(skip_task))}
