"""The engine step: transitions, bodies, fallbacks, automatic transitions, errors, ordering."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from baf import Agent, ReceiveFileEvent, ReceiveJSONEvent, ReceiveTextEvent, Session, StepHooks
from baf.core.session import runtime_side
from baf.core.state import DEFAULT_FALLBACK_MESSAGE
from baf.errors import ConfigurationError, LogError, SessionVariableError
from baf.log import open_log
from baf.testing import RecordingPlatform


def text_is(word: str) -> Any:
    def condition(session: Session) -> bool:
        return session.event is not None and session.event.text == word

    condition.__name__ = f"text is {word}"
    return condition


async def kinds(agent: Agent, session_id: str) -> list[str]:
    return [r.kind for r in await agent.log.read(session_id)]


def test_duplicate_state_and_second_initial_are_refused() -> None:
    agent = Agent("a", log="memory://")
    agent.new_state("s", initial=True)
    with pytest.raises(ConfigurationError, match="already has a state named 's'"):
        agent.new_state("s")
    with pytest.raises(ConfigurationError, match="already has an initial state"):
        agent.new_state("t", initial=True)


async def test_agent_without_initial_state_fails_clearly() -> None:
    agent = Agent("a", log="memory://")
    agent.new_state("s")
    with pytest.raises(ConfigurationError, match="no initial state"):
        await agent.start()


def test_body_must_take_the_session() -> None:
    agent = Agent("a", log="memory://")
    state = agent.new_state("s", initial=True)
    with pytest.raises(ConfigurationError, match="exactly one argument"):
        state.set_body(lambda: None)  # type: ignore[arg-type]


async def test_first_matching_transition_in_declaration_order_fires(log_url: str, platform: RecordingPlatform) -> None:
    agent = Agent("a", log=log_url)
    start = agent.new_state("start", initial=True)
    first = agent.new_state("first")
    second = agent.new_state("second")
    first.set_body(lambda s: s.reply("first"))
    second.set_body(lambda s: s.reply("second"))
    start.when_event(ReceiveTextEvent).with_condition(text_is("go")).go_to(first)
    start.when_event(ReceiveTextEvent).go_to(second)  # also matches "go", but is declared later
    first.when_event().go_to(start)
    second.when_event().go_to(start)
    async with agent:
        await agent.receive_message("s1", "go", platform)
        await agent.receive_message("s1", "back", platform)
        await agent.receive_message("s1", "other", platform)
        session = agent.sessions["s1"]
        assert platform.replies["s1"] == ["first", "second"]
        assert session.current_state.name == "second"
        transitions = [r.data for r in await agent.log.read("s1") if r.kind == "transition"]
        assert [(t["source"], t["dest"]) for t in transitions] == [
            ("start", "first"),
            ("first", "start"),
            ("start", "second"),
        ]


async def test_unmatched_text_runs_the_fallback(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    start = agent.new_state("start", initial=True)
    custom = agent.new_state("custom")
    start.when_event(ReceiveTextEvent).with_condition(text_is("custom")).go_to(custom)
    custom.set_fallback_body(lambda s: s.reply(f"custom fallback for {s.event.text}"))
    async with agent:
        await agent.receive_message("s", "nonsense", platform)
        await agent.receive_message("s", "custom", platform)
        await agent.receive_message("s", "what?", platform)
        # A JSON message that matches nothing also gets the fallback.
        done = await agent.receive_event(ReceiveJSONEvent("s", payload={"x": 1}), platform)
        await done
    assert platform.replies["s"] == [
        DEFAULT_FALLBACK_MESSAGE,
        "custom fallback for what?",
        'custom fallback for {"x": 1}',
    ]


async def test_automatic_transition_runs_destination_after_body(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    idle = agent.new_state("idle", initial=True)
    work = agent.new_state("work")
    done = agent.new_state("done")
    work.set_body(lambda s: s.reply("working"))
    done.set_body(lambda s: s.reply("done"))
    idle.when_event().go_to(work)
    work.go_to(done)
    done.go_to(idle)
    async with agent:
        session = await agent.receive_message("s", "start", platform)
        assert platform.replies["s"] == ["working", "done"]
        assert session.current_state.name == "idle"


async def test_variable_condition_fires_after_body_and_after_outside_change(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    counting = agent.new_state("counting", initial=True)
    full = agent.new_state("full")

    def count(session: Session) -> None:
        session.set("n", session.get("n", 0) + 1)

    counting.set_body(count)
    counting.when_event().go_to(counting)
    counting.when_variable_matches_operation("n", ">=", 3).go_to(full)
    full.set_body(lambda s: s.reply(f"full at {s.get('n')}"))
    async with agent:
        await agent.receive_message("s", "x", platform)  # initial body ran on start: n=1, then n=2
        assert agent.sessions["s"].current_state.name == "counting"
        await agent.receive_message("s", "x", platform)
        assert agent.sessions["s"].current_state.name == "full"
        assert platform.replies["s"] == ["full at 3"]

        # A variable changed from outside any step triggers the check too: no polling involved.
        other = await agent.get_or_create_session("t", platform)
        await agent.wait_idle("t")
        other.set("n", 10)
        await agent.wait_idle("t")
        assert other.current_state.name == "full"
        assert platform.replies["t"] == ["full at 10"]


async def test_when_condition_and_file_types(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    start = agent.new_state("start", initial=True)
    image = agent.new_state("image")
    vip = agent.new_state("vip")
    image.set_body(lambda s: s.reply(f"image {s.event.name} ({len(s.event.content)} bytes)"))
    start.when_file_received(["image/*"]).go_to(image)
    start.when_condition(lambda s: s.get("vip") is True).go_to(vip)
    image.when_event().go_to(start)
    async with agent:
        session = await agent.get_or_create_session("s", platform)
        pdf = ReceiveFileEvent.from_bytes("s", "doc.pdf", b"%PDF")
        await (await agent.receive_event(pdf, platform))
        assert session.current_state.name == "start"  # a PDF is not an image: nothing matched
        png = ReceiveFileEvent.from_bytes("s", "cat.png", b"\x89PNG....")
        await (await agent.receive_event(png, platform))
        assert platform.replies["s"] == ["image cat.png (8 bytes)"]
        await agent.receive_message("s", "back", platform)
        session.set("vip", True)
        await agent.wait_idle("s")
        assert session.current_state.name == "vip"


async def test_body_error_is_recorded_and_the_session_goes_on(log_url: str, platform: RecordingPlatform) -> None:
    agent = Agent("a", log=log_url)
    state = agent.new_state("s", initial=True)

    def body(session: Session) -> None:
        if session.event and session.event.text == "boom":
            raise ValueError("kaboom")
        if session.event:
            session.reply(f"ok {session.event.text}")

    state.set_body(body)
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "boom", platform)
        await agent.receive_message("s", "fine", platform)
        errors = [r.data for r in await agent.log.read("s") if r.kind == "error"]
    assert platform.replies["s"] == ["ok fine"]
    assert platform.errors["s"] == ["Something went wrong while handling that (ValueError in state 's')."]
    assert len(errors) == 1
    assert errors[0]["type"] == "ValueError" and errors[0]["message"] == "kaboom"
    assert errors[0]["source"] == "body" and errors[0]["state"] == "s"
    assert "kaboom" in errors[0]["traceback"]


async def test_non_json_variable_is_refused_at_once(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    state = agent.new_state("s", initial=True)
    seen: list[str] = []

    def body(session: Session) -> None:
        try:
            session.set("bad", {1, 2})
        except SessionVariableError as exc:
            seen.append(str(exc))
        try:
            session.set("nan", float("nan"))
        except SessionVariableError as exc:
            seen.append(str(exc))
        session.set("good", {"list": [1, 2], "n": None})

    state.set_body(body)
    async with agent:
        session = await agent.get_or_create_session("s", platform)
        await agent.receive_message("s", "x", platform)
        assert "bad" not in session and "nan" not in session
        assert session["good"] == {"list": [1, 2], "n": None}
        sets = [r.data["name"] for r in await agent.log.read("s") if r.kind == "variable_set"]
    assert len(seen) == 2 and "'bad' must be JSON-serialisable" in seen[0] and "set" in seen[0]
    assert sets == ["good"]


async def test_mutating_a_returned_value_does_not_change_state_silently(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    agent.new_state("s", initial=True)
    async with agent:
        session = await agent.get_or_create_session("s", platform)
        session.set("items", [1])
        session.get("items").append(2)
        assert session["items"] == [1]


async def test_events_of_one_session_run_in_order_and_sessions_run_concurrently(
    platform: RecordingPlatform,
) -> None:
    """A sync body blocked on a thread event waits for another session's body to release it: if the
    slow body stalled the runtime, this would deadlock (the timeout fails the test instead)."""
    agent = Agent("a", log="memory://")
    state = agent.new_state("s", initial=True)
    release = threading.Event()
    order: list[str] = []

    def body(session: Session) -> None:
        if session.event is None:
            return
        text = session.event.text or ""
        if text == "wait":
            assert release.wait(timeout=10), "the other session never ran"
        elif text == "release":
            release.set()
        order.append(f"{session.id}:{text}")
        session.reply(text)

    state.set_body(body)
    state.when_event().go_to(state)
    async with agent:
        slow = asyncio.ensure_future(agent.receive_message("slow", "wait", platform))
        queued = asyncio.ensure_future(agent.receive_message("slow", "after", platform))
        await asyncio.sleep(0.05)
        await asyncio.wait_for(agent.receive_message("fast", "release", platform), timeout=5)
        await asyncio.wait_for(asyncio.gather(slow, queued), timeout=10)
    assert order.index("fast:release") < order.index("slow:wait") < order.index("slow:after")
    assert platform.replies["slow"] == ["wait", "after"]


async def test_async_body_and_awaited_reply(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    state = agent.new_state("s", initial=True)

    async def body(session: Session) -> None:
        if session.event:
            await session.reply("one")
            assert platform.replies[session.id] == ["one"]  # awaited: already delivered
            session.reply("two")  # not awaited: delivered in order by the end of the step

    state.set_body(body)
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "x", platform)
    assert platform.replies["s"] == ["one", "two"]


async def test_chat_history_reads_the_conversation(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    state = agent.new_state("s", initial=True)
    state.set_body(lambda s: s.reply(f"echo {s.event.text}") if s.event else None)
    state.when_event().go_to(state)
    async with agent:
        for word in ("a", "b", "c"):
            session = await agent.receive_message("s", word, platform)
        history = [(e.role, e.text) for e in session.chat_history()]
        assert history == [
            ("user", "a"),
            ("assistant", "echo a"),
            ("user", "b"),
            ("assistant", "echo b"),
            ("user", "c"),
            ("assistant", "echo c"),
        ]
        assert [(e.role, e.text) for e in session.chat_history(2)] == [("user", "c"), ("assistant", "echo c")]


async def test_hooks_are_called_in_documented_order(platform: RecordingPlatform) -> None:
    calls: list[str] = []

    class Capture(StepHooks):
        async def before_step(self, session: Session, event: Any) -> None:
            calls.append(f"before:{event.text if event else None}")

        async def after_transition(self, session: Session, transition: Any) -> None:
            calls.append(f"transition:{transition.dest.name}")

        async def after_step(self, session: Session, event: Any, seconds: float) -> None:
            assert platform.replies[session.id][-1:] == (["hi"] if event else [])
            calls.append("after")

    class Broken(StepHooks):
        async def before_step(self, session: Session, event: Any) -> None:
            raise RuntimeError("hook bug")

    agent = Agent("a", log="memory://")
    state = agent.new_state("s", initial=True)
    other = agent.new_state("o")
    other.set_body(lambda s: s.reply("hi"))
    state.when_event().go_to(other)
    agent.add_hook(Broken())
    agent.add_hook(Capture())
    async with agent:
        await agent.receive_message("s", "x", platform)
        errors = [r.data for r in await agent.log.read("s") if r.kind == "error"]
    assert calls == ["before:None", "after", "before:x", "transition:o", "after"]
    assert {e["source"] for e in errors} == {"hook"}


async def test_records_written_ahead_of_effects(db_url: str) -> None:
    """The reply record is durable (visible to a second connection) before the platform sees it, and
    the inbound message is durable before the body runs."""
    observed: dict[str, list[str]] = {"body": [], "reply": []}

    async def durable_kinds(session_id: str) -> list[str]:
        async with open_log(db_url) as other:
            return [r.kind for r in await other.read(session_id)]

    class Checking(RecordingPlatform):
        async def reply(self, session: Session, message: str) -> None:
            observed["reply"] = await durable_kinds(session.id)
            await super().reply(session, message)

    agent = Agent("a", log=db_url)
    state = agent.new_state("s", initial=True)

    async def body(session: Session) -> None:
        if session.event:
            observed["body"] = await durable_kinds(session.id)
            session.set("x", 1)
            await session.reply("hi")

    state.set_body(body)
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "hello", Checking())
    assert "message_received" in observed["body"]
    assert observed["body"][-2:] == ["step_started", "transition"]
    assert observed["reply"][-2:] == ["variable_set", "reply"]


async def test_no_body_runs_before_its_message_is_durable(platform: RecordingPlatform) -> None:
    """A store that holds appends until released: the body must wait for the message's record."""
    from baf.log import MemoryLog
    from baf.log.record import Record

    class GatedLog(MemoryLog):
        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()
            self.gate.set()

        async def append(self, records: Any) -> None:
            await self.gate.wait()
            await super().append(records)

    class RefusingLog(MemoryLog):
        async def append(self, records: list[Record]) -> None:
            if any(r.kind == "message_received" and r.data["text"] == "refused" for r in records):
                raise OSError("disk full")
            await super().append(records)

    ran: list[str] = []
    for log in (GatedLog(), RefusingLog()):
        agent = Agent("a", log=log)
        state = agent.new_state("s", initial=True)
        state.set_body(lambda s: ran.append(s.event.text) if s.event else None)
        state.when_event().go_to(state)
        async with agent:
            await agent.get_or_create_session("s", platform)
            await agent.wait_idle("s")
            if isinstance(log, GatedLog):
                log.gate.clear()
                pending = asyncio.ensure_future(agent.receive_message("s", "held", platform))
                await asyncio.sleep(0.05)
                assert ran == [] and not pending.done()
                log.gate.set()
                await pending
                assert ran == ["held"]
            else:
                with pytest.raises(LogError, match="disk full"):
                    await agent.receive_message("s", "refused", platform)
                assert ran == ["held"]  # the unrecorded message ran no body
                # The session is reloaded from what the log really holds, and goes on.
                await agent.receive_message("s", "after", platform)
                assert ran == ["held", "after"]
                texts = [r.data["text"] for r in await log.read("s") if r.kind == "message_received"]
                assert texts == ["after"]


