"""The timeline of a session: its records turned into entries a person can read.

Records are fine-grained (a reasoning turn writes an ``llm_request``, an ``llm_response``, a
``tool_result`` and several ``reasoning_step`` records); the timeline groups them into what happened:

- an inbound message, a transition, a variable change, a reply, an error: one entry each;
- a reasoning invocation (``reasoning_started`` .. ``reasoning_finished``): one ``reasoning`` group
  whose children are its LLM calls, tool calls, task-list changes and remaining steps;
- an LLM call: the ``llm_request`` and its ``llm_response`` (model, tokens, latency, what it asked for);
- a tool call: the call from the response and its ``tool_result``, matched by call id;
- a human approval: the request, the decision (who, approve or deny, why; the entry's time is when) or
  its expiry, one entry each. A reasoning group that paused for a decision stays open across the pause,
  so the decision and what the loop did after it are in the same group.

:class:`TimelineBuilder` is incremental (``feed`` one record at a time, ``finish`` at the end), so the
viewer can stop after one screen of a long session and ``--follow`` can feed records as they land.
Entries keep the full data; truncation is the renderer's business.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from baf.log.record import Record, RecordKind
from baf.reasoning.effects import rebuild_requests
from baf.reasoning.step import ReasoningStepKind

__all__ = [
    "Entry",
    "EntryFilter",
    "EntryKind",
    "TimelineBuilder",
    "build_timeline",
    "flatten",
    "full_llm_request",
    "iter_timeline",
]


#: ``reasoning_finished`` outcomes of a run that succeeded: a reasoning loop's, a pattern's stop reason.
_SUCCESS_OUTCOMES = frozenset({"answered", "completed"})


class EntryKind:
    """The kinds of timeline entries (not record kinds: one entry may cover several records)."""

    SESSION = "session"
    MESSAGE = "message"
    TRANSITION = "transition"
    INTENT = "intent"
    VARIABLE = "variable"
    REPLY = "reply"
    ERROR = "error"
    REASONING = "reasoning"
    LLM_CALL = "llm_call"
    TOOL_CALL = "tool_call"
    TASK_LIST = "task_list"
    STEP = "step"
    APPROVAL = "approval"
    ENGINE = "engine"
    RECORD = "record"


#: Records of the engine's bookkeeping, left out of the timeline unless asked for by kind.
ENGINE_KINDS = frozenset({RecordKind.STEP_STARTED, RecordKind.STEP_FINISHED, "step_resumed"})

# Written by crash resume (items 3-5 of issue 4); spelled out so this module does not depend on it.
_STEP_RESUMED = "step_resumed"

# Reasoning steps that repeat what an LLM-call or tool-call entry already shows.
_FOLDED_STEPS = frozenset({ReasoningStepKind.LLM_TOOL_CALLS, ReasoningStepKind.TOOL_RESULT})


@dataclass(slots=True)
class Entry:
    """One line of the timeline, possibly with children (a reasoning group).

    ``seq``/``ts`` are those of the first record; ``seqs`` and ``kinds`` list every record the entry
    covers (what filters match on). ``data`` holds everything needed to show the entry in full.
    ``status`` is ``"ok"``, ``"error"`` or ``"open"`` (still running when the log ended).
    """

    kind: str
    seq: int
    ts: float
    title: str
    data: dict[str, Any] = field(default_factory=dict)
    seqs: list[int] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    children: list[Entry] = field(default_factory=list)
    status: str = "ok"
    end_ts: float | None = None
    #: The group as built, when a filter kept only some of its children (its totals count them all).
    unfiltered: Entry | None = None

    def add_record(self, record: Record) -> None:
        """Note that ``record`` belongs to this entry."""
        self.seqs.append(record.seq)
        self.kinds.add(record.kind)
        self.end_ts = record.ts

    @property
    def last_seq(self) -> int:
        """The highest seq the entry (and its children) covers."""
        last = max(self.seqs) if self.seqs else self.seq
        return max([last, *(child.last_seq for child in self.children)])

    def search_text(self) -> str:
        """What ``--grep`` looks in: the title and the full data, as JSON."""
        return self.title + "\n" + json.dumps(self.data, ensure_ascii=False, default=str)


def _entry(kind: str, record: Record, title: str, data: dict[str, Any] | None = None) -> Entry:
    entry = Entry(kind, record.seq, record.ts, title, data if data is not None else record.data)
    entry.add_record(record)
    return entry


def _interruption(interrupted_by: Any, error: dict[str, Any]) -> str:
    """What ended an interrupted step: its ``step_finished``'s ``interrupted_by`` or, in logs written
    before that field existed, the error record written just before the step's end."""
    if interrupted_by is None:  # older logs
        if error.get("source") == "fork":
            interrupted_by = "fork"
        elif error.get("reason"):
            return f"interrupted: {error['reason']}"
    if interrupted_by in (None, "crash"):
        return "interrupted by a crash"
    if interrupted_by == "user":
        return "interrupted by the user"
    if interrupted_by == "stop":
        return "interrupted: the agent stopped past its grace period"
    if interrupted_by == "fork":
        return "closed by the fork, which was cut inside it"
    return f"interrupted ({interrupted_by})"


