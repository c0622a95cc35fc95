"""The terminal with a streaming model: pieces printed as they arrive, the reply then not printed twice."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from llm.fake_openai_server import FakeOpenAIServer, serve, streamed
from rich.console import Console

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm import LLMOpenAI
from baf.platforms.terminal import TerminalPlatform


class TimedOutput:
    """A console file that remembers when each piece of text was written."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return len(text)

    def flush(self) -> None:
        pass

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.writes)

    def first(self, fragment: str) -> float:
        return next(at for at, text in self.writes if fragment in text)


async def chat(server: FakeOpenAIServer, line: str, **llm_options: Any) -> TimedOutput:
    """One line typed into a terminal chat with a reasoning agent on a streaming model; then EOF."""
    llm = LLMOpenAI("fake-model", base_url=server.base_url, stream=True, timeout=5.0, **llm_options)
    agent = Agent("helper", log="memory://")
    state = new_reasoning_state(agent, llm, enable_task_planning=False)
    state.when_event().go_to(state)
    output = TimedOutput()
    read_end, write_end = os.pipe()
    os.write(write_end, f"{line}\n".encode())
    os.close(write_end)  # EOF after the line: the chat ends once it is answered
    platform = TerminalPlatform(console=Console(file=output, width=100, color_system=None), input_fd=read_end,
                                show_steps=False)  # fmt: skip
    agent.add_platform(platform)
    try:
        async with agent:
            assert platform._reader is not None
            await asyncio.wait_for(platform._reader, 15)
    finally:
        os.close(read_end)
        await llm.close()
    return output


async def test_the_answer_is_printed_as_it_is_written_and_only_once() -> None:
    with serve() as server:
        server.script(streamed("Oslo ", "is ", "the ", "capital ", "of Norway.", interval=0.1))
        output = await chat(server, "capital of Norway?")
    text = output.text
    assert text.count("Oslo") == 1 and text.count("of Norway.") == 1, text  # not printed again as a panel
    assert "helper: Oslo is the capital of Norway." in text
    # Printed piece by piece: the first word well before the last.
    assert output.first("of Norway.") - output.first("Oslo") >= 0.3
    assert "╭" not in text  # no reply panel: the streamed line was the answer


async def test_a_reply_other_than_the_streamed_text_is_still_printed() -> None:
    with serve() as server:
        server.script(streamed("I was ", "saying", drop_after=3))  # the stream breaks, no retry left
        output = await chat(server, "hello", max_retries=0)
    text = output.text
    assert "helper: I was saying" in text
    assert "could not get an answer from the language model" in text  # the reply, in its panel
    assert "╭" in text
