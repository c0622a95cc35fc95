"""The reasoning demo: its tools, the offline model over the sample files, and ``baf demo`` in a terminal.

Expected figures are computed here from the sample CSV with the csv module, independently of the demo
code, so a test fails if the offline model ever answers with anything but what the file says.
"""

from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from baf import Agent
from baf.cli import find_agent, load_agent_module
from baf.errors import ToolError
from baf.library.demo import (
    DEMO_WORKSPACE,
    EXAMPLE_QUESTIONS,
    OFFLINE_BANNER,
    OfflineDemoLLM,
    build_demo_agent,
    calculate,
    csv_summary_tool,
    demo_llm,
)
from baf.library.demo_model import offline_demo_reply
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.openai_llm import LLMOpenAI
from baf.reasoning.workspace import Workspace
from baf.testing import RecordingPlatform

REPO = Path(__file__).resolve().parents[2]
SALES = DEMO_WORKSPACE / "sales_by_region_2024.csv"


# -- fixtures and helpers ----------------------------------------------------------------------------


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Refuse (and remember) every attempt to open a network connection during the test."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("network access is not allowed in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield attempts
    assert attempts == [], f"the demo tried to reach the network: {attempts}"


def sales_table(path: Path = SALES) -> dict[str, dict[str, float]]:
    """revenue_usd by region and quarter, read straight from the CSV."""
    table: dict[str, dict[str, float]] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            table.setdefault(row["region"], {})[row["quarter"]] = float(row["revenue_usd"])
    return table


def expected_growth(path: Path = SALES) -> dict[str, float]:
    table = sales_table(path)
    return {region: (q["2024-Q4"] - q["2024-Q1"]) / q["2024-Q1"] * 100 for region, q in table.items()}


async def ask(agent: Agent, *questions: str, session: str = "s1") -> tuple[RecordingPlatform, list[str]]:
    platform = RecordingPlatform()
    async with agent:
        for question in questions:
            await agent.receive_message(session, question, platform)
        errors = [r.data for r in await agent.log.read(session) if r.kind == "error"]
    assert errors == []
    return platform, platform.replies[session]


def step_kinds(platform: RecordingPlatform, session: str = "s1") -> list[str]:
    return [step.kind for step in platform.steps[session]]


def tools_called(platform: RecordingPlatform, session: str = "s1") -> list[str]:
    return [
        call["name"]
        for step in platform.steps[session]
        if step.kind == "llm_tool_calls"
        for call in step.details["tool_calls"]
    ]


def offline_agent(log: str = "memory://", workspace: Path | None = None) -> Agent:
    return build_demo_agent(log, llm=OfflineDemoLLM(), workspace=workspace)


# -- the tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("(268400 - 187200) / 187200 * 100", 43.3760683761),
        ("2 ** 10", 1024),
        ("0.1 + 0.2", 0.3),
        ("-7 // 2 + 7 % 3", -3),
        ("round(sqrt(2), 3) + abs(-1) + max(1, 2, 3) - min(4, 5)", 1.414),
        ("10 / 4", 2.5),
        ("6 / 3", 2),
        ("2 * pi", 6.28318530718),
    ],
)
def test_calculate_evaluates_arithmetic(expression: str, value: float) -> None:
    assert calculate(expression) == pytest.approx(value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "not allowed"),
        ("open('x')", "unknown function 'open'"),
        ("x + 1", "unknown name 'x'"),
        ("(1).__class__", "not allowed"),
        ("2 ^ 3", "write '\\*\\*'"),
        ("1,200 + 5", "thousands separators"),
        ("1 / 0", "divides by zero"),
        ("9 ** 9 ** 9", "too large"),
        ("10.0 ** 400", "cannot evaluate"),
        ("True + 1", "not allowed"),
        ("'a' * 3", "not allowed"),
        ("1 +", "not a valid arithmetic expression"),
        ("1" * 501, "the limit is 500"),
    ],
)
def test_calculate_refuses_anything_but_arithmetic(expression: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        calculate(expression)


async def test_csv_summary_overview_and_grouped_totals() -> None:
    tool = csv_summary_tool(Workspace(DEMO_WORKSPACE))
    overview = await tool.call({"relative_path": SALES.name})
    assert overview["rows"] == 20
    assert overview["columns"]["region"]["kind"] == "text" and overview["columns"]["region"]["distinct"] == 5
    assert overview["columns"]["revenue_usd"]["total"] == sum(sum(q.values()) for q in sales_table().values())

    grouped = await tool.call({"relative_path": SALES.name, "column": "revenue_usd", "group_by": "region"})
    totals = {g["value"]: g["total"] for g in grouped["groups"]}
    assert totals == {region: sum(q.values()) for region, q in sales_table().items()}
    assert grouped["count"] == 20 and grouped["total"] == sum(totals.values())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"relative_path": "../sales.csv"}, "uses '..' to leave"),
        ({"relative_path": "missing.csv"}, "no file 'missing.csv'"),
        ({"relative_path": SALES.name, "column": "profit"}, "no column 'profit'; its columns are quarter"),
        ({"relative_path": SALES.name, "column": "region"}, "holds no numbers"),
    ],
)
async def test_csv_summary_refusals_are_tool_errors(arguments: dict[str, Any], message: str) -> None:
    tool = csv_summary_tool(Workspace(DEMO_WORKSPACE))
    with pytest.raises(ToolError, match=message):
        await tool.run(arguments)


