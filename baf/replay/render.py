"""Rich rendering of timelines, session lists and snapshots.

Each entry is one line (``#seq  time  label  text``), children indented under their reasoning group.
Long text (tool arguments and results, messages, replies) is cut to ``width`` characters with a
``… [N chars]`` marker; ``expand=True`` prints the entry's full data under it instead, which is what
"expandable" means on a terminal. Text from the log is never interpreted as rich markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from baf.log.redaction import Redactor
from baf.replay.state_at import SessionSnapshot
from baf.replay.timeline import Entry, EntryKind

__all__ = ["DEFAULT_WIDTH", "entry_line", "render_entry", "render_llm_request", "render_sessions",
           "render_snapshot", "render_timeline", "shorten"]  # fmt: skip

#: Characters of a text shown before it is cut.
DEFAULT_WIDTH: Final = 160

_LABELS: Final[dict[str, tuple[str, str]]] = {
    EntryKind.SESSION: ("● session", "bold"),
    EntryKind.MESSAGE: ("▶ user", "bold cyan"),
    EntryKind.TRANSITION: ("→ transition", "magenta"),
    EntryKind.VARIABLE: ("= variable", "dim"),
    EntryKind.REPLY: ("◀ reply", "bold green"),
    EntryKind.ERROR: ("✖ error", "bold red"),
    EntryKind.REASONING: ("┌ reasoning", "bold yellow"),
    EntryKind.LLM_CALL: ("◆ llm", "blue"),
    EntryKind.TOOL_CALL: ("⚙ tool", "cyan"),
    EntryKind.TASK_LIST: ("☰ tasks", "yellow"),
    EntryKind.STEP: ("· step", "dim"),
    EntryKind.ENGINE: ("· engine", "dim"),
    EntryKind.RECORD: ("· record", "dim"),
}


def shorten(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with a marker saying how long it was."""
    flat = " ".join(text.split())
    if width <= 0 or len(flat) <= width:
        return flat
    return f"{flat[: width - 1]}… [{len(text)} chars]"


