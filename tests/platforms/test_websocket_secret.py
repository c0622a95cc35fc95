"""Without ``secret=``, the resume-token secret is kept beside the log (mode 0600): a restarted server resumes
the client's conversation. Real SQLite files, real websockets on loopback."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from baf import Agent
from baf.core.session import Session
from baf.errors import ConfigurationError
from baf.platforms.secret_file import load_or_create_secret, secret_path_beside
from baf.platforms.websocket import WebSocketPlatform

from .helpers import Client


def echo_agent(db: Path) -> Agent:
    agent = Agent("keeper", log=f"sqlite:///{db}")
    state = agent.new_state("main", initial=True)

    def body(session: Session) -> None:
        assert session.event is not None
        session.reply(f"echo: {session.event.text}")

    state.set_body(body)
    state.when_event().go_to(state)
    return agent


async def talk(db: Path, resume: str | None, text: str, **options: object) -> tuple[dict, dict | None, str]:
    """Start a server on ``db``, say hello (resuming ``resume``), send ``text``: the welcome, the history
    (if resumed) and the new token. The server stops at the end, as a restart would."""
    agent = echo_agent(db)
    platform = WebSocketPlatform("127.0.0.1", 0, **options)  # type: ignore[arg-type]
    agent.add_platform(platform)
    async with agent:
        client = await Client.open(platform.ws_url)
        await client.send({"type": "hello"} if resume is None else {"type": "hello", "resume": resume})
        first = await client.recv()
        if first["type"] == "error":
            return first, None, ""
        history = (await client.until("history"))[0] if first["resumed"] else None
        await client.send({"type": "message", "text": text})
        await client.until("reply", text=f"echo: {text}")
        await client.close()
        return first, history, first["resume_token"]


async def test_a_restarted_server_resumes_the_conversation_without_a_configured_secret(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    welcome, _, token = await talk(db, None, "first")
    secret_file = tmp_path / "agent.db.websocket-secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    again, history, _ = await talk(db, token, "second")  # a new process would read the same file
    assert again["type"] == "welcome" and again["resumed"] is True
    assert again["session_id"] == welcome["session_id"]
    assert history is not None
    assert [i["text"] for i in history["items"] if i["type"] in ("user", "reply")] == ["first", "echo: first"]


async def test_an_explicit_secret_overrides_the_kept_one(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    _, _, token = await talk(db, None, "first")
    refused, _, _ = await talk(db, token, "again", secret=b"another-secret-of-the-operator-0123")
    assert refused["type"] == "error" and refused["code"] == "bad_token"
    _, _, own = await talk(db, None, "x", secret=b"another-secret-of-the-operator-0123")
    resumed, _, _ = await talk(db, own, "y", secret=b"another-secret-of-the-operator-0123")
    assert resumed["resumed"] is True


async def test_a_memory_log_keeps_no_secret_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    agent = Agent("mem", log="memory://")
    agent.new_state("main", initial=True)
    agent.add_platform(WebSocketPlatform("127.0.0.1", 0))
    async with agent:
        pass
    assert os.listdir(tmp_path) == []


def test_a_secret_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = secret_path_beside(tmp_path / "agent.db", "websocket")
    secret = load_or_create_secret(path)
    assert load_or_create_secret(path) == secret and len(secret) == 64
    os.chmod(path, 0o644)
    with pytest.raises(ConfigurationError, match="can be read by others"):
        load_or_create_secret(path)
    path.write_text("short")
    os.chmod(path, 0o600)
    with pytest.raises(ConfigurationError, match="does not hold a secret"):
        load_or_create_secret(path)


def test_a_secret_file_another_user_owns_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log in a shared folder (/tmp): another user made its secret file first, mode 0600, and knows the
    secret. Here this process runs as another user than the file's owner."""
    from baf.platforms import secret_file

    path = secret_path_beside(tmp_path / "agent.db", "websocket")
    load_or_create_secret(path)
    monkeypatch.setattr(secret_file.os, "geteuid", lambda: os.stat(path).st_uid + 1)
    with pytest.raises(ConfigurationError, match="belongs to another user"):
        load_or_create_secret(path)


async def test_processes_starting_together_agree_on_one_secret(tmp_path: Path) -> None:
    path = tmp_path / "agent.db.websocket-secret"
    found = await asyncio.gather(*(asyncio.to_thread(load_or_create_secret, path) for _ in range(8)))
    assert len(set(found)) == 1
    assert os.listdir(tmp_path) == ["agent.db.websocket-secret"]  # no temporary file left
