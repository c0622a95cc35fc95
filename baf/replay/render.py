"""Rich rendering of timelines, session lists and snapshots.

Each entry is one line (``#seq  time  label  text``), children indented under their reasoning group.
Long text (tool arguments and results, messages, replies) is cut to ``width`` characters with a
``… [N chars]`` marker; ``expand=True`` prints the entry's full data under it instead, which is what
"expandable" means on a terminal. Text from the log is never interpreted as rich markup, and its control
characters are shown as escapes (:func:`visible`): a log may come from someone else, and what the
terminal shows must be what the log holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from baf.log.printable import visible, visible_json
from baf.log.record import Record
from baf.log.redaction import Redactor
from baf.replay.state_at import SessionSnapshot
from baf.replay.timeline import Entry, EntryKind
from baf.wording import counted

__all__ = [
    "DEFAULT_WIDTH",
    "RECORD_FIELDS",
    "SESSION_FIELDS",
    "entry_line",
    "fit_columns",
    "grep_context",
    "print_fitted",
    "records_plain",
    "render_entry",
    "render_group_end",
    "render_llm_request",
    "render_sessions",
    "render_snapshot",
    "render_timeline",
    "session_records",
    "sessions_plain",
    "short_data",
    "shorten",
    "visible",
    "visible_json",
]

#: Characters of a text shown before it is cut.
DEFAULT_WIDTH: Final = 160


def _shown(text: str, style: str = "") -> Text:
    """Text from the log, to print: never markup, its control characters visible."""
    return Text(visible(text), style=style)


_LABELS: Final[dict[str, tuple[str, str]]] = {
    EntryKind.SESSION: ("● session", "bold"),
    EntryKind.MESSAGE: ("▶ user", "bold cyan"),
    EntryKind.TRANSITION: ("→ transition", "magenta"),
    EntryKind.INTENT: ("? intent", "magenta"),
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


def _time(ts: float | None, narrow: bool = False) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S" if narrow else "%H:%M:%S.%f")[: 8 if narrow else -3]


#: Below this many columns the timeline drops the milliseconds.
NARROW = 100


def fit_columns(console: Console) -> int | None:
    """The width every line must fit in: the terminal's (or ``COLUMNS``'), so that nothing wraps mid-word;
    ``None`` when the output goes to a file or a pipe, where long lines are what a reader greps."""
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console.width
    return None


def print_fitted(console: Console, renderable: Any) -> None:
    """Print ``renderable`` (a table) in the terminal's width; to a file or a pipe (:func:`fit_columns`), as
    wide as it is, so that nothing is wrapped or cut (rich would squeeze it into 80 columns)."""
    if fit_columns(console) is not None:
        console.print(renderable)
        return
    natural = Measurement.get(console, console.options.update_width(1 << 16), renderable).maximum
    shown_at = console.width
    console.width = max(shown_at, natural)
    try:
        console.print(renderable)
    finally:
        console.width = shown_at


def grep_context(entry: Entry, grep: str, around: int = 30) -> str | None:
    """Where ``grep`` occurs in what ``--grep`` searches (the title and the full data), with ``around``
    characters either side, on one line; ``None`` if it does not occur."""
    text = " ".join(entry.search_text().split())
    at = text.lower().find(grep.lower())
    if at < 0:
        return None
    start, end = max(0, at - around), min(len(text), at + len(grep) + around)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


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
        counts = f"{counted(calls, 'LLM call')}, {counted(tokens, 'token')}"
        return f"{shorten(entry.title, width)}  [{outcome}, {counts}]"
    return shorten(entry.title, width)


def _tokens(entry: Entry) -> int:
    usage = ((entry.data.get("response") or {}).get("usage")) or {}
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def entry_line(
    entry: Entry, depth: int = 0, width: int = DEFAULT_WIDTH, marker: str = "", columns: int | None = None
) -> Text:
    """One entry as a line of text; with ``columns`` (see :func:`fit_columns`) cut to fit, with ``…``."""
    label, style = _LABELS.get(entry.kind, ("· " + visible(entry.kind), "dim"))
    if depth:
        label = "│ " + label.lstrip("┌ ")
    line = Text(f"{marker:1}#{entry.seq:<6} {_time(entry.ts, columns is not None and columns < NARROW)}  ",
                style="dim")  # fmt: skip
    status_style = "red" if entry.status == "error" else style
    line.append(f"{label:<14}", style=status_style)
    line.append(" ")
    line.append(visible(_detail(entry, width)), style="red" if entry.status == "error" else "")
    if columns is not None and line.cell_len > columns:
        line.truncate(columns, overflow="ellipsis")
    return line


def render_entry(console: Console, entry: Entry, depth: int = 0, width: int = DEFAULT_WIDTH,
                 expand: bool = False, grep: str | None = None) -> None:  # fmt: skip
    """Print one entry (and, expanded, its full data). With ``grep``, an entry whose line does not show
    the match gets a second line showing where it is."""
    columns = fit_columns(console)
    line = entry_line(entry, depth, width, columns=columns)
    console.print(line, soft_wrap=True)
    if grep and grep.lower() not in line.plain.lower():
        shown = Text(f" {'':7} {'':12}  {'│ ' if depth else ''}  ↳ matches: ", style="dim")
        room = (columns if columns is not None else 120) - shown.cell_len - len(grep)
        context = grep_context(entry, grep, max(10, room // 2 - 1))
        if context is not None:
            shown.append(visible(context), style="yellow")
            if columns is not None and shown.cell_len > columns:
                shown.truncate(columns, overflow="ellipsis")
            console.print(shown, soft_wrap=True)
    if expand:
        text = visible_json(json.dumps(entry.data, ensure_ascii=False, indent=2, default=str))
        console.print(Text(_indent(text, depth + 2)), soft_wrap=True)


def render_timeline(
    console: Console,
    entries: Iterable[Entry],
    width: int = DEFAULT_WIDTH,
    expand: bool = False,
    grep: str | None = None,
) -> int:
    """Print entries with their children; return how many top-level entries were printed. With ``grep``
    (``--grep``), each entry that matches but does not show it says where the match is."""
    count = 0
    for entry in entries:
        render_entry(console, entry, 0, width, expand, grep)
        for child in entry.children:
            render_entry(console, child, 1, width, expand, grep)
        if entry.kind == EntryKind.REASONING and entry.data.get("finished"):
            render_group_end(console, entry)
        count += 1
    return count


def render_group_end(console: Console, entry: Entry) -> None:
    """Print the closing line of a finished reasoning group: its final summary."""
    finished = entry.data.get("finished") or {}
    line = _shown(f" {'':7} {'':12}  └ {finished.get('summary', '')}", "dim")
    columns = fit_columns(console)
    if columns is not None and line.cell_len > columns:
        line.truncate(columns, overflow="ellipsis")
    console.print(line, soft_wrap=True)


def render_sessions(console: Console, rows: Iterable[dict[str, Any]], title: str) -> None:
    """The session list (``baf sessions LOG``, ``baf replay LOG``); ``title`` is text, not markup.

    An id is what one copies into the next command, so it is never wrapped: the list takes the fullest
    layout whose lines fit the terminal (or ``COLUMNS``) and leaves out, in turn, the first activity, the
    seconds, and the agent (named in the title instead when every session has the same one). When even
    the narrowest table does not fit, each session takes two lines: its id, then the rest. Output to a
    file or a pipe is not wrapped at all (:func:`fit_columns`); ``--plain`` and ``--json`` are for scripts.
    """
    rows = list(rows)
    if not rows:  # an empty table reads as a bug; say what it means
        console.print(_shown(f"{title}: no sessions yet"))
        return
    width = fit_columns(console)
    agents = {row["agent"] for row in rows if row.get("unreadable") is None}
    one_agent = next(iter(agents)) if len(agents) == 1 and len(rows) > 1 else None
    layouts = [(True, True, False), (False, True, False), (False, False, False)]
    if one_agent:
        title = f"{title} (agent {one_agent})"
        layouts = [(first, seconds, True) for first, seconds, _ in layouts]
    else:
        layouts.append((False, False, True))
    unbounded = console.options.update_width(1 << 16)  # measured as if any width would do
    for first, seconds, agentless in layouts:
        table = _sessions_table(rows, title, first=first, seconds=seconds, agent=not agentless)
        natural = Measurement.get(console, unbounded, table).maximum
        if width is None or natural <= width:
            print_fitted(console, table)
            return
    console.print(_shown(title, "bold"))
    for row in rows:
        console.print(_shown(row["session"]), no_wrap=True, crop=False, soft_wrap=True)
        console.print(Padding(_summary(row, agent=one_agent is None), (0, 0, 0, 3)))


def _sessions_table(rows: list[dict[str, Any]], title: str, *, first: bool, seconds: bool, agent: bool) -> Table:
    table = Table(title=_shown(title), box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True)
    table.add_column("session", no_wrap=True)
    if agent:
        table.add_column("agent", no_wrap=True)
    if first:
        table.add_column("first activity", no_wrap=True)
    table.add_column("last activity", no_wrap=True)
    for column in ("records", "state", "errors"):
        table.add_column(column, no_wrap=True, justify="right" if column != "state" else "left")
    for row in rows:
        cells: list[Any] = [_shown(row["session"])]
        if row.get("unreadable") is not None:
            seq = getattr(row["unreadable"], "seq", "?")
            cells += ["-"] * (agent + first + 1) + ["?", Text(f"unreadable at #{seq}", style="red"), "?"]
        else:
            cells += [_shown(row["agent"] or "-")] if agent else []
            cells += [_date(row["first"])] if first else []
            cells += [_date(row["last"], narrow=not seconds), str(row["records"]), _shown(row["state"] or "-"),
                      Text(str(row["errors"]), style="red" if row["errors"] else "")]  # fmt: skip
        table.add_row(*cells)
    return table


def _summary(row: dict[str, Any], *, agent: bool) -> Text:
    """A session's row as one line, for the two-line layout of a very narrow terminal."""
    if row.get("unreadable") is not None:
        return Text(f"unreadable at #{getattr(row['unreadable'], 'seq', '?')}", style="red")
    parts = [row["agent"] or "-"] if agent else []
    parts += [_date(row["last"], narrow=True), f"{row['records']} records", row["state"] or "-"]
    line = _shown(" · ".join(parts), "dim")
    line.append(f" · {row['errors']} errors", style="red" if row["errors"] else "dim")
    return line