class TimelineBuilder:
    """Turns records, fed in seq order, into top-level entries.

    ``feed`` returns the top-level entries completed by that record; a reasoning group is complete at
    its ``reasoning_finished`` step. ``finish`` returns what is still open (marked ``"open"``).
    ``include_engine`` keeps ``step_started``/``step_finished`` records (hidden by default: every
    event has them, and they say nothing the rest does not, except an interrupted step, always shown).
    """

    def __init__(self, include_engine: bool = False) -> None:
        self.include_engine = include_engine
        self._group: Entry | None = None
        self._llm_call: Entry | None = None
        self._tool_calls: dict[str, Entry] = {}
        # The latest error record's data: it says why a step that follows was closed as interrupted.
        self._last_error: dict[str, Any] = {}
        # The intent prediction of the message being handled: the transition it caused names it.
        self._prediction: Record | None = None
        # Approval requests not decided yet, by call id: their entries close when the decision comes.
        self._requests: dict[str, Entry] = {}
        # Tool calls held for approval: shown when their result is recorded, after the decision.
        self._held_tools: dict[str, Entry] = {}
        # The request of a model call cut short before its answer was recorded (its process stopped, or its
        # log refused a write): the resumed step asks it again, and the answer is shown where it was
        # recorded, with this request.
        self._asked_again: dict[str, Any] | None = None

    def feed(self, record: Record) -> list[Entry]:
        """Take the next record; return the top-level entries it completed."""
        handler = _DISPATCH.get(record.kind)
        if handler is None:
            return self._place(_entry(EntryKind.RECORD, record, record.kind))
        return handler(self, record)

    @property
    def open_group(self) -> Entry | None:
        """The reasoning group being built (children are added to it as records arrive)."""
        return self._group

    def finish(self) -> list[Entry]:
        """The entries still open at the end of the records (a reasoning loop in flight)."""
        group, self._group = self._group, None
        if group is None:
            return []
        group.children += self._held_tools.values()  # held calls the records end before
        self._held_tools.clear()
        group.status = "open"
        return [group]

    # -- placing entries -------------------------------------------------------------------------

    def _place(self, entry: Entry) -> list[Entry]:
        """Put ``entry`` in the open reasoning group, or return it as a completed top-level entry."""
        if self._group is not None:
            self._group.children.append(entry)
            return []
        return [entry]

    # -- handlers ---------------------------------------------------------------------------------

    def _session_started(self, record: Record) -> list[Entry]:
        d = record.data
        title = f"session started: agent {d.get('agent')}, initial state {d.get('initial_state')}"
        if d.get("platform"):
            title += f", platform {d['platform']}"
        return self._place(_entry(EntryKind.SESSION, record, title))

    def _message(self, record: Record) -> list[Entry]:
        text = record.data.get("text")
        if text is None:
            event = record.data.get("event") or {}
            text = f"[{event.get('type', 'event')}] {json.dumps(event, ensure_ascii=False, default=str)}"
        return self._place(_entry(EntryKind.MESSAGE, record, str(text)))

    def _engine(self, record: Record) -> list[Entry]:
        # A reasoning invocation runs within one step: if it is still open when its step ends, it was cut
        # short (the agent stopped, or a fork was cut inside it), and what follows is not part of it.
        paused = self._group is not None and self._group.data.get("awaiting_approval")
        done = self.finish() if record.kind == RecordKind.STEP_FINISHED and not paused else []
        for group in done:
            group.status = "error"  # not "open": it will not go on
        if record.kind == _STEP_RESUMED:
            self._model_call_cut_short()
        # A crash-interrupted step, or one a restart resumed, is worth seeing; routine steps are not.
        interrupted = bool(record.data.get("interrupted")) or record.kind == _STEP_RESUMED
        if not (self.include_engine or interrupted):
            return done
        event_seq = record.data.get("event_seq")
        # A step without an event is the initial state's body, run when the session starts.
        title = record.kind.replace("_", " ") + (f" (event #{event_seq})" if event_seq is not None
                                                  else " (session start)")  # fmt: skip
        if record.data.get("interrupted"):
            title += " — " + _interruption(record.data.get("interrupted_by"), self._last_error)
        entry = _entry(EntryKind.ENGINE, record, title)
        if record.data.get("interrupted"):
            entry.status = "error"
        return done + self._place(entry)

    def _model_call_cut_short(self) -> None:
        """A step resumes with a model call open: it was cut short (its process stopped, or its log refused a
        write) before the answer was recorded. The call's entry says so; the answer, asked for again, gets an
        entry of its own where it is recorded."""
        call, self._llm_call = self._llm_call, None
        if call is None:
            return
        call.status = "error"
        call.title += " — no answer recorded before the step was cut short; asked again when it resumed"
        self._asked_again = call.data.get("request")

    def _forked_from(self, record: Record) -> list[Entry]:
        d = record.data
        title = f"forked from session {d.get('session')} after #{d.get('seq')}"
        if d.get("inside_step"):
            title += " (inside a step)"
        return self._place(_entry(EntryKind.SESSION, record, title))

    def _transition(self, record: Record) -> list[Entry]:
        d = record.data
        title = f"{d.get('source')} → {d.get('dest')}"
        label = str(d.get("label") or "")
        # The recorded label is "source -> dest (trigger)" (Transition.describe): say the move once.
        said = f"{d.get('source')} -> {d.get('dest')} ("
        if label.startswith(said) and label.endswith(")"):
            label = label[len(said) : -1]
        if label:
            title += f"  ({label})"
        label = str(d.get("label") or "")
        if self._prediction is not None and any(m in label for m in ("(intent ", "(global intent ", "(no intent")):
            title += f"  ← prediction #{self._prediction.seq}"
            self._prediction = None
        return self._place(_entry(EntryKind.TRANSITION, record, title))

    def _intent(self, record: Record) -> list[Entry]:
        d = record.data
        self._prediction = record
        by = f"score {float(d.get('score') or 0):.2f} by {d.get('classifier')}"
        if d.get("intent"):
            title = f"intent {d['intent']} matched ({by})"
            if d.get("parameters"):
                title += ": " + ", ".join(f"{k}={v}" for k, v in dict(d["parameters"]).items())
        elif d.get("error"):
            title = f"no intent matched: {d['error']}"
        elif d.get("best"):
            title = f"no intent matched (best {d['best']}, {by}, below {d.get('threshold')})"
        else:
            title = "no intent matched"
        entry = _entry(EntryKind.INTENT, record, title)
        if d.get("error"):
            entry.status = "error"
        return self._place(entry)

    def _variable(self, record: Record) -> list[Entry]:
        d = record.data
        if record.kind == RecordKind.VARIABLE_DELETED:
            title = f"del {d.get('name')}"
        else:
            title = f"{d.get('name')} = {json.dumps(d.get('value'), ensure_ascii=False, default=str)}"
        return self._place(_entry(EntryKind.VARIABLE, record, title))

    def _reply(self, record: Record) -> list[Entry]:
        d = record.data
        fmt = d.get("format")
        title = str(d.get("text", ""))
        if fmt:
            title = f"[{fmt}] {title}"
        # Rich replies carry base64 payloads; the timeline shows their size, not the bytes.
        data = {k: (f"<{len(v)} base64 characters>" if k == "data" else v) for k, v in d.items()}
        return self._place(_entry(EntryKind.REPLY, record, title, data))

    def _error(self, record: Record) -> list[Entry]:
        d = record.data
        self._last_error = d
        entry = _entry(EntryKind.ERROR, record, f"{d.get('source')}: {d.get('type')}: {d.get('message')}")
        entry.status = "error"
        return self._place(entry)

    def _llm_request(self, record: Record) -> list[Entry]:
        d = record.data
        self._asked_again = None  # a new request: the one cut short was not asked again
        title = f"{d.get('model')} {_call_label(d)}"
        entry = _entry(EntryKind.LLM_CALL, record, title, {"request": d, "response": None})
        entry.status = "open"
        self._llm_call = entry
        return self._place(entry)

    def _llm_response(self, record: Record) -> list[Entry]:
        d = record.data
        entry = self._llm_call
        self._llm_call = None
        placed: list[Entry] = []
        if entry is None:  # asked again after a restart, or a log that starts mid-call (no request)
            request, self._asked_again = self._asked_again, None
            entry = _entry(EntryKind.LLM_CALL, record, f"{d.get('model')} {_call_label(d)}", {"request": request})
            placed = self._place(entry)
        else:
            entry.add_record(record)
        entry.data["response"] = d
        entry.status = "ok"
        entry.title = _llm_title(d, entry.data.get("request"))
        for call in d.get("tool_calls") or []:
            tool = Entry(EntryKind.TOOL_CALL, record.seq, record.ts, f"{call.get('name')}({call.get('arguments')})",
                         {"call": call, "result": None}, status="open")  # fmt: skip
            tool.kinds.add(record.kind)
            self._tool_calls[str(call.get("id"))] = tool
            placed += self._place(tool)
        return placed

    def _tool_result(self, record: Record) -> list[Entry]:
        d = record.data
        # Kept in the map: the ``tool_result`` reasoning step that follows folds into the same entry.
        tool = self._tool_calls.get(str(d.get("call_id")))
        if tool is None:
            tool = _entry(EntryKind.TOOL_CALL, record, f"{d.get('name')}(?)", {"call": None, "result": d})
            tool.status = "error" if d.get("is_error") else "ok"
            return self._place(tool)
        tool.add_record(record)
        tool.data["result"] = d
        tool.status = "error" if d.get("is_error") else "ok"
        if self._held_tools.pop(str(d.get("call_id")), None) is not None:  # held for approval: shown as it ran
            tool.seq, tool.ts = record.seq, record.ts
            return self._place(tool)
        return []

    def _task_list(self, record: Record) -> list[Entry]:
        tasks = record.data.get("tasks") or []
        return self._place(_entry(EntryKind.TASK_LIST, record, _tasks_line(tasks)))

    def _reasoning_step(self, record: Record) -> list[Entry]:
        d = record.data
        kind = d.get("kind")
        details = d.get("details") or {}
        if kind == ReasoningStepKind.REASONING_STARTED:
            done = self.finish()  # a group left open (a crash) ends where the next one starts
            group = _entry(EntryKind.REASONING, record, str(details.get("request", d.get("summary", ""))),
                           {"started": d, "finished": None})  # fmt: skip
            group.status = "open"
            self._group = group
            self._tool_calls.clear()
            return done
        if kind == ReasoningStepKind.REASONING_FINISHED:
            closing, self._group = self._group, None
            if closing is None:
                return [_entry(EntryKind.STEP, record, str(d.get("summary", "")))]
            closing.children += self._held_tools.values()  # held calls that never ran (a crash, a change)
            self._held_tools.clear()
            closing.add_record(record)
            closing.data["finished"] = d
            closing.status = "ok" if details.get("outcome") in _SUCCESS_OUTCOMES else "error"
            return [closing]
        if kind in _FOLDED_STEPS:
            target: Entry | None = None
            if kind == ReasoningStepKind.TOOL_RESULT:
                target = self._tool_calls.get(str(details.get("call_id")))
            if target is None:
                target = self._group
            if target is not None:
                target.add_record(record)
                return []
        entry = _entry(EntryKind.STEP, record, f"{kind}: {d.get('summary', '')}")
        if kind in (ReasoningStepKind.PUSHBACK, ReasoningStepKind.MAX_STEPS, ReasoningStepKind.BUDGET_SPENT):
            entry.status = "error"
        return self._place(entry)

    def _approval(self, record: Record) -> list[Entry]:
        d = record.data
        group = self._group
        waiting: set[str] = set(group.data.get("awaiting_approval") or ()) if group is not None else set()
        call = f"{d.get('name')} (call {d.get('call_id')})"
        if record.kind == RecordKind.APPROVAL_REQUESTED:
            waiting.add(str(d.get("call_id")))
            entry = _entry(EntryKind.APPROVAL, record, f"approval requested: {d.get('name')}({d.get('arguments')})")
            entry.status = "open"  # until decided
            self._requests[str(d.get("call_id"))] = entry
            tool = self._tool_calls.get(str(d.get("call_id")))
            if group is not None and tool is not None and tool in group.children:
                group.children.remove(tool)
                self._held_tools[str(d.get("call_id"))] = tool
        elif record.kind == RecordKind.APPROVAL_DECIDED:
            waiting.discard(str(d.get("call_id")))
            request = self._requests.pop(str(d.get("call_id")), None)
            if request is not None:
                request.status = "ok"
            verdict = "approved" if d.get("approved") else "denied"
            by = f" by {d.get('by')}" if d.get("by") else ""
            reason = f": {d.get('reason')}" if d.get("reason") else ""
            entry = _entry(EntryKind.APPROVAL, record, f"{verdict}{by}: {call}{reason}")
            entry.status = "ok" if d.get("approved") else "error"
        else:
            ids = [str(i) for i in d.get("call_ids") or []]
            waiting.difference_update(ids)
            entry = _entry(EntryKind.APPROVAL, record, f"approval expired ({d.get('reason')}): {', '.join(ids)}")
            entry.status = "error"
        if group is not None:
            group.data["awaiting_approval"] = sorted(waiting)
        placed = self._place(entry)
        if record.kind == RecordKind.APPROVAL_EXPIRED:  # never run: shown where they expired
            for call_id in d.get("call_ids") or []:
                held = self._held_tools.pop(str(call_id), None)
                if held is not None:
                    placed += self._place(held)
        if record.kind == RecordKind.APPROVAL_EXPIRED and group is not None and not waiting:
            self._group = None  # the paused loop will not go on
            group.status = "error"
            placed.append(group)
        return placed