async def test_receive_event_returns_once_durable(db_url: str) -> None:
    agent = Agent("a", log=db_url)
    state = agent.new_state("s", initial=True)
    gate = asyncio.Event()

    async def body(session: Session) -> None:
        if session.event:
            await gate.wait()

    state.set_body(body)
    state.when_event().go_to(state)
    async with agent:
        done = await agent.receive_event(ReceiveTextEvent("s", message="remember me"))
        assert not done.done()
        async with open_log(db_url) as other:
            texts = [r.data.get("text") for r in await other.read("s") if r.kind == "message_received"]
        assert texts == ["remember me"]
        gate.set()
        await done


async def test_many_sessions_concurrently(log_url: str, platform: RecordingPlatform) -> None:
    agent = Agent("a", log=log_url)
    state = agent.new_state("s", initial=True)

    async def body(session: Session) -> None:
        if session.event:
            session.set("count", session.get("count", 0) + 1)
            await session.reply(f"{session.id}:{session.get('count')}")

    state.set_body(body)
    state.when_event().go_to(state)
    async with agent:
        await asyncio.gather(*(agent.receive_message(f"s{i}", "x", platform) for i in range(50) for _ in range(3)))
        for i in range(50):
            assert platform.replies[f"s{i}"] == [f"s{i}:1", f"s{i}:2", f"s{i}:3"]
            assert (await kinds(agent, f"s{i}")).count("reply") == 3


