"""A local OpenAI-compatible server for tests: real HTTP on 127.0.0.1, scripted answers, no internet.

Each POST to ``/v1/chat/completions`` takes the next :class:`Reply` from the queue (or a 500 saying the
script ran out) and records what it received, with the time it arrived, so tests can check both the
request body and the waits between retries.

A :class:`StreamReply` answers as a stream of server-sent events (what ``"stream": true`` asks for),
with a pause between events, and can drop the connection mid-body; :func:`streamed` builds one from
text pieces and :func:`tool_call_fragment` builds the events that carry pieces of tool calls.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "StreamReply",
    "chunk",
    "completion",
    "error_reply",
    "serve",
    "streamed",
    "tool_call_fragment",
]


@dataclass(frozen=True)
class Reply:
    """One scripted answer. A dict body is sent as JSON; str/bytes are sent as they are."""

    status: int = 200
    body: dict[str, Any] | str | bytes = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (to provoke client timeouts)


@dataclass(frozen=True)
class StreamReply:
    """A streamed 200 answer: each event is one ``data:`` line (a dict as JSON, a str as it is, e.g.
    ``"[DONE]"``), sent ``interval`` seconds after the previous one.

    ``drop_after``: after that many events the connection is closed although the ``Content-Length``
    sent promised the whole stream, as a server or proxy dying mid-answer does.
    """

    events: list[dict[str, Any] | str]
    interval: float = 0.0
    drop_after: int | None = None
    content_type: str = "text/event-stream"


def chunk(delta: dict[str, Any] | None = None, finish_reason: str | None = None, **fields: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` event with a single choice holding ``delta``."""
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish_reason}
    return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": "fake-model", "choices": [choice], **fields}  # fmt: skip


def tool_call_fragment(
    index: int | None, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> dict[str, Any]:
    """A chunk carrying one fragment of a tool call (``None`` fields are left out)."""
    fragment: dict[str, Any] = {}
    if index is not None:
        fragment["index"] = index
    if id is not None:
        fragment["id"] = id
        fragment["type"] = "function"
    function = {key: value for key, value in (("name", name), ("arguments", arguments)) if value is not None}
    if function:
        fragment["function"] = function
    return chunk({"tool_calls": [fragment]})


def streamed(
    *pieces: str,
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int = 7,
    completion_tokens: int = 3,
    interval: float = 0.0,
    drop_after: int | None = None,
    done: bool = True,
) -> StreamReply:
    """A stream as OpenAI sends it: a role chunk, a chunk per text piece, the ``tool_calls`` chunks
    given (see :func:`tool_call_fragment`), a chunk with the finish reason, a usage chunk, ``[DONE]``."""
    events: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in pieces]
    events += tool_calls or []
    events.append(chunk({}, finish_reason="tool_calls" if tool_calls else "stop"))
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip
    events.append({"id": "chatcmpl-test", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    if done:
        events.append("[DONE]")
    return StreamReply(events, interval=interval, drop_after=drop_after)


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received."""

    path: str
    headers: dict[str, str]
    body: Any
    received_at: float  # time.monotonic()


def completion(
    text: str | None = "hello",
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int = 7,
    completion_tokens: int = 3,
) -> Reply:
    """A 200 reply shaped like a real chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return Reply(
        body={
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "fake-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def error_reply(status: int, message: str, headers: dict[str, str] | None = None, delay: float = 0.0) -> Reply:
    """An error reply in OpenAI's error format."""
    return Reply(
        status=status,
        body={"error": {"message": message, "type": "test_error", "code": None}},
        headers=headers or {},
        delay=delay,
    )


class _Server(ThreadingHTTPServer):
    # Handler threads are joined on close (no thread outlives a test), and they are woken early
    # through ``stopping`` when a reply is delayed, so closing stays fast.
    daemon_threads = False
    block_on_close = True

    def __init__(self, owner: FakeOpenAIServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner = owner

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The client gave up on a delayed reply (a timeout test) and closed the socket: expected here.
        pass


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so no keep-alive thread lingers after a test.
    protocol_version = "HTTP/1.0"
    timeout = 10  # a stuck client cannot hold a handler thread forever
    server: _Server

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        owner.requests.append(
            RecordedRequest(
                path=self.path,
                headers={key.lower(): value for key, value in self.headers.items()},
                body=body,
                received_at=time.monotonic(),
            )
        )
        if self.path.rstrip("/") != "/v1/chat/completions":
            reply = error_reply(404, f"fake server has no route {self.path}")
        else:
            try:
                reply = owner.replies.get_nowait()
            except queue.Empty:
                reply = error_reply(500, "fake server: the test scripted no reply for this request")
        if isinstance(reply, StreamReply):
            self._stream(reply)
            return
        if reply.delay and owner.stopping.wait(reply.delay):
            return  # the server is closing; nobody is waiting for this answer any more
        payload = reply.body
        if isinstance(payload, dict):
            data = json.dumps(payload).encode()
            content_type = "application/json"
        else:
            data = payload.encode() if isinstance(payload, str) else payload
            content_type = "application/json"  # deliberately claims JSON, as a broken server would
        self.send_response(reply.status)
        headers = {"Content-Type": content_type, "Content-Length": str(len(data)), **reply.headers}
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, reply: StreamReply) -> None:
        owner = self.server.owner
        encoded = [
            f"data: {json.dumps(event) if isinstance(event, dict) else event}\n\n".encode() for event in reply.events
        ]
        self.send_response(200)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Cache-Control", "no-cache")
        if reply.drop_after is not None:
            # The whole stream's length is promised, so the client can tell the answer was cut short.
            self.send_header("Content-Length", str(sum(len(data) for data in encoded)))
        self.end_headers()
        sent = encoded if reply.drop_after is None else encoded[: reply.drop_after]
        for number, data in enumerate(sent):
            if number and reply.interval and owner.stopping.wait(reply.interval):
                return
            self.wfile.write(data)
            self.wfile.flush()
        owner.streams_sent += 1
        # Returning ends the connection (HTTP/1.0): the end of a complete stream, or the drop of a cut one.

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


class FakeOpenAIServer:
    """The server plus its script and its recorded requests. Use :func:`serve` to run one."""

    def __init__(self) -> None:
        self.replies: queue.Queue[Reply | StreamReply] = queue.Queue()
        #: Streams sent to the end of their script (a dropped one counts once its part was sent).
        self.streams_sent = 0
        self.requests: list[RecordedRequest] = []
        self.stopping = threading.Event()
        self._server = _Server(self)
        # A short poll interval: shutdown() waits up to one interval, and it runs after every test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )

    @property
    def base_url(self) -> str:
        """The URL to give LLMOpenAI (``http://127.0.0.1:PORT/v1``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *replies: Reply | StreamReply) -> None:
        """Queue replies, answered in order."""
        for reply in replies:
            self.replies.put(reply)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def close(self) -> None:
        """Stop serving, wake delayed handlers, and join every thread."""
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@contextmanager
def serve() -> Iterator[FakeOpenAIServer]:
    """Run a fake server for the duration of a ``with`` block."""
    server = FakeOpenAIServer()
    server.start()
    try:
        yield server
    finally:
        server.close()
