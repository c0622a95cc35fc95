"""The offline demo model: a deterministic stand-in for a language model, used by ``baf demo`` without a key.

:class:`OfflineDemoLLM` plays the assistant over the demo workspace (a sales CSV, product notes and
meeting notes). It never touches the network. It does not understand language: it recognises a few kinds
of request by keyword and then works like a tool-calling model would, one turn at a time, deciding each
move from the conversation it is sent: the last user message, the tool calls already made since, and
their results. Every figure in its answers is computed from what its tools returned, so editing the sample
files changes the answers.

What it can do (see :data:`EXAMPLE_QUESTIONS`):

- growth per region between the first and last quarter (plans 3 tasks; ``list_directory``, ``read_file``,
  one ``calculate`` per region in parallel);
- totals and shares per region (plans 3 tasks; ``csv_summary`` twice, ``calculate`` per region);
- decisions and action items of the meeting notes (plans 2 tasks; ``list_directory``, ``read_file``);
- product facts: known issues, prices, the roadmap (one ``read_file``, no plan);
- a briefing across all files (plans 5 tasks, answers once too early, is pushed back, skips a task);
- arithmetic (one ``calculate``, no plan);
- anything else: it lists the workspace and suggests questions it can answer.

It uses only the tools it is offered, so it also runs under ``enable_task_planning=False`` (no plan).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.llm.call_ids import ToolCallNumbering

__all__ = ["EXAMPLE_QUESTIONS", "OfflineDemoLLM", "offline_demo_reply"]

#: Questions the offline model has a routine for, shown to the user when the demo starts.
EXAMPLE_QUESTIONS: tuple[str, ...] = (
    "Which region grew fastest this year?",
    "What was the total revenue by region?",
    "What are the action items from the planning meeting?",
    "What are the known product issues?",
    "Give me a briefing for Monday.",
    "What is (268400 - 187200) / 187200 * 100?",
)


class OfflineDemoLLM(LLM):
    """A scripted model for the offline demo: deterministic, no network, answers from its tools' results.

    Tool-call ids are numbered ``offline_1``, ``offline_2``, ... per instance, so they are unique within a
    run and the same on every run.
    """

    name = "offline-demo"

    def __init__(self) -> None:
        self._call_ids = ToolCallNumbering("offline_")

    async def predict_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """Decide the next move from the conversation so far (see :func:`offline_demo_reply`)."""
        return self._call_ids.number(offline_demo_reply(messages, tools, system_message))


def offline_demo_reply(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], system_message: str | None = None
) -> LLMResponse:
    """The offline model's next move as a pure function of what it is sent.

    Tool calls in the response have empty ids; :class:`OfflineDemoLLM` numbers them.
    """
    turn = _Turn(messages, tools, system_message or "")
    return _play(turn, _routine_for(turn))


# -- reading the conversation -----------------------------------------------------------------------


@dataclass(slots=True)
class _ToolUse:
    """One tool call made since the user's message, with its result once it came back."""

    name: str
    arguments: dict[str, Any]
    result: str | None = None

    @property
    def ok(self) -> bool:
        # The loop reports every refused or failed call as a tool message starting with "Error".
        return self.result is not None and not self.result.startswith("Error")


class _Turn:
    """What the model knows at this turn: the request, the tools offered, and the work done since."""

    def __init__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], system: str) -> None:
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        start = users[-1] if users else -1
        self.request = str(messages[start].get("content") or "") if users else ""
        self.words = self.request.lower()
        self.system = system
        self.tool_names = {str(t.get("function", {}).get("name")) for t in tools}
        self.uses: list[_ToolUse] = []
        #: True once an answer of ours was refused (the loop pushed back because tasks were open).
        self.pushed_back = False
        by_id: dict[str, _ToolUse] = {}
        for message in messages[start + 1 :]:
            role = message.get("role")
            if role == "assistant" and message.get("tool_calls"):
                for call in message["tool_calls"]:
                    function = call.get("function", {})
                    use = _ToolUse(str(function.get("name")), _parse_arguments(function.get("arguments")))
                    self.uses.append(use)
                    by_id[str(call.get("id"))] = use
            elif role == "tool":
                use_or_none = by_id.get(str(message.get("tool_call_id")))
                if use_or_none is not None:
                    use_or_none.result = str(message.get("content") or "")
            elif role == "assistant":
                # A text answer inside the current request means it was not accepted.
                self.pushed_back = True

    def can(self, tool: str) -> bool:
        """Whether ``tool`` is offered this turn."""
        return tool in self.tool_names

    def find(self, name: str, **arguments: Any) -> _ToolUse | None:
        """The latest call of ``name`` whose arguments include ``arguments``."""
        for use in reversed(self.uses):
            if use.name == name and all(use.arguments.get(k) == v for k, v in arguments.items()):
                return use
        return None

    def task_ids(self) -> list[int]:
        """Ids of the tasks our ``add_tasks`` call created, in order."""
        use = self.find("add_tasks")
        if use is None or not use.ok or use.result is None:
            return []
        return [int(n) for n in re.findall(r"(?:: |; )(\d+)\. ", use.result)]

    def settled_ids(self) -> set[int]:
        """Tasks we already completed or skipped (or tried to: a refused attempt is not repeated)."""
        return {
            int(use.arguments["task_id"])
            for use in self.uses
            if use.name in ("complete_task", "skip_task") and isinstance(use.arguments.get("task_id"), int)
        }

    def known_files(self) -> list[str]:
        """Files seen so far: in ``list_directory`` results, else in the workspace preview of the prompt."""
        listings = [use.result for use in self.uses if use.name == "list_directory" and use.ok and use.result]
        for text in [*listings, self.system]:
            files = _FILE_LINE.findall(text)
            if files:
                return files
        return []


