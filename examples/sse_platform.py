"""A second platform adapter: plain HTTP in, server-sent events out. Standard library and asyncio only.

It is written against baf's public interface alone (``baf.platforms.Platform``, ``Agent.receive_event``,
``ReceiveTextEvent``), as a model for adapters of your own; docs/writing_a_platform.md walks through it.

Wire format::

    POST /sessions                      -> 201 {"session_id": ID, "token": TOKEN}
    GET  /events?token=TOKEN            -> 200 text/event-stream; events "reply", "error",
                                           "reasoning_step", "task_list", each with one JSON data line
    POST /messages {"token", "text"}    -> 202 {"accepted": true}
    GET  /history?token=TOKEN           -> 200 {"items": [...]} read from the session log

Errors are JSON ``{"error": ...}`` with 400 (bad request), 403 (bad token), 404, 405 or 413 (too large).
The token is the session id plus an HMAC of it, so nobody can post to or listen on another session.
Each event stream has a bounded queue: a listener that stops reading is disconnected, never waited for.

Run it::

    python examples/sse_platform.py            # then, in another shell:
    curl -s -XPOST localhost:8766/sessions
    curl -N "localhost:8766/events?token=..." &
    curl -s -XPOST localhost:8766/messages -d '{"token": "...", "text": "hi"}'
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import os
import secrets
from typing import Any
from urllib.parse import parse_qs, urlsplit

from baf import Agent, Session
from baf.core.events import ReceiveTextEvent
from baf.errors import ConfigurationError
from baf.platforms import Platform

__all__ = ["SSEPlatform"]

logger = logging.getLogger("examples.sse_platform")

_REASONS = {200: "OK", 201: "Created", 202: "Accepted", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 413: "Payload Too Large"}  # fmt: skip


class SSEPlatform(Platform):
    """HTTP + server-sent events. ``port=0`` picks a free port (see :attr:`port` once started)."""

    name = "sse"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8766,
        *,
        secret: bytes | None = None,
        max_body: int = 64 * 1024,
        queue_size: int = 256,
    ) -> None:
        super().__init__()
        self.host = host
        self._port = port
        self._secret = secret or secrets.token_bytes(32)
        self.max_body = max_body
        self.queue_size = queue_size
        self._server: asyncio.Server | None = None
        # Connection routing only: which event streams listen to which session. No other session state.
        self._streams: dict[str, set[asyncio.Queue[bytes | None]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Each stream's socket, so a stream that stopped reading can be cut off (see _publish).
        self._writers: dict[asyncio.Queue[bytes | None], asyncio.StreamWriter] = {}

    @property
    def port(self) -> int:
        """The port listened on."""
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        """Listen for HTTP requests."""
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self._port)
        except OSError as exc:  # mostly: the port is taken (a second copy of this server?)
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise ConfigurationError(f"sse platform cannot listen on {self.host}:{self._port}: {reason}; "
                                     "stop whatever uses it or pick another port") from exc  # fmt: skip
        logger.info("sse platform listening on http://%s:%d/", self.host, self.port)

    async def stop(self) -> None:
        """Close the event streams and stop listening."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for queues in self._streams.values():
            for queue in queues:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(None)  # ends the stream
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await server.wait_closed()

    # -- tokens ---------------------------------------------------------------------------------

    def _token(self, session_id: str) -> str:
        mac = hmac.new(self._secret, session_id.encode(), hashlib.sha256).digest()
        return f"{session_id}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"

    def _session_of(self, token: object) -> str | None:
        if not isinstance(token, str) or "." not in token:
            return None
        session_id = token.rpartition(".")[0]
        return session_id if hmac.compare_digest(self._token(session_id).encode(), token.encode()) else None

    # -- HTTP -----------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a client that hung up or sent garbage: nothing to answer
        except asyncio.CancelledError:
            # stop() cancelled this connection (an open event stream, say). Nobody awaits the task but
            # asyncio itself, which on Python 3.11 prints a traceback for a task that ends cancelled.
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = (await reader.readline()).decode("latin-1").split()
        if len(request_line) != 3:
            return await _respond(writer, 400, {"error": "malformed request line"})
        method, target, _ = request_line
        headers: dict[str, str] = {}
        while (line := (await reader.readline()).decode("latin-1").strip()) != "":
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        url = urlsplit(target)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(headers.get("content-length", "0") or 0)
        if length > self.max_body:
            return await _respond(writer, 413, {"error": f"bodies are limited to {self.max_body} bytes"})
        body = await reader.readexactly(length) if length else b""

        if url.path == "/sessions" and method == "POST":
            session_id = "sse-" + secrets.token_urlsafe(16)
            return await _respond(writer, 201, {"session_id": session_id, "token": self._token(session_id)})
        if url.path == "/messages" and method == "POST":
            return await self._post_message(writer, body)
        if url.path == "/events" and method == "GET":
            return await self._stream(writer, query.get("token"))
        if url.path == "/history" and method == "GET":
            return await self._history(writer, query.get("token"))
        if url.path in ("/sessions", "/messages", "/events", "/history"):
            return await _respond(writer, 405, {"error": f"{method} is not allowed on {url.path}"})
        return await _respond(writer, 404, {"error": "not found"})

    async def _post_message(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        try:
            payload = json.loads(body)
        except ValueError:
            return await _respond(writer, 400, {"error": "the body must be JSON"})
        if not isinstance(payload, dict) or not isinstance(payload.get("text"), str) or not payload["text"]:
            return await _respond(writer, 400, {"error": 'send {"token": ..., "text": "..."}'})
        session_id = self._session_of(payload.get("token"))
        if session_id is None:
            return await _respond(writer, 403, {"error": "bad token"})
        assert self.agent is not None
        # Returns once the message is durably recorded; the agent handles it in the session's mailbox.
        await self.agent.receive_event(ReceiveTextEvent(session_id, message=payload["text"]), self)
        await _respond(writer, 202, {"accepted": True})

    async def _history(self, writer: asyncio.StreamWriter, token: str | None) -> None:
        session_id = self._session_of(token)
        if session_id is None:
            return await _respond(writer, 403, {"error": "bad token"})
        assert self.agent is not None
        records = await self.agent.log.read(session_id)
        items = [{"seq": r.seq, "kind": r.kind, "text": r.data.get("text")}
                 for r in records if r.kind in ("message_received", "reply")]  # fmt: skip
        await _respond(writer, 200, {"items": items})

    async def _stream(self, writer: asyncio.StreamWriter, token: str | None) -> None:
        session_id = self._session_of(token)
        if session_id is None:
            return await _respond(writer, 403, {"error": "bad token"})
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(self.queue_size)
        self._streams.setdefault(session_id, set()).add(queue)
        self._writers[queue] = writer
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                         b"Connection: close\r\n\r\n: connected\n\n")  # fmt: skip
            await writer.drain()
            while (chunk := await queue.get()) is not None:
                writer.write(chunk)
                await writer.drain()
        finally:
            self._writers.pop(queue, None)
            streams = self._streams.get(session_id, set())
            streams.discard(queue)
            if not streams:
                self._streams.pop(session_id, None)

    # -- the Platform interface -----------------------------------------------------------------

    def _publish(self, session: Session, event: str, data: dict[str, Any]) -> None:
        chunk = f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
        for queue in list(self._streams.get(session.id, ())):
            try:
                queue.put_nowait(chunk)
            except asyncio.QueueFull:
                # The listener stopped reading: end its stream rather than let the agent wait for it.
                logger.warning("session %s: an event stream is not reading; closing it", session.id)
                self._streams[session.id].discard(queue)
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(None)
                # The stream's task is most likely blocked in drain() on that very client, where it would
                # never see the None: abort the socket, so drain() fails and the task ends.
                writer = self._writers.pop(queue, None)
                if writer is not None:
                    writer.transport.abort()

    async def reply(self, session: Session, message: str) -> None:
        """Send a ``reply`` event."""
        self._publish(session, "reply", {"text": message})

    async def reply_error(self, session: Session, message: str) -> None:
        """Send an ``error`` event."""
        self._publish(session, "error", {"message": message})

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        """Send a ``reasoning_step`` event."""
        self._publish(session, "reasoning_step", step.to_dict() if hasattr(step, "to_dict") else dict(step))

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        """Send a ``task_list`` event."""
        self._publish(session, "task_list", {"tasks": tasks})


async def _respond(writer: asyncio.StreamWriter, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")  # fmt: skip
    writer.write(head.encode() + body)
    await writer.drain()


def main() -> None:
    """Serve an echo agent on http://127.0.0.1:8766."""
    agent = Agent("sse-echo", log="memory://")
    state = agent.new_state("echo", initial=True)

    def echo(session: Session) -> None:
        if session.event is not None and session.event.text is not None:
            session.reply(f"You said: {session.event.text}")

    state.set_body(echo)
    state.when_event().go_to(state)
    agent.add_platform(SSEPlatform())
    # Show the platform's INFO line (where it listens); baf's own would show without this.
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        agent.run()  # Ctrl-C to stop
    except ConfigurationError as exc:
        raise SystemExit(f"sse_platform: {exc}") from None


if __name__ == "__main__":
    main()