async def test_using_an_agent_that_is_not_running_fails_clearly() -> None:
    agent = Agent("a", log="memory://")
    agent.new_state("s", initial=True)
    with pytest.raises(ConfigurationError, match="not running"):
        await agent.receive_message("s", "x")
    async with agent:
        with pytest.raises(ConfigurationError, match="while agent 'a' is running"):
            agent.new_state("late")


async def test_rich_replies_are_recorded_before_delivery(db_url: str) -> None:
    delivered: list[tuple[str, Any]] = []

    class Rich(RecordingPlatform):
        async def reply_options(self, session: Session, message: str, options: Any) -> None:
            async with open_log(db_url) as other:
                last = (await other.read(session.id))[-1]
            delivered.append(("options", (message, list(options), last.kind, last.data["format"])))

        async def reply_file(self, session: Session, name: str, content: bytes, mime_type: str = "",
                             caption: str = "") -> None:  # fmt: skip
            delivered.append(("file", (name, content, caption)))

    agent = Agent("a", log=db_url)
    state = agent.new_state("s", initial=True)

    async def body(session: Session) -> None:
        if session.event:
            await session.reply_options("Pick one", ["red", "blue"])
            session.reply_file("notes.txt", b"hello", "text/plain", caption="your notes")
            session.reply_image(b"\x89PNG", caption="a chart")  # the base platform falls back to text

    state.set_body(body)
    state.when_event().go_to(state)
    platform = Rich()
    async with agent:
        session = await agent.receive_message("s", "go", platform)
        replies = [r.data for r in await agent.log.read("s") if r.kind == "reply"]
    assert delivered == [
        ("options", ("Pick one", ["red", "blue"], "reply", "options")),
        ("file", ("notes.txt", b"hello", "your notes")),
    ]
    assert platform.replies["s"] == ["a chart\n\n[image: image/png, 4 bytes]"]
    assert [r["format"] for r in replies] == ["options", "file", "image"]
    assert [e.text for e in session.chat_history()][-3:] == ["Pick one", "your notes", "a chart"]


