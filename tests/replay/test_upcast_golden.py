"""Schema evolution end to end: a record in an older shape, written by hand into a real SQLite log,
is lifted by an upcaster on read and then replays like a current one.

The test pretends the current version is 3 (a private ``Upcasters`` registry, holding baf's real
upcasters, swapped in for the real one) and that version 2 of ``llm_response`` kept its token counts as
``{"tokens": {"in": .., "out": ..}}``. The golden log itself is version 1: it goes through baf's real
version 1 -> 2 upcasters first, then the pretend step.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from baf.log import upcast as upcast_module
from baf.log.projection import project
from baf.log.upcast import Upcasters
from baf.replay import build_timeline, export_otel
from baf.replay.timeline import EntryKind

from .helpers import GOLDEN_SESSION, copy_golden, read_records

OLD_RESPONSE = {"loop": "reasoning", "run": 0, "turn": 0, "step": 0,
                "model": "old-model", "latency_ms": 12.5, "text": "from an old baf",
                "tool_calls": [], "tokens": {"in": 11, "out": 7}}  # fmt: skip


@pytest.fixture
def version_3(monkeypatch: pytest.MonkeyPatch) -> Upcasters:
    registry = Upcasters(current_version=3)
    registry._steps.update(upcast_module.UPCASTERS._steps)  # baf's own 1 -> 2 steps

    @registry.register("llm_response", from_version=2)
    def tokens_to_usage(data: dict[str, Any]) -> dict[str, Any]:
        if "tokens" not in data:
            return data  # lifted from version 1 by baf's own step: already has usage
        tokens = data.pop("tokens")
        data["usage"] = {"prompt_tokens": tokens["in"], "completion_tokens": tokens["out"]}
        return data

    monkeypatch.setattr(upcast_module, "UPCASTERS", registry)
    return registry


async def test_hand_written_old_record_is_upcast_and_replays(tmp_path: Path, version_3: Upcasters) -> None:
    path = copy_golden(tmp_path)
    with sqlite3.connect(path) as db:
        # The golden records are version 1 (lifted twice); these two were written by a pretend
        # version 2, in its shape.
        last = db.execute("SELECT MAX(seq) FROM baf_records WHERE session_id = ?", (GOLDEN_SESSION,)).fetchone()[0]
        rows = [
            (
                GOLDEN_SESSION,
                last + 1,
                1_700_000_000.0,
                "llm_request",
                2,
                json.dumps(
                    {
                        "loop": "reasoning",
                        "run": 0,
                        "turn": 0,
                        "step": 0,
                        "model": "old-model",
                        "messages": [{"role": "user", "content": "old"}],
                        "tools": [],
                    }
                ),
            ),
            (GOLDEN_SESSION, last + 2, 1_700_000_001.0, "llm_response", 2, json.dumps(OLD_RESPONSE)),
        ]
        db.executemany("INSERT INTO baf_records (session_id, seq, ts, kind, version, data) VALUES (?,?,?,?,?,?)", rows)
    db.close()

    records = await read_records(path)
    assert all(r.version == 3 for r in records)
    old = records[-1]
    assert old.data["usage"] == {"prompt_tokens": 11, "completion_tokens": 7} and "tokens" not in old.data
    assert project(GOLDEN_SESSION, records).current_state == "farewell"

    call = build_timeline(records)[-1]
    assert call.kind == EntryKind.LLM_CALL and call.data["response"]["usage"]["completion_tokens"] == 7
    spans = export_otel(records)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    attrs = {a["key"]: a["value"] for a in spans[-1]["attributes"]}
    assert attrs["gen_ai.usage.input_tokens"] == {"intValue": "11"}

    # The file itself is untouched: records are never rewritten on disk.
    with sqlite3.connect(path) as db:
        stored = db.execute("SELECT version, data FROM baf_records WHERE seq = ?", (last + 2,)).fetchone()
    db.close()
    assert stored[0] == 2 and json.loads(stored[1]) == OLD_RESPONSE