def _time(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S.%f")[:-3] if ts else "-"


def _detail(entry: Entry, width: int) -> str:
    """The text after the label: the title, plus what matters for LLM and tool calls."""
    if entry.kind == EntryKind.LLM_CALL:
        response = entry.data.get("response")
        if not response:
            return f"{entry.title}  (no response recorded)"
        usage = response.get("usage") or {}
        return (f"{shorten(entry.title, width)}  [{usage.get('prompt_tokens', 0)} in / "
                f"{usage.get('completion_tokens', 0)} out tokens, {response.get('latency_ms', '?')} ms]")  # fmt: skip
    if entry.kind == EntryKind.TOOL_CALL:
        call = entry.data.get("call") or {}
        result = entry.data.get("result")
        name = call.get("name") or (result or {}).get("name")
        head = f"{name}({shorten(str(call.get('arguments', '?')), width // 2)})"
        if result is None:
            return f"{head} → (no result recorded)"
        return f"{head} → {shorten(str(result.get('content', '')), width)}"
    if entry.kind == EntryKind.REASONING:
        finished = (entry.data.get("finished") or {}).get("details") or {}
        children = (entry.unfiltered or entry).children  # the totals of the run, whatever a filter shows
        calls = sum(1 for c in children if c.kind == EntryKind.LLM_CALL)
        tokens = sum(_tokens(c) for c in children)
        # No outcome: still running when the log ends ("open"), or cut short when its step ended.
        outcome = finished.get("outcome") or ("in flight" if entry.status == "open" else "cut short")
        return f"{shorten(entry.title, width)}  [{outcome}, {calls} LLM calls, {tokens} tokens]"
    return shorten(entry.title, width)


def _tokens(entry: Entry) -> int:
    usage = ((entry.data.get("response") or {}).get("usage")) or {}
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def entry_line(entry: Entry, depth: int = 0, width: int = DEFAULT_WIDTH, marker: str = "") -> Text:
    """One entry as a line of text."""
    label, style = _LABELS.get(entry.kind, ("· " + entry.kind, "dim"))
    if depth:
        label = "│ " + label.lstrip("┌ ")
    line = Text(f"{marker:1}#{entry.seq:<6} {_time(entry.ts)}  ", style="dim")
    status_style = "red" if entry.status == "error" else style
    line.append(f"{label:<14}", style=status_style)
    line.append(" ")
    line.append(_detail(entry, width), style="red" if entry.status == "error" else "")
    return line


def render_entry(console: Console, entry: Entry, depth: int = 0, width: int = DEFAULT_WIDTH,
                 expand: bool = False) -> None:  # fmt: skip
    """Print one entry (and, expanded, its full data)."""
    console.print(entry_line(entry, depth, width), soft_wrap=True)
    if expand:
        console.print(Text(_indent(json.dumps(entry.data, ensure_ascii=False, indent=2, default=str), depth + 2)),
                      soft_wrap=True)  # fmt: skip


def render_timeline(
    console: Console, entries: Iterable[Entry], width: int = DEFAULT_WIDTH, expand: bool = False
) -> int:
    """Print entries with their children; return how many top-level entries were printed."""
    count = 0
    for entry in entries:
        render_entry(console, entry, 0, width, expand)
        for child in entry.children:
            render_entry(console, child, 1, width, expand)
        if entry.kind == EntryKind.REASONING and entry.data.get("finished"):
            finished = entry.data["finished"]
            console.print(Text(f" {'':7} {'':12}  └ {finished.get('summary', '')}", style="dim"), soft_wrap=True)
        count += 1
    return count


def render_sessions(console: Console, rows: Iterable[dict[str, Any]], title: str) -> None:
    """The session list (``baf replay LOG``)."""
    table = Table(title=title)
    for column in ("session", "agent", "first activity", "last activity", "records", "state", "errors"):
        table.add_column(column, overflow="fold")
    for row in rows:
        if row.get("unreadable") is not None:
            seq = getattr(row["unreadable"], "seq", "?")
            table.add_row(Text(row["session"]), "-", "-", "-", "?", Text(f"unreadable at #{seq}", style="red"), "?")
            continue
        table.add_row(
            Text(row["session"]), Text(row["agent"] or "-"), _date(row["first"]), _date(row["last"]),
            str(row["records"]), Text(row["state"] or "-"),
            Text(str(row["errors"]), style="red" if row["errors"] else ""),
        )  # fmt: skip
    console.print(table)


def _date(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def render_snapshot(console: Console, snapshot: SessionSnapshot, width: int = DEFAULT_WIDTH) -> None:
    """``--at SEQ``: the session as it stood after that record."""
    p = snapshot.projection
    record = snapshot.record
    console.print(Text(f"session {p.session_id} after #{snapshot.seq}" +
                       (f" ({record.kind}, {_date(record.ts)})" if record else ""), style="bold"))  # fmt: skip
    console.print(Text(f"agent: {p.agent or '-'}   state: {p.current_state or '-'}   errors: {p.errors}"))
    if p.open_step is not None:
        event = f"event #{p.open_step}" if p.open_step else "no event: the session start or a check"
        console.print(Text(f"a step is running ({event})", style="yellow"))
    if p.unstarted:
        console.print(Text(f"events waiting: {', '.join('#' + str(s) for s in sorted(p.unstarted))}", style="yellow"))
    console.print(Text("variables:", style="bold"))
    if not p.variables:
        console.print(Text("  (none)", style="dim"))
    for name, value in p.variables.items():
        console.print(Text(f"  {name} = {shorten(json.dumps(value, ensure_ascii=False, default=str), width)}"))
    state = "in flight" if snapshot.reasoning_in_flight else "last invocation"
    console.print(Text(f"task list ({state}" + (f", from #{snapshot.tasks_seq}" if snapshot.tasks_seq else "") + "):",
                       style="bold"))  # fmt: skip
    if not snapshot.tasks:
        console.print(Text("  (none)", style="dim"))
    marks = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "skipped": "[-]"}
    for task in snapshot.tasks:
        # shorten() trims the text it is given, so the separator stays outside it.
        result = f" — {shorten(str(task['result']), width)}" if task.get("result") else ""
        console.print(Text(f"  {marks.get(str(task.get('status')), '[?]')} {task.get('id')}. "
                           f"{task.get('description')}{result}"))  # fmt: skip
    console.print(Text("conversation:", style="bold"))
    if not p.history:
        console.print(Text("  (none)", style="dim"))
    for chat in p.history:
        console.print(Text(f"  #{chat.seq:<6} {chat.role:>9}: {shorten(chat.text, width)}"))


def render_llm_request(console: Console, request: dict[str, Any], redactor: Redactor | None = None) -> None:
    """The full request of one LLM call, as the model received it."""
    text = json.dumps(request, ensure_ascii=False, indent=2, default=str)
    console.print(Text(redactor.redact_text(text) if redactor is not None else text), soft_wrap=True)


def _indent(text: str, depth: int) -> str:
    pad = "   " * depth
    return "\n".join(pad + line for line in text.splitlines())