_FILE_LINE = re.compile(r"^\s*(\S[^\n]*?) \((?:\d+ B|\d+\.\d [KMGT]B)\)\s*$", re.MULTILINE)


def _parse_arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


# -- routines: a plan of stages, played one model turn at a time ------------------------------------


@dataclass(slots=True)
class _Need:
    """The stage needs these tool calls before it can finish."""

    calls: list[tuple[str, dict[str, Any]]]


@dataclass(slots=True)
class _Done:
    """The stage is finished; ``summary`` becomes the task's result."""

    summary: str


@dataclass(slots=True)
class _Skip:
    """The stage cannot be done; ``reason`` is given to ``skip_task``."""

    reason: str


#: A stage's verdict; ``None`` leaves its task open (the model "forgets" it).
_Outcome: TypeAlias = _Need | _Done | _Skip | None


@dataclass(slots=True)
class _Stage:
    task: str
    work: Callable[[_Turn], _Outcome]
    #: Whether later stages wait while this one still needs calls (False: their calls go out together).
    blocking: bool = True


@dataclass(slots=True)
class _Routine:
    stages: list[_Stage]
    answer: Callable[[_Turn], str]
    intro: str = "Let me plan this first."


def _play(turn: _Turn, routine: _Routine) -> LLMResponse:
    """One model turn of ``routine``: plan, then the next calls (with the completions they allow), then
    the answer.

    Stages run in order because each one builds on the data of the ones before, except after a
    non-blocking stage, whose calls go out together with the next stage's. Finishing a task and starting
    the next stage's calls share one turn, as tool-calling models tend to do.
    """
    planned = turn.can("add_tasks") and len(routine.stages) > 1
    if planned and turn.find("add_tasks") is None:
        descriptions = [stage.task for stage in routine.stages]
        return _calls([("add_tasks", {"descriptions": descriptions})], routine.intro)
    ids = turn.task_ids() if planned else []
    settled = turn.settled_ids()
    calls: list[tuple[str, dict[str, Any]]] = []
    for index, stage in enumerate(routine.stages):
        task_id = ids[index] if index < len(ids) else None
        if task_id is not None and task_id in settled:
            continue
        outcome = stage.work(turn)
        if outcome is None and turn.pushed_back:
            outcome = _Skip("nothing in the workspace covers this")
        if isinstance(outcome, _Need):
            calls.extend(c for c in outcome.calls if c not in calls)
            if stage.blocking:
                break
            continue
        if task_id is None or outcome is None:
            continue
        if isinstance(outcome, _Done):
            calls.append(("complete_task", {"task_id": task_id, "result": outcome.summary}))
        else:
            calls.append(("skip_task", {"task_id": task_id, "reason": outcome.reason}))
    if calls:
        return _calls(calls)
    return LLMResponse(text=routine.answer(turn))


def _calls(calls: list[tuple[str, dict[str, Any]]], text: str | None = None) -> LLMResponse:
    return LLMResponse(text=text, tool_calls=[ToolCall("", name, json.dumps(arguments)) for name, arguments in calls])


