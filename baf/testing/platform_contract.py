"""A contract test kit every platform adapter runs against itself.

Subclass :class:`PlatformContract` in a test module (name the subclass ``Test...`` so pytest collects it)
and implement two methods: :meth:`~PlatformContract.make_platform` builds the adapter, and
:meth:`~PlatformContract.open_client` connects one user to it the way a real user would (a socket, an
HTTP request, ...), returning a :class:`ContractClient`. Every ``test_*`` method then runs against the
adapter with a real agent on an in-memory log. The tests need ``pytest-asyncio``, in any mode: each
async test carries its ``asyncio`` mark, so a project in the default strict mode runs them as they are.

::

    from baf.testing.platform_contract import ContractClient, Output, PlatformContract

    class TestMyPlatform(PlatformContract):
        def make_platform(self):
            return MyPlatform(port=0)

        async def open_client(self, agent, platform):
            return MyClient(await connect(platform.url))

What the contract checks:

1. The adapter is a :class:`~baf.platforms.Platform` with a name, and starts and stops with its agent
   (stopping twice is harmless).
2. A user's message reaches the agent, is recorded, and the reply comes back to that user.
3. Replies arrive in the order they were sent.
4. Two users never see each other's replies.
5. Reasoning steps and task-list updates stream without a failed delivery.
6. The richer replies (Markdown, options, file, image) work natively or fall back, without failing.
7. An error in a state body reaches the user as an error (or a plain reply) and the session goes on.
8. Text streamed while the model writes it (``reply_delta``) is shown or ignored without a failed
   delivery, and the complete answer then arrives once, as a reply. A client that reports the pieces
   it was shown (``Output`` kind ``"delta"``) must have been shown exactly the answer's text.
9. A tool call waiting for a human's approval is shown to the user (natively, or as the default plain
   reply), naming the call; a decision (sent through the adapter when :meth:`ContractClient.decide`
   can, else as an :class:`~baf.core.events.ApprovalEvent` for the session) lets the loop finish.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from baf.core.agent import Agent
from baf.core.events import ApprovalEvent, ReceiveTextEvent
from baf.core.platform import Platform
from baf.llm.base import LLMResponse, ToolCall
from baf.testing.llms import ScriptedLLM

if TYPE_CHECKING:
    from baf.core.session import Session
    from baf.testing.recording import RecordingPlatform

__all__ = ["ContractClient", "Output", "PlatformContract", "RecordingClient"]

#: The kinds of :class:`Output` a client reports.
REPLY, ERROR, DELTA, OTHER = "reply", "error", "delta", "other"


@dataclass(frozen=True, slots=True)
class Output:
    """Something the user saw: ``kind`` is ``"reply"``, ``"error"``, ``"delta"`` (a piece of an answer
    shown while it is written) or ``"other"`` (steps, task lists, anything else the adapter shows);
    ``text`` is what a user would read, if anything."""

    kind: str
    text: str = ""
    payload: Any = field(default=None, compare=False)


class ContractClient(abc.ABC):
    """One user of the adapter under test, as the contract drives it."""

    @abc.abstractmethod
    async def send(self, text: str) -> None:
        """Send a text message as this user. May return before the agent has handled it."""

    @abc.abstractmethod
    async def next_output(self, wait: float) -> Output:
        """The next thing this user was shown; raise ``TimeoutError`` after ``wait`` seconds."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Disconnect. Optional."""

    async def decide(self, call_id: str, approved: bool, reason: str = "") -> bool:
        """Decide on the tool call ``call_id`` as this user would (a button, a command). Optional: return
        ``False`` when the adapter offers no way, and the contract sends the decision as an event."""
        return False


