"""The WebSocket protocol, driven by the real ``websockets`` client against a server on 127.0.0.1:0."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from baf import Agent
from baf.core.session import Session
from baf.errors import ConfigurationError
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.platforms.websocket import WebSocketPlatform
from baf.testing import FunctionLLM, ScriptedLLM

from .helpers import FINAL_ANSWER, Client, body_agent, echo, planning_script, reasoning_agent


@asynccontextmanager
async def serving(agent: Agent, **options: Any) -> AsyncIterator[WebSocketPlatform]:
    """Run ``agent`` with a WebSocketPlatform on a free loopback port."""
    platform = WebSocketPlatform("127.0.0.1", 0, **options)
    agent.add_platform(platform)
    async with agent:
        yield platform


def echo_llm() -> FunctionLLM:
    """A model that answers every message with ``echo: <message>``, for tests with many sessions."""

    def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> str:
        return f"echo: {messages[-1]['content']}"

    return FunctionLLM(answer)


def slow_down_reads(agent: Agent) -> None:
    """Make every read of ``agent``'s log take 3 ms, as a real store's may: replies commit meanwhile."""
    read = agent.log.read

    async def slow_read(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.003)
        return await read(*args, **kwargs)

    agent.log.read = slow_read  # type: ignore[method-assign]


async def test_conversation_with_a_reasoning_agent() -> None:
    agent = reasoning_agent(planning_script())
    async with serving(agent) as platform:
        client = await Client.open(platform.ws_url)
        welcome = await client.hello()
        assert welcome["protocol"] == 1 and welcome["agent"] == "assistant" and welcome["resumed"] is False
        assert welcome["session_id"].startswith("ws-") and welcome["resume_token"].startswith(welcome["session_id"])
        await client.send({"type": "message", "text": "What is the total?"})
        reply, frames = await client.until("reply")
        assert reply == {"type": "reply", "text": FINAL_ANSWER, "format": "markdown", "seq": reply["seq"]}
        kinds = [f["step"]["kind"] for f in frames if f["type"] == "reasoning_step"]
        assert kinds[0] == "reasoning_started"
        assert {"llm_tool_calls", "task_added", "tool_result", "task_completed", "llm_text"} <= set(kinds)
        task_lists = [f["tasks"] for f in frames if f["type"] == "task_list"]
        assert [t["status"] for t in task_lists[0]] == ["in_progress", "pending"]
        assert [t["status"] for t in task_lists[-1]] == ["completed", "completed"]
        finished, _ = await client.until("reasoning_step")  # the trace group closes after the reply
        assert finished["step"]["kind"] == "reasoning_finished"
        records = await agent.log.read(welcome["session_id"])
        assert [r.data["text"] for r in records if r.kind == "reply"] == [FINAL_ANSWER]
        await client.close()


async def test_malformed_frames_get_errors_and_the_connection_survives() -> None:
    async with serving(body_agent(echo)) as platform:
        client = await Client.open(platform.ws_url)
        await client.send("{not json")
        assert (await client.recv())["code"] == "bad_json"
        await client.send("[1, 2]")
        assert (await client.recv())["code"] == "bad_frame"
        await client.send({"type": "launch_missiles"})
        error = await client.recv()
        assert error["code"] == "unknown_type" and "message" in error["message"]
        await client.send(b"\x00\x01")
        assert (await client.recv())["code"] == "binary"
        await client.send({"type": "message", "text": "too early"})
        assert (await client.recv())["code"] == "no_session"
        await client.hello()
        await client.send({"type": "message", "text": 42})
        assert (await client.recv())["code"] == "bad_frame"
        await client.send({"type": "history", "after_seq": -1})
        assert (await client.recv())["code"] == "bad_frame"
        await client.send({"type": "message", "text": "still here?"})
        reply, _ = await client.until("reply")
        assert reply["text"] == "echo: still here?"


async def test_oversize_frames() -> None:
    async with serving(body_agent(echo), max_message_size=1000) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        await client.send({"type": "message", "text": "x" * 2000})
        error = await client.recv()
        assert error["code"] == "too_large" and "1000" in error["message"]
        await client.send({"type": "message", "text": "small"})
        assert (await client.until("reply"))[0]["text"] == "echo: small"
        # Past 4x the limit the library refuses the frame before buffering it, and closes.
        await client.send({"type": "message", "text": "x" * 5000})
        with pytest.raises(ConnectionClosed) as closed:
            await client.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        other = await Client.open(platform.ws_url)  # the server and the agent are fine
        await other.hello()
        await other.send({"type": "message", "text": "hi"})
        assert (await other.until("reply"))[0]["text"] == "echo: hi"
        records = await agent_records(platform)
        assert not any("x" * 2000 in json.dumps(r) for r in records)


async def agent_records(platform: WebSocketPlatform) -> list[dict[str, Any]]:
    assert platform.agent is not None
    out = []
    for session_id in await platform.agent.log.sessions():
        out += [r.data for r in await platform.agent.log.read(session_id)]
    return out


async def test_a_client_cannot_resume_or_read_another_session() -> None:
    agent = reasoning_agent(echo_llm())
    async with serving(agent, secret="test-secret") as platform:
        alice = await Client.open(platform.ws_url)
        await alice.hello()
        await alice.send({"type": "message", "text": "alice's secret plan"})
        await alice.until("reply")
        assert alice.session_id is not None and alice.token is not None

        mallory = await Client.open(platform.ws_url)
        session_id = alice.session_id
        other_platform = WebSocketPlatform(secret="another-secret")
        forgeries = [
            session_id,  # the bare id
            f"{session_id}.AAAA",  # a made-up signature
            alice.token[:-2] + ("AA" if not alice.token.endswith("AA") else "BB"),  # a tampered one
            other_platform.resume_token(session_id),  # signed with another key
            f"{alice.token}x",
            "../" + alice.token,
            alice.token[:-1] + "é",  # not ASCII
        ]
        for forged in forgeries:
            await mallory.send({"type": "hello", "resume": forged})
            assert (await mallory.recv())["code"] == "bad_token", forged
            await mallory.send({"type": "resume", "token": forged})
            assert (await mallory.recv())["code"] == "bad_token", forged
        await mallory.send({"type": "resume"})  # no token: an error, not a silent new session
        assert (await mallory.recv())["code"] == "bad_token"
        await mallory.send({"type": "resume", "token": None})
        assert (await mallory.recv())["code"] == "bad_token"
        await mallory.send({"type": "history", "after_seq": 0})
        assert (await mallory.recv())["code"] == "no_session"
        await mallory.send({"type": "message", "text": "mallory writes into alice's session"})
        assert (await mallory.recv())["code"] == "no_session"

        # Mallory's own session is a different one, and Alice's traffic never reaches it.
        await mallory.hello()
        assert mallory.session_id != alice.session_id
        await alice.send({"type": "message", "text": "alice again"})
        await alice.until("reply", text="echo: alice again")
        # Mallory's own answer comes after: a frame of alice's sent to mallory too would be before it
        await mallory.send({"type": "message", "text": "mine"})
        _, seen = await mallory.until("reply", text="echo: mine")
        leaked = [f for f in seen if "alice" in json.dumps(f)]
        assert leaked == []
        texts = [r.data.get("text") for r in await agent.log.read(session_id)]
        assert "mallory writes into alice's session" not in texts


async def test_a_client_that_stops_reading_is_dropped_and_others_are_served() -> None:
    chunk = "x" * 60_000

    def body(session: Session) -> None:
        assert session.event is not None
        if session.event.text == "flood":
            for _ in range(300):  # ~18 MB: far more than socket buffers hold
                session.reply(chunk)
        else:
            session.reply(f"echo: {session.event.text}")

    async with serving(body_agent(body), send_queue_size=8) as platform:
        # max_queue=1 keeps the client library from buffering on the reader's behalf.
        stuck = await Client.open(platform.ws_url, max_queue=1, max_size=None)
        await stuck.hello()
        reader = await Client.open(platform.ws_url)
        await reader.hello()
        await stuck.send({"type": "message", "text": "flood"})  # and never read again
        await reader.send({"type": "message", "text": "are you there?"})
        reply, _ = await reader.until("reply", wait=10)
        assert reply["text"] == "echo: are you there?"
        assert platform.agent is not None and stuck.session_id is not None
        await platform.agent.wait_idle(stuck.session_id)
        await reader.send({"type": "message", "text": "again"})  # a commit that flushes the drop record
        await reader.until("reply", text="echo: again", wait=10)
        await platform.agent.wait_idle()
        for _ in range(50):
            if platform.connection_count == 1:
                break
            await asyncio.sleep(0.05)
        assert platform.connection_count == 1
        # Durable without waiting for the session's next commit (none comes: it is idle).
        drops: list[Any] = []
        for _ in range(50):
            drops = [r for r in await platform.agent.log.read(stuck.session_id) if r.kind == "delivery_dropped"]
            if drops:
                break
            await asyncio.sleep(0.05)
        assert len(drops) == 1 and "not reading" in drops[0].data["reason"]
        with pytest.raises(ConnectionClosed):
            while True:  # what it had buffered, then the end
                await stuck.ws.recv()


async def test_a_drop_after_the_step_ended_is_durable_while_the_session_is_idle() -> None:
    # The connection's writer sends after the step's last commit; if sending then fails, the client is
    # dropped with no commit of that session to come: the record must not wait for one.
    async def body(session: Session) -> None:
        session.reply("hello")

    async with serving(body_agent(body)) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        (server_side,) = platform._clients

        async def broken_send(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("the network stack failed")

        server_side.ws.send = broken_send  # type: ignore[method-assign]
        await client.send({"type": "message", "text": "hi"})
        assert platform.agent is not None
        drops: list[Any] = []
        for _ in range(50):
            if client.session_id is not None:
                await platform.agent.wait_idle(client.session_id)
                records = await platform.agent.log.read(client.session_id)
                drops = [r for r in records if r.kind == "delivery_dropped"]
                if drops:
                    break
            await asyncio.sleep(0.05)
        assert len(drops) == 1 and "sending failed (RuntimeError)" in drops[0].data["reason"], drops


async def test_reconnect_gets_history_from_the_log() -> None:
    agent = reasoning_agent(planning_script())
    async with serving(agent) as platform:
        first = await Client.open(platform.ws_url)
        welcome = await first.hello()
        await first.send({"type": "message", "text": "What is the total?"})
        await first.until("reply")
        await agent.wait_idle()
        await first.close()

        again = await Client.open(platform.ws_url)
        resumed = await again.hello(resume=welcome["resume_token"])
        assert resumed["resumed"] is True and resumed["session_id"] == welcome["session_id"]
        history, _ = await again.until("history")
        items = history["items"]
        assert items[0] == {"seq": items[0]["seq"], "type": "user", "text": "What is the total?"}
        types = [i["type"] for i in items]
        assert {"user", "reply", "reasoning_step", "task_list"} <= set(types)
        assert [i["text"] for i in items if i["type"] == "reply"] == [FINAL_ANSWER]
        steps = [i["step"]["kind"] for i in items if i["type"] == "reasoning_step"]
        assert steps[0] == "reasoning_started" and steps[-1] == "reasoning_finished"
        assert [t["status"] for t in [i for i in items if i["type"] == "task_list"][-1]["tasks"]] == ["completed"] * 2
        assert history["truncated"] is False and history["last_seq"] >= items[-1]["seq"]

        # Asking for history after a seq returns only what came later.
        cut = next(i["seq"] for i in items if i["type"] == "reply")
        await again.send({"type": "history", "after_seq": cut})
        later, _ = await again.until("history")
        assert all(i["seq"] > cut for i in later["items"]) and "reply" not in [i["type"] for i in later["items"]]


async def test_reset_starts_a_new_session() -> None:
    async with serving(body_agent(echo)) as platform:
        client = await Client.open(platform.ws_url)
        first = await client.hello()
        await client.send({"type": "reset"})
        second, _ = await client.until("welcome")
        assert second["session_id"] != first["session_id"] and second["resumed"] is False
        await client.send({"type": "message", "text": "new"})
        assert (await client.until("reply"))[0]["text"] == "echo: new"
        assert platform.agent is not None
        assert first["session_id"] not in await platform.agent.log.sessions()  # nothing was said there


async def test_bearer_token_authentication() -> None:
    async with serving(body_agent(echo), auth_token="open-sesame") as platform:
        with pytest.raises(InvalidStatus) as refused:
            await Client.open(platform.ws_url)
        assert refused.value.response.status_code == 401
        with pytest.raises(InvalidStatus):
            await Client.open(platform.ws_url, additional_headers={"Authorization": "Bearer wrong"})
        client = await Client.open(platform.ws_url, additional_headers={"Authorization": "Bearer open-sesame"})
        await client.hello()
        by_query = await Client.open(platform.ws_url + "?access_token=open-sesame")
        await by_query.hello()


async def test_origin_checks() -> None:
    async with serving(body_agent(echo)) as platform:
        with pytest.raises(InvalidStatus) as refused:
            await Client.open(platform.ws_url, origin="http://evil.example")
        assert refused.value.response.status_code == 403
        same = await Client.open(platform.ws_url, origin=f"http://127.0.0.1:{platform.port}")
        await same.hello()
    async with serving(body_agent(echo), allowed_origins=["https://app.example"]) as platform:
        ok = await Client.open(platform.ws_url, origin="https://app.example")
        await ok.hello()
        with pytest.raises(InvalidStatus):
            await Client.open(platform.ws_url, origin=f"http://127.0.0.1:{platform.port}")


async def test_any_origin_needs_a_token() -> None:
    # Without one, a page on any site the user visits could chat with the agent and drive its tools.
    with pytest.raises(ConfigurationError, match=r'allowed_origins=\["\*"\].*auth_token'):
        WebSocketPlatform(allowed_origins=["https://app.example", "*"])
    async with serving(body_agent(echo), allowed_origins=["*"], auth_token="t0ken") as platform:
        with pytest.raises(InvalidStatus) as refused:
            await Client.open(platform.ws_url, origin="http://any.example")
        assert refused.value.response.status_code == 401
        ok = await Client.open(f"{platform.ws_url}?access_token=t0ken", origin="http://any.example")
        await ok.hello()
        await ok.close()


def http_get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


async def test_the_ui_is_served_over_http() -> None:
    async with serving(body_agent(echo)) as platform:
        status, headers, body = await asyncio.to_thread(http_get, platform.url)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in headers["Content-Security-Policy"] and b"app.js" in body
        status, headers, _ = await asyncio.to_thread(http_get, platform.url + "app.js")
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")
        status, _, _ = await asyncio.to_thread(http_get, platform.url + "../baf.db")
        assert status == 404
    async with serving(body_agent(echo), ui=False) as platform:
        status, _, _ = await asyncio.to_thread(http_get, platform.url)
        assert status == 404


async def test_rich_replies_and_agent_errors() -> None:
    async def body(session: Session) -> None:
        assert session.event is not None and session.platform is not None
        if session.event.text == "boom":
            raise ValueError("kaput")
        session.reply_options("Pick one", ["red", "blue"])
        session.reply_image(b"\x89PNG", "image/png", "a picture")
        session.reply_file("notes.txt", b"hello", "text/plain")

    async with serving(body_agent(body)) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        await client.send({"type": "message", "text": "show me", "id": "m1"})
        echoed = await client.recv()  # the message itself comes first, as every client of the session sees it
        assert echoed["type"] == "user" and echoed["text"] == "show me" and echoed["id"] == "m1"
        options = await client.recv()
        assert options["seq"] > echoed["seq"]
        assert options.pop("seq") > 0
        assert options == {"type": "reply", "format": "options", "text": "Pick one", "options": ["red", "blue"]}
        image = await client.recv()
        assert image["format"] == "image" and image["data"] == "iVBORw==" and image["text"] == "a picture"
        file = await client.recv()
        assert file["format"] == "file" and file["name"] == "notes.txt" and file["mime_type"] == "text/plain"
        # A resumed view shows the same: history items keep the rich fields the log recorded.
        again = await Client.open(platform.ws_url)
        await again.hello(resume=client.token)
        history, _ = await again.until("history")
        replies = [{k: v for k, v in i.items() if k != "seq"} for i in history["items"] if i["type"] == "reply"]
        assert replies[0] == {"type": "reply", "format": "options", "text": "Pick one", "options": ["red", "blue"]}
        assert {k: replies[1][k] for k in ("format", "data", "mime_type", "text")} == {
            "format": "image",
            "data": "iVBORw==",
            "mime_type": "image/png",
            "text": "a picture",
        }
        assert {k: replies[2][k] for k in ("format", "name", "mime_type", "data")} == {
            "format": "file",
            "name": "notes.txt",
            "mime_type": "text/plain",
            "data": "aGVsbG8=",
        }
        await again.close()
        await client.send({"type": "message", "text": "boom"})
        error, _ = await client.until("error")
        assert error["code"] == "agent" and "ValueError" in error["message"] and "kaput" not in error["message"]


def test_resume_tokens() -> None:
    platform = WebSocketPlatform(secret=b"k")
    session_id = "ws-" + "a" * 24
    token = platform.resume_token(session_id)
    assert platform.verify_resume_token(token) == session_id
    assert WebSocketPlatform(secret=b"k2").verify_resume_token(token) is None
    assert WebSocketPlatform().verify_resume_token(token) is None  # a generated secret is per instance
    issued = token.split(".")[1]
    bad: list[Callable[[str], str]] = [
        lambda t: t + "=",
        lambda t: t.replace("a", "b", 1),
        lambda t: "",
        lambda t: t.replace(f".{issued}.", f".{int(issued, 16) + 3600:x}."),  # issue time moved: MAC fails
        lambda t: t.replace(f".{issued}.", "."),  # the v1 layout, without an issue time
        lambda t: t[:-1] + "é",  # not ASCII: refused, not a crash in the comparison
        lambda t: t + "\n",  # a trailing newline is not part of any field
    ]
    assert all(platform.verify_resume_token(change(token)) is None for change in bad)
    with pytest.raises(ValueError):
        WebSocketPlatform(max_message_size=0)
    for ttl in (0, -1, True):
        with pytest.raises(ValueError, match="resume_token_ttl"):
            WebSocketPlatform(resume_token_ttl=ttl)


def test_resume_tokens_expire() -> None:
    platform = WebSocketPlatform(secret=b"k", resume_token_ttl=3600)
    session_id = "ws-" + "b" * 24
    now = time.time()
    assert platform.verify_resume_token(platform.resume_token(session_id, issued_at=now - 3500)) == session_id
    assert platform.verify_resume_token(platform.resume_token(session_id, issued_at=now - 3700)) is None
    assert platform.verify_resume_token(platform.resume_token(session_id, issued_at=now + 3600)) is None  # future
    forever = WebSocketPlatform(secret=b"k", resume_token_ttl=None)
    assert forever.verify_resume_token(platform.resume_token(session_id, issued_at=now - 10**8)) == session_id


async def test_an_expired_token_does_not_resume_and_each_welcome_renews_it() -> None:
    async with serving(body_agent(echo), secret="s", resume_token_ttl=60) as platform:
        first = await Client.open(platform.ws_url)
        welcome = await first.hello()
        session_id = welcome["session_id"]
        await first.close()

        client = await Client.open(platform.ws_url)
        stale = platform.resume_token(session_id, issued_at=time.time() - 61)
        await client.send({"type": "hello", "resume": stale})
        error = await client.recv()
        assert error["code"] == "bad_token" and "expired" in error["message"]
        renewed = await client.hello(resume=welcome["resume_token"])
        assert renewed["resumed"] is True and renewed["session_id"] == session_id
        assert platform.verify_resume_token(renewed["resume_token"]) == session_id


async def raw_status(port: int, request: str) -> str:
    """The status line the server answers ``request`` (sent as is) with."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request.encode())
    await writer.drain()
    line = (await reader.readline()).decode().strip()
    writer.close()
    return line


