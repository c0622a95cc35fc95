"""The terminal with a streaming model (a real local OpenAI-compatible server streaming over HTTP): the answer
is shown rendered while it is written, and the final screen holds the rendered reply once, as a reply that
was not streamed shows, never the raw Markdown pieces. The console writes to a terminal emulator (pyte),
whose screen is what a user would see once the chat is over."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pyte
from llm.fake_openai_server import FakeOpenAIServer, completion, serve, streamed, tool_call_fragment
from rich.console import Console

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm import LLMOpenAI
from baf.platforms.terminal import TerminalPlatform

ANSWER = ("**Oslo** ", "is the ", "capital ", "of *Norway*.\n\n", "- fjords\n", "- `skiing`")


class Screen:
    """A console file that a terminal emulator reads: what was written when, and the screen it leaves.

    The screen is taller than the console says it is (24 lines), so nothing scrolls off: every line
    printed stays to be checked, as in a terminal's scrollback."""

    def __init__(self, width: int = 80) -> None:
        self.screen = pyte.Screen(width, 400)
        self.stream = pyte.Stream(self.screen)
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        self.stream.feed(text.replace("\n", "\r\n"))  # a terminal's output post-processing (onlcr)
        return len(text)

    def flush(self) -> None:
        pass

    @property
    def raw(self) -> str:
        return "".join(text for _, text in self.writes)

    @property
    def lines(self) -> list[str]:
        shown = [line.rstrip() for line in self.screen.display]
        while shown and not shown[-1]:
            shown.pop()
        return shown

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def first(self, fragment: str) -> float:
        return next(at for at, text in self.writes if fragment in text)


async def chat(
    server: FakeOpenAIServer, line: str, output: Any, *, show_steps: bool = False, **llm_options: Any
) -> None:
    """One line typed into a terminal chat with a reasoning agent on a streaming model; then EOF."""
    llm = LLMOpenAI("fake-model", base_url=server.base_url, **{"stream": True, "timeout": 5.0, **llm_options})
    agent = Agent("helper", log="memory://")

    @agent.tool
    def lookup(topic: str) -> str:
        """Look a topic up.

        Args:
            topic: What to look up.
        """
        return f"{topic}: 42"

    state = new_reasoning_state(agent, llm, enable_task_planning=False)
    state.when_event().go_to(state)
    console = Console(file=output, width=80, height=24, force_terminal=output.__class__ is Screen,
                      color_system=None, legacy_windows=False)  # fmt: skip
    await type_one_line(agent, llm, line, console, show_steps=show_steps)


async def type_one_line(agent: Agent, llm: LLMOpenAI, line: str, console: Console, **options: Any) -> None:
    """Run ``agent`` on a terminal platform (``options``) writing to ``console``, whose input is ``line`` and
    then EOF: the chat ends once the line is answered. Closes ``llm``."""
    read_end, write_end = os.pipe()
    os.write(write_end, f"{line}\n".encode())
    os.close(write_end)
    platform = TerminalPlatform(console=console, input_fd=read_end, **options)
    agent.add_platform(platform)
    try:
        async with agent:
            assert platform._reader is not None
            await asyncio.wait_for(platform._reader, 15)
    finally:
        os.close(read_end)
        await llm.close()


def answer_panel(screen: Screen) -> list[str]:
    """The lines of the reply panel (from its top border, titled with the agent's name, to its bottom)."""
    lines = screen.lines
    (top,) = [i for i, line in enumerate(lines) if line.startswith("╭─ helper")]
    bottom = next(i for i in range(top, len(lines)) if lines[i].startswith("╰"))
    return lines[top : bottom + 1]


