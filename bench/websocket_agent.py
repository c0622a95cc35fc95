"""The agent bench_websocket.py runs as ``baf serve`` workers: its echo agent, listening on ``BAF_BENCH_PORT``
(the workers of one host share it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_websocket import build_agent

agent, platform = build_agent(int(os.environ.get("BAF_BENCH_PORT", "8765")))
