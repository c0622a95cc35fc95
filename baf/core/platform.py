"""The platform interface: how an agent talks to the outside world (adapters live in ``baf.platforms``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session
    from baf.reasoning.approval import ApprovalDecision, ApprovalExpiry, ApprovalRequest

__all__ = ["Platform", "approval_request_text"]


def approval_request_text(request: ApprovalRequest) -> str:
    """A request for approval as a plain-text (Markdown) message: what the default
    :meth:`Platform.reply_approval_request` sends."""
    arguments = request.arguments if len(request.arguments) <= 2000 else request.arguments[:2000] + " …"
    return (
        f"I would like to run the tool `{request.tool}` with these arguments:\n\n```json\n{arguments}\n```\n\n"
        f"It needs a human's approval first (call `{request.call_id}`). It waits for a decision; "
        "sending a new message cancels it."
    )


class Platform:
    """Translates between a wire format and baf events and replies. Holds no session state.

    An adapter delivers inbound traffic with ``await agent.receive_message(...)`` or
    ``await agent.receive_event(...)`` and implements :meth:`reply`. The streaming methods are
    optional: their defaults do nothing, so a plain text channel needs only ``reply``. The richer
    replies (:meth:`reply_markdown`, :meth:`reply_file`, :meth:`reply_image`, :meth:`reply_options`)
    fall back to a plain :meth:`reply`; an adapter overrides those its channel can show natively.
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

    def has_client(self, session_id: str) -> bool:
        """Whether a client of ``session_id`` is connected to this platform in this process now, waiting
        for what the session shows. A worker among many (``baf.serve``) shows such a session even while
        another worker runs it, by following its log. Default ``False``: a platform that reaches its users
        through a service (a bot API) is served by whichever worker runs the session."""
        return False

    def share_with_workers(self) -> None:
        """Called by ``baf.serve`` before :meth:`start`, in each of several worker processes running this
        agent on one host: a platform that listens on a port lets them all listen on it (the WebSocket
        platform: ``SO_REUSEPORT``, the kernel spreads the connections). A platform that cannot be shared
        raises :class:`~baf.errors.ConfigurationError` saying why (the terminal: one person's terminal), and
        the worker stops before it opens anything. Default: nothing."""

    async def reply(self, session: Session, message: str) -> None:
        """Send a text reply (Markdown allowed) to the session's user."""
        raise NotImplementedError(f"{type(self).__name__} must implement reply()")

    async def reply_user_message(self, session: Session, text: str, client_message_id: str | None) -> None:
        """Show a message the user sent (its ``message_received`` record is durable) to every client of the
        session, in order with the replies: a second browser tab or device of the same user then sees
        it live, not only after a reload. ``client_message_id`` is the id the sending client gave it
        (:attr:`~baf.core.events.Event.client_message_id`), or ``None``: that client shows the message
        already and should recognize it by this id rather than show it twice. Optional: the default does
        nothing (in a chat service the user sees their own message anyway)."""

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        """Show one reasoning step (``ReasoningStep``) as it happens. Optional."""

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        """Show the current task list of a reasoning loop. Optional."""

    async def reply_approval_request(self, session: Session, request: ApprovalRequest) -> None:
        """Show a tool call that waits for a human's approval (``docs/human_approval.md``): the tool, its
        arguments (secrets redacted) and the ``call_id`` an :class:`~baf.core.events.ApprovalEvent`
        names to decide it. Called once the request is durable; the loop has already ended its step,
        so this must not wait for the decision: the decision arrives later, as an event.

        The default sends a plain :meth:`reply` describing the request. A channel that can take the
        decision (buttons, a prompt) overrides this and sends ``ApprovalEvent(session.id, call_id=...,
        approved=..., reason=..., approver=...)`` through ``agent.receive_event`` when the human
        answers. Until then the call waits; a new message from the user expires it.
        """
        await self.reply(session, approval_request_text(request))

    async def reply_approval_decision(self, session: Session, decision: ApprovalDecision) -> None:
        """Show that a call which waited was decided: ``decision.approved``, ``decision.by`` (who),
        ``decision.reason`` and ``decision.at`` (when), after the ``approval_decided`` record is durable.
        Every client of the session should see it, not only the one that decided (another browser tab,
        another chat member), so a request shown with buttons can be closed everywhere. Optional: the
        default does nothing (the human who answered knows; what follows shows the outcome)."""

    async def reply_approval_expired(self, session: Session, expiry: ApprovalExpiry) -> None:
        """Show that calls which waited (``expiry.call_ids``) were dropped undecided because the
        conversation moved on (``expiry.reason``, ``expiry.at``), after the ``approval_expired`` record
        is durable. Optional: the default does nothing."""

    async def reply_delta(self, session: Session, run_id: str, text: str) -> None:
        """Show a piece of the model's answer while it is written (a model that streams). Optional.

        Pieces of one answer share a ``run_id``, arrive in order, and are not records: the complete
        answer arrives afterwards as an ordinary reply (or, if the model failed, an error message),
        which should take the place of what the pieces showed. A new ``run_id`` starts a new answer (a
        later model turn, or a retry after the stream broke): what the old one showed is superseded.
        Called while the model writes, not after a commit; a reconnecting client's history has only the
        final reply. See :mod:`baf.reasoning.streaming`.
        """

    async def reply_error(self, session: Session, message: str) -> None:
        """Show an error to the user. Defaults to a plain reply."""
        await self.reply(session, message)

    # -- richer replies: each falls back to a plain text reply ----------------------------------

    async def reply_markdown(self, session: Session, markdown: str) -> None:
        """Send Markdown to be rendered. Defaults to :meth:`reply` (whose text may hold Markdown too)."""
        await self.reply(session, markdown)

    async def reply_file(
        self, session: Session, name: str, content: bytes, mime_type: str = "", caption: str = ""
    ) -> None:
        """Send a file. Defaults to a text reply naming the file, for channels that cannot carry one."""
        note = f"[file: {name}, {len(content)} bytes]"
        await self.reply(session, f"{caption}\n\n{note}" if caption else note)

    async def reply_image(
        self, session: Session, content: bytes, mime_type: str = "image/png", caption: str = ""
    ) -> None:
        """Send an image. Defaults to a text reply with the caption, for channels that cannot show one."""
        note = f"[image: {mime_type}, {len(content)} bytes]"
        await self.reply(session, f"{caption}\n\n{note}" if caption else note)

    async def reply_options(self, session: Session, message: str, options: Sequence[str]) -> None:
        """Offer choices (buttons where the channel has them). Defaults to a reply listing them."""
        listed = "\n".join(f"- {option}" for option in options)
        await self.reply(session, f"{message}\n\n{listed}" if listed else message)