def test_sample_files_ship_with_the_package() -> None:
    names = sorted(p.name for p in DEMO_WORKSPACE.iterdir())
    assert names == ["meeting_notes_2024-10-14.txt", "product_notes.md", "sales_by_region_2024.csv"]
    assert '"**/*.csv"' in (REPO / "pyproject.toml").read_text()  # the CSV is package data too


# -- the offline model, end to end ------------------------------------------------------------------


async def test_growth_question_is_answered_from_the_csv(log_url: str, no_network: list[Any]) -> None:
    growth = expected_growth()
    ranked = sorted(growth, key=lambda region: growth[region], reverse=True)
    platform, replies = await ask(offline_agent(log_url), "Which region grew fastest this year?")

    assert len(replies) == 1
    answer = replies[0]
    best = ranked[0]
    assert f"**{best} grew fastest**" in answer
    q = sales_table()[best]
    assert f"${q['2024-Q1']:,.0f}" in answer and f"${q['2024-Q4']:,.0f}" in answer
    for region in ranked:
        assert f"| {region} |" in answer and f"{growth[region]:+.1f}%" in answer
    assert answer.index(ranked[0]) < answer.index(f"| {ranked[1]} |")  # ranked, fastest first

    kinds = step_kinds(platform)
    assert kinds[0] == "reasoning_started" and kinds[-1] == "reasoning_finished"
    assert kinds.count("task_added") == 3 and kinds.count("task_completed") == 3
    assert "tool_result" in kinds and "pushback" not in kinds
    assert tools_called(platform)[:4] == ["add_tasks", "list_directory", "complete_task", "read_file"]
    assert tools_called(platform).count("calculate") == len(growth)  # one per region, in one turn
    final = platform.steps["s1"][-2]
    assert final.kind == "llm_text" and final.details == {"text": answer, "final": True}
    assert all(task["status"] == "completed" for task in platform.task_lists["s1"][-1])


async def test_totals_question_uses_csv_summary_and_shares(no_network: list[Any]) -> None:
    totals = {region: sum(q.values()) for region, q in sales_table().items()}
    grand = sum(totals.values())
    top = max(totals, key=lambda region: totals[region])
    platform, replies = await ask(offline_agent(), "What was the total revenue by region?")

    answer = replies[0]
    assert f"**{top}** brought in the most revenue: ${totals[top]:,.0f} of ${grand:,.0f}" in answer
    for region, total in totals.items():
        assert f"| {region} | ${total:,.0f} | {total / grand * 100:.1f}% |" in answer
    assert tools_called(platform).count("csv_summary") == 2
    assert step_kinds(platform).count("task_completed") == 3