#: The fields of ``baf sessions --plain`` (a header line first) and ``--json``, in order.
SESSION_FIELDS: Final = ("session", "agent", "first_activity", "last_activity", "records", "state", "errors",
                         "unreadable")  # fmt: skip


def session_records(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session list for scripts: one dict per session with :data:`SESSION_FIELDS` (times in Unix
    seconds; ``unreadable`` the error of a session that could not be read, else ``None``; secrets of the
    environment redacted from it, as from the ids)."""
    redact = Redactor.from_environment().redact_text
    return [
        {
            "session": row["session"], "agent": row["agent"], "first_activity": row["first"],
            "last_activity": row["last"], "records": row["records"], "state": row["state"],
            "errors": row["errors"],
            "unreadable": None if row.get("unreadable") is None else redact(str(row["unreadable"])),
        }
        for row in rows
    ]  # fmt: skip


def sessions_plain(rows: Iterable[dict[str, Any]]) -> list[str]:
    """``baf sessions --plain``: a header, then one session a line, fields separated by tabs; times in ISO
    8601 with the UTC offset, unknown fields empty, tabs and line breaks inside a field escaped."""
    lines = ["\t".join(SESSION_FIELDS)]
    for record in session_records(rows):
        cells = []
        for name in SESSION_FIELDS:
            value = record[name]
            if name.endswith("_activity") and value is not None:
                value = datetime.fromtimestamp(value).astimezone().isoformat(timespec="seconds")
            cells.append("" if value is None else _plain_cell(str(value)))
        lines.append("\t".join(cells))
    return lines


#: The fields of ``baf log --plain``, in order.
RECORD_FIELDS: Final = ("seq", "time", "kind", "data")

#: How much of a record's data ``baf log`` shows (``--json`` shows all of it).
_DATA_SHOWN = 300


def short_data(record: Record) -> str:
    """The record's data as JSON, safe to print, cut after :data:`_DATA_SHOWN` characters."""
    data = json.dumps(record.data, ensure_ascii=False)
    return visible_json(data if len(data) < _DATA_SHOWN else data[: _DATA_SHOWN - 3] + "...")


def records_plain(records: Iterable[Record]) -> list[str]:
    """``baf log --plain`` (and ``baf log`` to a file or a pipe): a header, then one record a line, fields
    separated by tabs: seq, time in ISO 8601 with the UTC offset (empty if unknown), kind, and the data as
    :func:`short_data` shows it (JSON has no tab or line break of its own)."""
    lines = ["\t".join(RECORD_FIELDS)]
    for r in records:
        when = datetime.fromtimestamp(r.ts).astimezone().isoformat(timespec="seconds") if r.ts else ""
        lines.append("\t".join((str(r.seq), when, _plain_cell(r.kind), short_data(r))))
    return lines


def _plain_cell(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return visible(escaped)


def _date(ts: float | None, narrow: bool = False) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M" if narrow else "%Y-%m-%d %H:%M:%S") if ts else "-"


def render_snapshot(console: Console, snapshot: SessionSnapshot, width: int = DEFAULT_WIDTH) -> None:
    """``--at SEQ``: the session as it stood after that record."""
    p = snapshot.projection
    record = snapshot.record
    console.print(_shown(f"session {p.session_id} after #{snapshot.seq}" +
                       (f" ({record.kind}, {_date(record.ts)})" if record else ""), "bold"))  # fmt: skip
    console.print(_shown(f"agent: {p.agent or '-'}   state: {p.current_state or '-'}   errors: {p.errors}"))
    if p.open_step is not None:
        event = f"event #{p.open_step}" if p.open_step else "no event: the session start or a check"
        console.print(_shown(f"a step is running ({event})", "yellow"))
    if p.unstarted:
        console.print(_shown(f"events waiting: {', '.join('#' + str(s) for s in sorted(p.unstarted))}", "yellow"))
    console.print(_shown("variables:", "bold"))
    if not p.variables:
        console.print(_shown("  (none)", "dim"))
    for name, value in p.variables.items():
        console.print(_shown(f"  {name} = {shorten(json.dumps(value, ensure_ascii=False, default=str), width)}"))
    state = "in flight" if snapshot.reasoning_in_flight else "last invocation"
    console.print(_shown(f"task list ({state}" + (f", from #{snapshot.tasks_seq}" if snapshot.tasks_seq else "") + "):",
                       "bold"))  # fmt: skip
    if not snapshot.tasks:
        console.print(_shown("  (none)", "dim"))
    marks = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "skipped": "[-]"}
    for task in snapshot.tasks:
        # shorten() trims the text it is given, so the separator stays outside it.
        result = f" — {shorten(str(task['result']), width)}" if task.get("result") else ""
        console.print(_shown(f"  {marks.get(str(task.get('status')), '[?]')} {task.get('id')}. "
                           f"{task.get('description')}{result}"))  # fmt: skip
    console.print(_shown("conversation:", "bold"))
    if not p.history:
        console.print(_shown("  (none)", "dim"))
    for chat in p.history:
        console.print(_shown(f"  #{chat.seq:<6} {chat.role:>9}: {shorten(chat.text, width)}"))


def render_llm_request(console: Console, request: dict[str, Any], redactor: Redactor | None = None) -> None:
    """The full request of one LLM call, as the model received it."""
    text = json.dumps(request, ensure_ascii=False, indent=2, default=str)
    console.print(Text(visible_json(redactor.redact_text(text) if redactor is not None else text)), soft_wrap=True)


def _indent(text: str, depth: int) -> str:
    pad = "   " * depth
    return "\n".join(pad + line for line in text.splitlines())
