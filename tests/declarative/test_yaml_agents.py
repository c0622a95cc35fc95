"""YAML agents: the examples offline and over HTTP, every reason.* action, triggers, the CLI, schema and docs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from baf_test_helpers import baf
from llm.fake_openai_server import completion, serve, streamed

from baf import ReceiveFileEvent, ReceiveJSONEvent, load_agent
from baf.core.agent import Agent
from baf.core.session import runtime_side
from baf.declarative import agent_schema, build_agent
from baf.declarative.reference import render_reference
from baf.errors import AgentFileError
from baf.replay.rerun import assert_replays
from baf.testing import RecordingPlatform, ScriptedLLM

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "yaml"
HELP_DESK_CHAT = ["hello", "when are you open?", "can you deliver to Porto?", "help", "what is the meaning of life"]
HELP_DESK_REPLIES = [
    "Hello! Ask me about our opening hours or deliveries.",
    "We are open Monday to Saturday, 9:00 to 18:00.",
    "Yes, we deliver to Porto within two working days.",
    "I answer questions about opening hours and deliveries. Try: when are you open?",
    "Sorry, I did not get that. Say 'help' to see what I can do.",
]


def js(**fields: Any) -> str:
    return json.dumps(fields)


async def chat(agent: Agent, *messages: str) -> tuple[RecordingPlatform, Any]:
    platform = RecordingPlatform()
    agent.add_platform(platform)
    async with agent:
        session = await agent.get_or_create_session("u", platform)
        await agent.wait_idle("u")
        for message in messages:
            session = await agent.receive_message("u", message, platform)
    return platform, session


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


async def test_the_intent_bot_example_runs_offline_and_reruns_from_its_log(offline: None, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'desk.db'}"
    platform, session = await chat(load_agent(EXAMPLES / "help_desk.yaml", log=url), *HELP_DESK_CHAT)
    assert platform.replies["u"] == HELP_DESK_REPLIES and not platform.errors["u"]
    assert runtime_side(session).projection.current_state == "idle"
    # The re-run asks no classifier: its offline script is not played again (it would have run out).
    report = await assert_replays(url, "u", load_agent(EXAMPLES / "help_desk.yaml", log="memory://"))
    assert report.records_compared > 30


async def test_the_intent_bot_example_with_a_key_classifies_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve() as server:
        server.script(completion(js(intent="help", score=0.98, parameters={})),
                      completion(js(intent="delivery", score=0.9, parameters={"city": "Faro"})))  # fmt: skip
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-123456")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        agent = load_agent(EXAMPLES / "help_desk.yaml", log="memory://")
        platform, _ = await chat(agent, "what can you do?", "deliveries to Faro?")
        requests = list(server.requests)
    assert platform.replies["u"] == [HELP_DESK_REPLIES[3], "Yes, we deliver to Faro within two working days."]
    assert requests[0].body["model"] == "gpt-4o-mini" and requests[0].body["temperature"] == 0
    assert "the user asks what the bot can do" in requests[0].body["messages"][-1]["content"]


async def test_the_reasoning_graph_example_runs_offline_and_sets_the_documented_variables(offline: None) -> None:
    platform, session = await chat(load_agent(EXAMPLES / "math_tutor.yaml", log="memory://"), "What is 15% of 80?")
    assert platform.replies["u"] == [
        "Send me a math problem: I will think it through, then check my answer.",
        "My thinking:\n15% as a decimal is 15/100 = 0.15.\n0.15 x 80 = 12.\nFirst answer: 12. "
        "Checked: 15% of 80 is 12, since 0.15 x 80 = 12.",
    ]
    variables = runtime_side(session).projection.variables
    assert variables["math_problem"] == "What is 15% of 80?" and variables["first_answer"] == "12"
    assert variables["reasoning_answer"] == "15% of 80 is 12, since 0.15 x 80 = 12."
    [round_one] = variables["improvement_history"]
    assert round_one["round"] == 1 and round_one["critique"]["satisfactory"] is True
    assert [step["kind"] for step in variables["reasoning_trace"]] == ["thought", "reflection", "llm_text"]
    # The steps streamed to the platform: both patterns' runs, started and finished.
    kinds = [step.kind for step in platform.steps["u"]]
    assert kinds.count("reasoning_started") == 2 and kinds.count("reasoning_finished") == 2


async def test_the_reasoning_graph_example_runs_on_a_real_model_when_a_key_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with serve() as server:
        server.script(
            completion(js(content="2 + 2 = 4", confidence=0.99, is_final=True, final_answer="4")),
            completion("4"), completion(js(satisfactory=True, issues=[], suggestions=[], score=1.0)),
        )  # fmt: skip
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-123456")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        platform, _ = await chat(load_agent(EXAMPLES / "math_tutor.yaml", log="memory://"), "2 + 2?")
        assert len(server.requests) == 3
    assert platform.replies["u"][-1] == "My thinking:\n2 + 2 = 4\nFirst answer: 4. Checked: 4"


def graph(action: str, inputs: str, extra: str = "") -> str:
    """An agent whose one action runs on each message, then replies with the answer."""
    with_lines = "".join(f"      {line}\n" for line in inputs.splitlines())
    return (
        "name: actions\nlog: memory://\nllms:\n  main: {model: m}\n" + extra + "\n"
        "states:\n"
        "  - name: start\n    initial: true\n    transitions:\n      - {on: text, to: run}\n"
        "  - name: run\n    set: {question: '{{ event.text }}'}\n"
        f"    action: {action}\n    with:\n{with_lines}"
        "    reply: '{{ state.reasoning_answer }}'\n    transitions:\n      - {on: text, to: run}\n"
    )


async def test_reason_react_uses_the_tools_named_and_sets_react_steps(tmp_path: Path) -> None:
    (tmp_path / "shop_tools.py").write_text(
        'def stock(item: str) -> str:\n    """How many of ``item`` are in stock."""\n    return f"7 {item}"\n'
    )
    source = graph("reason.react", 'goal: "{{ state.question }}"\ntools: [stock]\nmax_steps: 4\n',
                   extra="tools:\n  - shop_tools:stock")  # fmt: skip
    (tmp_path / "agent.yaml").write_text(source)
    llm = ScriptedLLM([
        ScriptedLLM.tool_call("stock", {"item": "apples"}),
        ScriptedLLM.tool_call("final_answer", {"answer": "There are 7 apples."}),
    ])  # fmt: skip
    platform, session = await chat(load_agent(tmp_path / "agent.yaml", llms={"main": llm}), "apples?")
    assert platform.replies["u"] == ["There are 7 apples."]
    react_steps = runtime_side(session).projection.variables["react_steps"]
    assert react_steps[0]["action"] == "stock" and react_steps[0]["action_input"] == {"item": "apples"}
    assert react_steps[0]["observation"] == "7 apples"
    assert llm.requests[0].tool_names == ["stock", "final_answer"]


@pytest.mark.parametrize(
    ("action", "inputs", "script", "answer", "variable"),
    [
        ("reason.cot", 'problem: "{{ state.question }}"\nthinking_format: pros_cons',
         [js(content="pro: cheap; con: slow", is_final=True, final_answer="take the bus")], "take the bus",
         ("reasoning_thinking", "pro: cheap; con: slow")),
        ("reason.self_correct", 'task: "{{ state.question }}"\nimprovement_rounds: 2',
         ["draft", js(satisfactory=False, issues=["vague"], score=0.2), "better", js(satisfactory=True, score=0.9)],
         "better", ("improvement_history", 2)),
        ("reason.decompose", 'problem: "{{ state.question }}"\nmax_depth: 1',
         [js(goal="g", phases=[{"name": "p", "tasks": ["t"]}]), "t done", "all done"], "all done", None),
        ("reason.plan_execute", 'goal: "{{ state.question }}"',
         [js(goal="g", steps=[{"id": "a", "description": "do it"}]), js(success=True, output="done it")],
         "done it", None),
        ("reason.tree_of_thoughts", 'problem: "{{ state.question }}"\nbranching_factor: 1\nmax_depth: 1',
         [js(branches=["the one idea"]), js(score=0.99, reasoning="fine")], "the one idea",
         ("reasoning_thinking", "fine")),
    ],
)  # fmt: skip
async def test_each_reason_action_runs_its_pattern_on_the_rendered_input(
    action: str, inputs: str, script: list[str], answer: str, variable: tuple[str, Any] | None
) -> None:
    llm = ScriptedLLM(script)
    agent = build_agent(graph(action, inputs), "agent.yaml", llms={"main": llm})
    platform, session = await chat(agent, "how do I get to town?")
    assert platform.replies["u"] == [answer]
    assert "how do I get to town?" in llm.requests[0].messages[0]["content"]
    variables = runtime_side(session).projection.variables
    assert variables["reasoning_answer"] == answer and variables["reasoning_trace"]
    if variable is not None:
        name, expected = variable
        assert (len(variables[name]) if isinstance(expected, int) else variables[name]) == expected


async def test_triggers_json_file_condition_and_when(offline: None) -> None:
    agent = build_agent(textwrap.dedent("""\
        name: triggers
        log: memory://
        states:
          - name: start
            initial: true
            transitions:
              - {on: json, to: got_json, when: "event.payload.kind == 'order'"}
              - {on: {file: [".csv"]}, to: got_csv}
              - {on: text, to: count}
          - name: got_json
            reply: "order {{ event.payload.id }}"
            transitions: [{on: auto, to: start}]
          - name: got_csv
            reply: "csv {{ event.text }}"
            transitions: [{on: auto, to: start}]
          - name: count
            set: {seen: "{{ (session.seen | default('') ) ~ 'x' }}"}
            transitions:
              - {on: {condition: "session.seen | length >= 2"}, to: enough}
              - {on: text, to: count}
          - name: enough
            reply: "enough after {{ session.seen }}"
    """), "agent.yaml")  # fmt: skip
    platform = RecordingPlatform()
    agent.add_platform(platform)
    async with agent:
        await (await agent.receive_event(ReceiveJSONEvent("u", payload={"kind": "order", "id": 7}), platform))
        await (await agent.receive_event(ReceiveJSONEvent("u", payload={"kind": "other"}), platform))
        await (await agent.receive_event(ReceiveFileEvent.from_bytes("u", "a.csv", b"1,2"), platform))
        await agent.receive_message("u", "one", platform)
        await agent.receive_message("u", "two", platform)
    assert platform.replies["u"] == ["order 7", "Sorry, I didn't understand that.", "csv [file a.csv]",
                                     "enough after xx"]  # fmt: skip


def test_run_a_yaml_agent_from_the_command_line(tmp_path: Path) -> None:
    chat_input = "\n".join(HELP_DESK_CHAT) + "\n"
    result = baf("run", str(EXAMPLES / "help_desk.yaml"), cwd=tmp_path, stdin=chat_input)
    assert result.returncode == 0, result.stderr
    for reply in HELP_DESK_REPLIES:
        assert reply in result.stdout
    assert (tmp_path / "help_desk.db").exists()
    # The recorded run re-runs from the same YAML file, as a Python agent file does.
    rerun = baf("replay", "help_desk.db", "terminal", "--rerun", str(EXAMPLES / "help_desk.yaml"), cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert "identical" in rerun.stdout
    (tmp_path / "broken.yaml").write_text("name: x\nstates:\n  - name: a\n    initial: maybe\n")
    broken = baf("run", "broken.yaml", cwd=tmp_path)
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert "broken.yaml:4:14: states[0].initial: Input should be a valid boolean (found 'maybe')" in broken.stderr


def test_schema_command_prints_the_models_schema(tmp_path: Path) -> None:
    result = baf("schema", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema == agent_schema()
    state = schema["$defs"]["StateSpec"]
    assert {"global", "with", "action", "reply"} <= set(state["properties"])
    assert state["additionalProperties"] is False


def test_the_committed_reference_page_is_what_the_models_generate() -> None:
    committed = (REPO / "docs" / "yaml_reference.md").read_text(encoding="utf-8")
    assert committed == render_reference(), "regenerate: python -m baf.declarative.reference > docs/yaml_reference.md"


async def test_an_mcp_server_of_the_file_offers_its_tools_to_the_reasoning_state(tmp_path: Path) -> None:
    server = REPO / "examples" / "mcp" / "calculator_server.py"
    (tmp_path / "agent.yaml").write_text(textwrap.dedent(f"""\
        name: calc
        log: memory://
        llms:
          main: {{model: m}}
        mcp_servers:
          calc:
            command: ["{sys.executable}", "{server}"]
            tools: [multiply]
        states:
          - name: chat
            initial: true
            reasoning: {{enable_task_planning: false}}
            transitions:
              - {{on: text, to: chat}}
    """))  # fmt: skip
    llm = ScriptedLLM([ScriptedLLM.tool_call("calc__multiply", {"a": 12.5, "b": 8}), "12.5 × 8 = 100."])
    platform, _ = await chat(load_agent(tmp_path / "agent.yaml", llms={"main": llm}), "12.5 times 8?")
    assert platform.replies["u"][-1] == "12.5 × 8 = 100."
    assert llm.requests[0].tool_names == ["calc__multiply"]
    assert "100" in llm.requests[1].messages[-1]["content"]


async def test_a_model_with_stream_true_streams_its_answers(tmp_path: Path) -> None:
    with serve() as server:
        server.script(streamed("Hello ", "from ", "YAML."))
        (tmp_path / "agent.yaml").write_text(textwrap.dedent(f"""\
            name: streamer
            log: memory://
            llms:
              main: {{model: m, base_url: "{server.base_url}", stream: true}}
            states:
              - name: chat
                initial: true
                reasoning: {{enable_task_planning: false}}
                transitions:
                  - {{on: text, to: chat}}
        """))  # fmt: skip
        platform, _ = await chat(load_agent(tmp_path / "agent.yaml"), "hi")
        assert server.requests[0].body["stream"] is True
    assert [text for _, text in platform.deltas["u"]] == ["Hello ", "from ", "YAML."]
    assert platform.replies["u"] == ["Hello from YAML."]


def test_workspaces_skills_platforms_and_properties_map_onto_the_python_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from baf.platforms.terminal import TerminalPlatform
    from baf.platforms.websocket import WebSocketPlatform

    (tmp_path / "files").mkdir()
    skills = tmp_path / "skills" / "tone"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text("---\nname: tone\ndescription: how to speak\n---\nBe brief.\n")
    monkeypatch.setenv("DESK_TOKEN", "secret-token-123")
    (tmp_path / "agent.yaml").write_text(textwrap.dedent("""\
        name: desk
        log: memory://
        properties:
          nlp: {intent_threshold: 0.7}
          shop: {city: Porto}
        workspaces:
          - {path: files, name: docs, writable: true}
        skills:
          - {name: style, content: "Answer in English.", description: language}
          - {folder: skills}
        platforms:
          - {type: terminal, session_id: desk}
          - {type: websocket, port: 0, ui: false, auth_token_env: DESK_TOKEN}
        states:
          - {name: start, initial: true}
    """))  # fmt: skip
    agent = load_agent(tmp_path / "agent.yaml")
    assert agent.get_property("nlp.intent_threshold") == 0.7 and agent.get_property("shop.city") == "Porto"
    workspace = agent.workspaces["docs"]
    assert workspace.root == (tmp_path / "files").resolve() and workspace.writable
    assert set(agent.skills) == {"style", "tone"} and agent.skills["tone"].description == "how to speak"
    terminal, websocket = agent.platforms
    assert isinstance(terminal, TerminalPlatform) and terminal.session_id == "desk"
    assert isinstance(websocket, WebSocketPlatform)
    assert agent.redactor.redact_text("token secret-token-123") == "token [REDACTED]"


def test_tools_that_need_approval_are_declared_with_a_flag_or_a_policy(tmp_path: Path) -> None:
    (tmp_path / "bank.py").write_text(
        'def pay(amount: float) -> str:\n    """Pay."""\n    return "paid"\n\n'
        'def refund(amount: float) -> str:\n    """Refund."""\n    return "refunded"\n\n'
        "def over_100(session, call):\n    return 100 < __import__('json').loads(call.arguments)['amount']\n"
    )
    head = "name: bank\nlog: memory://\nstates:\n  - name: start\n    initial: true\n"
    (tmp_path / "agent.yaml").write_text(
        head + "tools:\n  - {function: 'bank:pay', requires_approval: true}\n"
        "  - {function: 'bank:refund', requires_approval: 'bank:over_100'}\n"
    )
    agent = load_agent(tmp_path / "agent.yaml")
    assert agent.tools["pay"].requires_approval is True
    policy = agent.tools["refund"].requires_approval
    assert callable(policy) and policy.__name__ == "over_100"
    (tmp_path / "bad.yaml").write_text(head + "tools:\n  - {function: 'bank:pay', requires_approval: 'always'}\n")
    with pytest.raises(AgentFileError, match="requires_approval is true, false or a policy"):
        load_agent(tmp_path / "bad.yaml")
