"""One A2A task, carried out by a baf session: the message in, the replies and steps out.

:class:`SessionExecutor` is the a2a-sdk ``AgentExecutor`` the server calls for each ``SendMessage``.
It maps the request's **context** to a baf session (``a2a-<context id>``) and the **task** to the
handling of that one message:

1. the task is published (``submitted``), then ``working``;
2. the message becomes an event for the agent (text parts: ``ReceiveTextEvent``; a message of JSON data
   parts only: ``ReceiveJSONEvent``), durably recorded before anything else happens;
3. while the agent handles it, each reasoning step is a ``working`` status update (the step's summary
   as text, its JSON as a data part) and each task-list snapshot one too; each reply is an artifact
   (text, options as data, files and images as raw parts);
4. once handled: ``completed``, or ``failed`` with the error the user would have been shown, or
   ``input-required`` when a tool call waits for a human's approval (``docs/human_approval.md``): the
   status message describes each call (text) and lists them as a data part
   ``{"approval_requests": [{"call_id", "tool", "arguments", "step"}, ...]}``.

A message whose only part is a data part ``{"approval": {"call_id": ID, "approved": BOOL, "reason": TEXT,
"approver": NAME}}`` (``reason`` and ``approver`` optional) is the decision on that call: an
``ApprovalEvent`` of the context's session, recorded with approver ``a2a client`` (and the name given).
Sent in the task that is ``input-required`` (its ``taskId``), the task goes on with what the agent does
next; it can also come as a new task of the context. A task that still has calls waiting after a decision
(two calls held together, one decided) is ``input-required`` again, with those left.

Tasks of one context run one after the other, as the session's mailbox would handle them anyway: the
platform then knows which task a reply belongs to. The platform forwards what the session sends into
the task's own queue and returns at once; this executor publishes it to the SDK, so a slow A2A client
never holds up the agent.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, Part, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict

from baf.core.events import ApprovalEvent, Event, ReceiveJSONEvent, ReceiveTextEvent

if TYPE_CHECKING:
    from baf.platforms.a2a import A2APlatform

__all__ = ["APPROVAL_KEY", "REQUESTS_KEY", "SESSION_PREFIX", "SessionExecutor", "TaskRoute"]

#: Session ids are this prefix and the A2A context id.
SESSION_PREFIX = "a2a-"

# Context ids become session ids (and so file names in some stores, lines in a terminal): keep them tame.
_CONTEXT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

#: Characters of one inbound message at most (a text, or JSON data).
MAX_MESSAGE_CHARS = 1_000_000

#: A message whose one part is a data part holding only this key is a decision on a waiting tool call.
APPROVAL_KEY = "approval"
#: The data part key of the calls an ``input-required`` task waits on.
REQUESTS_KEY = "approval_requests"


@dataclass
class TaskRoute:
    """Where a session's output goes while one of its tasks runs: a queue only this task reads."""

    items: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)


class SessionExecutor(AgentExecutor):
    """Runs each A2A task as one message to the baf session of its context."""

    def __init__(self, platform: A2APlatform) -> None:
        self.platform = platform
        self._locks: dict[str, asyncio.Lock] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Carry out one task (see the module docstring)."""
        message = context.message
        if message is None:
            return
        task = context.current_task or new_task_from_user_message(message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        event, problem = _event(SESSION_PREFIX + task.context_id, task.context_id, message)
        if event is None:
            await updater.reject(_agent_text(problem, task.context_id, task.id))
            return
        lock = self._locks.setdefault(event.session_id, asyncio.Lock())
        waiting = _waiting_requests(context.current_task)
        try:
            async with lock:
                await self._run(event, updater, waiting)
        finally:
            if not lock.locked() and self._locks.get(event.session_id) is lock:
                del self._locks[event.session_id]  # nobody else waits for this context

    async def _run(self, event: Event, updater: TaskUpdater, waiting: list[dict[str, Any]]) -> None:
        platform = self.platform
        agent = platform.agent
        assert agent is not None, "the A2A platform is not attached to an agent"
        route = TaskRoute()
        platform.routes[event.session_id] = route
        try:
            await updater.start_work()
            try:
                done = await agent.receive_event(event, platform)
            except Exception as exc:
                text = f"the agent could not take the message ({type(exc).__name__}); send it again"
                await updater.failed(_agent_text(text, updater.context_id, updater.task_id))
                return
            errors: list[str] = []
            requested: list[dict[str, Any]] = []  # tool calls that now wait for approval
            replied = False
            waiter = asyncio.ensure_future(asyncio.wait([done]))
            try:
                while True:
                    getter = asyncio.ensure_future(route.items.get())
                    finished, _ = await asyncio.wait([getter, waiter], return_when=asyncio.FIRST_COMPLETED)
                    if getter in finished:
                        replied |= await self._publish(updater, *getter.result(), errors, requested)
                        continue
                    getter.cancel()
                    break
            finally:
                waiter.cancel()
            while not route.items.empty():
                replied |= await self._publish(updater, *route.items.get_nowait(), errors, requested)
            if done.cancelled() or done.exception() is not None:
                errors.append("the agent stopped before it finished handling the message")
            if not requested and not replied and isinstance(event, ApprovalEvent):
                # Decided one of several calls held together: the others still wait.
                requested = [request for request in waiting if request.get("call_id") != event.call_id]
            if errors:
                await updater.failed(_agent_text("\n".join(errors), updater.context_id, updater.task_id))
            elif requested:
                await updater.requires_input(_requests_message(requested, updater))
            else:
                await updater.complete()
        finally:
            if platform.routes.get(event.session_id) is route:
                del platform.routes[event.session_id]

    async def _publish(
        self, updater: TaskUpdater, kind: str, payload: Any, errors: list[str], requested: list[dict[str, Any]]
    ) -> bool:
        """Turn one thing the session sent into A2A task events; ``True`` for a reply (an artifact)."""
        if kind == "error":
            errors.append(str(payload))
        elif kind == "approval":
            requested.append(payload)  # shown when the task stops: input-required
        elif kind == "step":
            parts = [Part(text=str(payload.get("summary", ""))), _data_part({"reasoning_step": payload})]
            await updater.update_status(TaskState.TASK_STATE_WORKING, _agent_parts(parts, updater))
        elif kind == "tasks":
            part = _data_part({"task_list": payload})
            await updater.update_status(TaskState.TASK_STATE_WORKING, _agent_parts([part], updater))
        elif kind == "reply":
            await updater.add_artifact([Part(text=str(payload))], name="reply")
        elif kind == "options":
            text, options = payload
            await updater.add_artifact([Part(text=text), _data_part({"options": list(options)})], name="options")
        elif kind == "file":
            name, content, mime_type, caption = payload
            parts = [Part(raw=content, filename=name, media_type=mime_type or "application/octet-stream")]
            if caption:
                parts.insert(0, Part(text=caption))
            await updater.add_artifact(parts, name=name or "file")
        return kind in ("reply", "options", "file")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled. The baf step goes on to its end (its outcome stays in the log)."""
        if context.task_id and context.context_id:
            await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def _event(session_id: str, context_id: str, message: Message) -> tuple[Event | None, str]:
    """The event for ``message``, or ``None`` and why it cannot be one."""
    if not _CONTEXT_ID.fullmatch(context_id):
        return None, "the context id must be 1-128 characters of letters, digits, '.', '_', ':' or '-'"
    texts = [part.text for part in message.parts if part.HasField("text")]
    data = [part.data for part in message.parts if part.HasField("data")]
    if texts:
        text = "\n".join(texts)
        if len(text) > MAX_MESSAGE_CHARS:
            return None, f"the message is longer than {MAX_MESSAGE_CHARS:,} characters"
        return ReceiveTextEvent(session_id, message=text), ""
    if len(data) == 1:
        payload = MessageToDict(data[0])
        if isinstance(payload, dict) and set(payload) == {APPROVAL_KEY} and len(message.parts) == 1:
            return _approval_event(session_id, payload[APPROVAL_KEY])
        if isinstance(payload, dict):
            return ReceiveJSONEvent(session_id, payload=payload), ""
    return None, "this agent reads text parts, or one data part holding a JSON object"


