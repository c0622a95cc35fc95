"""A secret inside a session id: refused before anything is stored or logged, and redacted by the CLI in
logs written before the secret was known. (Redaction reaches record data, not keys: an id is a key.)"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from baf_test_helpers import baf

from baf import Agent, Runtime
from baf.core.events import ReceiveTextEvent
from baf.core.session import Session
from baf.errors import SessionIdError
from baf.log.redaction import register_secret

SECRET = "tok-8c1e55d0a7b2-canary"


def agent_on(db: Path) -> Agent:
    agent = Agent("keeper", log=f"sqlite:///{db}")
    state = agent.new_state("main", initial=True)

    def body(session: Session) -> None:
        session.reply("hello")

    state.set_body(body)
    state.when_event().go_to(state)
    return agent


async def test_a_session_id_holding_a_marked_secret_is_refused_and_never_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # aiosqlite logs every query with its parameters at DEBUG
    db = tmp_path / "agent.db"
    agent = agent_on(db)
    agent.mark_secret(SECRET)
    async with agent:
        with pytest.raises(SessionIdError, match="contains one of the agent's secrets") as refused:
            await agent.receive_message(f"user-{SECRET}", "hi")
        with pytest.raises(SessionIdError):
            await agent.get_or_create_session(f"{SECRET}")
        assert SECRET not in str(refused.value)
        await agent.receive_message("user-plain", "hi")  # other ids work as before
        assert await agent.log.sessions() == ["user-plain"]
    assert SECRET not in caplog.text
    assert_not_in_files(tmp_path, SECRET)


def assert_not_in_files(folder: Path, text: str) -> None:
    """``text`` is in no file of ``folder`` (the database, its WAL and shared-memory files)."""
    for file in folder.iterdir():
        assert text.encode() not in file.read_bytes(), file.name


async def test_a_registered_key_inside_a_session_id_is_refused(tmp_path: Path) -> None:
    key = "sk-registered-31f0c9e2d4"
    register_secret(key)  # what an LLM client does with its api_key
    agent = agent_on(tmp_path / "agent.db")
    async with agent:
        with pytest.raises(SessionIdError):
            await agent.receive_message(f"chat:{key}", "hi")
        assert await agent.log.sessions() == []


async def test_a_worker_refuses_it_before_a_lease_or_an_inbox_row_stores_it(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []

    class Router:  # what baf.serve's worker is to its runtime; here it only notes what it was asked
        async def claim(self, session_id: str) -> bool:
            calls.append(("claim", session_id))
            return False

        async def forward(self, session_id: str, data: dict[str, Any], platform: object) -> None:
            calls.append(("forward", session_id))

        async def release(self, session_id: str) -> None:
            calls.append(("release", session_id))

    agent = agent_on(tmp_path / "agent.db")
    agent.mark_secret(SECRET)
    runtime = Runtime(agent, router=Router())
    await runtime.start()
    try:
        with pytest.raises(SessionIdError):
            await runtime.receive(ReceiveTextEvent(f"user-{SECRET}", message="hi"))
        assert calls == []
        await runtime.receive(ReceiveTextEvent("user-plain", message="hi"))
        assert calls == [("claim", "user-plain"), ("forward", "user-plain")]
    finally:
        await runtime.stop()


async def test_empty_session_ids_are_a_session_id_error(tmp_path: Path) -> None:
    async with agent_on(tmp_path / "agent.db") as agent:
        with pytest.raises(SessionIdError, match="non-empty"):
            await agent.receive_message("", "hi")


async def test_the_cli_redacts_a_secret_in_an_id_of_a_log_written_before_it_was_known(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    async with agent_on(db) as agent:
        await agent.receive_message(f"user-{SECRET}", "hi")  # nothing marked yet: stored as it is
    env = {"SERVICE_API_KEY": SECRET}
    listing = baf("sessions", str(db), cwd=tmp_path, env=env)
    assert listing.returncode == 0, listing.stderr
    assert "[REDACTED]" in listing.stdout.replace("\n", "").replace("│", "").replace(" ", "")
    for args in (("sessions", str(db)), ("log", str(db), f"user-{SECRET}"),
                 ("log", str(db), f"user-{SECRET}", "--json"),
                 ("export", str(db), f"user-{SECRET}", "--format", "otel"),
                 ("export", str(db), f"user-{SECRET}")):  # fmt: skip
        result = baf(*args, cwd=tmp_path, env=env, columns=400)
        assert result.returncode == 0, (args, result.stderr)
        flat = result.stdout.replace("\n", "").replace("│", "").replace(" ", "")
        assert SECRET not in flat, args


async def test_the_cli_never_echoes_a_typed_session_id_holding_a_secret(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    async with agent_on(db) as agent:
        await agent.receive_message(f"user-{SECRET}", "hi")  # nothing marked yet: stored as it is
    (tmp_path / "keeper.py").write_text(AGENT_FILE.format(db=db))
    env = {"SERVICE_API_KEY": SECRET}
    stored, missing = f"user-{SECRET}", f"nobody-{SECRET}"
    for args, status in (
        (("replay", str(db), stored, "--at", "2"), 0),  # the state at a seq, headed by its session id
        (("replay", str(db), stored, "--at", "99"), 2),  # an error quoting the id
        (("replay", str(db), stored, "--rerun", "keeper.py"), 2),  # the agent refuses the id, without it
        (("replay", str(db), stored, "--fork-at", "2"), 0),  # the fork and its new id
        (("replay", str(db), missing), 2),
        (("log", str(db), missing), 2),
        (("export", str(db), missing), 2),
    ):
        result = baf(*args, cwd=tmp_path, env=env, columns=400)
        assert result.returncode == status, (args, result.stdout, result.stderr)
        flat = (result.stdout + result.stderr).replace("\n", "").replace("│", "").replace(" ", "")
        assert SECRET not in flat, args
        assert "[REDACTED]" in flat or "refused" in flat, args


AGENT_FILE = """
from baf import Agent

agent = Agent("keeper", log="sqlite:///{db}")
state = agent.new_state("main", initial=True)


def body(session):
    session.reply("hello")


state.set_body(body)
state.when_event().go_to(state)
"""
