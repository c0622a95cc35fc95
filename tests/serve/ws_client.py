"""A small WebSocket protocol client for the multi-worker delivery tests."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

#: The frames that show a session's records live (each carries the record's ``seq``).
LIVE = ("reply", "reasoning_step", "task_list")


class Client:
    """One connection: sends frames, and keeps every frame received in ``frames``."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []

    @classmethod
    async def open(cls, port: int) -> Client:
        return cls(await connect(f"ws://127.0.0.1:{port}/ws", open_timeout=30, ping_interval=None))

    async def send(self, **frame: Any) -> None:
        await self.ws.send(json.dumps(frame))

    async def until(self, kind: str, within: float = 30.0, **match: Any) -> dict[str, Any]:
        """Read frames until one of type ``kind`` (with the ``match`` fields) arrives; return it."""
        async with asyncio.timeout(within):
            while True:
                frame = json.loads(await self.ws.recv())
                self.frames.append(frame)
                if frame.get("type") == "error" and frame.get("code") != "agent":
                    raise AssertionError(frame)
                if frame.get("type") == kind and all(frame.get(k) == v for k, v in match.items()):
                    return frame

    async def hello(self, token: str | None = None, after_seq: int = 0) -> dict[str, Any]:
        if token is None:
            await self.send(type="hello")
        else:
            await self.send(type="hello", resume=token, after_seq=after_seq)
        return await self.until("welcome")

    async def ask(self, text: str, within: float = 30.0) -> dict[str, Any]:
        await self.send(type="message", text=text)
        return await self.until("reply", within, text=f"answer to {text}")

    async def until_seq(self, seq: int, within: float = 30.0) -> None:
        """Read frames until a live frame of record ``seq`` (or a later one) arrived."""
        async with asyncio.timeout(within):
            while not any(frame.get("seq", 0) >= seq for frame in self.live()):
                self.frames.append(json.loads(await self.ws.recv()))

    def live(self) -> list[dict[str, Any]]:
        """The live frames showing records, in the order received."""
        return [frame for frame in self.frames if frame.get("type") in LIVE]

    async def close(self) -> None:
        await self.ws.close()
