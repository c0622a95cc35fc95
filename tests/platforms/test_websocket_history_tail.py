"""A history request reads the end of the session, not all of it: a long session's history costs what it
shows, so a client asking again and again cannot make the server read the whole log each time. Real
websockets on loopback."""

from __future__ import annotations

from typing import Any

from baf.core.session import Session
from baf.log.memory import MemoryLog
from baf.log.record import Record, RecordKind

from .helpers import Client, body_agent
from .test_websocket_protocol import serving

EXCHANGES = 2000


class CountingLog(MemoryLog):
    """A memory log that counts the records its reads return (``read`` and ``read_last``)."""

    def __init__(self) -> None:
        super().__init__()
        self.records_read = 0

    async def read(self, session_id: str, after_seq: int = 0) -> list[Record]:
        records = await super().read(session_id, after_seq)
        self.records_read += len(records)
        return records

    async def read_last(self, session_id: str, count: int, before_seq: int | None = None) -> list[Record]:
        records = await super().read_last(session_id, count, before_seq)
        self.records_read += len(records)
        return records


def long_session(session_id: str, first: list[Record]) -> list[Record]:
    """A session's start and then its first message and reply (``first``, a real session's records)
    again ``EXCHANGES`` times, each with a text of its own."""
    start = next(r.seq for r in first if r.kind == RecordKind.MESSAGE_RECEIVED) - 1
    records = [Record(session_id, r.seq, r.kind, r.data, r.ts, r.version) for r in first[:start]]
    for n in range(EXCHANGES):
        for record in first[start:]:
            data = dict(record.data)
            if record.kind == RecordKind.MESSAGE_RECEIVED:
                data["text"] = f"question {n}"
                data["event"] = {**data["event"], "message": f"question {n}"}
            elif record.kind == RecordKind.REPLY:
                data["text"] = f"answer {n}"
            if data.get("event_seq") is not None:  # the step handled this exchange's message
                data["event_seq"] = start + 1 + n * (len(first) - start)
            records.append(Record(session_id, len(records) + 1, record.kind, data, record.ts, record.version))
    return records


async def test_a_history_reads_only_the_records_it_shows_however_long_the_session() -> None:
    def body(session: Session) -> None:
        session.reply("ok")

    agent = body_agent(body)
    log = CountingLog()
    agent.log = log
    async with serving(agent, history_limit=10) as platform:
        first = await Client.open(platform.ws_url)
        await first.hello()
        await first.send({"type": "message", "text": "question"})
        await first.until("reply")
        assert first.session_id is not None
        session_id = "ws-" + "l" * 24
        records = long_session(session_id, await log.read(first.session_id))
        await log.append(records)
        size = (len(records) - 3) // EXCHANGES  # records per exchange
        client = await Client.open(platform.ws_url)
        await client.hello(resume=platform.resume_token(session_id))
        resumed, _ = await client.until("history")
        log.records_read = 0
        for after in (0, len(records) - 10 * size):
            await client.send({"type": "history", "after_seq": after})
            history: dict[str, Any]
            history, _ = await client.until("history")
            texts = [item["text"] for item in history["items"]]
            assert texts == [f"{kind} {n}" for n in range(EXCHANGES - 5, EXCHANGES) for kind in ("question", "answer")]
            assert history["truncated"] is True and history["last_seq"] == len(records)
        assert resumed["items"] == history["items"]
        # Two requests for the newest ten items read a few pages of records, never the whole session.
        assert log.records_read <= 2 * 3 * 11 * size, (log.records_read, len(records))