def _approval_event(session_id: str, decision: Any) -> tuple[Event | None, str]:
    """The ``ApprovalEvent`` an ``{"approval": {...}}`` data part stands for, or ``None`` and why not."""
    shape = (
        'a decision is {"approval": {"call_id": "<id>", "approved": true or false, "reason": "<optional text>", '
        '"approver": "<optional name>"}}'
    )
    if not isinstance(decision, dict):
        return None, shape
    call_id, approved = decision.get("call_id"), decision.get("approved")
    reason, approver = decision.get("reason", ""), decision.get("approver", "")
    if not isinstance(call_id, str) or not 0 < len(call_id) <= 200 or not isinstance(approved, bool):
        return None, f"{shape}: 'call_id' must be a string of 1-200 characters and 'approved' a boolean"
    if not isinstance(reason, str) or len(reason) > 2000 or not isinstance(approver, str) or len(approver) > 200:
        return None, f"{shape}: 'reason' must be text of at most 2,000 characters, 'approver' of at most 200"
    who = f"a2a client {approver}" if approver else "a2a client"
    return ApprovalEvent(session_id, call_id=call_id, approved=approved, reason=reason, approver=who), ""


def _waiting_requests(task: Task | None) -> list[dict[str, Any]]:
    """The calls ``task`` waits on, if it is ``input-required`` (from its status message's data part)."""
    if task is None or task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        return []
    for part in task.status.message.parts:
        if part.HasField("data"):
            requests = MessageToDict(part.data).get(REQUESTS_KEY) if part.data.HasField("struct_value") else None
            if isinstance(requests, list):
                return [request for request in requests if isinstance(request, dict)]
    return []


def _requests_message(requests: list[dict[str, Any]], updater: TaskUpdater) -> Message:
    """The ``input-required`` status message: each call described, then all of them as data."""
    lines = [
        f"The tool `{request.get('tool')}` waits for approval (call `{request.get('call_id')}`), with the "
        f"arguments {request.get('arguments')}."
        for request in requests
    ]
    lines.append(
        'Decide each with a message holding one data part: {"approval": {"call_id": "<id>", "approved": true '
        'or false, "reason": "<optional>"}}. A new message instead cancels them.'
    )
    parts = [Part(text="\n".join(lines)), _data_part({REQUESTS_KEY: requests})]
    return _agent_parts(parts, updater)


def _data_part(value: dict[str, Any]) -> Part:
    part = Part()
    part.data.struct_value.update(value)
    return part


def _agent_parts(parts: list[Part], updater: TaskUpdater) -> Message:
    import uuid

    return Message(
        role=Role.ROLE_AGENT, message_id=uuid.uuid4().hex, context_id=updater.context_id,
        task_id=updater.task_id, parts=parts,
    )  # fmt: skip


def _agent_text(text: str, context_id: str, task_id: str) -> Message:
    import uuid

    return Message(
        role=Role.ROLE_AGENT, message_id=uuid.uuid4().hex, context_id=context_id, task_id=task_id,
        parts=[Part(text=text)],
    )  # fmt: skip
