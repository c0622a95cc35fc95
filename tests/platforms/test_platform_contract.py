"""The platform contract kit, run against every adapter baf ships or shows: WebSocket, Recording, SSE."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import json
import logging
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from baf import Agent
from baf.core.session import Session
from baf.errors import ConfigurationError
from baf.platforms import Platform
from baf.platforms.websocket import WebSocketPlatform
from baf.testing import RecordingPlatform
from baf.testing.platform_contract import ContractClient, Output, PlatformContract, RecordingClient

from .helpers import Client


def _load_sse_example() -> Any:
    path = Path(__file__).resolve().parents[2] / "examples" / "sse_platform.py"
    spec = importlib.util.spec_from_file_location("examples_sse_platform", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sse_example = _load_sse_example()
_user_numbers = itertools.count(1)


class TestRecordingPlatform(PlatformContract):
    def make_platform(self) -> Platform:
        return RecordingPlatform()

    async def open_client(self, agent: Agent, platform: Platform) -> ContractClient:
        assert isinstance(platform, RecordingPlatform)
        return RecordingClient(agent, platform, f"user-{next(_user_numbers)}")


class WebSocketClient(ContractClient):
    def __init__(self, client: Client) -> None:
        self.client = client

    async def send(self, text: str) -> None:
        await self.client.send({"type": "message", "text": text})

    async def next_output(self, wait: float) -> Output:
        frame = await self.client.recv(wait)
        if frame["type"] == "reply":
            return Output("reply", frame.get("text", ""), frame)
        if frame["type"] == "error":
            return Output("error", frame["message"], frame)
        if frame["type"] == "reply_delta":
            return Output("delta", frame["text"], frame)
        return Output("other", "", frame)

    async def close(self) -> None:
        await self.client.close()

    async def decide(self, call_id: str, approved: bool, reason: str = "") -> bool:
        await self.client.send({"type": "approval", "call_id": call_id, "approved": approved, "reason": reason})
        return True


class TestWebSocketPlatform(PlatformContract):
    def make_platform(self) -> Platform:
        return WebSocketPlatform("127.0.0.1", 0)

    async def open_client(self, agent: Agent, platform: Platform) -> ContractClient:
        assert isinstance(platform, WebSocketPlatform)
        client = await Client.open(platform.ws_url)
        await client.hello()
        return WebSocketClient(client)


async def http(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """One HTTP/1.1 request with a JSON body; the status and the decoded JSON answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode() if body is not None else b""
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, payload = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


class SSEClient(ContractClient):
    """A session, its event stream parsed in a background task, and POSTs for messages."""

    def __init__(self, port: int, token: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.port, self.token = port, token
        self.reader, self.writer = reader, writer
        self.outputs: asyncio.Queue[Output] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, port: int) -> SSEClient:
        status, created = await http(port, "POST", "/sessions")
        assert status == 201
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /events?token={created['token']} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        while (await reader.readline()).strip():
            pass
        assert await reader.readline() == b": connected\n"  # registered: replies can no longer be missed
        return cls(port, created["token"], reader, writer)

    async def _read(self) -> None:
        event = ""
        while line := (await self.reader.readline()).decode():
            if line.startswith("event: "):
                event = line[7:].strip()
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                kind = event if event in ("reply", "error") else "other"
                await self.outputs.put(Output(kind, data.get("text") or data.get("message") or "", data))

    async def send(self, text: str) -> None:
        status, _ = await http(self.port, "POST", "/messages", {"token": self.token, "text": text})
        assert status == 202

    async def next_output(self, wait: float) -> Output:
        return await asyncio.wait_for(self.outputs.get(), wait)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.writer.close()


class TestSSEPlatform(PlatformContract):
    def make_platform(self) -> Platform:
        platform: Platform = sse_example.SSEPlatform("127.0.0.1", 0)
        return platform

    async def open_client(self, agent: Agent, platform: Platform) -> ContractClient:
        return await SSEClient.open(platform.port)  # type: ignore[attr-defined]