class RecordingClient(ContractClient):
    """A client of :class:`~baf.testing.RecordingPlatform`: delivers to the agent directly and reads the
    platform's event list. Also an example of the smallest possible client."""

    def __init__(self, agent: Agent, platform: RecordingPlatform, session_id: str) -> None:
        self.agent = agent
        self.platform = platform
        self.session_id = session_id
        self._seen = 0

    async def send(self, text: str) -> None:
        await self.agent.receive_event(ReceiveTextEvent(self.session_id, message=text), self.platform)

    async def next_output(self, wait: float) -> Output:
        async with asyncio.timeout(wait):
            while True:
                mine = [e for e in self.platform.events if e[0] == self.session_id]
                if len(mine) > self._seen:
                    _, kind, payload = mine[self._seen]
                    self._seen += 1
                    if kind in (REPLY, ERROR):
                        return Output(kind, str(payload), payload)
                    if kind == DELTA:
                        return Output(DELTA, payload[1], payload)
                    return Output(OTHER, "", payload)
                await asyncio.sleep(0.005)


def _echo_body(session: Session) -> None:
    event = session.event
    if event is None or event.text is None:
        return
    text = event.text
    if text == "boom":
        raise RuntimeError("the body failed on purpose")
    if text.startswith("many "):
        for i in range(int(text.split()[1])):
            session.reply(f"part {i}")
        return
    session.reply(f"echo: {text}")


def _rich_body(session: Session) -> None:
    # Through the session, as bodies do: each reply is recorded, then delivered by the platform.
    session.reply_markdown("**bold** and `code`")
    session.reply_options("Pick one", ["red", "blue"])
    session.reply_file("notes.txt", b"hello", "text/plain", "the notes")
    session.reply_image(b"\x89PNG\r\n", "image/png", "a picture")
    session.reply("done")


