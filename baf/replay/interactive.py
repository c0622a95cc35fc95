"""Stepping through a timeline one entry at a time: ``baf replay LOG SESSION --interactive``.

A plain line-command loop (read a line, act, print), so it works over any terminal and is tested by
piping commands to stdin::

    n / next [K]      move forward (K entries)          p / prev [K]   move back
    j / jump SEQ      go to the entry covering SEQ      o / open       full LLM request at this entry
    e / expand        full data of this entry           s / state      session state after this entry
    l / list [K]      the K entries around this one     h / help       this text       q / quit

``open`` works on an LLM call, and on any entry inside a reasoning group (it opens the group's last
LLM call up to that point), rebuilding the request from the log's deltas.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TextIO

from rich.console import Console
from rich.text import Text

from baf.log.record import Record
from baf.log.redaction import Redactor
from baf.replay.render import (
    DEFAULT_WIDTH,
    entry_line,
    render_entry,
    render_llm_request,
    render_snapshot,
    visible,
)
from baf.replay.state_at import state_at
from baf.replay.timeline import Entry, EntryKind, flatten, full_llm_request

__all__ = ["HELP", "TimelineCursor", "run_interactive"]

HELP = __doc__.split("::", 1)[1].split("``open``", 1)[0].strip("\n") if __doc__ else ""


class TimelineCursor:
    """A position in the flattened timeline (reasoning groups' children are entries of their own)."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.items = flatten(entries)
        self.index = 0

    @property
    def current(self) -> tuple[int, Entry]:
        """``(depth, entry)`` under the cursor."""
        return self.items[self.index]

    def move(self, delta: int) -> bool:
        """Move by ``delta`` entries, stopping at the first or last one; False if that cut the move short."""
        target = self.index + delta
        self.index = min(max(target, 0), len(self.items) - 1)
        return self.index == target

    def jump(self, seq: int) -> bool:
        """Go to the entry that covers ``seq`` (or the first one after it); False if there is none.

        A reasoning group covers its own first and last records; a child covering ``seq`` wins over it.
        """
        covering = [i for i, (_, entry) in enumerate(self.items) if seq in entry.seqs]
        leaves = [i for i in covering if not self.items[i][1].children]
        after = [i for i, (_, entry) in enumerate(self.items) if entry.seq >= seq]
        for candidates in (leaves, covering, after):
            if candidates:
                self.index = candidates[0]
                return True
        return False

    def llm_call_seq(self) -> int | None:
        """The ``llm_request`` seq to open here: this LLM call, or the latest one before it in its group."""
        for index in range(self.index, -1, -1):
            depth, entry = self.items[index]
            if entry.kind == EntryKind.LLM_CALL and entry.data.get("request") is not None:
                return entry.seq
            if depth == 0 and index != self.index:
                return None  # left the reasoning group
            if entry.kind == EntryKind.REASONING:
                return None
        return None


def run_interactive(records: list[Record], entries: list[Entry], stdin: TextIO, console: Console,
                    redactor: Redactor | None = None, width: int = DEFAULT_WIDTH) -> None:  # fmt: skip
    """Read commands from ``stdin`` until ``quit`` or end of input, printing to ``console``."""
    if not entries:
        console.print("(no entries)")
        return
    cursor = TimelineCursor(entries)
    session_id = records[0].session_id
    console.print(Text("h for help, q to quit", style="dim"))
    _show(console, cursor, width)
    for raw in stdin:
        words = raw.split()
        if not words:
            continue
        command, args = words[0].lower(), words[1:]
        try:
            if command in ("q", "quit", "exit"):
                return
            if command in ("h", "help", "?"):
                console.print(Text(HELP))
            elif command in ("n", "next", "p", "prev", "previous"):
                step = _number(args, 1, f"{command} takes a number of entries, e.g. {command} 3")
                if not cursor.move(step if command.startswith("n") else -step):
                    console.print(Text("(at the end)" if command.startswith("n") else "(at the start)", style="dim"))
                _show(console, cursor, width)
            elif command in ("j", "jump"):
                usage = f"{command} takes a record number, e.g. {command} 28"
                if not args:
                    raise _BadArgument(usage)
                target = _number(args, 0, usage)
                if not cursor.jump(target):
                    console.print(Text(f"no entry at or after #{target}", style="red"))
                _show(console, cursor, width)
            elif command in ("e", "expand"):
                depth, entry = cursor.current
                render_entry(console, entry, depth, width, expand=True)
            elif command in ("o", "open"):
                seq = cursor.llm_call_seq()
                request = full_llm_request(records, seq) if seq is not None else None
                if request is None:
                    console.print(Text("no LLM request at this entry", style="red"))
                else:
                    console.print(Text(f"LLM request #{seq}", style="bold"))
                    render_llm_request(console, request, redactor)
            elif command in ("s", "state"):
                render_snapshot(console, state_at(session_id, records, cursor.current[1].last_seq), width)
            elif command in ("l", "list"):
                around = _number(args, 5, f"{command} takes a number of entries, e.g. {command} 3")
                low, high = max(0, cursor.index - around), min(len(cursor.items), cursor.index + around + 1)
                for index in range(low, high):
                    depth, entry = cursor.items[index]
                    console.print(entry_line(entry, depth, width, ">" if index == cursor.index else ""), soft_wrap=True)
            else:
                console.print(Text(f"unknown command {command!r}; h for help", style="red"))
        except _BadArgument as exc:
            console.print(Text(visible(str(exc)), style="red"))


class _BadArgument(ValueError):
    """A command argument that is not what the command takes; the message says what is."""


def _number(args: list[str], default: int, usage: str) -> int:
    """The command's numeric argument (``default`` when there is none)."""
    if not args:
        return default
    try:
        return int(args[0])
    except ValueError:
        raise _BadArgument(usage) from None


def _show(console: Console, cursor: TimelineCursor, width: int) -> None:
    depth, entry = cursor.current
    position = Text(f"[{cursor.index + 1}/{len(cursor.items)}] ", style="dim")
    console.print(position + entry_line(entry, depth, width, ">"), soft_wrap=True)
