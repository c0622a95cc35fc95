"""Stopping the agent: the grace period, interrupting now, and the body threads it abandons."""

from __future__ import annotations

import asyncio
import io
import logging
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from baf import Agent, ReceiveTextEvent, Session
from baf.core import runtime as runtime_module
from baf.core.session import runtime_side
from baf.core.threadpool import DaemonThreadPool
from baf.errors import LogClosedError, RuntimeStoppedError
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse, ToolCall
from baf.log import open_log
from baf.log.memory import MemoryLog
from baf.log.record import Record
from baf.testing import FunctionLLM, RecordingPlatform


def blocking_agent(db_url: str, platform: RecordingPlatform) -> tuple[Agent, threading.Event, threading.Event]:
    """An agent whose ``work`` body waits for ``release``, then tries to reply and set a variable,
    keeping what each raised in ``agent.outcome``."""
    agent = Agent("a", log=db_url)
    idle = agent.new_state("idle", initial=True)
    work = agent.new_state("work")
    started, release = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def slow(session: Session) -> None:
        started.set()
        release.wait(10)
        for name, call in (("reply", lambda: session.reply("late")), ("set", lambda: session.set("x", 1))):
            try:
                call()
                outcome[name] = None
            except Exception as exc:  # what the abandoned thread sees
                outcome[name] = exc

    work.set_body(slow)
    idle.when_event().go_to(work)
    agent.add_platform(platform)
    agent.outcome = outcome  # type: ignore[attr-defined]
    return agent, started, release


async def started_in_blocked_body(db_url: str, platform: RecordingPlatform) -> tuple[Agent, threading.Event]:
    """A started ``blocking_agent`` whose body is blocked in session "s"; set the event to release it."""
    agent, started, release = blocking_agent(db_url, platform)
    await agent.start()
    await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
    assert await asyncio.to_thread(started.wait, 10)
    return agent, release


