"""Benchmark: a ``history`` request on a long session, over a real WebSocket on loopback.

A SQLite log holds one session of up to ``--records`` records, whole exchanges only (the start of a real
session, then its first message, step and reply repeated, each exchange with texts of its own). A client resumes it
and asks ``{"type": "history", "after_seq": 0}`` ``--requests`` times, one after another; reported: the
median and p90 time from the request to its ``history`` frame, and the items it carried (``history_limit``, 1,000).
Run it from a checkout to measure that checkout's baf (``PYTHONPATH=OTHER_CHECKOUT`` measures another)::

    python bench/bench_history.py --records 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from websockets.asyncio.client import connect

from baf import Agent
from baf.core.session import Session
from baf.log.record import Record, RecordKind
from baf.platforms.websocket import WebSocketPlatform


def agent_on(path: Path) -> Agent:
    agent = Agent("history_bench", log=f"sqlite:///{path}")
    state = agent.new_state("main", initial=True)

    def reply(session: Session) -> None:
        session.reply("ok")

    state.set_body(reply)
    state.when_event().go_to(state)
    return agent


async def until(ws: object, kind: str) -> dict[str, object]:
    while True:
        frame = json.loads(await ws.recv())  # type: ignore[attr-defined]
        if frame["type"] == kind:
            return frame  # type: ignore[no-any-return]


def repeated(session_id: str, first: list[Record], count: int) -> list[Record]:
    """``first``'s start, then its first exchange again and again while a whole one fits in ``count`` records."""
    start = next(r.seq for r in first if r.kind == RecordKind.MESSAGE_RECEIVED) - 1
    records = [Record(session_id, r.seq, r.kind, r.data, r.ts, r.version) for r in first[:start]]
    exchange = first[start:]
    n = 0
    while len(records) + len(exchange) <= count:
        message_seq = len(records) + 1
        for record in exchange:
            data = dict(record.data)
            if record.kind == RecordKind.MESSAGE_RECEIVED:
                data["text"] = f"question {n}"
                data["event"] = {**data["event"], "message": f"question {n}"}
            elif record.kind == RecordKind.REPLY:
                data["text"] = f"answer {n}"
            if data.get("event_seq") is not None:
                data["event_seq"] = message_seq
            records.append(Record(session_id, len(records) + 1, record.kind, data, record.ts, record.version))
        n += 1
    return records


async def main(records: int, requests: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        agent = agent_on(Path(folder) / "history.db")
        platform = WebSocketPlatform("127.0.0.1", 0)
        agent.add_platform(platform)
        async with agent, connect(f"ws://127.0.0.1:{platform.port}/ws") as ws:
            await ws.send(json.dumps({"type": "hello"}))
            welcome = await until(ws, "welcome")
            await ws.send(json.dumps({"type": "message", "text": "question"}))
            await until(ws, "reply")
            session_id = "ws-" + "b" * 24
            long = repeated(session_id, await agent.log.read(str(welcome["session_id"])), records)
            for start in range(0, len(long), 5000):
                await agent.log.append(long[start : start + 5000])
            await ws.send(json.dumps({"type": "hello", "resume": platform.resume_token(session_id)}))
            await until(ws, "history")
            took = []
            for _ in range(requests):
                began = time.perf_counter()
                await ws.send(json.dumps({"type": "history", "after_seq": 0}))
                history = await until(ws, "history")
                took.append(time.perf_counter() - began)
        took.sort()
        print(
            f"{len(long):,} records, {requests} history requests: median {statistics.median(took) * 1000:.1f} ms, "
            f"p90 {took[int(len(took) * 0.9)] * 1000:.1f} ms, {len(history['items'])} items "  # type: ignore[arg-type]
            f"(truncated: {history['truncated']})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.records, args.requests))
