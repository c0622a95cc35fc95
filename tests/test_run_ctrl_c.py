"""Ctrl-C on ``baf run`` in a terminal, while a slow sync body (or sync tool) runs: once waits, twice
stops now."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from baf_test_helpers import baf as run_baf

pytestmark = pytest.mark.slow

# The body says it started (a file, not the terminal: the test waits for it), sleeps, then replies.
SLOW_AGENT = """
import os, pathlib, time
from baf import Agent, ReceiveTextEvent, Session

agent = Agent("slow", log="sqlite:///slow.db")
idle = agent.new_state("idle", initial=True)
work = agent.new_state("work")

def slow(session: Session) -> None:
    pathlib.Path("body-started").touch()
    time.sleep(float(os.environ["SLOW_SECONDS"]))
    session.reply("done sleeping")

work.set_body(slow)
idle.when_event(ReceiveTextEvent).go_to(work)
work.go_to(idle)
"""

# A reasoning state whose one tool is sync and slow: it runs in a thread, as a sync body does.
SLOW_TOOL_AGENT = """
import os, pathlib, time
from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.testing import ScriptedLLM

agent = Agent("slow", log="sqlite:///slow.db")

@agent.tool
def nap() -> str:
    \"\"\"Sleep a while.\"\"\"
    pathlib.Path("body-started").touch()
    time.sleep(float(os.environ["SLOW_SECONDS"]))
    return "done sleeping"