def _llm_title(response: dict[str, Any], request: dict[str, Any] | None = None) -> str:
    """``model step N  → calls a, b`` or ``→ "text"`` (the call labelled from its request when there is one)."""
    calls = response.get("tool_calls") or []
    what = "calls " + ", ".join(str(c.get("name")) for c in calls) if calls else repr(response.get("text") or "")
    return f"{response.get('model')} {_call_label(request or response)} → {what}"


def _call_label(data: dict[str, Any]) -> str:
    """``step N`` for a reasoning state's turn, ``<pattern> call N (purpose)`` for a pattern's (counted from 1)."""
    if data.get("loop", "reasoning") == "reasoning":
        return f"step {data.get('step')}"
    purpose = f" ({data['purpose']})" if data.get("purpose") else ""
    return f"{data.get('loop')} call {int(data.get('turn') or 0) + 1}{purpose}"


def _tasks_line(tasks: list[dict[str, Any]]) -> str:
    marks = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "skipped": "[-]"}
    line = "  ".join(f"{marks.get(str(t.get('status')), '[?]')} {t.get('id')}. {t.get('description')}" for t in tasks)
    return line or "(empty)"


_DISPATCH = {
    RecordKind.SESSION_STARTED: TimelineBuilder._session_started,
    RecordKind.MESSAGE_RECEIVED: TimelineBuilder._message,
    RecordKind.STEP_STARTED: TimelineBuilder._engine,
    RecordKind.STEP_FINISHED: TimelineBuilder._engine,
    _STEP_RESUMED: TimelineBuilder._engine,
    RecordKind.TRANSITION: TimelineBuilder._transition,
    RecordKind.VARIABLE_SET: TimelineBuilder._variable,
    RecordKind.VARIABLE_DELETED: TimelineBuilder._variable,
    RecordKind.REPLY: TimelineBuilder._reply,
    RecordKind.ERROR: TimelineBuilder._error,
    RecordKind.LLM_REQUEST: TimelineBuilder._llm_request,
    RecordKind.LLM_RESPONSE: TimelineBuilder._llm_response,
    RecordKind.TOOL_RESULT: TimelineBuilder._tool_result,
    RecordKind.TASK_LIST: TimelineBuilder._task_list,
    RecordKind.REASONING_STEP: TimelineBuilder._reasoning_step,
    RecordKind.FORKED_FROM: TimelineBuilder._forked_from,
    RecordKind.APPROVAL_REQUESTED: TimelineBuilder._approval,
    RecordKind.APPROVAL_DECIDED: TimelineBuilder._approval,
    RecordKind.APPROVAL_EXPIRED: TimelineBuilder._approval,
    "intent_predicted": TimelineBuilder._intent,
}


