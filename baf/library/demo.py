"""The reasoning demo behind ``baf demo``: an agent that answers questions about a folder of sample files.

The agent has one reasoning state (a self-loop), a read-only workspace of sample business files shipped
with baf (:data:`DEMO_WORKSPACE`: quarterly sales by region, product notes, meeting notes) and two tools,
:func:`calculate` and a ``csv_summary`` tool bound to the workspace. With ``OPENAI_API_KEY`` set it talks
to a real model (``BAF_MODEL``, default ``gpt-4o-mini``; ``OPENAI_BASE_URL`` for any OpenAI-compatible
server); without one, :class:`~baf.library.demo_model.OfflineDemoLLM` plays the assistant, offline.

``examples/reasoning_agent.py`` wires the same agent step by step, as an example to copy.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import operator
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from baf.core.agent import Agent
from baf.errors import ToolError, WorkspaceError
from baf.library.demo_model import EXAMPLE_QUESTIONS, OfflineDemoLLM
from baf.library.state.reasoning_state_library import DEFAULT_SYSTEM_PROMPT, new_reasoning_state
from baf.llm.base import LLM
from baf.log import SessionLog
from baf.log.printable import shell_word
from baf.reasoning.tool import Tool
from baf.reasoning.workspace import Workspace

__all__ = [
    "DEFAULT_LOG_URL",
    "DEMO_AGENT_NAME",
    "DEMO_SYSTEM_PROMPT",
    "DEMO_WORKSPACE",
    "EXAMPLE_QUESTIONS",
    "OFFLINE_BANNER",
    "OfflineDemoLLM",
    "build_demo_agent",
    "calculate",
    "csv_summary_tool",
    "demo_llm",
    "print_intro",
    "run_demo",
]

#: The sample files, shipped as package data so ``baf demo`` works from an installed wheel.
DEMO_WORKSPACE = Path(__file__).parent / "demo_workspace"

#: Where the demo keeps its session log by default: a SQLite file in the working directory.
DEFAULT_LOG_URL = "sqlite:///reasoning_demo.db"

#: The demo agent's name, as its sessions record it: ``baf replay --fork-at`` tells a fork of one to go on
#: with ``baf demo --session`` (there is no agent file of the user's to name).
DEMO_AGENT_NAME = "reasoning_demo"

OFFLINE_BANNER = "offline demo: a scripted model plays the assistant (set OPENAI_API_KEY to use a real model)"

DEMO_SYSTEM_PROMPT = (
    DEFAULT_SYSTEM_PROMPT
    + " Do arithmetic with `calculate` rather than in your head, and use `csv_summary` for totals and "
    "averages over CSV files. Quote the figures you used."
)

_WORKSPACE_DESCRIPTION = "Sample files of Larkspur Outfitters: 2024 sales by region, product notes, meeting notes."


# -- tools -------------------------------------------------------------------------------------------

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
_MAX_EXPRESSION_CHARS = 500
# Integers beyond this many bits take real time to compute and print; no business question needs them.
_MAX_INT_BITS = 4096


def calculate(expression: str) -> int | float:
    """Evaluate an arithmetic expression and return the number.

    Supports + - * / // % ** and parentheses, the functions abs, round, min, max and sqrt, and the
    constants pi and e. Write plain numbers: no thousands separators, currency signs or units.

    Args:
        expression: The expression, e.g. '(268400 - 187200) / 187200 * 100'.
    """
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is {len(expression)} characters long; the limit is {_MAX_EXPRESSION_CHARS}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"{expression!r} is not a valid arithmetic expression ({exc.msg})") from None
    try:
        value = _evaluate(tree.body)
    except ZeroDivisionError:
        raise ToolError(f"{expression!r} divides by zero") from None
    except (OverflowError, ValueError, TypeError) as exc:
        raise ToolError(f"cannot evaluate {expression!r}: {exc}") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError(f"{expression!r} has no finite value")
        value = float(f"{value:.12g}")  # drop binary noise such as 0.30000000000000004
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    return value


def _evaluate(node: ast.expr) -> int | float:
    """Walk the parsed expression, allowing only numbers, arithmetic and a few named functions.

    A whitelist walk instead of ``eval``: model output is untrusted input, and ``eval`` would run it.
    """
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value  # True and False are ints to Python, but not numbers to a user
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int) and right > 0:
            if abs(left) > 1 and left.bit_length() * right > _MAX_INT_BITS:
                raise ValueError(f"the power {left}**{right} is too large")
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_size(_UNARY[type(node.op)](_evaluate(node.operand)))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ValueError(f"unknown name {node.id!r}; known constants: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            raise ValueError(f"unknown function {node.func.id!r}; known functions: {', '.join(_FUNCTIONS)}")
        return _check_size(function(*(_evaluate(arg) for arg in node.args)))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise ValueError("'^' is not a power here; write '**' instead")
    if isinstance(node, ast.Tuple):
        raise ValueError("write numbers without thousands separators (a comma separates values)")
    raise ValueError(f"{ast.unparse(node)!r} is not allowed; only numbers, arithmetic and {', '.join(_FUNCTIONS)}")


def _check_size(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"the result {value!r} is not a number")
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise ValueError("the result is too large")
    return value


def csv_summary_tool(workspace: Workspace, name: str = "csv_summary") -> Tool:
    """A tool that summarises CSV files of ``workspace`` (counts, totals, means, per group)."""

    def csv_summary(relative_path: str, column: str | None = None, group_by: str | None = None) -> dict[str, Any]:
        """Summarise a CSV file of the workspace.

        Without a column: the number of rows and a summary of every column (numbers: total, mean, min,
        max; text: the distinct values). With a column: count, total, mean, min and max of that numeric
        column, per value of group_by when given.

        Args:
            relative_path: The CSV file, relative to the workspace root.
            column: A numeric column to summarise; leave it out for an overview of all columns.
            group_by: A column whose values split the rows into groups, e.g. 'region'.
        """
        header, rows = _read_csv(workspace, relative_path)
        for wanted in (column, group_by):
            if wanted is not None and wanted not in header:
                raise ToolError(f"{relative_path} has no column {wanted!r}; its columns are {', '.join(header)}")
        result: dict[str, Any] = {"file": relative_path, "rows": len(rows)}
        if column is None:
            result["columns"] = {h: _describe([row.get(h) or "" for row in rows]) for h in header}
            return result
        values = [(row.get(group_by) or "" if group_by else "", _to_number(row.get(column) or "")) for row in rows]
        numbers = [v for _, v in values if v is not None]
        if not numbers:
            raise ToolError(f"column {column!r} of {relative_path} holds no numbers")
        result.update({"column": column, **_stats(numbers)})
        if len(numbers) < len(values):
            result["non_numeric_rows"] = len(values) - len(numbers)
        if group_by is not None:
            groups: dict[str, list[float]] = {}
            for key, number in values:
                if number is not None:
                    groups.setdefault(key, []).append(number)
            result["group_by"] = group_by
            result["groups"] = [{"value": key, **_stats(nums)} for key, nums in groups.items()]
        return result

    return Tool(csv_summary, name=name)


def _read_csv(workspace: Workspace, relative_path: str) -> tuple[list[str], list[dict[str, str]]]:
    try:
        real = workspace.resolve(relative_path)  # refuses paths that leave the workspace
    except WorkspaceError as exc:
        raise ToolError(str(exc)) from exc
    if not real.is_file():
        raise ToolError(f"no file {relative_path!r} in workspace {workspace.name!r}")
    size = real.stat().st_size
    if size > workspace.max_read_bytes:
        # A summary of a cut file would be silently wrong, so refuse instead.
        raise ToolError(f"{relative_path} is {size} bytes; csv_summary reads at most {workspace.max_read_bytes}")
    text = real.read_text(encoding="utf-8-sig", errors="replace")
    reader = csv.DictReader(io.StringIO(text))
    header = [h for h in (reader.fieldnames or []) if h]
    if not header:
        raise ToolError(f"{relative_path} is empty or has no header row")
    return header, list(reader)


def _to_number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "").replace("$", "").replace("€", "").replace("%", "")
    try:
        number = float(cleaned)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _tidy(value: float) -> int | float:
    return int(value) if value.is_integer() else round(value, 4)


def _stats(numbers: list[float]) -> dict[str, int | float]:
    total = math.fsum(numbers)
    return {"count": len(numbers), "total": _tidy(total), "mean": _tidy(total / len(numbers)),
            "min": _tidy(min(numbers)), "max": _tidy(max(numbers))}  # fmt: skip


def _describe(cells: list[str]) -> dict[str, Any]:
    numbers = [n for n in (_to_number(c) for c in cells if c.strip()) if n is not None]
    filled = [c for c in cells if c.strip()]
    if filled and len(numbers) == len(filled):
        return {"kind": "number", **_stats(numbers)}
    distinct = list(dict.fromkeys(filled))
    return {"kind": "text", "distinct": len(distinct), "values": distinct[:10]}


# -- the agent ---------------------------------------------------------------------------------------


def demo_llm() -> LLM:
    """The demo's model: ``LLMOpenAI`` when ``OPENAI_API_KEY`` is set, else the offline demo model.

    ``BAF_MODEL`` names the model (default ``gpt-4o-mini``); ``OPENAI_BASE_URL`` points at any
    OpenAI-compatible server.
    """
    if os.environ.get("OPENAI_API_KEY"):
        from baf.llm.openai_llm import LLMOpenAI

        return LLMOpenAI(
            os.environ.get("BAF_MODEL") or "gpt-4o-mini", base_url=os.environ.get("OPENAI_BASE_URL") or None
        )
    return OfflineDemoLLM()


def build_demo_agent(
    log_url: str | SessionLog = DEFAULT_LOG_URL,
    llm: LLM | None = None,
    workspace: str | Path | None = None,
) -> Agent:
    """The demo agent: one reasoning state looping on every message, a read-only workspace and two tools.

    Args:
        log_url: Where sessions are recorded (a log URL or a ``SessionLog``).
        llm: The model; :func:`demo_llm` picks one when left out.
        workspace: The folder to browse; defaults to the sample files in :data:`DEMO_WORKSPACE`.
    """
    agent = Agent(DEMO_AGENT_NAME, log=log_url)
    files = agent.new_workspace(workspace or DEMO_WORKSPACE, name="files", description=_WORKSPACE_DESCRIPTION)
    agent.new_tool(calculate)
    agent.add_tool(csv_summary_tool(files))
    # 12 turns, not the default 8: a briefing over every file takes a real model about ten.
    state = new_reasoning_state(agent, llm or demo_llm(), system_prompt=DEMO_SYSTEM_PROMPT, max_steps=12)
    state.when_event().go_to(state)
    return agent


def print_intro(llm: LLM, console: Console | None = None, how_to_stop: str = "Type exit to quit.") -> None:
    """Say which model plays the assistant (clearly, when it is the offline one), what to ask, and
    ``how_to_stop`` (the terminal's words by default; a server says its own)."""
    console = console or Console()
    if isinstance(llm, OfflineDemoLLM):
        # soft_wrap: the banner must stay one line (and searchable) on any terminal width.
        console.print(Text(OFFLINE_BANNER, style="bold yellow"), soft_wrap=True)
    else:
        base_url = os.environ.get("OPENAI_BASE_URL")
        console.print(Text(f"model: {llm.name}" + (f" at {base_url}" if base_url else ""), style="bold green"))
    questions = "\n".join(f"  • {q}" for q in EXAMPLE_QUESTIONS)
    console.print(Panel(
        f"Ask about the sample files (sales by region, product notes, meeting notes), for example:\n{questions}\n"
        + how_to_stop, title="baf reasoning demo", title_align="left",
    ))  # fmt: skip


def _baf_command() -> str:
    """How to run ``baf`` again from here: ``baf`` when that is this program, else the path it was run by
    (``.venv/bin/baf demo``, the README's first command, leaves ``baf`` off the ``PATH``)."""
    invoked = sys.argv[0] if sys.argv else ""
    if Path(invoked).name != "baf" or os.sep not in invoked:
        return "baf"  # run as baf from the PATH, or as python -m baf.cli, or not by the command at all
    found = shutil.which("baf")
    if found is not None and Path(found).resolve() == Path(invoked).resolve():
        return "baf"
    return shlex.quote(invoked)


def run_demo(
    log: str | None = None, llm: LLM | None = None, console: Console | None = None, session_id: str | None = None
) -> None:
    """Run the demo agent in the terminal until the user types ``exit`` (what ``baf demo`` does).

    Args:
        log: The log URL; defaults to ``reasoning_demo.db`` in the working directory.
        llm: The model; :func:`demo_llm` picks one when left out.
        console: Where to print; the terminal by default.
        session_id: The terminal chat's session (default ``terminal``); naming one, as ``baf demo --session``
            does, also continues a fork's held messages first (as ``baf run --session`` does).
    """
    console = console or Console()
    model = llm or demo_llm()
    url = log or DEFAULT_LOG_URL
    agent = build_demo_agent(url, llm=model)
    print_intro(model, console)
    terminal = agent.use_terminal_platform(
        console=console, session_id=session_id or "terminal", continue_fork=session_id is not None
    )
    agent.run()
    if url.startswith("sqlite:///"):  # a file to read back (a memory:// log is gone)
        # Decoded as open_log decodes it (a "#" in the name is "%23" in the URL), and quoted for a shell.
        path = unquote(urlsplit(url).path[1:])
        session = terminal.session_id
        dashes = "-- " if session.startswith("-") else ""  # else argparse reads the id as an option
        command = f"{_baf_command()} replay {shell_word(path)} {dashes}{shell_word(session)}"
        console.print(Text(f"The conversation is recorded in {path}; see it again with: {command}", style="dim"),
                      soft_wrap=True)  # fmt: skip