@pytest.mark.parametrize("how", ["append fails", "commit cancelled"])
async def test_a_commit_that_failed_lets_the_next_commit_fail_too_instead_of_hanging(
    how: str, platform: RecordingPlatform
) -> None:
    """A commit that raised (or was cancelled mid-append) releases the session's commit lock: the next
    commit reports that the log may lag (``LogError``) rather than waiting forever."""
    from baf.log import MemoryLog
    from baf.log.record import Record

    class FailingLog(MemoryLog):
        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()
            self.gate.set()

        async def append(self, records: list[Record]) -> None:
            if any(r.kind == "variable_set" for r in records):
                if how == "append fails":
                    raise OSError("disk full")
                self.gate.clear()
                await self.gate.wait()  # held until cancelled
            await super().append(records)

    outcome: list[str] = []

    async def body(session: Session) -> None:
        if session.event is None:
            return
        session.set("x", 1)
        if how == "append fails":
            with pytest.raises(LogError, match="disk full"):
                await runtime_side(session).commit()
        else:
            first = asyncio.ensure_future(runtime_side(session).commit())
            await asyncio.sleep(0.01)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
        with pytest.raises(LogError):
            await asyncio.wait_for(runtime_side(session).commit(), 2)  # a TimeoutError here: the lock was kept
        outcome.append("released")

    agent = Agent("a", log=FailingLog())
    state = agent.new_state("s", initial=True)
    state.set_body(body)
    state.when_event().go_to(state)
    async with agent:
        with pytest.raises(LogError):
            done = await agent.receive_event(ReceiveTextEvent("s", message="go"))
            await done
    assert outcome == ["released"]