async def test_meeting_question_lists_the_action_items(no_network: list[Any]) -> None:
    platform, replies = await ask(offline_agent(), "What are the action items from the planning meeting?")
    answer = replies[0]
    notes = (DEMO_WORKSPACE / "meeting_notes_2024-10-14.txt").read_text()
    items = notes.split("Action items\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(items) == 4
    for item in items:
        owner, task = item.removeprefix("- ").split(": ", 1)
        assert f"- **{owner}**: {task}" in answer
    assert "**Decisions** (3)" in answer and "(2024-10-14)" in answer
    assert step_kinds(platform).count("task_completed") == 2


async def test_a_follow_up_about_one_person_narrows_the_list(no_network: list[Any]) -> None:
    _, replies = await ask(offline_agent(), "What does Tom need to do?")
    assert "**Tom Okafor**: confirm the Tarn zipper fix" in replies[0]
    assert "Maya Chen" not in replies[0]


async def test_product_question_is_a_single_read_without_a_plan(no_network: list[Any]) -> None:
    platform, replies = await ask(offline_agent(), "Any problems with the tent?")
    assert "Tarn tent: the rainfly zipper snags on the storm flap" in replies[0]
    assert "Ridgeline" not in replies[0]
    assert tools_called(platform) == ["read_file"]
    assert "task_added" not in step_kinds(platform)


async def test_briefing_is_pushed_back_and_skips_what_the_files_do_not_cover(no_network: list[Any]) -> None:
    table = sales_table()
    start = sum(q["2024-Q1"] for q in table.values())
    end = sum(q["2024-Q4"] for q in table.values())
    platform, replies = await ask(offline_agent(), "Give me a briefing for Monday.")

    assert len(replies) == 1  # the premature answer was refused, not sent
    answer = replies[0]
    assert f"from ${start:,.0f} in 2024-Q1 to ${end:,.0f} in 2024-Q4 ({(end - start) / start * 100:+.1f}%)" in answer
    assert "owners Maya Chen, Tom Okafor, Priya Raman, Luis Ortega" in answer
    assert "**Product issues** (3)" in answer
    kinds = step_kinds(platform)
    assert kinds.count("task_added") == 5 and kinds.count("task_completed") == 4
    assert kinds.index("pushback") < kinds.index("task_skipped") < len(kinds) - 2
    skipped = [s for s in platform.steps["s1"] if s.kind == "task_skipped"]
    assert skipped[0].details["result"] == "there is no support-ticket data in the workspace"
    # The three files were read in one turn.
    reads = [s for s in platform.steps["s1"] if s.kind == "llm_tool_calls" and "read_file" in s.summary]
    assert [c["name"] for c in reads[0].details["tool_calls"]].count("read_file") == 3


async def test_arithmetic_is_one_calculate_call(no_network: list[Any]) -> None:
    platform, replies = await ask(offline_agent(), "What is (268400 - 187200) / 187200 * 100?")
    assert replies == ["`(268400 - 187200) / 187200 * 100` = **43.3760683761**"]
    assert tools_called(platform) == ["calculate"]


async def test_unknown_requests_get_the_workspace_and_example_questions(no_network: list[Any]) -> None:
    platform, replies = await ask(offline_agent(), "Tell me a joke about penguins")
    answer = replies[0]
    assert "did not recognise that request" in answer
    for name in ("sales_by_region_2024.csv", "product_notes.md", "meeting_notes_2024-10-14.txt"):
        assert f"`{name}`" in answer
    for question in EXAMPLE_QUESTIONS:
        assert question in answer
    assert tools_called(platform) == ["list_directory"]


async def test_every_example_question_gets_a_real_answer(no_network: list[Any]) -> None:
    _, replies = await ask(offline_agent(), *EXAMPLE_QUESTIONS)
    assert len(replies) == len(EXAMPLE_QUESTIONS)
    for reply in replies:
        assert "did not recognise" not in reply and "could not" not in reply.lower()


async def test_answers_follow_the_data_not_a_script(tmp_path: Path, no_network: list[Any]) -> None:
    # Make Latin America the fastest grower: the answer must change with the file.
    shutil.copytree(DEMO_WORKSPACE, tmp_path / "ws")
    sales = tmp_path / "ws" / SALES.name
    text = sales.read_text().replace("2024-Q4,Latin America,112400", "2024-Q4,Latin America,192600")
    sales.write_text(text)
    growth = expected_growth(sales)
    _, replies = await ask(offline_agent(workspace=tmp_path / "ws"), "Which region grew fastest this year?")
    assert "**Latin America grew fastest**" in replies[0]
    assert f"{growth['Latin America']:+.1f}%" in replies[0]


async def test_missing_sales_file_is_skipped_and_explained(tmp_path: Path, no_network: list[Any]) -> None:
    shutil.copytree(DEMO_WORKSPACE, tmp_path / "ws")
    (tmp_path / "ws" / SALES.name).unlink()
    platform, replies = await ask(offline_agent(workspace=tmp_path / "ws"), "Which region grew fastest?")
    assert replies == ["I could not work out the growth per region: there is no sales CSV file in the workspace."]
    assert step_kinds(platform).count("task_skipped") == 3


async def test_without_task_planning_the_model_works_without_a_plan(no_network: list[Any]) -> None:
    agent = Agent("plain", log="memory://")
    agent.new_workspace(DEMO_WORKSPACE, name="files")
    agent.new_tool(calculate)
    state = new_reasoning_state(agent, OfflineDemoLLM(), enable_task_planning=False)
    state.when_event().go_to(state)
    platform, replies = await ask(agent, "Which region grew fastest this year?")
    best = max(expected_growth().items(), key=lambda item: item[1])
    assert f"**{best[0]} grew fastest**" in replies[0] and f"{best[1]:+.1f}%" in replies[0]
    assert "add_tasks" not in tools_called(platform) and "complete_task" not in tools_called(platform)


async def test_the_offline_model_is_deterministic(no_network: list[Any]) -> None:
    async def run() -> list[tuple[str, Any]]:
        agent = offline_agent()
        async with agent:
            await agent.receive_message("s1", "Give me a briefing for Monday.", RecordingPlatform())
            records = await agent.log.read("s1")
        # Timing is the only thing allowed to differ between runs.
        return [(r.kind, {k: v for k, v in r.data.items() if k != "latency_ms"}) for r in records]

    assert await run() == await run()


def test_offline_reply_is_a_pure_function_of_the_conversation() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 6 * 7?"}]
    tools = [{"type": "function", "function": {"name": "calculate", "parameters": {}}}]
    first = offline_demo_reply(messages, tools)
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("calculate", '{"expression": "6 * 7"}')]
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "6 * 7"}'}}
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "42"},
    ]  # fmt: skip
    assert offline_demo_reply(messages, tools).text == "`6 * 7` = **42**"


