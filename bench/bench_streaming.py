"""Benchmark: token streaming, from the model server's first byte to the first delta on the websocket.

Three processes on loopback, so none shares an event loop (or the GIL) with another:

- a local OpenAI-compatible server that streams: after ``--ttfb`` ms it writes the first piece of text,
  then one piece every ``--interval`` ms (``--pieces`` in all), then the usage chunk and ``[DONE]``. It
  notes, per request, when it wrote its first and its last byte;
- the agent: a reasoning state on ``LLMOpenAI(stream=True)`` (and, for comparison, ``stream=False``), a
  SQLite log, and a ``WebSocketPlatform``;
- the client (this process): sends a message, waits for the reply, sends the next (``--messages``).

All times are taken with the same monotonic clock (``CLOCK_MONOTONIC``, shared by every process on the
machine) and reported from the moment the client sent its message. Reported (median and p90):

- ``first byte``: the model server wrote its first piece of text;
- ``first delta``: the first ``reply_delta`` frame reached the client; the overhead is ``first delta -
  first byte``: HTTP, SSE parsing, the kernel, the platform's queue, the websocket, the client;
- ``reply``: the final ``reply`` frame reached the client, after the server's last byte (the response is
  recorded and committed first), and with ``stream=False`` the time to the first text the user sees.

::

    python bench/bench_streaming.py                 # ~30 s (--messages 30)
    python bench/bench_streaming.py --quick         # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def now() -> float:
    """Seconds on the clock every process of this machine shares."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# -- the model server ----------------------------------------------------------------------------------