async def test_an_event_that_is_not_json_is_refused_before_anything_is_recorded(platform: RecordingPlatform) -> None:
    agent = Agent("a", log="memory://")
    agent.new_state("idle", initial=True)
    async with agent:
        await agent.receive_message("s", "hello", platform)
        before = await agent.log.read("s")
        for payload in ({"x": float("nan")}, {"x": float("inf")}):  # JSON has no NaN: json.dumps would write one
            with pytest.raises(ValueError, match="ReceiveJSONEvent cannot be recorded: its fields must be JSON"):
                await agent.receive_event(ReceiveJSONEvent("s", payload=payload), platform)
        await agent.wait_idle()
        assert await agent.log.read("s") == before


async def test_an_application_logging_at_info_is_not_shown_the_state_machines_inner_steps(
    platform: RecordingPlatform, caplog: pytest.LogCaptureFixture
) -> None:
    # The `transitions` library logs each state's entry and exit at INFO; an agent's output is not the place.
    import logging

    caplog.set_level(logging.INFO)  # as logging.basicConfig(level=logging.INFO) does: the root's level
    agent = Agent("chatty", log="memory://")
    idle = agent.new_state("idle", initial=True)
    idle.when_event(ReceiveTextEvent).go_to(idle)
    idle.set_body(lambda session: session.reply("ok") if session.event else None)
    async with agent:
        await agent.receive_message("s", "hi", platform)
        await agent.wait_idle("s")
    assert platform.replies["s"] == ["ok"]
    assert [r.getMessage() for r in caplog.records if r.name.startswith("transitions")] == []
