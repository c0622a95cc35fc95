"""Two baf agents talking over A2A, offline: a travel planner asks a weather agent.

    pip install -e ".[a2a]"      # in a clone of baf
    python examples/a2a_agents.py

The weather agent is served with ``use_a2a_platform`` on a free loopback port; the planner gets it as
a tool with ``add_a2a_agent``. Both "models" are small functions (``FunctionLLM``), so the example runs
without an API key; swap in ``LLMOpenAI`` (``baf.llm``) for real ones. At the end both logs are re-run with the
code, the weather agent switched off: the planner's tool result comes from its log.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from baf import Agent
from baf.library.state.reasoning_state_library import reasoning_body
from baf.llm.base import LLMResponse, ToolCall
from baf.replay.rerun import rerun
from baf.testing import FunctionLLM

FORECASTS = {"lisbon": "sunny, 24 °C", "oslo": "snow, -3 °C", "zurich": "rain, 9 °C"}


def weather_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
    """Plays the weather agent's model: finds a city it knows in the question."""
    question = next(m["content"] for m in reversed(messages) if m["role"] == "user").lower()
    city = next((c for c in FORECASTS if c in question), None)
    answer = f"{city.title()}: {FORECASTS[city]}." if city else "I only know Lisbon, Oslo and Zurich."
    return LLMResponse(answer, [])


def planner_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
    """Plays the planner's model: asks the weather agent, then plans around its answer."""
    last = messages[-1]
    if last["role"] == "tool":
        advice = "pack an umbrella" if "rain" in last["content"] else "pack for the weather"
        return LLMResponse(f"The weather agent says {last['content']} So: {advice}.", [])
    question = f"What is the weather in {last['content'].split()[-1]}"
    return LLMResponse(None, [ToolCall(f"ask-{len(messages)}", "weather", json.dumps({"message": question}))])


def weather_agent(log: str) -> Agent:
    """Answers weather questions; served over A2A."""
    agent = Agent("weather", log=log)
    agent.new_skill("forecast", "Give the forecast for a city.", "Forecasts for Lisbon, Oslo and Zurich")
    state = agent.new_state("forecast", initial=True)
    state.set_body(reasoning_body(FunctionLLM(weather_model), enable_task_planning=False))
    state.when_event().go_to(state)
    return agent


def planner_agent(log: str, weather_url: str) -> Agent:
    """Plans trips; asks the weather agent through a tool."""
    agent = Agent("planner", log=log)
    agent.add_a2a_agent(weather_url, name="weather", description="Forecasts for a city", timeout=30)
    state = agent.new_state("plan", initial=True)
    state.set_body(reasoning_body(FunctionLLM(planner_model), enable_task_planning=False))
    state.when_event().go_to(state)
    return agent


async def main(folder: Path) -> list[str]:
    """Run the conversation, print it, re-run both logs; returns the planner's replies."""
    planner_log, weather_log = f"sqlite:///{folder / 'planner.db'}", f"sqlite:///{folder / 'weather.db'}"
    weather = weather_agent(weather_log)
    platform = weather.use_a2a_platform("127.0.0.1", 0, description="Weather forecasts")
    async with weather:
        print(f"weather agent serving A2A at {platform.url}")
        async with planner_agent(planner_log, platform.url) as planner:
            for message in ("a weekend in Zurich", "then a week in Lisbon"):
                print(f"user    > {message}")
                session = await planner.receive_message("trip", message)
                print(f"planner > {session.chat_history(1)[0].text}")
            replies = [r.data["text"] for r in await planner.log.read("trip") if r.kind == "reply"]
        (weather_session,) = await weather.log.sessions()
    for log, session_id, agent in (
        (planner_log, "trip", planner_agent("memory://", platform.url)),
        (weather_log, weather_session, weather_agent("memory://")),
    ):
        report = await rerun(log, session_id, agent)
        print(f"re-run of {agent.name}/{session_id}: {'identical' if report.identical else report}")
    return replies


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main(Path(folder)))
