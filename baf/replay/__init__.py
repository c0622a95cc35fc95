"""Replay: read a session back from its log.

- :mod:`baf.replay.timeline`: records grouped into a readable timeline;
- :mod:`baf.replay.render`: that timeline (and session lists, snapshots) on a rich console;
- :mod:`baf.replay.state_at`: the session as it stood after any record, by the runtime's own fold;
- :mod:`baf.replay.export`: JSON lines and OpenTelemetry (OTLP/JSON) traces;
- :mod:`baf.replay.interactive`: stepping through the timeline with line commands;
- :mod:`baf.replay.reading`: loading sessions and summaries from a log.

Nothing here writes to the log or runs agent code.
"""

from baf.replay.export import export_jsonl, export_otel
from baf.replay.state_at import SessionSnapshot, state_at
from baf.replay.timeline import Entry, EntryFilter, EntryKind, build_timeline, full_llm_request, iter_timeline

__all__ = [
    "Entry",
    "EntryFilter",
    "EntryKind",
    "SessionSnapshot",
    "build_timeline",
    "export_jsonl",
    "export_otel",
    "full_llm_request",
    "iter_timeline",
    "state_at",
]