# -- choosing the model, the example script -------------------------------------------------------


def test_demo_llm_uses_a_real_model_only_with_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert isinstance(demo_llm(), OfflineDemoLLM)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("BAF_MODEL", "qwen2.5:7b")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    llm = demo_llm()
    assert isinstance(llm, LLMOpenAI) and llm.name == "qwen2.5:7b"
    monkeypatch.delenv("BAF_MODEL")
    assert demo_llm().name == "gpt-4o-mini"


def test_the_example_builds_the_demo_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    example = find_agent(load_agent_module(REPO / "examples" / "reasoning_agent.py"))
    assert OFFLINE_BANNER in capsys.readouterr().out
    demo = offline_agent()
    assert example.name == demo.name
    assert set(example.tools) == set(demo.tools) == {"calculate", "csv_summary"}
    assert {n: w.root for n, w in example.workspaces.items()} == {n: w.root for n, w in demo.workspaces.items()}
    assert [(s.name, s.initial) for s in example.states] == [(s.name, s.initial) for s in demo.states]


# -- in a terminal ----------------------------------------------------------------------------------


def _terminal_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "BAF_MODEL")}
    env["COLUMNS"] = "160"  # rich wraps at the terminal width; keep answer lines whole
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["demo"], ["run", str(REPO / "examples" / "reasoning_agent.py")]],
    ids=["baf demo", "baf run example"],
)
def test_the_demo_in_a_terminal(tmp_path: Path, command: list[str]) -> None:
    growth = expected_growth()
    best = max(growth, key=lambda region: growth[region])
    result = subprocess.run(
        [sys.executable, "-m", "baf.cli", *command],
        input="Which region grew fastest this year?\nexit\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_terminal_env(),
        timeout=120,
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert OFFLINE_BANNER in out
    assert "reasoning started" in out and "reasoning finished" in out
    for line in ("[0] llm_tool_calls: calling add_tasks", "[0] task_added: task 1 added",
                 "[1] tool_result: list_directory returned", "task_completed: task 3 completed"):  # fmt: skip
        assert line in out
    assert f"{best} grew fastest" in out and f"{growth[best]:+.1f}%" in out
    assert out.index("reasoning started") < out.index(f"{best} grew fastest") < out.index("reasoning finished")
    assert (tmp_path / "reasoning_demo.db").exists()  # the session log lands in the working directory


@pytest.mark.slow
def test_the_demo_remembers_the_conversation_across_runs(tmp_path: Path) -> None:
    def run(question: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "baf.cli", "demo"], input=f"{question}\nexit\n", capture_output=True,
            text=True, cwd=tmp_path, env=_terminal_env(), timeout=120, check=True,
        ).stdout  # fmt: skip

    run("What is 6 * 7?")
    second = run("thanks")
    # The second run replays the first conversation from reasoning_demo.db before the new prompt.
    assert second.index("What is 6 * 7?") < second.index("You're welcome!")
    assert "42" in second