async def test_sse_example_refuses_bad_requests() -> None:
    platform = sse_example.SSEPlatform("127.0.0.1", 0)
    agent = Agent("sse", log="memory://")
    agent.new_state("idle", initial=True)
    agent.add_platform(platform)
    async with agent:
        port = platform.port
        assert (await http(port, "POST", "/messages", {"token": "sse-x.bad", "text": "hi"}))[0] == 403
        assert (await http(port, "POST", "/messages", {"text": "hi"}))[0] == 403
        assert (await http(port, "POST", "/messages", {"token": 1}))[0] == 400
        assert (await http(port, "GET", "/history?token=forged"))[0] == 403
        assert (await http(port, "GET", "/sessions"))[0] == 405
        assert (await http(port, "GET", "/nowhere"))[0] == 404
        assert await agent.log.sessions() == []


async def test_sse_example_ends_a_stream_that_stopped_reading() -> None:
    platform = sse_example.SSEPlatform("127.0.0.1", 0, queue_size=8)
    agent = Agent("sse", log="memory://")
    state = agent.new_state("main", initial=True)

    def flood(session: Session) -> None:
        if session.event is not None and session.event.text == "flood":
            for _ in range(300):  # ~18 MB: far more than socket buffers hold
                session.reply("x" * 60_000)

    state.set_body(flood)
    state.when_event().go_to(state)
    agent.add_platform(platform)
    async with asyncio.timeout(15), agent:  # a stream task stuck in drain() would also hang stop()
        _, created = await http(platform.port, "POST", "/sessions")
        reader, writer = await asyncio.open_connection("127.0.0.1", platform.port, limit=4096)
        writer.write(f"GET /events?token={created['token']} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        writer.transport.pause_reading()  # and never read again
        assert (await http(platform.port, "POST", "/messages", {"token": created["token"], "text": "flood"}))[0] == 202
        await agent.wait_idle()
        for _ in range(100):
            if not platform._tasks:
                break
            await asyncio.sleep(0.02)
        assert platform._tasks == set() and platform._streams == {} and platform._writers == {}
        writer.close()


def _taken_port() -> socket.socket:
    """A listening socket on a free loopback port: another server already there."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken


@pytest.mark.parametrize("make", [lambda port: WebSocketPlatform("127.0.0.1", port),
                                  lambda port: sse_example.SSEPlatform("127.0.0.1", port)])  # fmt: skip
async def test_a_port_in_use_is_a_configuration_error_naming_it(make: Callable[[int], Platform]) -> None:
    with _taken_port() as taken:
        port = taken.getsockname()[1]
        agent = Agent("twice", log="memory://")
        agent.new_state("idle", initial=True)
        agent.add_platform(make(port))
        with pytest.raises(ConfigurationError, match=f"cannot listen on 127.0.0.1:{port}: address already in use"):
            await agent.start()
        assert not agent.running


async def test_sse_example_stops_cleanly_with_a_stream_open(caplog: pytest.LogCaptureFixture) -> None:
    platform = sse_example.SSEPlatform("127.0.0.1", 0)
    agent = Agent("sse", log="memory://")
    agent.new_state("idle", initial=True)
    agent.add_platform(platform)
    async with agent:
        client = await SSEClient.open(platform.port)  # an open stream, like `curl -N .../events`
    await asyncio.sleep(0.05)  # where asyncio reports on the connection tasks that stop() ended
    await client.close()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.slow
def test_the_kit_runs_without_pytest_asyncio_auto_mode(tmp_path: Path) -> None:
    """A user's project, with pytest-asyncio in its default strict mode: the kit's tests still run."""
    import subprocess

    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\n")
    (tmp_path / "test_mine.py").write_text(
        "import itertools\n"
        "from baf.testing import RecordingPlatform\n"
        "from baf.testing.platform_contract import PlatformContract, RecordingClient\n"
        "users = itertools.count(1)\n\n"
        "class TestMine(PlatformContract):\n"
        "    def make_platform(self):\n"
        "        return RecordingPlatform()\n\n"
        "    async def open_client(self, agent, platform):\n"
        "        return RecordingClient(agent, platform, f'user-{next(users)}')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pytest.ini", "test_mine.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    # Strict mode skips an async test it was not told about (with a warning): none may be skipped.
    assert "10 passed" in result.stdout and "skipped" not in result.stdout, result.stdout
