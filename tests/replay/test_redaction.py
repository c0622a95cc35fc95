"""The Redactor: what it replaces, what it leaves alone, and what it refuses."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.log.record import Record
from baf.log.redaction import REDACTED, Redactor, register_secret, registered_secrets
from baf.testing import RecordingPlatform, ScriptedLLM


def test_replaces_secrets_recursively_including_keys() -> None:
    r = Redactor(["s3cr3t-value"])
    data = {"a": "x s3cr3t-value y", "b": [1, {"s3cr3t-value": ("s3cr3t-value", 2)}], "c": None, "d": 5}
    assert r.redact(data) == {"a": f"x {REDACTED} y", "b": [1, {REDACTED: (REDACTED, 2)}], "c": None, "d": 5}
    assert data["a"] == "x s3cr3t-value y"  # the input is not changed


def test_clean_data_is_returned_as_is() -> None:
    data = {"a": ["b", {"c": "d"}]}
    assert Redactor(["s3cr3t-value"]).redact(data) is data
    assert Redactor().redact(data) is data
    record = Record("s", 1, "k", data)
    assert Redactor(["s3cr3t-value"]).redact_record(record) is record


def test_longest_secret_wins() -> None:
    r = Redactor(["abcdef", "abcdefghij"])
    assert r.redact_text("..abcdefghij..abcdef") == f"..{REDACTED}..{REDACTED}"


def test_too_short_secrets_are_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        Redactor().add("abc")
    with pytest.raises(TypeError):
        Redactor().add(12345678)  # type: ignore[arg-type]


def test_from_environment_picks_key_like_variables() -> None:
    env = {"OPENAI_API_KEY": "sk-env-123456", "GITHUB_TOKEN": "ghp-abcdef", "HOME": "/root/home", "X_SECRET": "ab"}
    r = Redactor.from_environment(env)
    assert r.redact_text("sk-env-123456 ghp-abcdef /root/home ab") == f"{REDACTED} {REDACTED} /root/home ab"


def test_process_registry_applies_to_existing_redactors() -> None:
    r = Redactor()
    register_secret("registry-canary-0042")
    register_secret(None)
    register_secret("tiny")  # ignored, like a local server's placeholder key
    assert "registry-canary-0042" in registered_secrets() and "tiny" not in registered_secrets()
    assert r.redact({"t": "registry-canary-0042"}) == {"t": REDACTED}


def test_a_secret_registered_after_a_redactor_was_used_applies_at_once() -> None:
    """``redact`` and ``active`` use the patterns built for the registry's version, and build again when
    it changed since: a key an LLM client registers later is redacted from the next record on."""
    r = Redactor()
    clean = {"t": "later-canary-0077 is not secret yet"}
    assert r.redact(clean) is clean  # builds (and keeps) the patterns for the registry as it is now
    register_secret("later-canary-0077")
    assert r.active
    assert r.redact(clean) == {"t": f"{REDACTED} is not secret yet"}


class _Text(str):
    pass


@pytest.mark.parametrize(
    "secret",
    ["sk-plain-0123456789", 'with"quote-123', "back\\slash-123", "tab\tinside-123", "grüße-東京-🎉-123"],
)
def test_every_place_a_secret_can_hide_is_redacted(secret: str) -> None:
    """Data without secrets is recognised from its JSON text; everything else is walked. Either way no
    secret survives, whatever the characters of the secret and wherever it sits."""
    redactor = Redactor([secret])
    clean = {"text": "nothing here", "nested": [{"n": 1, "none": None}, ("tuple",)]}
    assert redactor.redact(clean) is clean
    places: list[Any] = [
        {"text": f"before {secret} after"},
        {f"key {secret}": 1},
        {"deep": [{"list": [("tuple", f"x{secret}y")]}]},
        {"sub": _Text(f"a {secret} b")},
        {1: "int key", "v": secret},
        {"obj": object(), "v": secret},
    ]
    for data in places:
        strings = list(_strings(redactor.redact(data)))
        assert not any(secret in text for text in strings), data
        assert any(REDACTED in text for text in strings), data


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    summary: str
    details: dict[str, Any]


@dataclasses.dataclass
class _Derived:
    text: str
    shout: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.shout = self.text.upper()


def test_dataclasses_are_redacted_in_a_copy_nested_and_frozen_ones_too() -> None:
    secret = "dc-secret-771"
    redactor = Redactor([secret, secret.upper()])
    step = _Step(f"saw {secret}", {"items": [_Step(secret, {})]})
    clean = redactor.redact(step)
    assert clean == _Step(f"saw {REDACTED}", {"items": [_Step(REDACTED, {})]})
    assert step.summary == f"saw {secret}"  # the original is left alone
    derived = redactor.redact([_Derived(f"x {secret}")])  # a field outside __init__: no replace()
    assert derived[0].text == f"x {REDACTED}" and derived[0].shout == f"X {REDACTED}"
    untouched = _Step("nothing here", {})
    assert redactor.redact(untouched) is untouched


@pytest.mark.parametrize(
    "written",
    [
        '{"password": "esc-canary-5d9\\u006561"}',  # a model escaping one letter in tool arguments
        '{"password": "esc-canary-5d9\\u0065\\u0036\\u0031"}',
        '"{\\"password\\": \\"esc-canary-5d9\\\\u006561\\"}"',  # escaped twice: JSON in a JSON string
        "KeyError: 'esc-canary-5d9\\x6561'",  # Python's repr
        "\\" * 5000 + "u0065sc-canary-5d9e61",  # behind a long run of backslashes (taken as one escape)
        "\\" * 5000 + " esc-canary-5d9e61 " + "\\" * 5000,
    ],
)
def test_a_secret_written_with_escapes_is_redacted(written: str) -> None:
    """What decodes to the secret is the secret: JSON or Python escapes do not hide it from redaction."""
    secret = "esc-canary-5d9e61"
    redactor = Redactor([secret])
    data = {"tool_calls": [{"arguments": written}]}
    redacted = redactor.redact(data)
    shown = redacted["tool_calls"][0]["arguments"]
    assert REDACTED in shown and "5d9" not in shown, shown
    assert redactor.redact_text(written) == shown
    record = redactor.redact_record(Record("s", 1, "llm_response", data))
    assert record.data == redacted
    # Text with backslashes but no secret is left as it is.
    clean = {"arguments": '{"path": "C:\\\\temp\\\\x", "n": "\\u0041"}'}
    assert redactor.redact(clean) is clean


async def test_tool_arguments_escaping_a_secret_never_reach_the_log_or_the_platform(tmp_path: Path) -> None:
    secret = "esc-canary-7c2f90"
    escaped = '{"password": "esc-canary-7c2f\\u0039\\u0030"}'
    assert json.loads(escaped)["password"] == secret
    agent = Agent("keeper", log=f"sqlite:///{tmp_path / 'esc.db'}")
    agent.mark_secret(secret)

    @agent.tool
    def check(password: str) -> str:
        """Check a password."""
        return "checked"

    model = ScriptedLLM([ScriptedLLM.tool_call("check", escaped), "done"])
    state = new_reasoning_state(agent, model, enable_task_planning=False)
    state.when_event().go_to(state)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "go", platform)
        records = await agent.log.read("s")
    stored = json.dumps([r.data for r in records])
    assert "7c2f\\\\u0039" not in stored and "7c2f" not in stored
    assert "7c2f" not in repr(platform.steps["s"])
    assert REDACTED in stored


async def test_a_failing_body_or_condition_logs_its_traceback_without_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "log-canary-31f0e2"
    agent = Agent("keeper", log="memory://")
    agent.mark_secret(secret)
    idle = agent.new_state("idle", initial=True)
    busy = agent.new_state("busy")

    def body(session: Any) -> None:
        raise ValueError(f"password {secret} rejected")

    def condition(session: Any) -> bool:
        raise KeyError(secret)

    busy.set_body(body)
    idle.when_event().with_condition(condition).go_to(idle)
    idle.when_event().go_to(busy)
    busy.go_to(idle)
    with caplog.at_level(logging.ERROR, logger="baf"):
        async with agent:
            await agent.receive_message("s", "go", RecordingPlatform())
    assert "ValueError" in caplog.text and "KeyError" in caplog.text
    assert secret not in caplog.text
    assert REDACTED in caplog.text


async def test_an_error_a_closed_session_cannot_record_is_still_logged_without_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A body thread abandoned at a stop fails after its session closed: the error is not lost from the
    # process's log, and the secret stays out of it.
    from baf.core.session import runtime_side
    from baf.errors import LogClosedError

    secret = "log-canary-9a41c7"
    agent = Agent("keeper", log="memory://")
    agent.mark_secret(secret)
    agent.new_state("idle", initial=True)
    async with agent:
        live = runtime_side(await agent.get_or_create_session("s"))
        await agent.wait_idle()
        live.close()
        with caplog.at_level(logging.ERROR, logger="baf"), pytest.raises(LogClosedError):
            live.report_error("a body raised", "body", ValueError(f"password {secret} rejected"))
    assert "a body raised (not recorded: the session is closed)" in caplog.text
    assert "ValueError" in caplog.text and secret not in caplog.text and REDACTED in caplog.text


@pytest.mark.parametrize("engine", ["reasoning", "react"])
async def test_streamed_steps_and_task_lists_show_what_was_recorded_redacted_or_not(engine: str) -> None:
    """A step or task list is redacted once, for its record and what the platform is shown: one holding a
    secret is shown as recorded (redacted), a clean one as it was built (the same object)."""
    from baf.library.state.pattern_state import new_pattern_state
    from baf.reasoning.patterns import ReAct
    from baf.reasoning.step import ReasoningStep

    secret = "stream-canary-41d8"
    agent = Agent("keeper", log="memory://")
    agent.mark_secret(secret)

    @agent.tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"the value of {key} is {secret}"

    if engine == "reasoning":
        llm = ScriptedLLM([
            ScriptedLLM.tool_call("add_tasks", {"descriptions": [f"find {secret}"]}),
            ScriptedLLM.tool_call("lookup", {"key": "k"}),
            ScriptedLLM.tool_call("complete_task", {"task_id": 1, "result": "found"}),
            f"It is {secret}.",
        ])  # fmt: skip
        state = new_reasoning_state(agent, llm)
    else:
        llm = ScriptedLLM([
            ScriptedLLM.tool_call("lookup", {"key": "k"}),
            ScriptedLLM.tool_call("final_answer", {"answer": f"It is {secret}."}),
        ])  # fmt: skip
        state = new_pattern_state(agent, llm, ReAct())
    state.when_event().go_to(state)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "go", platform)
        records = await agent.log.read("s")
    steps = [r.data for r in records if r.kind == "reasoning_step"]
    shown = platform.steps["s"]
    assert [ReasoningStep.from_dict(step) for step in steps] == shown
    assert secret not in repr(shown) and REDACTED in repr(shown)
    assert any(REDACTED not in repr(step) for step in shown)  # clean steps are shown too
    tasks = [r.data["tasks"] for r in records if r.kind == "task_list"]
    assert tasks == platform.task_lists["s"]
    assert secret not in repr(tasks) and (engine == "react" or REDACTED in repr(tasks))