@pytest.mark.slow
def test_the_demo_takes_a_plain_log_path_and_says_where_it_wrote(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "baf.cli", "demo", "--log", "plain.db"], input="exit\n", capture_output=True,
        text=True, cwd=tmp_path, env=_terminal_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "plain.db").exists() and not (tmp_path / "reasoning_demo.db").exists()
    assert "recorded in plain.db; see it again with: baf replay plain.db terminal" in result.stdout
    # A session id argparse would read as an option is given after "--", as the printed command does.
    result = subprocess.run(
        [sys.executable, "-m", "baf.cli", "demo", "--log", "plain.db", "--session=-x"], input="exit\n",
        capture_output=True, text=True, cwd=tmp_path, env=_terminal_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "see it again with: baf replay plain.db -- -x" in result.stdout
    shown = subprocess.run([sys.executable, "-m", "baf.cli", "replay", "plain.db", "--", "-x"], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr


@pytest.mark.slow
def test_a_fork_of_a_demo_session_is_continued_with_baf_demo(tmp_path: Path) -> None:
    def baf(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "baf.cli", *args], input=stdin, capture_output=True, text=True,
                              cwd=tmp_path, env=_terminal_env(), timeout=120)  # fmt: skip

    asked = baf("demo", stdin="What is 6 * 7?\nWhat is 2 + 3?\nexit\n")
    assert asked.returncode == 0, asked.stderr
    listed = baf("log", "reasoning_demo.db", "terminal", "--plain").stdout.splitlines()
    second = [line.split("\t")[0] for line in listed if "\tmessage_received\t" in line][1]
    forked = baf("replay", "reasoning_demo.db", "terminal", "--fork-at", second)
    assert forked.returncode == 0, forked.stderr
    # The demo's agent is defined in no file of the user's: the hint is the demo's own command.
    (hint,) = [line for line in forked.stdout.splitlines() if line.startswith("continue it in the terminal: ")]
    command = hint.removeprefix("continue it in the terminal: ")
    assert command == f"baf demo --log=sqlite:///reasoning_demo.db --session=terminal@{second}"
    done = baf(*command.split()[1:], stdin="thanks\nexit\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("handling it now") < out.index("2 + 3 = 5") < out.index("You're welcome!")
    assert f"baf replay reasoning_demo.db terminal@{second}" in out  # where it wrote: the fork


@pytest.mark.slow
def test_the_demo_names_baf_as_it_was_run_when_baf_is_not_on_the_path(tmp_path: Path) -> None:
    # The README's first command runs .venv/bin/baf without activating the venv: its "see it again with"
    # must work as printed, so it names the program by the path it was run by.
    script = Path(sys.executable).parent / "baf"
    assert script.is_file(), script
    for path, shown in ((os.defpath, str(script)), (f"{script.parent}{os.pathsep}{os.defpath}", "baf")):
        result = subprocess.run([str(script), "demo"], input="exit\n", capture_output=True, text=True, cwd=tmp_path,
                                env={**_terminal_env(), "PATH": path}, timeout=120)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"see it again with: {shown} replay reasoning_demo.db terminal" in result.stdout