async def test_the_answer_is_rendered_while_written_and_the_screen_holds_the_rendered_reply_once() -> None:
    with serve() as server:
        server.script(streamed(*ANSWER, interval=0.1))
        streamed_screen = Screen()
        await chat(server, "capital of Norway?", streamed_screen)
        # The same answer, not streamed: what the terminal shows for a whole reply.
        server.script(completion("".join(ANSWER)))
        whole_screen = Screen()
        await chat(server, "capital of Norway?", whole_screen, stream=False)

    # Shown while written: the first words well before the last, already rendered (no ** on the way).
    assert streamed_screen.first("skiing") - streamed_screen.first("Oslo") >= 0.3
    assert "**" not in streamed_screen.raw and "writing…" in streamed_screen.raw
    # The final screen: the rendered reply, once, exactly as the reply that was not streamed shows it.
    text = streamed_screen.text
    assert text.count("Oslo is the capital of Norway.") == 1, text
    assert text.count("skiing") == 1 and "**" not in text and "*Norway*" not in text and "writing…" not in text
    assert answer_panel(streamed_screen) == answer_panel(whole_screen)
    assert "• fjords" in "\n".join(answer_panel(streamed_screen))  # a Markdown list, rendered


async def test_a_pipe_gets_the_rendered_reply_alone_without_the_pieces() -> None:
    class File:
        def __init__(self) -> None:
            self.parts: list[str] = []

        def write(self, text: str) -> int:
            self.parts.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    output = File()
    with serve() as server:
        server.script(streamed(*ANSWER, interval=0.02))
        await chat(server, "capital of Norway?", output)
    text = "".join(output.parts)
    assert "\x1b[" not in text  # no cursor moves in a file
    assert text.count("Oslo is the capital of Norway.") == 1 and "**" not in text and "writing…" not in text


async def test_a_broken_stream_leaves_only_the_apology_on_the_screen() -> None:
    with serve() as server:
        server.script(streamed("I *was* ", "saying", interval=0.1, drop_after=3))  # no retry left
        screen = Screen()
        await chat(server, "hello", screen, max_retries=0)
    assert "I was" in screen.raw  # it was shown while written ...
    text = screen.text
    assert "saying" not in text and "I was" not in text, text  # ... and its reply took its place
    assert "could not get an answer from the language model" in text


async def test_a_retried_stream_and_a_turn_before_a_tool_call_leave_only_the_final_answer() -> None:
    lookup = [tool_call_fragment(0, "c1", "lookup", '{"topic": "sales"}')]
    with serve() as server:
        server.script(
            streamed("Let me *look* ", "that up.", tool_calls=lookup, interval=0.05),
            streamed("The total ", "is ", interval=0.05, drop_after=3),  # breaks: retried from the start
            streamed("The total ", "is **42**.", interval=0.05),
        )
        screen = Screen()
        await chat(server, "total?", screen, show_steps=True)
    assert "look" in screen.raw and "that up" in screen.raw
    # The trace shows the text written with the tool call rendered too, and marks where the answer came.
    text = screen.text
    assert text.count("The total is 42.") == 1 and "**" not in text and "The total is\n" not in text, text
    assert "Let me" not in "\n".join(answer_panel(screen))
    assert "      Let me look that up." in screen.lines
    # The steps printed while the answer was written stay, above it.
    steps = [i for i, line in enumerate(screen.lines) if "tool_result" in line]
    assert steps and steps[-1] < screen.lines.index(answer_panel(screen)[0])


async def test_an_answer_taller_than_the_terminal_shows_its_newest_lines_then_is_printed_whole_once() -> None:
    items = [f"- item **{n}**\n" for n in range(1, 41)]
    with serve() as server:
        server.script(streamed(*items, interval=0.01))
        screen = Screen()
        await chat(server, "list 40 things", screen)
    panel = answer_panel(screen)
    shown = [line for line in screen.lines if "item" in line]
    assert shown == [line for line in panel if "item" in line] and len(shown) == 40  # whole, once, in order
    assert [line.split("item ")[1].split()[0] for line in shown] == [str(n) for n in range(1, 41)]
    assert "**" not in screen.text
