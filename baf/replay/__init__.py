"""Replay: read a session back from its log.

- :mod:`baf.replay.timeline`: records grouped into a readable timeline;
- :mod:`baf.replay.render`: that timeline (and session lists, snapshots) on a rich console;
- :mod:`baf.replay.state_at`: the session as it stood after any record, by the runtime's own fold;
- :mod:`baf.replay.export`: JSON lines and OpenTelemetry (OTLP/JSON) traces;
- :mod:`baf.replay.interactive`: stepping through the timeline with line commands;
- :mod:`baf.replay.reading`: loading sessions and summaries from a log;
- :mod:`baf.replay.rerun`: deterministic re-run of the agent's current code over a recorded session;
- :mod:`baf.replay.fork`: a new session from any seq of an old one, continued live.

Nothing here writes to the log or runs agent code, except ``rerun`` (agent code on a fresh in-memory
log) and ``fork`` (a new session in the same log).
"""

from baf.replay.export import export_jsonl, export_otel
from baf.replay.fork import fork
from baf.replay.rerun import Divergence, RerunReport, assert_replays, rerun
from baf.replay.state_at import SessionSnapshot, state_at
from baf.replay.timeline import Entry, EntryFilter, EntryKind, build_timeline, full_llm_request, iter_timeline

__all__ = [
    "Divergence",
    "Entry",
    "EntryFilter",
    "EntryKind",
    "RerunReport",
    "SessionSnapshot",
    "assert_replays",
    "build_timeline",
    "export_jsonl",
    "export_otel",
    "fork",
    "full_llm_request",
    "iter_timeline",
    "rerun",
    "state_at",
]
