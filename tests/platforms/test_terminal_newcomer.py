"""The terminal as a newcomer meets it: replies shown whole, where the log is, the earlier conversation
marked as such, a restart that finishes its work before the prompt, and Ctrl-C ending its line."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from baf_test_helpers import baf

ECHO_AGENT = """
from baf import Agent, ReceiveTextEvent, Session

agent = Agent("echo", log="sqlite:///echo.db")
idle = agent.new_state("idle", initial=True)
answer = agent.new_state("answer")

def say(session: Session) -> None:
    session.reply(f"You said {session.event.text}. Ask me 'weather in <city>'.")

answer.set_body(say)
idle.when_event(ReceiveTextEvent).go_to(answer)
answer.go_to(idle)
"""

# A reasoning agent whose one tool sleeps on the first run (to be killed there) and not after.
RESUMING_AGENT = """
import os, pathlib, time
from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse, ToolCall
from baf.testing import FunctionLLM

agent = Agent("resuming", log="sqlite:///resuming.db")

def model(messages, tools, **_):
    if messages[-1]["role"] == "tool":
        return "all done: " + messages[-1]["content"]
    return LLMResponse(tool_calls=[ToolCall("c1", "weather", {"city": "Oslo"})])

@agent.tool(idempotent=True)
def weather(city: str) -> str:
    \"\"\"The weather.

    Args:
        city: The city.
    \"\"\"
    marker = pathlib.Path("tool-started")
    if not marker.exists():
        marker.touch()
        time.sleep(60)  # the first run is killed here
    return f"sunny in {city}"

state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False)
state.when_event().go_to(state)
"""


def test_replies_are_shown_whole_and_the_log_is_named_at_the_start(tmp_path: Path) -> None:
    (tmp_path / "echo_agent.py").write_text(ECHO_AGENT)
    done = baf("run", "echo_agent.py", cwd=tmp_path, stdin="hello\n", columns=80)
    assert done.returncode == 0, done.stderr
    assert "Ask me 'weather in <city>'." in done.stdout  # not Markdown's HTML: shown as written
    start = done.stdout.index(f"session terminal, recorded in {tmp_path / 'echo.db'}")
    assert start < done.stdout.index("you>")


def test_a_second_run_marks_the_earlier_conversation(tmp_path: Path) -> None:
    (tmp_path / "echo_agent.py").write_text(ECHO_AGENT)
    first = baf("run", "echo_agent.py", cwd=tmp_path, stdin="hello\n", columns=80)
    assert "earlier in this session" not in first.stdout
    second = baf("run", "echo_agent.py", cwd=tmp_path, stdin="again\n", columns=80).stdout
    earlier, now = second.index("earlier in this session"), second.index("now ─")
    assert earlier < second.index("you> hello") < second.index("You said hello") < now
    assert now < second.index("You said again")


@pytest.mark.slow
def test_after_kill_9_the_restart_finishes_its_work_then_prompts(tmp_path: Path) -> None:
    (tmp_path / "resuming_agent.py").write_text(RESUMING_AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(COLUMNS="80")
    first = subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "run", "resuming_agent.py"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert first.stdin is not None
    first.stdin.write(b"weather?\n")
    first.stdin.flush()
    deadline = time.monotonic() + 30
    while not (tmp_path / "tool-started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    first.kill()  # kill -9 in the middle of the tool call
    first.wait(10)
    first.stdin.close()

    second = baf("run", "resuming_agent.py", cwd=tmp_path, stdin="", columns=80)
    assert second.returncode == 0, second.stderr
    out = second.stdout
    resumed = out.index("resumed after a restart")
    answer = out.index("all done: sunny in Oslo")
    prompt = out.rindex("you>")
    assert resumed < answer < prompt
    assert out[prompt - 1] == "\n"  # the prompt starts a line of its own, after the resumed run


@pytest.mark.slow
def test_ctrl_c_at_the_prompt_ends_the_line(tmp_path: Path) -> None:
    (tmp_path / "echo_agent.py").write_text(ECHO_AGENT)
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(COLUMNS="80", NO_COLOR="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "run", "echo_agent.py"],
        cwd=tmp_path,
        stdin=follower,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    output = ""
    try:
        deadline = time.monotonic() + 30
        while "you>" not in output and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.05)[0]:
                output += os.read(leader, 65536).decode(errors="replace")
        assert "you>" in output, output
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.05)[0]:
                try:
                    output += os.read(leader, 65536).decode(errors="replace")
                except OSError:
                    break
        assert proc.wait(10) == 0
        assert output.endswith("\n"), repr(output[-40:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()
        os.close(leader)


# A greeting that takes a moment (as a model's would): the chat must not prompt before it is shown.
GREETING_AGENT = """
import asyncio
from baf import Agent, ReceiveTextEvent, Session

agent = Agent("greeter", log="sqlite:///greeter.db")
welcome = agent.new_state("welcome", initial=True)
answer = agent.new_state("answer")

async def greet(session: Session) -> None:
    if session.event is None:
        await asyncio.sleep(0.3)
        session.reply("Welcome! Say anything.")

def say(session: Session) -> None:
    session.reply(f"You said {session.event.text}.")

welcome.set_body(greet)
answer.set_body(say)
welcome.when_event(ReceiveTextEvent).go_to(answer)
answer.go_to(welcome)
"""

# A reply with a Markdown table between two paragraphs.
TABLE_AGENT = """
from baf import Agent, ReceiveTextEvent, Session

agent = Agent("tables", log="sqlite:///tables.db")
idle = agent.new_state("idle", initial=True)
answer = agent.new_state("answer")

def say(session: Session) -> None:
    session.reply("Growth by region:\\n\\n| Region | Growth |\\n|---|---:|\\n| Asia | +43.4% |\\n\\nSource: sales.")

answer.set_body(say)
idle.when_event(ReceiveTextEvent).go_to(answer)
answer.go_to(idle)
"""


def test_the_initial_states_greeting_shows_in_its_panel_before_the_first_prompt(tmp_path: Path) -> None:
    (tmp_path / "greeting_agent.py").write_text(GREETING_AGENT)
    done = baf("run", "greeting_agent.py", cwd=tmp_path, stdin="hi\n", columns=80)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    greeting = out.index("Welcome! Say anything.")
    assert greeting < out.index("you>")  # not after a prompt already shown, waiting
    assert out.rindex("╭─ greeter", 0, greeting) < greeting  # in the reply's panel, as every reply
    assert "you> hi" in out and "You said hi." in out
    # Run again: the greeting is now the earlier conversation, shown as such.
    again = baf("run", "greeting_agent.py", cwd=tmp_path, stdin="", columns=80).stdout
    assert again.index("earlier in this session") < again.index("Welcome! Say anything.") < again.index("now ─")


def test_a_table_sits_one_blank_line_from_the_text_around_it(tmp_path: Path) -> None:
    (tmp_path / "table_agent.py").write_text(TABLE_AGENT)
    done = baf("run", "table_agent.py", cwd=tmp_path, stdin="growth?\n", columns=80)
    assert done.returncode == 0, done.stderr
    inside = [line.strip("│").strip() for line in done.stdout.splitlines() if line.startswith("│")]
    start = inside.index("Growth by region:")
    assert inside[start : start + 7] == ["Growth by region:", "", "Region  Growth", "─" * 14, "Asia    +43.4%", "",
                                         "Source: sales."], inside  # fmt: skip