def _routine_for(turn: _Turn) -> _Routine:
    """Pick a routine by keyword; the order matters where keywords overlap ("revenue growth")."""
    words = turn.words
    expression = _find_expression(turn.request)
    if expression is not None:
        return _arithmetic_routine(expression)
    if _mentions(words, "grew", "grow", "fastest", "slowest", "increase", "trend"):
        return _growth_routine(turn)
    if _mentions(words, "total", "revenue", "sales", "sold", "share", "biggest", "largest", "top region", "most"):
        return _totals_routine(turn)
    if _mentions(words, "meeting", "action", "decision", "decided", "owner", "to-do", "todo", "next step", "who ",
                 "need to do", "assigned", "responsible", "deadline", "due "):  # fmt: skip
        return _meeting_routine()
    if _mentions(words, "product", "issue", "problem", "bug", "defect", "warranty", "return", "price", "pricing",
                 "margin", "roadmap", "backpack", "daypack", "tent", "jacket", "poles", "ridgeline", "tarn",
                 "cirrus", "basecamp"):  # fmt: skip
        return _product_routine()
    if _mentions(words, "brief", "summary", "summarise", "summarize", "overview", "catch me up", "update me", "status"):
        return _briefing_routine()
    if _mentions(words, "thank"):
        return _Routine([], lambda turn: "You're welcome! Ask me anything else about the sample files.")
    return _help_routine()


def _mentions(text: str, *keywords: str) -> bool:
    # Keywords match at the start of a word: "tent" must not fire on "content", nor "most" on "almost".
    return any(re.search(rf"\b{re.escape(keyword)}", text) for keyword in keywords)


# -- finding things in the workspace ----------------------------------------------------------------


def _pick_file(files: list[str], suffixes: tuple[str, ...], hints: tuple[str, ...]) -> str | None:
    """The first file with a matching suffix whose name contains a hint, else the first with the suffix."""
    candidates = [f for f in files if f.lower().endswith(suffixes)]
    hinted = [f for f in candidates if any(hint in f.lower() for hint in hints)]
    return next(iter(hinted or candidates), None)


def _sales_file(turn: _Turn) -> str | None:
    return _pick_file(turn.known_files(), (".csv",), ("sales", "revenue"))


def _meeting_file(turn: _Turn) -> str | None:
    return _pick_file(turn.known_files(), (".txt", ".md"), ("meeting", "minutes"))


def _product_file(turn: _Turn) -> str | None:
    return _pick_file(turn.known_files(), (".md", ".txt"), ("product",))


def _list_stage(task: str, pick: Callable[[_Turn], str | None], what: str) -> _Stage:
    """A stage that lists the workspace root and finishes once a suitable file shows up."""

    def work(turn: _Turn) -> _Outcome:
        listing = turn.find("list_directory")
        if listing is None:
            return _Need([("list_directory", {"relative_path": "."})])
        if not listing.ok:
            return _Skip(f"could not list the workspace: {listing.result}")
        path = pick(turn)
        return _Done(f"found {path}") if path else _Skip(f"there is no {what} in the workspace")

    return _Stage(task, work)


def _read(turn: _Turn, path: str | None, what: str) -> _Need | _Skip | str:
    """The text of ``path`` once read; otherwise the call that reads it, or why it cannot be read."""
    if path is None:
        if turn.find("list_directory") is None and turn.can("list_directory"):
            return _Need([("list_directory", {"relative_path": "."})])
        return _Skip(f"there is no {what} in the workspace")
    use = turn.find("read_file", relative_path=path)
    if use is None:
        return _Need([("read_file", {"relative_path": path})])
    if not use.ok or use.result is None:
        return _Skip(f"could not read {path}: {use.result}")
    return use.result


# -- sales figures ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Sales:
    """Per-region values of one metric of the sales file, by period."""

    path: str
    metric: str
    label: str
    money: bool
    periods: list[str]
    values: dict[str, dict[str, float]]

    def fmt(self, value: float) -> str:
        return f"${value:,.0f}" if self.money else f"{value:,.0f}"


def _metric_column(header: list[str], request: str) -> tuple[str, str] | None:
    """The column the question is about, and how to name it."""
    wanted = [("unit", "units sold"), ("customer", "new customers")]
    for needle, label in wanted:
        if needle in request:
            column = _column(header, needle)
            if column:
                return column, label
    column = _column(header, "revenue", "sales", "amount", "total")
    return (column, "revenue") if column else None


def _column(header: list[str], *needles: str) -> str | None:
    return next((h for h in header if any(n in h.lower() for n in needles)), None)


def _number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "").replace("$", "").replace("%", "")
    try:
        return float(cleaned)
    except ValueError:
        return None