class PlatformContract:
    """The contract suite. Override :meth:`make_platform` and :meth:`open_client`; keep the tests."""

    #: Seconds to wait for any one output.
    wait: float = 5.0
    #: Whether a reply the agent makes on its own, between the user's messages (after an approval
    #: decision), reaches the user. ``False`` for a request/response channel whose client cannot send the
    #: decision itself (a reply belongs to the request of a message); the contract then checks that reply
    #: in the log instead.
    replies_between_messages: bool = True

    def make_platform(self) -> Platform:
        """A new, unstarted adapter (listening on a free port if it listens at all)."""
        raise NotImplementedError

    async def open_client(self, agent: Agent, platform: Platform) -> ContractClient:
        """Connect a new user (a new session) to the started ``platform`` of ``agent``."""
        raise NotImplementedError

    # -- plumbing -------------------------------------------------------------------------------

    def _agent(self, body: Callable[[Session], Any]) -> tuple[Agent, Platform]:
        agent = Agent("contract", log="memory://")
        state = agent.new_state("main", initial=True)
        state.set_body(body)
        state.when_event().go_to(state)
        platform = self.make_platform()
        agent.add_platform(platform)
        return agent, platform

    async def _until(self, client: ContractClient, done: Callable[[Output], bool]) -> list[Output]:
        """Outputs up to and including the first for which ``done`` is true."""
        seen: list[Output] = []
        while True:
            try:
                output = await client.next_output(self.wait)
            except TimeoutError:
                raise AssertionError(f"no matching output within {self.wait}s; saw {seen!r}") from None
            seen.append(output)
            if done(output):
                return seen

    async def _replies(self, client: ContractClient, count: int) -> list[str]:
        replies: list[str] = []
        while len(replies) < count:
            outputs = await self._until(client, lambda o: o.kind == REPLY)
            replies.append(outputs[-1].text)
        return replies

    async def _run(self, body: Callable[[Session], Any], test: Callable[[Agent, Platform], Awaitable[None]]) -> None:
        agent, platform = self._agent(body)
        async with agent:
            await test(agent, platform)

    @staticmethod
    async def _delivery_errors(agent: Agent) -> list[dict[str, Any]]:
        await agent.wait_idle()
        errors = []
        for session_id in await agent.log.sessions():
            errors += [r.data for r in await agent.log.read(session_id) if r.kind == "error"]
        return [e for e in errors if e.get("source") == "platform"]

    # -- the contract ---------------------------------------------------------------------------

    def test_is_a_platform(self) -> None:
        platform = self.make_platform()
        assert isinstance(platform, Platform)
        assert isinstance(platform.name, str) and platform.name, "a platform needs a non-empty name"
        assert type(platform).reply is not Platform.reply, "a platform must implement reply()"

    @pytest.mark.asyncio
    async def test_starts_and_stops_with_the_agent(self) -> None:
        agent, platform = self._agent(_echo_body)
        assert platform.agent is agent
        await agent.start()
        await agent.stop()
        await platform.stop()  # a second stop is harmless

    @pytest.mark.asyncio
    async def test_message_reaches_the_agent_and_the_reply_comes_back(self) -> None:
        async def test(agent: Agent, platform: Platform) -> None:
            client = await self.open_client(agent, platform)
            await client.send("hello there")
            assert await self._replies(client, 1) == ["echo: hello there"]
            sessions = await agent.log.sessions()
            assert len(sessions) == 1, sessions
            records = await agent.log.read(sessions[0])
            assert records[0].kind == "session_started" and records[0].data["platform"] == platform.name
            assert [r.data.get("text") for r in records if r.kind == "message_received"] == ["hello there"]
            assert [r.data["text"] for r in records if r.kind == "reply"] == ["echo: hello there"]
            await client.close()

        await self._run(_echo_body, test)

    @pytest.mark.asyncio
    async def test_replies_arrive_in_order(self) -> None:
        async def test(agent: Agent, platform: Platform) -> None:
            client = await self.open_client(agent, platform)
            await client.send("many 5")
            await client.send("last")
            assert await self._replies(client, 6) == [*(f"part {i}" for i in range(5)), "echo: last"]
            await client.close()

        await self._run(_echo_body, test)

    @pytest.mark.asyncio
    async def test_users_do_not_see_each_others_replies(self) -> None:
        async def test(agent: Agent, platform: Platform) -> None:
            alice = await self.open_client(agent, platform)
            bob = await self.open_client(agent, platform)
            await alice.send("from alice")
            await bob.send("from bob")
            assert await self._replies(alice, 1) == ["echo: from alice"]
            assert await self._replies(bob, 1) == ["echo: from bob"]
            await alice.send("alice again")
            assert await self._replies(alice, 1) == ["echo: alice again"]
            await agent.wait_idle()
            leaked: list[Output] = []
            with contextlib.suppress(TimeoutError):
                while True:
                    leaked.append(await bob.next_output(0.2))
            assert not [o for o in leaked if "alice" in o.text], leaked
            assert len(await agent.log.sessions()) == 2
            await alice.close()
            await bob.close()

        await self._run(_echo_body, test)

    @pytest.mark.asyncio
    async def test_reasoning_steps_and_task_lists_stream(self) -> None:
        from baf.library.state.reasoning_state_library import reasoning_body

        llm = ScriptedLLM(
            [
                LLMResponse(None, [ToolCall("c1", "add_tasks", '{"descriptions": ["look", "answer"]}')]),
                LLMResponse(None, [ToolCall("c2", "complete_task", '{"task_id": 1, "result": "looked"}')]),
                LLMResponse(None, [ToolCall("c3", "skip_task", '{"task_id": 2, "reason": "not needed"}')]),
                "All done.",
            ]
        )

        async def test(agent: Agent, platform: Platform) -> None:
            client = await self.open_client(agent, platform)
            await client.send("plan something")
            outputs = await self._until(client, lambda o: o.kind == REPLY)
            assert outputs[-1].text == "All done."
            assert not [o for o in outputs if o.kind == ERROR], outputs
            assert await self._delivery_errors(agent) == []
            await client.close()

        await self._run(reasoning_body(llm), test)

    @pytest.mark.asyncio
    async def test_richer_replies_work_or_fall_back(self) -> None:
        async def test(agent: Agent, platform: Platform) -> None:
            client = await self.open_client(agent, platform)
            await client.send("show me")
            outputs = await self._until(client, lambda o: o.kind == REPLY and o.text == "done")
            assert not [o for o in outputs if o.kind == ERROR], outputs
            assert await self._delivery_errors(agent) == []
            await client.close()

        await self._run(_rich_body, test)

    @pytest.mark.asyncio
    async def test_a_body_error_reaches_the_user_and_the_session_goes_on(self) -> None:
        async def test(agent: Agent, platform: Platform) -> None:
            client = await self.open_client(agent, platform)
            await client.send("boom")
            outputs = await self._until(client, lambda o: o.kind in (ERROR, REPLY))
            assert "RuntimeError" in outputs[-1].text, outputs
            await client.send("still there?")
            assert await self._replies(client, 1) == ["echo: still there?"]
            await client.close()

        await self._run(_echo_body, test)

    @pytest.mark.asyncio
    async def test_streamed_text_is_followed_by_one_reply(self) -> None:
        from baf.library.state.reasoning_state_library import reasoning_body

        answer = "The answer, streamed word by word."
        llm = ScriptedLLM([answer], stream=True)

        async def test(agent: Agent, platform: Platform) -> None:
            client = await self.open_client(agent, platform)
            await client.send("stream it")
            outputs = await self._until(client, lambda o: o.kind == REPLY)
            assert outputs[-1].text == answer
            assert not [o for o in outputs if o.kind == ERROR], outputs
            shown = [o.text for o in outputs if o.kind == DELTA]
            assert not shown or "".join(shown) == answer, shown
            assert await self._delivery_errors(agent) == []
            later: list[Output] = []
            with contextlib.suppress(TimeoutError):
                while True:
                    later.append(await client.next_output(0.2))
            assert not [o for o in later if o.kind in (REPLY, DELTA)], later  # the answer came once
            await client.close()

        await self._run(reasoning_body(llm, enable_task_planning=False), test)

    @pytest.mark.asyncio
    async def test_a_call_waiting_for_approval_is_shown_and_a_decision_continues_it(self) -> None:
        from baf.library.state.reasoning_state_library import reasoning_body

        llm = ScriptedLLM([LLMResponse(None, [ToolCall("c-approve-1", "guarded", '{"x": 1}')]), "Done."])
        ran: list[int] = []

        def guarded(x: int) -> str:
            """A tool that needs approval."""
            ran.append(x)
            return "ran"

        async def test(agent: Agent, platform: Platform) -> None:
            client = await self.open_client(agent, platform)
            await client.send("do it")
            shown = await self._until(client, lambda o: "c-approve-1" in f"{o.text} {o.payload!r}")
            assert not [o for o in shown if o.kind == ERROR], shown
            assert ran == []
            if not await client.decide("c-approve-1", True):
                (session_id,) = await agent.log.sessions()
                await agent.receive_event(ApprovalEvent(session_id, call_id="c-approve-1", approved=True))
            if self.replies_between_messages:
                outputs = await self._until(client, lambda o: o.kind == REPLY and o.text == "Done.")
                assert not [o for o in outputs if o.kind == ERROR], outputs
            else:  # a request/response channel: what the loop says after the decision is in the log
                await agent.wait_idle()
                (session_id,) = await agent.log.sessions()
                assert [r.data["text"] for r in await agent.log.read(session_id) if r.kind == "reply"][-1] == "Done."
            assert ran == [1] and await self._delivery_errors(agent) == []
            await client.close()

        agent, platform = self._agent(reasoning_body(llm, enable_task_planning=False))
        agent.new_tool(guarded, requires_approval=True)
        async with agent:
            await test(agent, platform)
