"""What the reasoning loop tells the model: the system prompt, push-back, and conversation memory."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from baf.library.state.tasks import Task, TaskList

if TYPE_CHECKING:
    from baf.core.session import Session
    from baf.reasoning.skill import Skill
    from baf.reasoning.workspace import Workspace

__all__ = [
    "PLANNING_GUIDANCE",
    "build_pushback_message",
    "build_static_prompt",
    "build_system_prompt",
    "memory_messages",
]

PLANNING_GUIDANCE = (
    "## Task planning\n"
    "For a request that needs more than one tool call or more than one piece of information, first call "
    "`add_tasks` with one short task per step. Work through the tasks with your tools, call "
    "`complete_task` with a short result as each one is done, or `skip_task` with a reason when one cannot "
    "or need not be done. Your final answer is accepted only when no task is open. Simple questions need "
    "no tasks: answer them directly."
)


def build_static_prompt(
    base_prompt: str, skills: Iterable[Skill], workspaces: Iterable[Workspace], planning: bool
) -> str:
    """The system prompt without the task list: base prompt, skills, workspace previews, planning guidance."""
    parts = [base_prompt.strip()]
    skill_blocks = [skill.to_prompt() for skill in skills]
    if skill_blocks:
        parts.append("## Skills\n\n" + "\n\n".join(skill_blocks))
    workspace_blocks = [
        f"### {ws.name} ({'writable' if ws.writable else 'read-only'})"
        + (f"\n{ws.description}" if ws.description else "")
        + f"\n```\n{ws.preview()}\n```"
        for ws in workspaces
    ]
    if workspace_blocks:
        parts.append(
            "## Workspaces\nBrowse them with `list_directory` and `read_file` (pass `workspace` to choose one)."
            "\n\n" + "\n\n".join(workspace_blocks)
        )
    if planning:
        parts.append(PLANNING_GUIDANCE)
    return "\n\n".join(parts)


def build_system_prompt(static_prompt: str, task_list: TaskList | None) -> str:
    """The system prompt of one turn: the static part and, when planning, the live task list."""
    if task_list is None:
        return static_prompt
    return f"{static_prompt}\n\n## Current task list\n{task_list.to_prompt()}"


def build_pushback_message(pending: list[Task]) -> str:
    """The system message sent when the model answers while tasks are still open."""
    listing = "\n".join(f"- {t.id}. {t.description} ({t.status})" for t in pending)
    return (
        "Your answer was not accepted: these tasks are still open:\n"
        f"{listing}\n"
        "Work on them and call `complete_task` for each, or `skip_task` with a reason for any that cannot "
        "be done. Then give your final answer."
    )


def memory_messages(
    session: Session, before_seq: int, exchanges: int | None, tool_memory: dict[int, list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Earlier user messages and replies of the session (from the log), as chat messages.

    ``exchanges`` bounds how many user/assistant pairs are kept: ``None`` keeps all, ``0`` none.
    ``tool_memory`` maps the seq of an earlier user message to the tool calls and results the loop made
    answering it; they follow that message (``memory_tool_results``).
    """
    if exchanges == 0:
        return []
    history = [e for e in session.chat_history() if e.seq < before_seq]
    if exchanges is not None:
        # Keep the tail that starts at the exchanges-th last user message.
        users = [i for i, e in enumerate(history) if e.role == "user"]
        if len(users) > exchanges:
            history = history[users[-exchanges] :]
    messages: list[dict[str, Any]] = []
    for e in history:
        messages.append({"role": e.role, "content": e.text})
        if tool_memory and e.role == "user":
            messages.extend(tool_memory.get(e.seq, ()))
    return messages
