"""Agent configuration: properties, tools, skills, workspaces, log URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from baf import Agent
from baf.errors import ConfigurationError
from baf.log import MemoryLog
from baf.reasoning.tool import Tool


def test_properties_from_yaml_become_dotted_names(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("llm:\n  openai:\n    api_key: sk-test\n    timeout: 30\nname: bot\n")
    agent = Agent("a", log="memory://")
    agent.load_properties(config)
    assert agent.get_property("llm.openai.api_key") == "sk-test"
    assert agent.get_property("llm.openai.timeout") == 30
    assert agent.get_property("missing", "default") == "default"
    agent.set_property("name", "other")
    assert agent.properties["name"] == "other"
    with pytest.raises(TypeError):
        agent.properties["x"] = 1  # type: ignore[index]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigurationError, match="mapping at the top level"):
        agent.load_properties(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [unclosed\n")
    with pytest.raises(ConfigurationError, match="cannot parse properties file"):
        agent.load_properties(broken)


def test_tool_registration_forms(tmp_path: Path) -> None:
    agent = Agent("a", log="memory://")

    @agent.tool
    def bare(x: int) -> int:
        """Double x."""
        return 2 * x

    @agent.tool(name="renamed", timeout=5)
    def with_args(text: str) -> str:
        """Echo."""
        return text

    agent.new_tool(lambda q: q, name="lam", description="identity")
    agent.add_tool(Tool(len, name="length", description="length of a list"))
    tools_file = tmp_path / "more_tools.py"
    tools_file.write_text(
        "from os import path\n\n"
        "def weather(city: str) -> str:\n    '''The weather in a city.'''\n    return f'sunny in {city}'\n\n"
        "def _private() -> None:\n    pass\n"
    )
    loaded = agent.load_tools(tools_file)
    assert [t.name for t in loaded] == ["weather"]  # imported names and private functions are not tools
    assert set(agent.tools) == {"bare", "renamed", "lam", "length", "weather"}
    assert isinstance(bare, Tool) and agent.tools["renamed"].timeout == 5
    assert agent.tools["bare"].schema["function"]["description"] == "Double x."
    with pytest.raises(ConfigurationError, match="already has a tool named 'bare'"):
        agent.new_tool(lambda x: x, name="bare")
    with pytest.raises(TypeError):
        agent.tools["x"] = bare  # type: ignore[index]


def test_skills_and_workspaces(tmp_path: Path) -> None:
    agent = Agent("a", log="memory://")
    agent.new_skill("tone", "Be brief.", description="style")
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "sql.md").write_text("---\nname: sql\ndescription: SQL help\n---\nUse CTEs.\n")
    agent.load_skills(skills)
    assert set(agent.skills) == {"tone", "sql"}
    assert "Use CTEs." in agent.skills["sql"].content
    with pytest.raises(ConfigurationError, match="already has a skill named 'tone'"):
        agent.new_skill("tone", "again")
    docs = tmp_path / "docs"
    docs.mkdir()
    workspace = agent.new_workspace(docs, name="docs")
    assert agent.workspaces["docs"] is workspace and workspace.writable is False
    with pytest.raises(ConfigurationError, match="already has a workspace named 'docs'"):
        agent.new_workspace(docs, name="docs")


def test_log_accepts_urls_and_instances(tmp_path: Path) -> None:
    store = MemoryLog()
    assert Agent("a", log=store).log is store
    assert type(Agent("a", log="memory://").log).__name__ == "MemoryLog"
    assert type(Agent("a", log=f"sqlite:///{tmp_path / 'x.db'}").log).__name__ == "SQLiteLog"
    assert type(Agent("a", log="postgresql://baf@db.example/agents").log).__name__ == "PostgresLog"
    with pytest.raises(ValueError, match="sqlite"):
        Agent("a", log="mysql://nope")


async def test_use_websocket_platform_serves_the_ui() -> None:
    import asyncio
    import urllib.request

    from baf.platforms.websocket import WebSocketPlatform

    agent = Agent("a", log="memory://")
    agent.new_state("s", initial=True)
    platform = agent.use_websocket_platform(port=0)
    assert isinstance(platform, WebSocketPlatform) and agent.platforms == (platform,)
    async with agent:
        page = await asyncio.to_thread(lambda: urllib.request.urlopen(platform.url, timeout=5).read().decode())
    assert "<html" in page.lower()


async def test_secrets_never_reach_the_log(tmp_path: Path) -> None:
    from baf.library.state.reasoning_state_library import new_reasoning_state
    from baf.testing import FunctionLLM, RecordingPlatform

    key = "sk-test-canary-0123456789"
    marked = "my-private-canary-42"

    from baf.llm import LLMOpenAI

    LLMOpenAI("gpt-test", api_key=key)  # constructing a client registers its key for redaction
    llm = FunctionLLM(lambda messages, tools, **_: f"the key is {key} and the secret is {marked}")
    db = tmp_path / "s.db"
    agent = Agent("a", log=f"sqlite:///{db}")
    state = new_reasoning_state(agent, llm)
    state.when_event().go_to(state)
    agent.mark_secret(marked)
    with pytest.raises(ValueError, match="at least 6 characters"):
        agent.mark_secret("abc")
    platform = RecordingPlatform()
    async with agent:
        session = await agent.receive_message("s", f"remember {marked}", platform)
        session.set("note", {"nested": [marked]})
        records = await agent.log.read("s")
    # The user sees what the log keeps: the model's words with both values redacted ...
    assert platform.replies["s"] == ["the key is [REDACTED] and the secret is [REDACTED]"]
    # ... and neither value reaches the log, on disk or as read back.
    files = {path.name: path.read_bytes() for path in tmp_path.iterdir()}  # noqa: ASYNC240 - a test, after stop
    for name, content in files.items():
        assert key.encode() not in content and marked.encode() not in content, name
    assert any("[REDACTED]" in str(r.data) for r in records if r.kind == "reply")
    assert session["note"] == {"nested": ["[REDACTED]"]}


async def test_a_secret_cut_by_a_summary_does_not_leak_half(tmp_path: Path) -> None:
    from baf.library.state.reasoning_state_library import new_reasoning_state
    from baf.testing import FunctionLLM, RecordingPlatform

    secret = "canary-secret-ABCDEFGHIJ"
    text = "x" * 72 + secret + " and more words after it to pass the summary limits"
    llm = FunctionLLM(lambda messages, tools, **_: text)
    db = tmp_path / "s.db"
    agent = Agent("a", log=f"sqlite:///{db}")
    state = new_reasoning_state(agent, llm)
    state.when_event().go_to(state)
    agent.mark_secret(secret)
    async with agent:
        await agent.receive_message("s", text, RecordingPlatform())
        records = await agent.log.read("s")
    dumped = str([r.data for r in records])
    for cut in range(6, len(secret)):
        assert secret[:cut] not in dumped, secret[:cut]
