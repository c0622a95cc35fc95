"""A remote A2A agent as a tool the model can call (the ``a2a`` extra: ``pip install -e ".[a2a]"`` in a clone).

::

    agent.add_a2a_agent("http://127.0.0.1:9000/", name="researcher")
    # or: agent.add_tool(a2a_agent_tool("http://127.0.0.1:9000/", name="researcher"))

The model sees a tool ``researcher(message)``. A call sends ``message`` to the remote agent over the
`Agent2Agent protocol <https://a2a-protocol.org>`_ (JSON-RPC, a blocking ``SendMessage``) and returns
the text of its answer: the task's artifacts, else its final status message, else the agent's last
message. It is a plain :class:`~baf.reasoning.tool.Tool`, so the reasoning kernel records each call and
its result ahead, and replay, re-run and resume serve the result from the log without calling the peer.

Calls from one baf session share one A2A context (its id is derived from the session id and the peer's
URL), so the remote agent sees one conversation per calling session.

What the model is told when the peer misbehaves (each a tool error; the session goes on):

- it is down or its agent card cannot be read: "could not be reached" (the card is read at every call);
- it answers too slowly: the tool's ``timeout`` (a ``ToolTimeoutError``);
- it answers with something that is not a well-formed A2A task or message: "answered with a malformed
  response";
- the task ends failed, rejected or canceled: its status message.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from baf.errors import MissingExtraError, ToolError, ToolExecutionError
from baf.log.redaction import register_header_secrets
from baf.reasoning.tool import Tool

__all__ = ["a2a_agent_tool"]

#: Characters of the answer returned to the model at most (the kernel caps tool output too).
_ANSWER_LIMIT = 200_000


def a2a_agent_tool(
    url: str,
    name: str,
    description: str | None = None,
    timeout: float = 120.0,
    headers: Mapping[str, str] | None = None,
    auth_token: str | None = None,
) -> Tool:
    """A :class:`~baf.reasoning.tool.Tool` that asks the A2A agent served at ``url``.

    Args:
        url: The remote agent's base URL; its agent card is read from
            ``<url>/.well-known/agent-card.json`` at the first call (and again after a failure).
        name: The tool's name, as the model calls it.
        description: What the model is told the agent does; a generic sentence naming it by default.
        timeout: Seconds one call may take, card included.
        headers: Sent with every request to ``url``'s origin (``Authorization``, ...).
        auth_token: The peer's bearer token (its ``auth_token``), sent as ``Authorization: Bearer ...``.

    The token, and the values of credential headers (``Authorization``, ``Cookie``, names holding ``key``,
    ``token``, ``secret`` or ``auth``: :func:`~baf.log.redaction.is_credential_header`), are redacted from
    every session log of the process.

    The headers (the token among them) go only to the scheme, host and port of ``url``: the peer's card may
    name another address to send messages to, and whoever serves the card must not be able to collect them.
    """
    try:
        import a2a.client  # noqa: F401 - fail here, with the extra named, not at the first call
    except ImportError as exc:
        raise MissingExtraError("A2A tools", "a2a") from exc
    sent = dict(headers or {})
    if auth_token is not None:
        sent["Authorization"] = f"Bearer {auth_token}"
    register_header_secrets(sent)  # never written to a session log (docs/a2a.md)
    peer = _Peer(url.rstrip("/") + "/", name, timeout, sent)

    async def ask(message: str, session: Any = None) -> str:
        """Send a message to the remote agent and return its answer.

        Args:
            message: What to ask or tell the agent, in plain language, with everything it needs to know.
        """
        return await peer.ask(message, getattr(session, "id", None))

    text = description or (
        f"Ask the remote agent '{name}' (over A2A) and get its answer in text. It remembers earlier "
        "messages from this conversation."
    )
    return Tool(ask, name=name, description=text, timeout=timeout)


class _Peer:
    """One remote agent. A call opens its own HTTP client and reads the card again: nothing is bound to
    an event loop between calls (an agent may be started again in another), and a peer that moved or
    came back is found."""

    def __init__(self, url: str, name: str, timeout: float, headers: dict[str, str]) -> None:
        self.url = url
        self.name = name
        self.timeout = timeout
        self.headers = headers

    def context_id(self, session_id: str | None) -> str:
        """One A2A context per calling session and peer; a call without a session gets a fresh one."""
        if session_id is None:
            return uuid.uuid4().hex
        return hashlib.sha256(f"{self.url}\n{session_id}".encode()).hexdigest()[:32]

    async def ask(self, message: str, session_id: str | None) -> str:
        import httpx
        from a2a.client import ClientConfig, create_client
        from a2a.types import Message, Part, Role, SendMessageRequest

        request = SendMessageRequest(
            message=Message(
                role=Role.ROLE_USER,
                message_id=uuid.uuid4().hex,
                context_id=self.context_id(session_id),
                parts=[Part(text=message)],
            )
        )
        answers: list[Any] = []
        async with httpx.AsyncClient(timeout=self.timeout, auth=_to_origin(self.url, self.headers)) as http:
            try:
                client = await create_client(self.url, ClientConfig(streaming=False, httpx_client=http))
            except Exception as exc:
                raise ToolExecutionError(
                    f"the A2A agent '{self.name}' at {self.url} could not be reached ({_reason(exc)}); "
                    "try again later or do without it"
                ) from exc
            try:
                async for response in client.send_message(request):
                    answers.append(response)
            except Exception as exc:
                if _is_connection_error(exc):
                    raise ToolExecutionError(
                        f"the A2A agent '{self.name}' at {self.url} could not be reached ({_reason(exc)})"
                    ) from exc
                raise ToolExecutionError(
                    f"the A2A agent '{self.name}' answered with a malformed response ({_reason(exc)})"
                ) from exc
        return _answer_text(self.name, answers)


def _answer_text(name: str, answers: list[Any]) -> str:
    """The text of the peer's answer; a ``ToolError`` for an answer that has none or says it failed."""
    from a2a.types import Role, TaskState

    if not answers:
        raise ToolExecutionError(f"the A2A agent '{name}' answered with a malformed response (nothing)")
    last = answers[-1]
    if last.HasField("message"):
        text = _parts_text(last.message.parts)
    elif last.HasField("task"):
        task = last.task
        state = task.status.state
        status_text = _parts_text(task.status.message.parts) if task.status.HasField("message") else ""
        if state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_CANCELED):
            what = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
            raise ToolError(f"the A2A agent '{name}' {what} the task: {status_text or 'no reason given'}")
        if state == TaskState.TASK_STATE_UNSPECIFIED or not task.id:
            raise ToolExecutionError(f"the A2A agent '{name}' answered with a malformed task (no id or no state)")
        text = "\n\n".join(t for artifact in task.artifacts if (t := _parts_text(artifact.parts)))
        if not text:
            text = status_text
        if not text:
            agent_messages = [m for m in task.history if m.role == Role.ROLE_AGENT]
            text = _parts_text(agent_messages[-1].parts) if agent_messages else ""
        if state == TaskState.TASK_STATE_INPUT_REQUIRED:
            text = f"{text}\n\n(The agent needs more input: call it again with your answer.)".strip()
    else:
        raise ToolExecutionError(f"the A2A agent '{name}' answered with a malformed response (no task or message)")
    if not text:
        return "(the agent answered with no text)"
    return text[:_ANSWER_LIMIT]


def _parts_text(parts: Any) -> str:
    import json

    from google.protobuf.json_format import MessageToDict

    texts = []
    for part in parts:
        if part.HasField("text"):
            texts.append(part.text)
        elif part.HasField("data"):
            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        elif part.filename or part.media_type:
            texts.append(f"[file {part.filename or part.media_type}]")
    return "\n".join(t for t in texts if t)


def _is_connection_error(exc: BaseException) -> bool:
    import httpx

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, httpx.TransportError) or "connect" in type(seen).__name__.lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _origin(url: Any) -> tuple[str, str, int | None]:
    """``url``'s scheme, host and port (the scheme's default made explicit): where it is sent."""
    import httpx

    parsed = httpx.URL(str(url))
    port = parsed.port if parsed.port is not None else {"http": 80, "https": 443}.get(parsed.scheme)
    return parsed.scheme, parsed.host, port


def _to_origin(url: str, headers: Mapping[str, str]) -> Callable[[Any], Any]:
    """An httpx auth function adding ``headers`` to the requests bound for ``url``'s origin only."""
    origin, added = _origin(url), dict(headers)

    def add(request: Any) -> Any:
        if added and _origin(request.url) == origin:
            request.headers.update(added)
        return request

    return add