def iter_timeline(records: Iterable[Record], include_engine: bool = False) -> Iterator[Entry]:
    """Top-level entries, each yielded as soon as it is complete (so a caller may stop early)."""
    builder = TimelineBuilder(include_engine)
    for record in records:
        yield from builder.feed(record)
    yield from builder.finish()


def build_timeline(records: Iterable[Record], include_engine: bool = False) -> list[Entry]:
    """All top-level entries of ``records``."""
    return list(iter_timeline(records, include_engine))


def flatten(entries: Iterable[Entry]) -> list[tuple[int, Entry]]:
    """Entries depth-first as ``(depth, entry)``: what the interactive viewer steps through."""
    flat: list[tuple[int, Entry]] = []
    for entry in entries:
        flat.append((0, entry))
        flat.extend((1, child) for child in entry.children)
    return flat


@dataclass(frozen=True, slots=True)
class EntryFilter:
    """``--kind``/``--from``/``--to``/``--grep``: which entries to show.

    An entry matches if one of its records is in the seq range and of a wanted kind, and its text
    contains ``grep`` (case-insensitive). A group is kept, with only its matching children, if it or
    any child matches.
    """

    kinds: frozenset[str] = frozenset()
    from_seq: int | None = None
    to_seq: int | None = None
    grep: str | None = None

    @property
    def empty(self) -> bool:
        """True when the filter lets everything through."""
        return not self.kinds and self.from_seq is None and self.to_seq is None and not self.grep

    def matches(self, entry: Entry) -> bool:
        """Whether ``entry`` itself (children aside) matches."""
        seqs = entry.seqs or [entry.seq]
        low = self.from_seq if self.from_seq is not None else 0
        high = self.to_seq if self.to_seq is not None else float("inf")
        if not any(low <= s <= high for s in seqs):
            return False
        if self.kinds and not (self.kinds & entry.kinds or entry.kind in self.kinds):
            return False
        return not self.grep or self.grep.lower() in entry.search_text().lower()

    def apply(self, entry: Entry) -> Entry | None:
        """``entry`` as shown under this filter, or ``None``."""
        if self.empty:
            return entry
        if not entry.children:
            return entry if self.matches(entry) else None
        children = [c for c in entry.children if self.matches(c)]
        if not children and not self.matches(entry):
            return None
        kept = copy.copy(entry)
        kept.children = children
        kept.unfiltered = entry.unfiltered or entry
        return kept


def full_llm_request(records: Iterable[Record], seq: int) -> dict[str, Any] | None:
    """The complete request of the ``llm_request`` record at ``seq``, rebuilt from the records.

    One rebuild for the viewer, the re-run and crash resume: :func:`~baf.reasoning.effects.rebuild_requests`
    (a record may hold only what changed since the previous request of its loop run). Returns
    ``{"model", "step", "system", "tools", "messages", "parameters"}``, or ``None`` if ``seq`` is not an
    ``llm_request``.
    """
    upto = itertools.takewhile(lambda record: record.seq <= seq, records)
    for request in rebuild_requests(upto):
        if request.seq == seq:
            return {"model": request.model, "step": request.step, "system": request.system,
                    "tools": request.tools, "messages": request.messages,
                    "parameters": request.parameters or None}  # fmt: skip
    return None