def upgrade(host: str, origin: str) -> str:
    return (
        f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: {origin}\r\n\r\n"
    )


async def test_dns_rebinding_is_refused_by_the_host_check() -> None:
    async with serving(body_agent(echo)) as platform:
        port = platform.port
        evil = f"rebind.evil.example:{port}"
        # The page's origin and the Host agree (the name resolves to 127.0.0.1): only the Host check stops it.
        assert " 403 " in await raw_status(port, upgrade(evil, f"http://{evil}"))
        assert " 403 " in await raw_status(port, f"GET / HTTP/1.1\r\nHost: {evil}\r\n\r\n")
        assert " 403 " in await raw_status(port, f"GET /app.js HTTP/1.1\r\nHost: {evil}\r\n\r\n")
        assert " 403 " in await raw_status(port, f"GET / HTTP/1.1\r\nHost: localhost:{port + 1}\r\n\r\n")
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            assert " 101 " in await raw_status(port, upgrade(host, f"http://{host}")), host
            assert " 200 " in await raw_status(port, f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n"), host
    async with serving(body_agent(echo), allowed_hosts=["chat.example"]) as platform:
        port = platform.port
        assert " 200 " in await raw_status(port, "GET / HTTP/1.1\r\nHost: chat.example\r\n\r\n")
        assert " 403 " in await raw_status(port, f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")


async def test_hostile_frames_cost_an_error_frame_not_the_connection() -> None:
    async with serving(body_agent(echo)) as platform:
        client = await Client.open(platform.ws_url)
        await client.send("[" * 50_000)  # json.loads raises RecursionError, not ValueError
        assert (await client.recv())["code"] == "bad_json"
        await client.send({"type": "history", "after_seq": 0})
        assert (await client.recv())["code"] == "no_session"
        await client.hello()
        await client.send({"type": "message", "text": "first"})
        await client.until("reply", text="echo: first")
        await client.send({"type": "history", "after_seq": 2**70})  # past SQLite's integers
        assert (await client.recv())["code"] == "bad_frame"
        await client.send({"type": "hello", "resume": client.token, "after_seq": 2**70})
        assert (await client.recv())["code"] == "bad_frame"
        await client.send('{"type": "message", "text": "a\\ud800b"}')  # a lone surrogate: not storable
        assert (await client.recv())["code"] == "bad_frame"

        async def broken(*_: Any) -> None:
            raise RuntimeError("a bug in a handler")

        platform._handlers = {**platform._handlers, "reset": broken}  # type: ignore[misc]
        await client.send({"type": "reset"})
        error = await client.recv()
        assert error["code"] == "internal" and "a bug" not in error["message"]
        await client.send({"type": "message", "text": "still here?"})
        assert (await client.until("reply"))[0]["text"] == "echo: still here?"
        assert platform.agent is not None and client.session_id is not None
        await platform.agent.wait_idle()
        texts = [r.data.get("text") for r in await platform.agent.log.read(client.session_id)]
        assert "still here?" in texts and not any("\ud800" in str(t) for t in texts)


async def test_a_writer_that_fails_drops_its_client() -> None:
    async with serving(body_agent(echo)) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        (server_side,) = platform._clients

        async def failing_send(*_: Any) -> None:
            raise RuntimeError("not a ConnectionClosed")

        server_side.ws.send = failing_send  # type: ignore[method-assign]
        await client.send({"type": "message", "text": "hi"})
        for _ in range(100):
            if server_side.dropped:
                break
            await asyncio.sleep(0.02)
        assert server_side.dropped and server_side.writer is not None and server_side.writer.done()
        with pytest.raises(ConnectionClosed):
            await client.recv()


async def test_a_flood_of_messages_is_answered_busy_and_the_mailbox_stays_bounded() -> None:
    async def slow(session: Session) -> None:
        await asyncio.sleep(0.2)  # stands in for a model call
        session.reply("done")

    async with serving(body_agent(slow), max_pending_messages=3) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        for i in range(50):
            await client.send({"type": "message", "text": f"m{i}"})
        # Each message is refused (busy, or rate_limited at once) or taken and answered: count, once all 50 are
        refused: list[str] = []
        answered = 0
        while len(refused) + answered < 50:
            frame = await client.recv(30)
            refused += [frame["code"]] if frame["type"] == "error" else []
            answered += frame["type"] == "reply"
        assert platform.agent is not None and client.session_id is not None
        received = [r for r in await platform.agent.log.read(client.session_id) if r.kind == "message_received"]
        assert len(received) == answered <= 4  # never more than 3 waiting, plus the one running
        assert refused.count("busy") >= 45
        await client.send({"type": "message", "text": "later"})  # once answered, messages are taken again
        assert (await client.until("reply", wait=5))[0]["text"] == "done"


async def test_a_flood_of_approval_decisions_is_answered_busy_as_messages_are() -> None:
    """A decision is an event in the session's mailbox too: while a step runs, approval frames (with call ids
    nothing waits on) count against ``max_pending_messages`` with the connection's messages."""

    async def slow(session: Session) -> None:
        await asyncio.sleep(1.0)
        session.reply("done")

    async with serving(body_agent(slow), max_pending_messages=3) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        await client.send({"type": "message", "text": "go"})
        assert platform.agent is not None and client.session_id is not None
        for _ in range(250):  # until its step runs
            if platform.agent.runtime.control.in_step(client.session_id):
                break
            await asyncio.sleep(0.02)
        for i in range(30):
            await client.send({"type": "approval", "call_id": f"junk-{i}", "approved": True})
        refused = [frame["code"] for frame in await client.drain(0.5) if frame["type"] == "error"]
        await platform.agent.wait_idle()
        decisions = [r for r in await platform.agent.log.read(client.session_id) if r.kind == "message_received"
                     and r.data["event"]["type"] != "text"]  # fmt: skip
        assert len(decisions) <= 2  # with the message: never more than 3 of this connection at once
        assert refused.count("busy") + refused.count("rate_limited") >= 28


async def test_a_client_that_stops_reading_cannot_pile_up_history_frames() -> None:
    chunk = "y" * 50_000

    def body(session: Session) -> None:
        for _ in range(40):
            session.reply(chunk)

    budget = 256 * 1024
    async with serving(body_agent(body), max_queued_bytes=budget) as platform:
        writer = await Client.open(platform.ws_url)
        await writer.hello()
        await writer.send({"type": "message", "text": "fill the log"})
        assert platform.agent is not None
        await platform.agent.wait_idle()
        await writer.close()
        stuck = await Client.open(platform.ws_url, max_queue=1, max_size=None)
        await stuck.hello(resume=writer.token)
        (server_side,) = platform._clients
        peak = 0
        for _ in range(300):  # ~ 2 MB of history each, were it not capped
            try:
                await stuck.send({"type": "history", "after_seq": 0})
            except ConnectionClosed:
                break
            await asyncio.sleep(0.002)
            peak = max(peak, sum(c.queued_bytes for c in platform._clients))
        assert peak <= budget
        assert server_side.dropped and server_side.queued_bytes == 0 and server_side.queue.empty()
        with pytest.raises(ConnectionClosed):
            while True:  # what it had buffered, then the end
                await stuck.ws.recv()
        for client in platform._clients:
            assert client.queued_bytes <= budget
            assert all(size <= budget // 2 for _, size, _ in list(client.queue._queue))  # type: ignore[attr-defined]


@pytest.mark.parametrize("body_kind", ["async", "sync"])
async def test_resuming_during_a_reply_stream_shows_each_reply_once(body_kind: str) -> None:
    agent = Agent("stream", log="memory://")
    state = agent.new_state("main", initial=True)
    count = 60

    async def async_body(session: Session) -> None:
        if session.event is None or session.event.text != "go":
            return
        for i in range(count):
            await session.reply(f"r{i}")
            await asyncio.sleep(0.001)

    def sync_body(session: Session) -> None:  # runs in a worker thread: replies cross into the loop
        if session.event is None or session.event.text != "go":
            return
        for i in range(count):
            session.reply(f"r{i}")
            time.sleep(0.001)

    state.set_body(async_body if body_kind == "async" else sync_body)
    state.when_event().go_to(state)
    async with serving(agent) as platform:
        slow_down_reads(agent)
        first = await Client.open(platform.ws_url)
        await first.hello()
        await first.send({"type": "message", "text": "go"})

        async def resume(delay: float) -> list[str]:
            await asyncio.sleep(delay)
            client = await Client.open(platform.ws_url, max_size=None)
            await client.send({"type": "hello", "resume": first.token})
            view: list[str] = []
            history_seen = False
            for frame in await client.drain(1.0):
                if frame["type"] == "history":
                    assert not history_seen and not view, "live frames before the history"
                    history_seen = True
                    view = [i["text"] for i in frame["items"] if i["type"] == "reply"]
                elif frame["type"] == "reply":
                    view.append(frame["text"])
            await client.close()
            return view

        views = await asyncio.gather(*(resume(k * 0.004) for k in range(20)))
        await agent.wait_idle()
        expected = [f"r{i}" for i in range(count)]
        assert [v for v in views if v != expected] == []
        await first.drain(0.05)  # a client that has not read what it was sent waits long for the close
        await first.close()


async def test_reconnect_history_shows_what_was_shown_live_errors_included() -> None:
    """A reloaded view equals the live one: a failing tool (shown as its step) and a failing model (shown
    as the apology reply) add no error item of their own; a body that raised shows the message shown live."""

    def boom(x: int) -> str:
        """Fail.

        Args:
            x: Anything.
        """
        raise ValueError("kaput")

    llm = ScriptedLLM([ScriptedLLM.tool_call("boom", {"x": 1}), "done", RuntimeError("model down")])
    agent = Agent("assistant", log="memory://")
    agent.add_tool(boom)
    reasoning = new_reasoning_state(agent, llm)
    crashing = agent.new_state("crashing")

    def crash(session: Session) -> None:
        raise KeyError("secret detail")

    crashing.set_body(crash)
    reasoning.when_event().with_condition(lambda s: s.event is not None and s.event.text == "crash").go_to(crashing)
    reasoning.when_event().go_to(reasoning)
    crashing.when_event().go_to(reasoning)

    def shown(frame: dict[str, Any]) -> tuple[str, str]:
        if frame["type"] == "reasoning_step":
            return ("reasoning_step", frame["step"]["kind"])
        if frame["type"] == "task_list":
            return ("task_list", json.dumps(frame["tasks"]))
        return (frame["type"], frame.get("text") or frame.get("message") or "")

    async with serving(agent) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()
        live: list[dict[str, Any]] = []
        for text, last in (("use the tool", "reasoning_finished"), ("ask again", "reasoning_finished"),
                           ("crash", "error")):  # fmt: skip
            await client.send({"type": "message", "text": text, "id": text.replace(" ", "-")})
            while True:
                live.append(await client.recv())
                if last in (live[-1]["type"], live[-1].get("step", {}).get("kind")):
                    break
            await agent.wait_idle()
        assert ("error", "Something went wrong while handling that (KeyError in state 'crashing').") in [
            shown(f) for f in live
        ]
        again = await Client.open(platform.ws_url)
        await again.hello(resume=client.token)
        history, _ = await again.until("history")
    # The user's messages too: shown live (``user`` frames) where a reload shows them.
    from_log = [shown(item) for item in history["items"]]
    assert from_log == [shown(f) for f in live]
    assert [f["text"] for f in live if f["type"] == "user"] == ["use the tool", "ask again", "crash"]
    assert "secret detail" not in json.dumps(history)


async def test_a_history_request_during_a_reply_stream_shows_each_reply_once(tmp_path: Path) -> None:
    """``history`` on a bound connection, while replies stream: the view rebuilt from it plus the live
    frames after it shows every reply once (as ``hello`` with a resume token does). A SQLite log, whose
    reads take long enough for replies to commit meanwhile (durability "full" made the race too slow to
    show: that variant passed without the fix)."""
    agent = Agent("stream", log=f"sqlite:///{tmp_path / 'log.db'}")
    state = agent.new_state("main", initial=True)
    count = 60

    async def body(session: Session) -> None:
        if session.event is None or session.event.text != "go":
            return
        for i in range(count):
            await session.reply(f"r{i}")
            await asyncio.sleep(0.001)

    state.set_body(body)
    state.when_event().go_to(state)
    async with serving(agent) as platform:
        slow_down_reads(agent)
        first = await Client.open(platform.ws_url)
        await first.hello()
        watchers = []
        for _ in range(20):
            watcher = await Client.open(platform.ws_url, max_size=None)
            await watcher.hello(resume=first.token)
            await watcher.until("history")
            watchers.append(watcher)
        await first.send({"type": "message", "text": "go"})

        async def reload(client: Client, delay: float) -> list[str]:
            view: list[str] = []
            reader = asyncio.ensure_future(client.drain(1.0))
            await asyncio.sleep(delay)
            await client.send({"type": "history", "after_seq": 0})
            for frame in await reader:
                if frame["type"] == "history":
                    view = [i["text"] for i in frame["items"] if i["type"] == "reply"]  # the UI redraws
                elif frame["type"] == "reply":
                    view.append(frame["text"])
            await client.close()
            return view

        views = await asyncio.gather(*(reload(w, k * 0.004) for k, w in enumerate(watchers)))
        await agent.wait_idle()
        expected = [f"r{i}" for i in range(count)]
        assert [v for v in views if v != expected] == []
        await first.drain(0.05)
        await first.close()