async def test_interrupt_abandons_a_sync_body_whose_later_calls_fail_clearly(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent, release = await started_in_blocked_body(db_url, platform)
    runtime = agent.runtime

    stopping = asyncio.ensure_future(agent.stop())
    await asyncio.sleep(0.05)  # the stop is waiting out its grace period for the body
    assert not stopping.done()
    begun = time.monotonic()
    runtime.interrupt()
    await asyncio.wait_for(stopping, 5)
    assert time.monotonic() - begun < 2  # did not wait for the body, still blocked

    release.set()  # the abandoned body goes on, after the log closed
    outcome: dict[str, Any] = agent.outcome  # type: ignore[attr-defined]
    for _ in range(200):
        if len(outcome) == 2:
            break
        await asyncio.sleep(0.01)
    assert isinstance(outcome["reply"], LogClosedError), outcome
    assert "the agent stopped" in str(outcome["reply"])
    assert isinstance(outcome["set"], LogClosedError), outcome
    assert platform.replies["s"] == []

    async with open_log(db_url) as log:
        records = await log.read("s")
    error, finished = records[-2], records[-1]
    assert error.kind == "error" and error.data["interrupted_by"] == "user"
    assert error.data["message"].startswith("interrupted by the user")
    assert finished.kind == "step_finished"
    assert finished.data == {"event_seq": finished.data["event_seq"], "interrupted": True, "interrupted_by": "user"}
    assert not any(r.kind == "reply" for r in records)


@pytest.mark.parametrize("when", ["during the stop", "before the stop"])
async def test_agent_interrupt_makes_stop_return_without_the_grace_period(
    db_url: str, platform: RecordingPlatform, when: str
) -> None:
    # The public way for a program using `async with agent:` to do what a second Ctrl-C does.
    agent, release = await started_in_blocked_body(db_url, platform)

    begun = time.monotonic()
    if when == "before the stop":
        agent.interrupt()
        await asyncio.wait_for(agent.stop(), 5)
    else:
        stopping = asyncio.ensure_future(agent.stop())
        await asyncio.sleep(0.05)
        assert not stopping.done()  # waiting out the grace period for the blocked body
        agent.interrupt()
        await asyncio.wait_for(stopping, 5)
    assert time.monotonic() - begun < 2  # the body is still blocked: stop() did not wait for it
    assert not agent.running
    agent.interrupt()  # not running: nothing to do
    release.set()

    async with open_log(db_url) as log:
        records = await log.read("s")
    error, finished = records[-2], records[-1]
    assert error.kind == "error" and error.data["interrupted_by"] == "user"
    assert error.data["message"] == (
        "interrupted by the user: told to stop now (Agent.interrupt()), the agent did not wait for this step"
    )
    assert finished.kind == "step_finished"
    assert finished.data == {"event_seq": finished.data["event_seq"], "interrupted": True, "interrupted_by": "user"}


async def test_a_step_past_the_grace_period_is_left_open_and_the_next_start_tells_the_user(
    db_url: str, platform: RecordingPlatform, caplog: pytest.LogCaptureFixture
) -> None:
    agent, release = await started_in_blocked_body(db_url, platform)
    with caplog.at_level(logging.WARNING, logger="baf.runtime"):
        await agent.runtime.stop(timeout=0.1)  # the runtime itself, with a short grace period
    release.set()
    assert "did not finish within the stop's grace period; it is left open" in caplog.text

    async with open_log(db_url) as log:
        records = await log.read("s")
    # Open, as a crash leaves it: the body (a sync function, not resumable) may have acted outside baf.
    assert records[-1].kind != "step_finished" and "step_started" in [r.kind for r in records]
    assert not any(r.kind == "error" for r in records)

    restarted, _, _ = blocking_agent(db_url, platform)
    async with restarted:
        await restarted.wait_idle()
    assert platform.replies["s"] == [runtime_module.INTERRUPTED_BY_RESTART_REPLY]
    async with open_log(db_url) as log:
        records = await log.read("s")
    assert records[-1].kind == "step_finished" and records[-1].data["interrupted_by"] == "crash"


async def test_a_reasoning_step_past_the_grace_period_resumes_at_the_next_start(db_url: str) -> None:
    """A rolling restart: the stop cuts a reasoning loop waiting on a tool; the next start goes on from its
    records, so the model's recorded answer is not asked for again, and the user gets the answer."""
    tool_started = asyncio.Event()
    calls: list[str] = []

    async def lookup(key: str) -> str:
        """Look a key up."""
        calls.append(key)
        tool_started.set()
        await asyncio.sleep(0 if len(calls) > 1 else 600)  # the first call outlasts the grace period
        return f"value of {key}"

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
        if messages[-1]["role"] == "tool":
            return LLMResponse(text=f"Found: {messages[-1]['content']}.")
        return LLMResponse(tool_calls=[ToolCall("call_1", "lookup", '{"key": "k"}')])

    def build(platform: RecordingPlatform) -> tuple[Agent, FunctionLLM]:
        llm = FunctionLLM(model)
        agent = Agent("a", log=db_url)
        agent.new_tool(lookup, idempotent=True)  # safe to run again when its result was not recorded
        state = new_reasoning_state(agent, llm, enable_task_planning=False)
        state.when_event().go_to(state)
        agent.add_platform(platform)
        return agent, llm

    first_platform = RecordingPlatform()
    agent, first_llm = build(first_platform)
    await agent.start()
    await agent.receive_event(ReceiveTextEvent("s", message="find k"), first_platform)
    await asyncio.wait_for(tool_started.wait(), 10)
    await agent.runtime.stop(timeout=0.1)
    assert len(first_llm.requests) == 1 and first_platform.replies.get("s", []) == []

    platform = RecordingPlatform()
    restarted, llm = build(platform)
    async with restarted:
        await restarted.wait_idle()
    assert platform.replies["s"] == ["Found: value of k."]
    assert len(llm.requests) == 1  # only the request after the tool: the recorded answer was not asked again
    assert calls == ["k", "k"]  # the tool, whose result was never recorded, ran again
    async with open_log(db_url) as log:
        kinds = [r.kind for r in await log.read("s")]
    assert kinds.count("step_resumed") == 1 and kinds.count("llm_response") == 2 and kinds[-1] == "step_finished"


async def test_stop_lets_a_running_sync_body_finish_and_deliver(db_url: str, platform: RecordingPlatform) -> None:
    agent, release = await started_in_blocked_body(db_url, platform)
    threading.Timer(0.2, release.set).start()
    await agent.stop()
    assert platform.replies["s"] == ["late"]
    async with open_log(db_url) as log:
        records = await log.read("s")
    assert records[-1].kind == "step_finished" and "interrupted" not in records[-1].data


def sleeping_agent(log: Any, platform: RecordingPlatform, seconds: float = 30) -> Agent:
    """An agent whose async body sleeps ``seconds`` on a message starting with "slow", then replies
    "done <message>"; other messages are answered at once."""
    agent = Agent("a", log=log)
    idle = agent.new_state("idle", initial=True)

    async def body(session: Session) -> None:
        if session.event is None:
            return
        if session.event.text.startswith("slow"):
            await asyncio.sleep(seconds)
        session.reply(f"done {session.event.text}")

    idle.set_body(body)
    idle.when_event().go_to(idle)
    agent.add_platform(platform)
    return agent


async def wait_until_in_step(agent: Agent, session_id: str) -> None:
    for _ in range(500):
        if agent.runtime.control.in_step(session_id):
            await asyncio.sleep(0.02)  # into the body's sleep
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"session {session_id} never started a step")