def _parse_sales(path: str, text: str, request: str) -> _Sales | str:
    """Group the CSV text by region and period; a string says why that is not possible."""
    rows = list(csv.DictReader(io.StringIO(text)))
    header = list(rows[0].keys()) if rows else []
    region = _column(header, "region", "market", "territory", "country")
    period = _column(header, "quarter", "period", "month", "year", "date")
    metric = _metric_column(header, request)
    if not rows or region is None or period is None or metric is None:
        return f"{path} has no region, period and revenue columns (columns: {', '.join(header) or 'none'})"
    column, label = metric
    values: dict[str, dict[str, float]] = {}
    for row in rows:
        number = _number(row.get(column) or "")
        if number is None or not row.get(region) or not row.get(period):
            continue  # a blank or malformed line, e.g. the truncation marker of a long file
        by_period = values.setdefault(row[region], {})
        by_period[row[period]] = by_period.get(row[period], 0.0) + number
    periods = sorted({p for by_period in values.values() for p in by_period})
    if len(periods) < 2:
        return f"{path} covers fewer than two periods, so there is no growth to measure"
    money = any(k in column.lower() for k in ("usd", "eur", "revenue", "amount", "price"))
    return _Sales(path, column, label, money, periods, values)


def _sales(turn: _Turn) -> _Sales | _Need | _Skip:
    text = _read(turn, _sales_file(turn), "sales CSV file")
    if not isinstance(text, str):
        return text
    parsed = _parse_sales(_sales_file(turn) or "", text, turn.words)
    return _Skip(parsed) if isinstance(parsed, str) else parsed


def _growth_expressions(sales: _Sales) -> dict[str, str]:
    """One ``calculate`` expression per region: percent change from the first to the last period."""
    first, last = sales.periods[0], sales.periods[-1]
    expressions = {}
    for region, by_period in sales.values.items():
        if by_period.get(first) and last in by_period:
            expressions[region] = (
                f"({_plain(by_period[last])} - {_plain(by_period[first])}) / {_plain(by_period[first])} * 100"
            )
        # A region missing either end (or starting at zero) has no meaningful growth rate: left out.
    return expressions


