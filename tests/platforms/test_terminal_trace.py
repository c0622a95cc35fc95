"""The reasoning trace in the terminal: what the model writes between tool calls (the text it sends with a
call, an answer it was sent back on) is Markdown and shows rendered, like a reply, under its step's line;
the final answer shows once, in the reply's panel. The screen is read from a terminal emulator (pyte); a
real local OpenAI-compatible server serves the model, streaming or not, and both leave the same screen."""

from __future__ import annotations

import json
from typing import Any

from llm.fake_openai_server import FakeOpenAIServer, Reply, StreamReply, completion, serve, streamed, tool_call_fragment
from rich.console import Console

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm import LLMOpenAI

from .test_terminal_streaming import Screen, answer_panel, type_one_line

# The model's turns: (its text, the tool call it makes, if any). The second answers while its task is still
# open, so the loop sends it back (a step of the trace that is not the answer); the last is the answer.
TURNS: list[tuple[str, tuple[str, dict[str, Any]] | None]] = [
    ("Let me **plan** this with `add_tasks` first.", ("add_tasks", {"descriptions": ["Add the numbers"]})),
    ("The total is **42**:\n\n- 40 from *sales*\n- 2 from `returns`", None),
    ("Checked: both **add up**.", ("complete_task", {"task_id": 1, "result": "42"})),
    ("The total is **42** (from `sales`).", None),
]


def replies(stream: bool) -> list[Reply | StreamReply]:
    out: list[Reply | StreamReply] = []
    for n, (text, call) in enumerate(TURNS):
        name, arguments = call if call is not None else ("", {})
        if stream:
            pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
            fragments = [tool_call_fragment(0, f"c{n}", name, json.dumps(arguments))] if call else None
            out.append(streamed(*pieces, tool_calls=fragments, interval=0.01))
        else:
            function = {"name": name, "arguments": json.dumps(arguments)}
            out.append(completion(text, [{"id": f"c{n}", "type": "function", "function": function}] if call else None))
    return out


async def chat(server: FakeOpenAIServer, screen: Screen, *, stream: bool) -> None:
    """One question typed into a terminal chat with a planning reasoning agent; then EOF."""
    server.script(*replies(stream))
    llm = LLMOpenAI("fake-model", base_url=server.base_url, stream=stream, timeout=5.0)
    agent = Agent("helper", log="memory://")
    state = new_reasoning_state(agent, llm)
    state.when_event().go_to(state)
    console = Console(file=screen, width=80, height=24, force_terminal=True, color_system=None, legacy_windows=False)
    await type_one_line(agent, llm, "total?", console)


async def test_the_models_text_between_tool_calls_shows_rendered_under_its_step_and_the_answer_once() -> None:
    with serve() as server:
        whole = Screen()
        await chat(server, whole, stream=False)
        written = Screen()
        await chat(server, written, stream=True)
    lines = whole.lines
    text = whole.text
    assert "**" not in text and "`" not in text and "*sales*" not in text, text  # no raw Markdown anywhere
    # The text sent with a tool call, rendered under the call's step line, indented.
    calling = lines.index("  · [0] llm_tool_calls: calling add_tasks")
    assert lines[calling + 1] == "      Let me plan this with add_tasks first."
    # The answer that was sent back (a task was still open): rendered, its list as a list, under its step.
    sent_back = lines.index("  · [1] llm_text:")
    assert lines[sent_back + 1 : sent_back + 5] == [
        "      The total is 42:",
        "",
        "       • 40 from sales",
        "       • 2 from returns",
    ]
    assert "  · [1] pushback: 1 task(s) still open" in lines
    assert lines[lines.index("  · [2] llm_tool_calls: calling complete_task") + 1] == "      Checked: both add up."
    # The answer: marked in the trace, shown whole once, in the reply's panel below.
    assert "  · [3] llm_text: the answer, below" in lines
    assert text.count("The total is 42 (from sales).") == 1
    assert "The total is 42 (from sales)." in "\n".join(answer_panel(whole))
    # Streamed, the screen ends up the same: the pieces were replaced by what the steps and reply show.
    assert written.lines == lines
    assert "writing…" in written.raw