async def test_interrupt_without_a_stop_leaves_the_session_taking_later_events(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent = sleeping_agent(db_url, platform)
    async with agent:
        slow = await agent.receive_event(ReceiveTextEvent("s", message="slow"), platform)
        await wait_until_in_step(agent, "s")
        agent.interrupt()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(slow, 5)
        session = await agent.receive_message("s", "after")  # the session was not closed by the interrupt
        assert platform.replies["s"] == ["done after"]
        assert agent.runtime.control.cut_of(session.id) is None  # the next step is a normal one
    async with open_log(db_url) as log:
        records = await log.read("s")
    finished = [r.data for r in records if r.kind == "step_finished"]
    assert finished[-2]["interrupted_by"] == "user"
    assert "interrupted" not in finished[-1]  # the next step is a normal one


async def test_interrupt_without_a_stop_lets_the_events_queued_behind_the_step_run(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent = sleeping_agent(db_url, platform)
    async with agent:
        slow = await agent.receive_event(ReceiveTextEvent("s", message="slow"), platform)
        await wait_until_in_step(agent, "s")
        queued = await agent.receive_event(ReceiveTextEvent("s", message="queued"), platform)
        agent.interrupt()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(slow, 5)
        await asyncio.wait_for(queued, 5)  # the worker went on with its mailbox
        assert platform.replies["s"] == ["done queued"]
    async with open_log(db_url) as log:
        records = await log.read("s")
    finished = [r.data for r in records if r.kind == "step_finished"]
    assert finished[-2]["interrupted_by"] == "user" and "interrupted" not in finished[-1]


async def test_an_interrupt_long_before_a_stop_does_not_cut_its_grace_period(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent = sleeping_agent(db_url, platform, seconds=0.3)
    await agent.start()
    await agent.receive_event(ReceiveTextEvent("s", message="slow1"), platform)
    await wait_until_in_step(agent, "s")
    agent.interrupt()
    await agent.wait_idle()
    await agent.receive_event(ReceiveTextEvent("t", message="slow2"), platform)
    await wait_until_in_step(agent, "t")
    await asyncio.wait_for(agent.stop(), 10)  # graceful: waits for t's step
    assert platform.replies["t"] == ["done slow2"]
    async with open_log(db_url) as log:
        records = await log.read("t")
    assert records[-1].kind == "step_finished" and "interrupted" not in records[-1].data
    assert not any(r.kind == "error" for r in records)


class SlowEndLog(MemoryLog):
    """A log whose commit of a step's end takes a while (an fsync, another process holding the lock)."""

    async def append(self, records: Sequence[Record]) -> None:
        if any(r.kind == "step_finished" and r.data.get("event_seq") for r in records):
            await asyncio.sleep(0.3)
        await super().append(records)


async def test_an_interrupt_while_a_step_commits_its_end_lets_it_finish_and_starts_no_other(
    platform: RecordingPlatform,
) -> None:
    log = SlowEndLog()
    agent = sleeping_agent(log, platform)
    await agent.start()
    await agent.wait_idle()
    await agent.receive_event(ReceiveTextEvent("s", message="hi"), platform)
    queued = await agent.receive_event(ReceiveTextEvent("s", message="slow"), platform)
    live = runtime_side(agent.sessions["s"])
    for _ in range(500):  # the body has replied; the step's final commit is under way
        if not live.in_step and not live.has_unflushed_records and live.projection.last_seq > 5:
            break
        await asyncio.sleep(0.005)
    else:
        raise AssertionError("the step never reached its final commit")
    stopping = asyncio.ensure_future(agent.stop())
    await asyncio.sleep(0)
    agent.interrupt()  # a second Ctrl-C
    await asyncio.wait_for(stopping, 5)
    assert queued.cancelled()  # not started once told to stop now; the next start handles it
    assert platform.replies["s"] == ["done hi"]
    await log.start()
    records = await log.read("s")
    assert [r.kind for r in records[-2:]] == ["reply", "step_finished"]
    assert "interrupted" not in records[-1].data
    slow_seq = next(r.seq for r in records if r.kind == "message_received" and r.data["text"] == "slow")
    assert not any(r.kind == "step_started" and r.data["event_seq"] == slow_seq for r in records)


async def test_a_second_signal_interrupts_even_when_stderr_is_a_closed_pipe(
    db_url: str, platform: RecordingPlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    agent = sleeping_agent(db_url, platform)
    await agent.start()
    agent._stop_requested = asyncio.Event()  # as run() sets it up
    slow = await agent.receive_event(ReceiveTextEvent("s", message="slow"), platform)
    await wait_until_in_step(agent, "s")
    monkeypatch.setattr("sys.stderr", ClosedPipe())
    agent._on_signal(signal.SIGINT)
    agent._on_signal(signal.SIGINT)
    monkeypatch.undo()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(slow, 5)
    await asyncio.wait_for(agent.stop(), 5)
    async with open_log(db_url) as log:
        records = await log.read("s")
    assert records[-1].data["interrupted_by"] == "user"
    assert "(a second Ctrl-C)" in records[-2].data["message"]


async def test_stop_does_not_wait_forever_for_a_body_that_swallows_its_cancellation(
    db_url: str, platform: RecordingPlatform, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runtime_module, "STOP_CANCEL_WAIT", 0.2, raising=False)
    release = asyncio.Event()
    agent = Agent("a", log=db_url)
    idle = agent.new_state("idle", initial=True)

    async def stubborn(session: Session) -> None:
        if session.event is None:
            return
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                pass  # goes on regardless, every time
        session.reply("too late")

    idle.set_body(stubborn)
    idle.when_event().go_to(idle)
    agent.add_platform(platform)
    await agent.start()
    runtime = agent.runtime
    await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
    await wait_until_in_step(agent, "s")
    worker = runtime._workers["s"]
    agent.interrupt()  # swallowed: the step goes on, and later interrupts must still reach the stop
    with caplog.at_level(logging.WARNING, logger="baf.runtime"):
        stopping = asyncio.ensure_future(agent.stop())
        await asyncio.sleep(0.05)
        agent.interrupt()
        await asyncio.wait_for(stopping, 5)
    assert "session s: its step did not end when interrupted" in caplog.text
    release.set()
    await asyncio.wait_for(worker, 5)  # ends quietly: its late records are refused, the log is closed
    assert platform.replies["s"] == []
    async with open_log(db_url) as log:
        records = await log.read("s")
    error, finished = records[-2], records[-1]
    assert error.kind == "error" and "caught CancelledError" in error.data["message"]
    assert finished.kind == "step_finished" and finished.data["interrupted_by"] == "user"


def test_daemon_thread_pool_caps_threads_and_cancels_queued_calls() -> None:
    pool = DaemonThreadPool(max_workers=2, thread_name_prefix="test")
    gate = threading.Event()
    running = [pool.submit(gate.wait, 10) for _ in range(2)]
    queued = pool.submit(gate.wait, 10)
    assert len(pool._threads) == 2 and all(t.daemon for t in pool._threads)
    pool.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    with pytest.raises(RuntimeStoppedError, match="the runtime has stopped") as caught:
        pool.submit(print)
    assert isinstance(caught.value, RuntimeError)  # what an Executor raises after shutdown
    gate.set()
    assert all(f.result(timeout=5) is True for f in running)
    for thread in pool._threads:
        thread.join(5)
        assert not thread.is_alive()


def test_daemon_thread_pool_reuses_an_idle_thread_and_passes_errors_on() -> None:
    pool = DaemonThreadPool(max_workers=4)
    assert pool.submit(lambda: 1).result(timeout=5) == 1
    for _ in range(50):  # the first thread goes idle once its call has returned
        if pool._idle._value:  # type: ignore[attr-defined]
            break
        time.sleep(0.01)
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(timeout=5)
    assert len(pool._threads) == 1
    pool.shutdown(wait=True)