def _plain(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _results(turn: _Turn, expressions: dict[str, str]) -> dict[str, float] | _Need:
    """The calculated value of each expression, or the ``calculate`` calls still missing (all at once:
    they are independent, so the loop runs them in parallel)."""
    missing = [e for e in expressions.values() if turn.find("calculate", expression=e) is None]
    if missing:
        return _Need([("calculate", {"expression": e}) for e in missing])
    results = {}
    for key, expression in expressions.items():
        use = turn.find("calculate", expression=expression)
        value = _number(use.result or "") if use is not None and use.ok else None
        if value is not None:
            results[key] = value
    return results


def _growth_routine(turn: _Turn) -> _Routine:
    label = "units" if "unit" in turn.words else "new-customer" if "customer" in turn.words else "revenue"

    def read(turn: _Turn) -> _Outcome:
        sales = _sales(turn)
        if not isinstance(sales, _Sales):
            return sales
        return _Done(f"{len(sales.values)} regions, {sales.periods[0]} to {sales.periods[-1]} ({sales.metric})")

    def compute(turn: _Turn) -> _Outcome:
        sales = _sales(turn)
        if not isinstance(sales, _Sales):
            return _Skip("no sales figures to work with")
        if not turn.can("calculate"):
            return _Skip("the calculate tool is not available")
        growth = _results(turn, _growth_expressions(sales))
        if isinstance(growth, _Need):
            return growth
        if not growth:
            return _Skip("none of the growth calculations succeeded")
        best = max(growth, key=lambda r: growth[r])
        return _Done(f"{best} grew fastest: {growth[best]:+.1f}%")

    def answer(turn: _Turn) -> str:
        sales = _sales(turn)
        if not isinstance(sales, _Sales):
            return _cannot("work out the growth per region", sales)
        growth = _results(turn, _growth_expressions(sales)) if turn.can("calculate") else {}
        if isinstance(growth, _Need) or not growth:
            return _cannot("work out the growth per region", _Skip("the growth calculations failed"))
        first, last = sales.periods[0], sales.periods[-1]
        ranked = sorted(growth, key=lambda r: growth[r], reverse=True)
        best, worst = ranked[0], ranked[-1]
        lines = [
            f"**{best} grew fastest**: {sales.label} rose from {sales.fmt(sales.values[best][first])} in {first} "
            f"to {sales.fmt(sales.values[best][last])} in {last}, **{growth[best]:+.1f}%**.",
            "",
            f"| Region | {first} | {last} | Growth |",
            "|---|---:|---:|---:|",
        ]
        for region in ranked:
            values = sales.values[region]
            lines.append(
                f"| {region} | {sales.fmt(values[first])} | {sales.fmt(values[last])} | {growth[region]:+.1f}% |"
            )
        lines += ["", f"Slowest: {worst} ({growth[worst]:+.1f}%). Source: `{sales.path}`; growth is "
                      f"({last} − {first}) / {first}, computed with `calculate`."]  # fmt: skip
        return "\n".join(lines)

    stages = [
        _list_stage("Find the sales data in the workspace", _sales_file, "sales CSV file"),
        _Stage(f"Read the quarterly {label} figures", read),
        _Stage(f"Compute each region's {label} growth from the first to the last quarter", compute),
    ]
    return _Routine(stages, answer, "This needs the sales data and a calculation per region; planning first.")


def _totals_routine(turn: _Turn) -> _Routine:
    def overview(turn: _Turn) -> dict[str, Any] | _Need | _Skip:
        path = _sales_file(turn)
        if path is None:
            if turn.find("list_directory") is None:
                return _Need([("list_directory", {"relative_path": "."})])
            return _Skip("there is no sales CSV file in the workspace")
        if not turn.can("csv_summary"):
            return _Skip("the csv_summary tool is not available")
        use = turn.find("csv_summary", relative_path=path, column=None)
        if use is None:
            return _Need([("csv_summary", {"relative_path": path})])
        data = _json(use)
        return data if data is not None else _Skip(f"could not summarise {path}: {use.result}")

    def grouped(turn: _Turn) -> dict[str, Any] | _Need | _Skip:
        data = overview(turn)
        if not isinstance(data, dict):
            return data
        header = list(data.get("columns", {}))
        metric = _metric_column(header, turn.words)
        region = _column(header, "region", "market", "territory", "country")
        if metric is None or region is None:
            return _Skip(f"no region and revenue columns (columns: {', '.join(header)})")
        path = str(data.get("file"))
        arguments = {"relative_path": path, "column": metric[0], "group_by": region}
        use = turn.find("csv_summary", **arguments)
        if use is None:
            return _Need([("csv_summary", arguments)])
        summary = _json(use)
        if summary is None or not summary.get("groups"):
            return _Skip(f"could not total {metric[0]} by {region}: {use.result}")
        summary["label"] = metric[1]
        return summary

    def shares(turn: _Turn) -> dict[str, float] | _Need | _Skip:
        summary = grouped(turn)
        if not isinstance(summary, dict):
            return _Skip("no totals to work with")
        if not turn.can("calculate"):
            return _Skip("the calculate tool is not available")
        grand = _plain(float(summary["total"]))
        expressions = {g["value"]: f"{_plain(float(g['total']))} / {grand} * 100" for g in summary["groups"]}
        return _results(turn, expressions)

    def look(turn: _Turn) -> _Outcome:
        data = overview(turn)
        if not isinstance(data, dict):
            return data
        return _Done(f"{data.get('rows')} rows; columns {', '.join(data['columns'])}")

    def total(turn: _Turn) -> _Outcome:
        summary = grouped(turn)
        if not isinstance(summary, dict):
            return summary
        return _Done(f"total {summary['total']:,.0f} across {len(summary['groups'])} regions")

    def share(turn: _Turn) -> _Outcome:
        result = shares(turn)
        return result if not isinstance(result, dict) else _Done(f"{len(result)} shares computed")

    def answer(turn: _Turn) -> str:
        summary = grouped(turn)
        if not isinstance(summary, dict):
            return _cannot("total the sales by region", summary)
        money = "usd" in str(summary.get("column", "")).lower() or summary["label"] == "revenue"
        fmt = (lambda v: f"${v:,.0f}") if money else (lambda v: f"{v:,.0f}")
        computed = shares(turn)
        share_of = computed if isinstance(computed, dict) else {}
        groups = sorted(summary["groups"], key=lambda g: g["total"], reverse=True)
        top = groups[0]
        headline = (
            f"**{top['value']}** brought in the most {summary['label']}: {fmt(top['total'])} of {fmt(summary['total'])}"
        )
        headline += f" ({share_of[top['value']]:.1f}%)." if top["value"] in share_of else "."
        lines = [headline, "", f"| Region | {summary['label'].capitalize()} | Share |", "|---|---:|---:|"]
        for group in groups:
            pct = f"{share_of[group['value']]:.1f}%" if group["value"] in share_of else "-"
            lines.append(f"| {group['value']} | {fmt(group['total'])} | {pct} |")
        lines += ["", f"Source: `{summary.get('file')}` ({summary.get('rows')} rows), totals from `csv_summary`."]
        return "\n".join(lines)

    label = "units sold" if "unit" in turn.words else "new customers" if "customer" in turn.words else "revenue"
    stages = [
        _Stage("Look at the columns of the sales file", look),
        _Stage(f"Total the {label} per region", total),
        _Stage("Work out each region's share of the total", share),
    ]
    return _Routine(stages, answer, "I'll summarise the sales file and then work out the shares.")


def _json(use: _ToolUse) -> dict[str, Any] | None:
    if not use.ok or use.result is None:
        return None
    try:
        value = json.loads(use.result)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- meeting notes and product notes ----------------------------------------------------------------


@dataclass(slots=True)
class _Notes:
    path: str
    title: str
    date: str | None
    sections: dict[str, list[str]]


_STOP_WORDS = frozenset(
    "what which when where does have with from that this were there their about them need needs meeting "
    "planning action actions items item decisions decided decision notes owner owners known product products "
    "issue issues problem problems list tell give show please todo latest last next the and for are who any "
    "all our can you get got did was has how its open current".split()
)


def _meeting_sections(text: str) -> dict[str, list[str]]:
    """Bulleted sections of plain-text notes: a short heading line followed by ``- `` items."""
    sections: dict[str, list[str]] = {}
    lines = text.splitlines()
    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if line.strip() and not line.startswith(("-", " ")) and following.startswith("- "):
            items: list[str] = []
            for item in lines[index + 1 :]:
                if not item.startswith("- "):
                    break
                items.append(item[2:].strip())
            sections[line.strip().rstrip(":").lower()] = items
    return sections


def _parse_meeting(path: str, text: str) -> _Notes:
    lines = [line for line in text.splitlines() if line.strip()]
    date = next((line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("date:")), None)
    return _Notes(path, lines[0].strip() if lines else path, date, _meeting_sections(text))


def _section(sections: dict[str, list[str]], *names: str) -> list[str]:
    return next((items for title, items in sections.items() if any(n in title for n in names)), [])


def _focus(items: list[str], request: str) -> list[str]:
    """The items that mention a word of the request (a name, a product), or all of them if none does."""
    words = {w for w in re.findall(r"[a-z][a-z0-9-]{2,}", request.lower()) if w not in _STOP_WORDS}
    hits = [item for item in items if any(re.search(rf"\b{re.escape(w)}", item.lower()) for w in words)]
    return hits or items


def _meeting_notes(turn: _Turn) -> _Notes | _Need | _Skip:
    path = _meeting_file(turn)
    text = _read(turn, path, "meeting notes file")
    return _parse_meeting(path or "", text) if isinstance(text, str) else text


def _action_item(item: str) -> str:
    owner, _, rest = item.partition(":")
    if not rest:
        return f"- {item}"
    return f"- **{owner.strip()}**: {rest.strip()}"


def _meeting_routine() -> _Routine:
    def read(turn: _Turn) -> _Outcome:
        notes = _meeting_notes(turn)
        if not isinstance(notes, _Notes):
            return notes
        actions = _section(notes.sections, "action")
        decisions = _section(notes.sections, "decision")
        return _Done(f"{len(actions)} action items, {len(decisions)} decisions")

    def answer(turn: _Turn) -> str:
        notes = _meeting_notes(turn)
        if not isinstance(notes, _Notes):
            return _cannot("read the meeting notes", notes)
        actions = _section(notes.sections, "action")
        decisions = _section(notes.sections, "decision")
        if not actions and not decisions:
            return f"`{notes.path}` has no decisions or action items that I can find."
        focused = _focus(actions, turn.request)
        heading = f"From **{notes.title}**" + (f" ({notes.date})" if notes.date else "") + f", `{notes.path}`:"
        lines = [heading, "", f"**Action items** ({len(focused)} of {len(actions)})" if focused != actions
                 else f"**Action items** ({len(actions)})"]  # fmt: skip
        lines += [_action_item(item) for item in focused] or ["- none recorded"]
        if focused == actions and decisions:
            lines += ["", f"**Decisions** ({len(decisions)})", *(f"- {d}" for d in decisions)]
        return "\n".join(lines)

    stages = [
        _list_stage("Find the meeting notes", _meeting_file, "meeting notes file"),
        _Stage("Read the notes and pull out the decisions and action items", read),
    ]
    return _Routine(stages, answer, "Two steps: find the notes, then read them.")


def _markdown_sections(text: str) -> dict[str, list[str]]:
    """``## `` sections of a Markdown file as lists of items (bullets, table rows or paragraphs)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is None or not line.strip():
            continue
        elif line.startswith((" ", "\t")) and current:
            current[-1] += " " + line.strip()  # a wrapped bullet goes on
        else:
            current.append(line.strip())
    return sections


def _product_routine() -> _Routine:
    def read(turn: _Turn) -> _Outcome:
        text = _read(turn, _product_file(turn), "product notes file")
        return _Done("read") if isinstance(text, str) else text

    def answer(turn: _Turn) -> str:
        path = _product_file(turn)
        text = _read(turn, path, "product notes file")
        if not isinstance(text, str):
            return _cannot("read the product notes", text)
        sections = _markdown_sections(text)
        topics = [
            (("issue", "problem", "bug", "defect", "warranty", "return", "broken", "fail"), "issue"),
            (("price", "pricing", "cost", "margin", "discount"), "pric"),
            (("roadmap", "plan", "next", "2025", "retire", "launch"), "roadmap"),
        ]
        wanted = next((key for needles, key in topics if _mentions(turn.words, *needles)), "product")
        title = next((t for t in sections if wanted in t.lower()), None) or next(iter(sections), None)
        if title is None:
            return f"`{path}` has no sections I can read."
        if wanted == "pric":
            # Prices live in the product table; the pricing notes say what changes them.
            table = next((t for t in sections if "product" in t.lower()), None)
            body = [*(sections[table] if table else []), "", f"**{title}**", *sections[title]]
            return "\n".join([f"From `{path}`, **prices and pricing notes**:", "", *body])
        items = sections[title]
        bullets = [i for i in items if i.startswith("- ")]
        body = _focus(bullets, turn.request) if bullets else items
        return "\n".join([f"From `{path}`, **{title}**:", "", *body])

    return _Routine([_Stage("Read the product notes", read)], answer)


# -- briefing, arithmetic, help ---------------------------------------------------------------------


def _briefing_routine() -> _Routine:
    def inventory(turn: _Turn) -> _Outcome:
        listing = turn.find("list_directory")
        if listing is None:
            return _Need([("list_directory", {"relative_path": "."})])
        files = turn.known_files()
        if not listing.ok or not files:
            return _Skip(f"the workspace could not be listed or is empty: {listing.result}")
        return _Done(f"{len(files)} files: {', '.join(files)}")

    def sales_trend(turn: _Turn) -> _Outcome:
        sales = _sales(turn)
        if not isinstance(sales, _Sales):
            return sales
        trend = _trend(turn, sales)
        return trend if isinstance(trend, _Need) else _Done(trend)

    def meeting(turn: _Turn) -> _Outcome:
        notes = _meeting_notes(turn)
        if not isinstance(notes, _Notes):
            return notes
        return _Done(f"{len(_section(notes.sections, 'action'))} action items")

    def issues(turn: _Turn) -> _Outcome:
        text = _read(turn, _product_file(turn), "product notes file")
        if not isinstance(text, str):
            return text
        return _Done(f"{len(_known_issues(text))} known issues")

    def support(turn: _Turn) -> _Outcome:
        tickets = [f for f in turn.known_files() if _mentions(f.lower(), "ticket", "support")]
        if not tickets:
            # Like a hurried model, answer without closing this task the first time; the loop pushes
            # back, and the task is then skipped with a reason.
            return _Skip("there is no support-ticket data in the workspace") if turn.pushed_back else None
        text = _read(turn, tickets[0], "support-ticket file")
        return _Done(f"read {tickets[0]}") if isinstance(text, str) else text

    def answer(turn: _Turn) -> str:
        lines = ["**Monday briefing**", ""]
        sales = _sales(turn)
        if isinstance(sales, _Sales):
            trend = _trend(turn, sales)
            last = sales.periods[-1]
            top = max(sales.values, key=lambda r: sales.values[r].get(last, 0.0))
            if isinstance(trend, str):
                lines.append(f"- **Sales**: {trend}; {top} is the largest region in {last}.")
        else:
            lines.append("- **Sales**: no sales figures found.")
        notes = _meeting_notes(turn)
        if isinstance(notes, _Notes):
            actions = _section(notes.sections, "action")
            owners = ", ".join(item.partition(":")[0].strip() for item in actions)
            when = f" ({notes.date})" if notes.date else ""
            lines.append(f"- **Last meeting**{when}: {len(actions)} open action items, owners {owners}.")
        text = _read(turn, _product_file(turn), "product notes file")
        if isinstance(text, str):
            found = _known_issues(text)
            lines.append(f"- **Product issues** ({len(found)}): " + "; ".join(found) + ".")
        if not any(_mentions(f.lower(), "ticket", "support") for f in turn.known_files()):
            lines.append("- **Support tickets**: not covered; the workspace has no support data.")
        return "\n".join(lines)

    stages = [
        _Stage("List what is in the workspace", inventory),
        # The three sources are independent, so they are read in one turn (the loop runs them in parallel).
        _Stage("Summarise the sales trend", sales_trend, blocking=False),
        _Stage("Collect the action items from the latest meeting", meeting, blocking=False),
        _Stage("Note the open product issues", issues, blocking=False),
        _Stage("Check open customer-support tickets", support),
    ]
    return _Routine(stages, answer, "A briefing needs several sources; here is my plan.")


def _trend(turn: _Turn, sales: _Sales) -> str | _Need:
    """All regions together, first period against last, with the change worked out by ``calculate``."""
    first, last = sales.periods[0], sales.periods[-1]
    start = sum(v.get(first, 0.0) for v in sales.values.values())
    end = sum(v.get(last, 0.0) for v in sales.values.values())
    text = f"{sales.label} went from {sales.fmt(start)} in {first} to {sales.fmt(end)} in {last}"
    if not start or not turn.can("calculate"):
        return text
    result = _results(turn, {"change": f"({_plain(end)} - {_plain(start)}) / {_plain(start)} * 100"})
    if isinstance(result, _Need):
        return result
    return text + (f" ({result['change']:+.1f}%)" if "change" in result else "")


def _known_issues(text: str) -> list[str]:
    """One short line per known issue: the product and the first clause of its description."""
    sections = _markdown_sections(text)
    items = _section({t.lower(): v for t, v in sections.items()}, "issue")
    found = []
    for item in items:
        product, _, rest = item.removeprefix("- ").partition(":")
        first = re.split(r"[;.]", rest.strip(), maxsplit=1)[0]
        found.append(f"{product.strip()} ({first})" if first else product.strip())
    return found


# Numbers joined by operators, not touching letters: "2024-Q1 + 2024-Q2" holds labels, not a sum.
_EXPRESSION = re.compile(
    r"(?<![A-Za-z])[-+(]*\s*\d[\d.,]*(?:\s*[-+*/×÷^%]\s*[-+(]*\s*\d[\d.,]*\s*\)*)+\)*(?!\w|-[A-Za-z])"
)
_DATE = re.compile(r"^\d{4}-\d{2}(?:-\d{2})?$")


def _find_expression(text: str) -> str | None:
    """The arithmetic expression in a question ("what is 3 * (4 + 5)?"), if there is one."""
    matches = [m.group(0).strip() for m in _EXPRESSION.finditer(text)]
    matches = [m for m in matches if not _DATE.match(m)]
    if not matches:
        return None
    expression = max(matches, key=len).rstrip(".,")
    expression = re.sub(r"(?<=\d),(?=\d{3}\b)", "", expression)  # 1,200 → 1200
    expression = expression.replace("×", "*").replace("÷", "/").replace("^", "**")
    # Balance the parentheses that the pattern may have cut at the edges of the match.
    expression = "(" * max(0, expression.count(")") - expression.count("(")) + expression
    return expression + ")" * max(0, expression.count("(") - expression.count(")"))


def _arithmetic_routine(expression: str) -> _Routine:
    def work(turn: _Turn) -> _Outcome:
        if not turn.can("calculate"):
            return _Skip("the calculate tool is not available")
        return _Need([("calculate", {"expression": expression})]) if turn.find("calculate") is None else _Done("done")

    def answer(turn: _Turn) -> str:
        use = turn.find("calculate", expression=expression)
        if use is None:
            return "I would need the `calculate` tool for that, and it is not available."
        if not use.ok:
            return f"I could not calculate `{expression}`: {use.result}"
        return f"`{expression}` = **{use.result}**"

    return _Routine([_Stage("Calculate", work)], answer)


def _help_routine() -> _Routine:
    def work(turn: _Turn) -> _Outcome:
        if not turn.can("list_directory"):
            return _Done("no workspace")
        return (
            _Need([("list_directory", {"relative_path": "."})])
            if turn.find("list_directory") is None
            else _Done("listed")
        )

    def answer(turn: _Turn) -> str:
        listing = turn.find("list_directory")
        files = turn.known_files()
        if re.match(r"\s*(hi|hello|hey|good (morning|afternoon|evening))\b", turn.words):
            opening = "Hello! I'm the offline demo model: I follow a few scripted routines over the sample files."
        else:
            opening = ("I'm the offline demo model: I follow a few scripted routines instead of understanding "
                       "free text, and I did not recognise that request.")  # fmt: skip
        lines = [opening]
        if files:
            lines += ["", "The workspace holds:", *(f"- `{f}`" for f in files)]
        elif listing is not None and not listing.ok:
            lines += ["", f"I could not list the workspace: {listing.result}"]
        lines += ["", "Try one of these:", *(f"- {q}" for q in EXAMPLE_QUESTIONS)]
        return "\n".join(lines)

    return _Routine([_Stage("Look at the workspace", work)], answer)


def _cannot(what: str, why: _Need | _Skip | None) -> str:
    reason = why.reason if isinstance(why, _Skip) else "the data I needed did not arrive"
    return f"I could not {what}: {reason}."