def serve_model(ttfb: float, interval: float, pieces: int) -> None:
    """Stream answers to every chat completion; ``GET /timings`` returns when each one's bytes went out."""
    timings: list[dict[str, float]] = []
    lock = threading.Lock()

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {"id": "b", "object": "chat.completion.chunk", "model": "bench",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
        return f"data: {json.dumps(body)}\n\n".encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Each write leaves at once, as a model server's would: no Nagle wait for the previous ACK.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            with lock:
                data = json.dumps(timings).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            arrived = now()
            request = json.loads(self.rfile.read(int(self.headers["content-length"])))
            words = [f"word{i} " for i in range(pieces)]
            if not request.get("stream"):
                time.sleep(ttfb + interval * (pieces - 1))
                body = {"id": "b", "object": "chat.completion", "model": "bench",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(words)},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": pieces}}  # fmt: skip
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                first = last = now()
            else:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(chunk({"role": "assistant", "content": ""}))
                self.wfile.flush()
                time.sleep(ttfb)
                first = now()
                for i, word in enumerate(words):
                    if i:
                        time.sleep(interval)
                    self.wfile.write(chunk({"content": word}))
                    self.wfile.flush()
                usage = {"id": "b", "object": "chat.completion.chunk", "choices": [],
                         "usage": {"prompt_tokens": 10, "completion_tokens": pieces}}  # fmt: skip
                self.wfile.write(chunk({}, "stop") + f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
                self.wfile.flush()
                last = now()
                self.close_connection = True
            with lock:
                timings.append({"arrived": arrived, "first": first, "last": last})

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # the parent closes stdin to stop
    server.shutdown()


# -- the agent -----------------------------------------------------------------------------------------


def serve_agent(model_url: str, stream: bool, db: str) -> None:
    """The agent with a websocket platform; prints its port, serves until stdin closes."""
    from baf import Agent
    from baf.library.state.reasoning_state_library import new_reasoning_state
    from baf.llm import LLMOpenAI
    from baf.platforms.websocket import WebSocketPlatform

    async def main() -> None:
        llm = LLMOpenAI("bench", base_url=model_url, stream=stream, timeout=30.0)
        agent = Agent("bench", log=f"sqlite:///{db}")
        state = new_reasoning_state(agent, llm, enable_task_planning=False, memory=0)
        state.when_event().go_to(state)
        platform = WebSocketPlatform("127.0.0.1", 0, ui=False, ping_interval=None)
        agent.add_platform(platform)
        async with agent:
            print(platform.port, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await llm.close()

    asyncio.run(main())


# -- the client ----------------------------------------------------------------------------------------


async def talk(port: int, messages: int) -> list[dict[str, float]]:
    from websockets.asyncio.client import connect

    seen: list[dict[str, float]] = []
    async with connect(f"ws://127.0.0.1:{port}/ws", ping_interval=None, compression=None) as ws:
        await ws.send(json.dumps({"type": "hello"}))
        while json.loads(await ws.recv())["type"] != "welcome":
            pass
        for i in range(messages):
            sent = now()
            await ws.send(json.dumps({"type": "message", "text": f"question {i}"}))
            first_delta = None
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "reply_delta" and first_delta is None:
                    first_delta = now()
                elif frame["type"] == "reply":
                    seen.append({"sent": sent, "first_delta": first_delta or float("nan"), "reply": now()})
                    break
                elif frame["type"] == "error":
                    raise RuntimeError(frame)
    return seen


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def stop(process: subprocess.Popen[str]) -> None:
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def run(stream: bool, args: argparse.Namespace) -> list[dict[str, float]]:
    model = child("--serve-model", str(args.ttfb), str(args.interval), str(args.pieces))
    agent = None
    try:
        assert model.stdout is not None
        model_port = int(model.stdout.readline())
        with tempfile.TemporaryDirectory() as tmp:
            agent = child(
                "--serve-agent", f"http://127.0.0.1:{model_port}/v1", str(int(stream)), str(Path(tmp) / "b.db")
            )
            assert agent.stdout is not None
            port = int(agent.stdout.readline())
            seen = asyncio.run(asyncio.wait_for(talk(port, args.messages + 2), 300))
            stop(agent)
            agent = None
        with urllib.request.urlopen(f"http://127.0.0.1:{model_port}/timings", timeout=10) as answer:
            timings = json.loads(answer.read())
    finally:
        if agent is not None:
            stop(agent)
        stop(model)
    assert len(timings) == len(seen), (len(timings), len(seen))
    rows = [{**client, **server} for client, server in zip(seen, timings, strict=True)]
    return rows[2:]  # the first two warm the connections and the code paths up


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * len(ordered)))]
    return f"{statistics.median(ordered) * 1000:8.2f} ms  (p90 {p90 * 1000:7.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=30, help="measured messages per mode (default 30)")
    parser.add_argument("--ttfb", type=float, default=0.2, help="the model's seconds before its first piece")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between pieces")
    parser.add_argument("--pieces", type=int, default=20, help="pieces of text per answer")
    parser.add_argument("--quick", action="store_true", help="5 messages, short answers")
    parser.add_argument("--serve-model", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--serve-agent", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_model:
        ttfb, interval, pieces = args.serve_model
        serve_model(float(ttfb), float(interval), int(pieces))
        return
    if args.serve_agent:
        url, stream, db = args.serve_agent
        serve_agent(url, stream == "1", db)
        return
    if args.quick:
        args.messages, args.pieces = 5, 5
    if not 1 <= args.messages <= 1000 or not 1 <= args.pieces <= 1000:
        raise SystemExit("--messages and --pieces must be 1..1000")

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus; model: first piece after "
          f"{args.ttfb * 1000:g} ms, {args.pieces} pieces {args.interval * 1000:g} ms apart; "
          f"{args.messages} messages per mode, SQLite log")  # fmt: skip
    streamed = run(True, args)
    print("\nLLMOpenAI(stream=True), from the client's send:")
    print(f"  model asked (request arrived)      {summary([r['arrived'] - r['sent'] for r in streamed])}")
    print(f"  model's first byte of text         {summary([r['first'] - r['sent'] for r in streamed])}")
    print(f"  first reply_delta at the client    {summary([r['first_delta'] - r['sent'] for r in streamed])}")
    print(f"  first delta - first byte (overhead){summary([r['first_delta'] - r['first'] for r in streamed])}")
    print(f"  reply at the client                {summary([r['reply'] - r['sent'] for r in streamed])}")
    print(f"  reply - model's last byte          {summary([r['reply'] - r['last'] for r in streamed])}")
    whole = run(False, args)
    print("\nLLMOpenAI(stream=False), the same model answering whole:")
    print(f"  model asked (request arrived)      {summary([r['arrived'] - r['sent'] for r in whole])}")
    print(f"  reply at the client (first text)   {summary([r['reply'] - r['sent'] for r in whole])}")
    print(f"  reply - model's last byte          {summary([r['reply'] - r['last'] for r in whole])}")
    ratio = statistics.median(r["first_delta"] - r["sent"] for r in streamed) / statistics.median(
        r["reply"] - r["sent"] for r in whole
    )
    print(f"\nfirst text the user sees, streamed / whole: {ratio:.2f}x")


if __name__ == "__main__":
    main()