state = new_reasoning_state(agent, ScriptedLLM([ScriptedLLM.tool_call("nap", {}), "rested"]))
state.when_event().go_to(state)
"""


class Terminal:
    """``baf run slow.py`` on a pseudo-terminal (stdin and stdout, as in a real terminal); stderr piped."""

    def __init__(self, cwd: Path, seconds: float, agent: str = SLOW_AGENT) -> None:
        (cwd / "slow.py").write_text(agent)
        self.cwd = cwd
        leader, follower = pty.openpty()
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        env.update(SLOW_SECONDS=str(seconds), COLUMNS="120", NO_COLOR="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "baf.cli", "run", "slow.py"],
            cwd=cwd, stdin=follower, stdout=follower, stderr=subprocess.PIPE, env=env, start_new_session=True,
        )  # fmt: skip
        os.close(follower)
        self.leader = leader
        self.output = ""

    def read(self, seconds: float) -> None:
        """Collect terminal output for ``seconds`` (the pty must be drained or the agent blocks)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.leader], [], [], min(left, 0.05))
            if ready:
                try:
                    chunk = os.read(self.leader, 65536)
                except OSError:  # the process exited and closed its side
                    time.sleep(min(left, 0.05))
                    continue
                self.output += chunk.decode(errors="replace")

    def wait_for(self, what: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while what not in self.output and time.monotonic() < end and self.proc.poll() is None:
            self.read(0.1)
        assert what in self.output, self.output

    def send_message(self, text: str, timeout: float = 60) -> None:
        """Type ``text`` once the prompt is up; return once its body has started."""
        self.wait_for("you>", timeout)
        os.write(self.leader, text.encode() + b"\n")
        started, end = self.cwd / "body-started", time.monotonic() + timeout
        while not started.exists() and time.monotonic() < end:
            self.read(0.05)
        assert started.exists(), self.output

    def wait_exit(self, timeout: float) -> float:
        """Wait for the process to exit; the seconds it took."""
        begun = time.monotonic()
        while self.proc.poll() is None and time.monotonic() - begun < timeout:
            self.read(0.05)
        took = time.monotonic() - begun
        assert self.proc.poll() is not None, f"still running after {took:.1f} s"
        self.read(0.1)
        return took

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        os.close(self.leader)


@pytest.fixture
def terminal(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Terminal]:
    """A terminal running ``SLOW_AGENT``; the parameter is the seconds its body sleeps."""
    term = Terminal(tmp_path, request.param)
    yield term
    term.close()


@pytest.fixture
def tool_terminal(tmp_path: Path) -> Iterator[Terminal]:
    """A terminal running ``SLOW_TOOL_AGENT``, whose tool sleeps 8 s."""
    term = Terminal(tmp_path, 8.0, SLOW_TOOL_AGENT)
    yield term
    term.close()


def baf(*args: str, cwd: Path) -> str:
    result = run_baf(*args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def records(cwd: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in baf("log", "slow.db", "terminal", "--json", cwd=cwd).splitlines()]


@pytest.mark.parametrize("terminal", [2.0], indirect=True)
def test_first_ctrl_c_says_so_and_lets_the_step_finish_and_reply(terminal: Terminal) -> None:
    terminal.send_message("hello")
    terminal.proc.send_signal(signal.SIGINT)
    terminal.wait_exit(timeout=30)
    err = terminal.stderr()
    assert terminal.proc.returncode == 0, err
    assert "stopping after the current step" in err and "Ctrl-C again to stop now" in err
    assert "Traceback" not in err and "never awaited" not in err
    assert "done sleeping" in terminal.output  # delivered

    log = records(terminal.cwd)
    assert [r["data"]["text"] for r in log if r["kind"] == "reply"] == ["done sleeping"]  # type: ignore[index]
    assert log[-1]["kind"] == "step_finished" and "interrupted" not in log[-1]["data"]  # type: ignore[operator]


def signal_twice(terminal: Terminal, sig: signal.Signals) -> str:
    """Send a message, then ``sig`` twice; the process's stderr. It must exit within 3 s of the second
    signal, cleanly, without a traceback or an un-awaited coroutine."""
    terminal.send_message("hello")
    terminal.proc.send_signal(sig)
    terminal.read(0.3)
    terminal.proc.send_signal(sig)
    took = terminal.wait_exit(timeout=20)
    err = terminal.stderr()
    assert took < 3, f"exited {took:.1f} s after the second {sig.name}\n{err}"
    assert terminal.proc.returncode == 0, err
    assert "Traceback" not in err and "never awaited" not in err
    return err


def assert_ends_interrupted_by_user(log: list[dict[str, object]]) -> None:
    """The log's last step was cut by the user: an error saying so, then ``step_finished``."""
    error, finished = log[-2], log[-1]
    assert error["kind"] == "error" and str(error["data"]["message"]).startswith(  # type: ignore[index]
        "interrupted by the user"
    )
    assert finished["kind"] == "step_finished"
    assert finished["data"]["interrupted_by"] == "user"  # type: ignore[index]


@pytest.mark.parametrize("terminal", [8.0], indirect=True)
def test_second_ctrl_c_stops_now_and_records_the_user_interrupted(terminal: Terminal) -> None:
    err = signal_twice(terminal, signal.SIGINT)  # the body sleeps 8 s: its thread is not waited for
    assert "Ctrl-C again to stop now" in err and "Warning" not in err
    assert "done sleeping" not in terminal.output
    assert_ends_interrupted_by_user(records(terminal.cwd))

    timeline = baf("replay", "slow.db", "terminal", cwd=terminal.cwd)
    assert "— interrupted by the user" in timeline
    assert "crash" not in timeline


def test_second_ctrl_c_during_a_slow_sync_tool_stops_now(tool_terminal: Terminal) -> None:
    # A sync tool runs on the agent's daemon threads, as sync bodies do: the interpreter does not wait
    # for it at exit (asyncio's default executor's threads it would join).
    err = signal_twice(tool_terminal, signal.SIGINT)
    assert "Ctrl-C again to stop now" in err and "Warning" not in err
    log = records(tool_terminal.cwd)
    assert not [r for r in log if r["kind"] == "tool_result"]  # the tool never returned in this process
    assert_ends_interrupted_by_user(log)


@pytest.mark.parametrize("terminal", [8.0], indirect=True)
def test_a_second_sigterm_stops_now_and_the_log_says_sigterm(terminal: Terminal) -> None:
    # What a service manager (systemd, docker stop) sends: the messages name SIGTERM, not Ctrl-C.
    err = signal_twice(terminal, signal.SIGTERM)
    assert "send SIGTERM again to stop now" in err and "Ctrl-C" not in err
    log = records(terminal.cwd)
    assert_ends_interrupted_by_user(log)
    assert log[-2]["data"]["message"] == (  # type: ignore[index]
        "interrupted by the user: told to stop now (a second SIGTERM), the agent did not wait for this step"
    )


# An async body that will not be cancelled: it catches the cancellation and sleeps on.
STUBBORN_AGENT = """
import asyncio, os, pathlib
from baf import Agent, ReceiveTextEvent, Session

agent = Agent("slow", log="sqlite:///slow.db")
idle = agent.new_state("idle", initial=True)
work = agent.new_state("work")

async def stubborn(session: Session) -> None:
    pathlib.Path("body-started").touch()
    while True:
        try:
            await asyncio.sleep(float(os.environ["SLOW_SECONDS"]))
            return
        except asyncio.CancelledError:
            pass

work.set_body(stubborn)
idle.when_event(ReceiveTextEvent).go_to(work)
work.go_to(idle)
"""


def test_a_body_that_swallows_its_cancellation_does_not_keep_baf_run_alive(tmp_path: Path) -> None:
    # The stop gives up on it after a bounded wait; asyncio.run's own clean-up would then wait on it
    # forever, so a further Ctrl-C must end the process (Python's own handling is back by then).
    terminal = Terminal(tmp_path, 60.0, STUBBORN_AGENT)
    try:
        terminal.send_message("hello")
        terminal.proc.send_signal(signal.SIGINT)
        terminal.read(0.3)
        terminal.proc.send_signal(signal.SIGINT)
        begun = time.monotonic()
        while terminal.proc.poll() is None and time.monotonic() - begun < 20:
            terminal.read(0.5)
            if terminal.proc.poll() is None:
                terminal.proc.send_signal(signal.SIGINT)
        assert terminal.proc.poll() is not None, "still running 20 s after the second Ctrl-C"
        assert "Traceback" not in terminal.stderr()
    finally:
        terminal.close()
