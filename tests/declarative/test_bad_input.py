"""YAML agent files that must be refused (or contained), each with a clear, located message."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from baf.core.session import runtime_side
from baf.declarative import build_agent, load_agent
from baf.errors import AgentFileError
from baf.testing import RecordingPlatform, ScriptedLLM


def problems(source: str, tmp_path: Path | None = None) -> list[str]:
    """The located problem lines of an agent file that must not load."""
    text = textwrap.dedent(source).lstrip()
    with pytest.raises(AgentFileError) as caught:
        if tmp_path is None:
            build_agent(text, "agent.yaml")
        else:
            (tmp_path / "agent.yaml").write_text(text)
            load_agent(tmp_path / "agent.yaml")
    lines = str(caught.value).replace(f"{tmp_path}/", "").splitlines()[1:]
    assert len(lines) == len(caught.value.problems)
    return [line.strip() for line in lines]


def test_unknown_keys_name_the_key_its_place_and_what_is_accepted() -> None:
    found = problems("""
        name: bot
        statse: []
        states:
          - name: start
            initial: true
            replyy: hi
    """)
    assert found == [
        "agent.yaml:2:1: statse: unknown key 'statse'; expected one of: name, log, properties, llms, tools, "
        "workspaces, skills, mcp_servers, platforms, intents, intent_classifier, states",
        "agent.yaml:6:5: states[0].replyy: unknown key 'replyy'; expected one of: name, initial, global, body, "
        "reasoning, set, action, with, reply, fallback, transitions",
    ]


def test_a_wrong_type_says_what_was_expected_and_found() -> None:
    found = problems("""
        name: bot
        states:
          - name: start
            initial: "yes please"
            reasoning:
              max_steps: ten
    """)
    assert found == [
        "agent.yaml:4:14: states[0].initial: Input should be a valid boolean (found 'yes please')",
        "agent.yaml:6:18: states[0].reasoning.max_steps: Input should be a valid integer (found 'ten')",
    ]


def test_a_transition_to_a_missing_state() -> None:
    found = problems("""
        name: bot
        states:
          - name: start
            initial: true
            transitions:
              - on: text
                to: nowhere
    """)
    assert found == ["agent.yaml:7:13: states[0].transitions[0].to: no state named 'nowhere' (states: start)"]


def test_two_initial_states() -> None:
    found = problems("""
        name: bot
        states:
          - name: a
            initial: true
          - name: b
            initial: true
    """)
    assert len(found) == 1
    assert found[0].startswith("agent.yaml:6:14: states[1].initial: agent 'bot' already has an initial state ('a')")


def test_a_tool_or_body_path_that_does_not_import(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("def present(x: int) -> int:\n    return x\n")
    found = problems("""
        name: bot
        tools:
          - helpers:present
          - helpers:absent
          - no_such_module:tool
        states:
          - name: start
            initial: true
            body: helpers:missing_body
    """, tmp_path)  # fmt: skip
    assert found == [
        "agent.yaml:4:5: tools[1]: cannot import tool 'helpers:absent': AttributeError: module 'helpers' has no "
        "attribute 'absent'",
        "agent.yaml:5:5: tools[2]: cannot import tool 'no_such_module:tool': ModuleNotFoundError: No module named "
        "'no_such_module'",
    ]


async def test_a_template_reading_a_missing_variable_is_recorded_with_its_place() -> None:
    agent = build_agent(textwrap.dedent("""\
        name: bot
        log: memory://
        states:
          - name: start
            initial: true
            transitions:
              - {on: text, to: greet}
          - name: greet
            reply: "Hello {{ session.name }}"
    """), "agent.yaml")  # fmt: skip
    platform = RecordingPlatform()
    agent.add_platform(platform)
    async with agent:
        await agent.receive_message("u", "hi", platform)
        [error] = [r.data for r in await agent.log.read("u") if r.kind == "error"]
    assert error["type"] == "TemplateError"
    assert error["message"] == (
        "template at agent.yaml:9:12 (states[1].reply) failed: 'dict object' has no attribute 'name'"
    )
    assert platform.replies["u"] == [] and platform.errors["u"]  # the user is told something went wrong


async def test_a_template_escaping_the_sandbox_is_refused() -> None:
    found = problems("""
        name: bot
        states:
          - name: start
            initial: true
            reply: "{{ ''.__class__ }}"
    """)
    assert found == [
        "agent.yaml:5:12: states[0].reply: the template reads '__class__': names starting with '_' are "
        "refused (sandbox)"
    ]
    # A filter reaching for the same attribute gets past the load check; the sandbox refuses it at render.
    agent = build_agent('name: bot\nlog: "memory://"\nstates:\n  - name: s\n    initial: true\n'
                        "    reply: \"{{ ''|attr('__class__') }}\"\n", "agent.yaml")  # fmt: skip
    async with agent:
        session = await agent.get_or_create_session("u")
        await agent.wait_idle("u")
        [error] = [r.data for r in await agent.log.read("u") if r.kind == "error"]
    assert "access to attribute '__class__' of 'str' object is unsafe" in error["message"]
    assert runtime_side(session).projection.history == []


def test_a_yaml_bomb_stops_at_the_limit_without_expanding() -> None:
    laughs = "\n".join(
        f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]"
        for name, previous in zip("bcdefghi", "abcdefgh", strict=True)
    )
    found = problems(f'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n{laughs}\n')
    assert len(found) == 1 and "expands to more than 100000 values" in found[0]


def test_an_intent_with_no_training_sentences() -> None:
    found = problems("""
        name: bot
        intents:
          greeting:
            description: hello
        states:
          - name: start
            initial: true
    """)
    assert found == [
        "agent.yaml:3:3: intents.greeting: intent 'greeting' has no training sentences (or an empty one): a "
        "classifier cannot recognise it; give it at least one example of what a user would write"
    ]


def test_two_global_states_claiming_one_intent() -> None:
    found = problems("""
        name: bot
        intents:
          help: {training_sentences: [help]}
        states:
          - name: start
            initial: true
          - name: help
            global: help
          - name: help_again
            global: help
    """)
    assert found == [
        "agent.yaml:10:13: states[2].global: intent 'help' already leads to global state 'help'; 'help_again' "
        "cannot claim it too (one intent reaches one global state)"
    ]


async def test_a_classifier_model_answering_an_unknown_intent_or_malformed_json_is_no_match_recorded() -> None:
    llm = ScriptedLLM(['{"intent": "refund", "score": 0.99}', "sure, that is a greeting"])
    agent = build_agent(textwrap.dedent("""
        name: bot
        log: memory://
        llms:
          nlu: {model: any}
        intent_classifier: {type: llm}
        intents:
          greeting: {training_sentences: [hi, hello]}
        states:
          - name: start
            initial: true
            transitions:
              - {on: {intent: greeting}, to: start}
              - {on: no_intent, to: lost}
          - name: lost
            reply: "Sorry?"
            transitions:
              - {on: auto, to: start}
    """), "agent.yaml", llms={"nlu": llm})  # fmt: skip
    platform = RecordingPlatform()
    agent.add_platform(platform)
    async with agent:
        await agent.receive_message("u", "give me my money back", platform)
        await agent.receive_message("u", "hello", platform)
        predictions = [r.data for r in await agent.log.read("u") if r.kind == "intent_predicted"]
    assert platform.replies["u"] == ["Sorry?", "Sorry?"]
    assert [p["intent"] for p in predictions] == [None, None]
    assert "'refund', which is not one of ['greeting']" in predictions[0]["error"]
    assert "not the JSON asked for" in predictions[1]["error"] and predictions[1]["raw"] == "sure, that is a greeting"


def test_yaml_syntax_errors_and_other_problems_are_located() -> None:
    [syntax] = problems("name: bot\nstates: [\n")
    assert syntax.startswith("agent.yaml:3:1: not valid YAML: expected the node content")
    assert problems("name: a\nname: b\nstates: []\n") == ["agent.yaml:2:1: key 'name' is written twice in this mapping"]
    assert problems("- just\n- a list\n") == [
        "agent.yaml:1:1: the file must hold a mapping (name, states, ...), found list"
    ]
    found = problems("""
        name: bot
        states:
          - name: start
            initial: true
            reply: "{{ unclosed"
            transitions:
              - {on: {condition: "session.x >"}, to: start}
              - {on: {intent: nope}, to: start}
              - {on: textt, to: start}
    """)
    assert found[0].startswith("agent.yaml:9:14: states[0].transitions[2].on: Input should be 'text', 'json'")
    assert found[1:] == []  # the models are checked first: one phase's problems at a time
    found = problems("""
        name: bot
        states:
          - name: start
            initial: true
            reply: "{{ unclosed"
            transitions:
              - {on: {condition: "session.x >"}, to: start}
              - {on: {intent: nope}, to: start}
    """)
    assert found == [
        "agent.yaml:5:12: states[0].reply: not a valid template (line 1 of the template): unexpected end of "
        "template, expected 'end of print statement'.",
        "agent.yaml:7:26: states[0].transitions[0].on.condition: not a valid template (line 1 of the "
        "template): unexpected 'end of print statement'",
        "agent.yaml:8:14: states[0].transitions[1].on: agent 'bot' has no intent named 'nope'",
    ]


def test_action_inputs_are_checked_with_their_place_and_tea_names_get_a_hint() -> None:
    found = problems("""
        name: bot
        llms:
          main: {model: m, offline_script: []}
        states:
          - name: start
            initial: true
            action: reason.self_correct
            with:
              task: "{{ event.text }}"
              critic_prompt: "Review {{ output }}"
              improvement_rounds: 0
    """)
    assert found == [
        "agent.yaml:9:7: states[0].with: 'critic_prompt' is The Edge Agent's; in baf write prompts: "
        "{critique: '... {task} ... {answer} ...'} (baf's prompt slot and fields)",
    ]
    found = problems("""
        name: bot
        llms:
          main: {model: m, offline_script: []}
        states:
          - name: start
            initial: true
            action: reason.react
            with:
              goal: "{{ event.text }}"
              model: other
              max_stepz: 3
    """)
    assert found == [
        "agent.yaml:11:7: states[0].with.max_stepz: unknown key 'max_stepz'; expected one of: model, max_steps, "
        "step_timeout, prompts, native_structured, stream_steps, goal, tools, termination"
    ]
    found = problems("""
        name: bot
        llms:
          main: {model: m, offline_script: []}
        states:
          - name: start
            initial: true
            action: reason.react
            with:
              goal: "{{ event.text }}"
              model: other
    """)
    assert found == ["agent.yaml:10:14: states[0].with.model: no model named 'other' under 'llms' (models: main)"]


def test_a_missing_api_key_without_an_offline_script_is_located(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    found = problems("""
        name: bot
        llms:
          main: {model: gpt-4o-mini}
        states:
          - {name: start, initial: true}
    """)
    assert found == [
        "agent.yaml:3:3: llms.main: model 'main' needs an API key: set OPENAI_API_KEY (or give base_url for a "
        "local server, or offline_script to run offline)"
    ]
