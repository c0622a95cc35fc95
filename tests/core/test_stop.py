"""Stopping the agent: the grace period, interrupting now, and the body threads it abandons."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from baf import Agent, ReceiveTextEvent, Session
from baf.core.threadpool import DaemonThreadPool
from baf.errors import LogClosedError
from baf.log import open_log
from baf.testing import RecordingPlatform


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


async def test_interrupt_abandons_a_sync_body_whose_later_calls_fail_clearly(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent, started, release = blocking_agent(db_url, platform)
    await agent.start()
    runtime = agent._require_runtime()
    await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
    assert await asyncio.to_thread(started.wait, 10)

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
    agent, started, release = blocking_agent(db_url, platform)
    await agent.start()
    await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
    assert await asyncio.to_thread(started.wait, 10)

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


async def test_a_step_past_the_grace_period_is_recorded_as_cut_by_the_stop(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent, started, release = blocking_agent(db_url, platform)
    await agent.start()
    runtime = agent._require_runtime()
    await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
    assert await asyncio.to_thread(started.wait, 10)
    agent._runtime = None  # stop the runtime itself, with a short grace period
    await runtime.stop(timeout=0.1)
    release.set()

    async with open_log(db_url) as log:
        records = await log.read("s")
    assert records[-1].data["interrupted_by"] == "stop"
    assert "grace period" in records[-2].data["message"]


async def test_stop_lets_a_running_sync_body_finish_and_deliver(db_url: str, platform: RecordingPlatform) -> None:
    agent, started, release = blocking_agent(db_url, platform)
    await agent.start()
    await agent.receive_event(ReceiveTextEvent("s", message="go"), platform)
    assert await asyncio.to_thread(started.wait, 10)
    threading.Timer(0.2, release.set).start()
    await agent.stop()
    assert platform.replies["s"] == ["late"]
    async with open_log(db_url) as log:
        records = await log.read("s")
    assert records[-1].kind == "step_finished" and "interrupted" not in records[-1].data


def test_daemon_thread_pool_caps_threads_and_cancels_queued_calls() -> None:
    pool = DaemonThreadPool(max_workers=2, thread_name_prefix="test")
    gate = threading.Event()
    running = [pool.submit(gate.wait, 10) for _ in range(2)]
    queued = pool.submit(gate.wait, 10)
    assert len(pool._threads) == 2 and all(t.daemon for t in pool._threads)
    pool.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(print)
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
