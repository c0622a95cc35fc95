"""The platform interface: how an agent talks to the outside world."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session

__all__ = ["Platform"]


class Platform:
    """Translates between a wire format and baf events and replies. Holds no session state.

    An adapter delivers inbound traffic with ``await agent.receive_message(...)`` or
    ``await agent.receive_event(...)`` and implements :meth:`reply`. The streaming methods are
    optional: their defaults do nothing, so a plain text channel needs only ``reply``.
    """

    #: A short name, recorded with each session so the log says where a conversation came from.
    name: str = "platform"

    def __init__(self) -> None:
        self.agent: Agent | None = None

    def bind(self, agent: Agent) -> None:
        """Called by ``agent.add_platform``; gives the adapter its agent."""
        self.agent = agent

    async def start(self) -> None:
        """Begin accepting traffic (open sockets, start readers). Called by ``agent.start()``."""

    async def stop(self) -> None:
        """Stop accepting traffic and release resources. Called by ``agent.stop()``."""

    async def reply(self, session: Session, message: str) -> None:
        """Send a text reply (Markdown allowed) to the session's user."""
        raise NotImplementedError(f"{type(self).__name__} must implement reply()")

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        """Show one reasoning step (``ReasoningStep``) as it happens. Optional."""

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        """Show the current task list of a reasoning loop. Optional."""

    async def reply_error(self, session: Session, message: str) -> None:
        """Show an error to the user. Defaults to a plain reply."""
        await self.reply(session, message)
