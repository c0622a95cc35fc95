"""Canary secrets never reach the log files, what the platform shows live, ``baf replay`` output or an export.

Plants an API key (given to ``LLMOpenAI`` as ``api_key=``), another in ``OPENAI_API_KEY``, and a value the
user marks secret, then runs a real session on SQLite in which the user types the secret, tools return
all three, the model repeats them and a tool error carries one in its message and traceback.

The write-time hooks live in ``baf.core`` (``Agent.mark_secret``, ``SessionWriter.record``) and
``LLMOpenAI`` (``register_secret``). Where they are not wired yet, :func:`wire_hooks` does exactly what
they do, so this test pins the behaviour either way; once they are, it exercises the real ones.
"""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

import pytest

from baf import Agent
from baf.cli import main
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.openai_llm import LLMOpenAI
from baf.log.redaction import REDACTED, registered_secrets
from baf.testing import RecordingPlatform
from baf.testing.llms import ScriptedLLM

CANARY_KEY = "sk-canary-llm-7f3a9c2e11d0"
CANARY_ENV = "sk-canary-env-b81d44e0aa93"
USER_SECRET = "hunter2-canary-5d9e61"
CANARIES = (CANARY_KEY, CANARY_ENV, USER_SECRET)
SESSION = "secret-session"


def wire_hooks(monkeypatch: pytest.MonkeyPatch, agent: Agent, llm_key: str) -> None:
    """Mark the user's secret; the LLM key must already be known from constructing the client."""
    assert llm_key in registered_secrets(), "LLMOpenAI did not register its key for redaction"
    agent.mark_secret(USER_SECRET)


def build(db: Path) -> tuple[Agent, ScriptedLLM, LLMOpenAI]:
    agent = Agent("keeper", log=f"sqlite:///{db}")
    # Constructed as a user would, with the key in code: it must be redacted although never used here.
    openai_llm = LLMOpenAI("gpt-canary", api_key=CANARY_KEY)
    model = ScriptedLLM([
        ScriptedLLM.tool_call("read_config", {}),
        ScriptedLLM.tool_call("check", {"password": USER_SECRET}),
        f"Your password is {USER_SECRET}; keys {CANARY_KEY} and {CANARY_ENV}.",
    ])  # fmt: skip

    @agent.tool
    def read_config() -> str:
        """The service configuration."""
        return f"password={USER_SECRET} env_key={os.environ['OPENAI_API_KEY']} llm_key={CANARY_KEY}"

    @agent.tool
    def check(password: str) -> str:
        """Check a password."""
        raise PermissionError(f"password {password} rejected for key {CANARY_KEY}")

    state = new_reasoning_state(agent, model, enable_task_planning=False)
    state.when_event().go_to(state)
    return agent, model, openai_llm


def assert_clean(where: str, data: bytes | str) -> None:
    blob = data.encode("utf-8") if isinstance(data, str) else data
    for canary in CANARIES:
        assert canary.encode() not in blob, f"{canary!r} found in {where}"


def db_files(db: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in db.parent.glob(db.name + "*")}


def test_canaries_never_reach_files_output_or_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_ENV)
    db = tmp_path / "secrets.db"
    agent, model, _ = build(db)
    wire_hooks(monkeypatch, agent, CANARY_KEY)

    platform = RecordingPlatform()
    agent.add_platform(platform)

    async def run_session() -> None:
        async with agent:
            await agent.receive_message(SESSION, f"my password is {USER_SECRET}", platform)
            await agent.wait_idle()
            files = db_files(db)
            assert any(name.endswith("-wal") for name in files)  # checked while the WAL holds the records
            for name, content in files.items():
                assert_clean(name, content)

    asyncio.run(run_session())
    for name, content in db_files(db).items():
        assert_clean(name, content)
    # What the user saw live: the answer, every streamed step (tool results included) and the errors.
    live = {"replies": platform.replies[SESSION], "steps": platform.steps[SESSION], "errors": platform.errors[SESSION]}
    assert live["replies"] and live["steps"]
    for label, seen in live.items():
        assert_clean(f"live {label}", repr(seen))
    assert REDACTED in live["replies"][-1]

    # The secrets did flow through the session (the model saw them in memory) ...
    assert USER_SECRET in str(model.requests[0].messages) and CANARY_KEY in str(model.requests[-1].messages)
    # ... and the log holds the marker in their place.
    assert REDACTED.encode() in b"".join(db_files(db).values())

    outputs: dict[str, str] = {}
    for label, argv in {
        "timeline": ["replay", str(db), SESSION, "--expand", "--limit", "0"],
        "json": ["replay", str(db), SESSION, "--json"],
        "at": ["replay", str(db), SESSION, "--at", "999999"],
        "sessions": ["replay", str(db)],
    }.items():
        main(argv)
        captured = capsys.readouterr()
        outputs[label] = captured.out + captured.err
    llm_requests = [n for n, line in enumerate(outputs["json"].splitlines(), 1) if '"llm_request"' in line]
    assert llm_requests
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"j {n}\nopen\nexpand\nstate\n" for n in llm_requests)))
    main(["replay", str(db), SESSION, "--interactive"])
    outputs["interactive"] = capsys.readouterr().out
    for fmt in ("jsonl", "otel"):
        target = tmp_path / f"export.{fmt}"
        assert main(["export", str(db), SESSION, "--format", fmt, "-o", str(target)]) == 0
        outputs[fmt] = target.read_text()
    for label, text in outputs.items():
        assert text.strip(), label
        assert_clean(label, text)
    assert REDACTED in outputs["timeline"] and REDACTED in outputs["otel"]
    assert "LLM request #" in outputs["interactive"]


async def test_framework_failures_are_logged_redacted(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What reaches logging.exception-style lines (a step failing outside the engine's containment, a
    websocket handler failing) is redacted as the records are."""
    import logging

    import baf.core.runtime as runtime_module
    from baf.log import MemoryLog

    canary = "canary-step-4f1e2d"

    async def broken_step(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"framework bug while holding {canary}")

    agent = Agent("leaky", log=MemoryLog())
    agent.new_state("only", initial=True)
    agent.mark_secret(canary)
    monkeypatch.setattr(runtime_module, "run_step", broken_step)
    with caplog.at_level(logging.ERROR):
        async with agent:
            await agent.get_or_create_session("s")
            await agent.wait_idle()
    assert "step failed" in caplog.text and "framework bug while holding [REDACTED]" in caplog.text
    assert canary not in caplog.text


async def test_websocket_handler_failures_are_logged_redacted(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from baf.log import MemoryLog
    from baf.platforms.websocket import WebSocketPlatform

    canary = "canary-ws-9a8b7c"

    def check(token: str) -> bool:
        raise ValueError(f"token store unreachable at https://u:{canary}@tokens.internal")

    agent = Agent("leaky", log=MemoryLog())
    agent.new_state("only", initial=True)
    agent.mark_secret(canary)
    platform = agent.add_platform(WebSocketPlatform("127.0.0.1", 0, auth_token=check))
    assert isinstance(platform, WebSocketPlatform)
    with caplog.at_level(logging.ERROR):
        async with agent:
            with pytest.raises(InvalidStatus):
                async with connect(platform.ws_url, additional_headers={"Authorization": "Bearer x"}):
                    pass
    assert "auth_token callback failed" in caplog.text and "https://u:[REDACTED]@tokens.internal" in caplog.text
    assert canary not in caplog.text
