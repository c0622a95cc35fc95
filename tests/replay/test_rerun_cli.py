"""``baf replay LOG SESSION --rerun agent.py`` on what users really record: tool calls written as dicts,
sessions a restart resumed, forks (cut between steps, inside a step, or holding a message)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from baf_test_helpers import baf

from baf.cli import find_agent, load_agent_module
from baf.core.agent import Agent
from baf.llm.base import ToolCall
from baf.log import Record, SQLiteLog
from baf.log.postgres import PostgresLog
from baf.replay.fork import fork

AGENT = '''
print("Welcome to the shop agent!")  # the module's own banner: no part of a re-run's report

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse, ToolCall
from baf.testing import FunctionLLM


def model(messages, tools, **_):
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    step = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
    item = messages[last_user]["content"].split()[-1]
    if step == 0:  # arguments as a dict, as people write them
        return LLMResponse(tool_calls=[ToolCall(id=f"c{last_user}", name="price", arguments={"item": item})])
    return f"{item}: " + messages[-1]["content"]


agent = Agent("shop", log="sqlite:///shop.db")
state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False)
state.when_event().go_to(state)


@agent.tool(idempotent=True)  # safe to run again after a crash
def price(item: str) -> str:
    """The price of an item.

    Args:
        item: What to price.
    """
    print(f"pricing {item}")  # side output of the agent's own code
    return f"{len(item)} euros"
'''


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shop_agent.py").write_text(AGENT)
    return tmp_path


def load() -> Agent:
    return find_agent(load_agent_module("shop_agent.py"))


def rerun_cli(folder: Path, session: str) -> str:
    done = baf("replay", "shop.db", session, "--rerun", "shop_agent.py", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "identical" in done.stdout
    assert "Welcome" not in done.stdout and "pricing" not in done.stdout
    return done.stdout


async def records_of(session: str) -> list[Record]:
    async with SQLiteLog("shop.db") as log:
        return await log.read(session)


def test_tool_call_arguments_given_as_a_dict_are_kept_as_json_text() -> None:
    call = ToolCall("c1", "price", {"item": "apple"})  # type: ignore[arg-type]  # what users write
    assert call.arguments == '{"item": "apple"}'
    assert ToolCall.from_dict({"id": "c1", "name": "price", "arguments": {"item": "apple"}}) == call
    with pytest.raises(TypeError, match="arguments must be the JSON text of an object, or a dict"):
        ToolCall("c1", "price", ["apple"])  # type: ignore[arg-type]


async def test_dict_arguments_record_as_json_and_rerun_identically(shop: Path, capsys: Any) -> None:
    async with load() as agent:
        await agent.receive_message("s", "price of apple")
        await agent.receive_message("s", "price of kiwi")
    records = await records_of("s")
    calls = [c for r in records if r.kind == "llm_response" for c in r.data["tool_calls"]]
    assert [c["arguments"] for c in calls] == ['{"item": "apple"}', '{"item": "kiwi"}']
    assert [r.data["text"] for r in records if r.kind == "reply"] == ["apple: 5 euros", "kiwi: 4 euros"]
    rerun_cli(shop, "s")


async def test_a_session_resumed_after_a_crash_reruns_identically(shop: Path) -> None:
    async with load() as agent:
        await agent.receive_message("s", "price of apple")
        await agent.receive_message("s", "price of kiwi")
    full = await records_of("s")
    # A crash right after the second model response was recorded: its tool call had not run yet.
    second = [r for r in full if r.kind == "llm_response"][2]
    (shop / "shop.db").unlink()
    async with SQLiteLog("shop.db") as log:
        await log.append(full[: second.seq])
    async with load() as agent:
        await agent.wait_idle()
    resumed = await records_of("s")
    assert any(r.kind == "step_resumed" for r in resumed)
    assert [r.data["text"] for r in resumed if r.kind == "reply"] == ["apple: 5 euros", "kiwi: 4 euros"]
    rerun_cli(shop, "s")


async def test_forks_rerun_identically(shop: Path) -> None:
    async with load() as agent:
        await agent.receive_message("s", "price of apple")
        await agent.receive_message("s", "price of kiwi")
    records = await records_of("s")
    between = next(r.seq for r in records if r.kind == "step_finished" and r.seq > 5)
    inside = [r for r in records if r.kind == "llm_response"][2].seq
    holding = [r for r in records if r.kind == "message_received"][1].seq
    async with SQLiteLog("shop.db") as log:
        forks = [await fork(log, "s", seq) for seq in (between, inside, holding)]
        forks.append(await fork(log, forks[0], between, "fork-of-fork"))
    async with load() as agent:
        await agent.continue_session(forks[2])  # the held question, handled now
        for session in forks:
            await agent.receive_message(session, "price of plum")
    for session in forks:
        replies = [r.data["text"] for r in await records_of(session) if r.kind == "reply"]
        assert replies[-1] == "plum: 4 euros", session
        rerun_cli(shop, session)


async def test_baf_run_session_continues_a_held_fork(shop: Path) -> None:
    async with load() as agent:
        await agent.receive_message("s", "price of apple")
        await agent.receive_message("s", "price of kiwi")
    holding = [r for r in await records_of("s") if r.kind == "message_received"][1].seq
    forked = baf("replay", "shop.db", "s", "--fork-at", str(holding), cwd=shop)
    assert forked.returncode == 0, forked.stderr
    # The log does not say which file defines the agent (shop_agent.py here): the hint names the agent.
    hint = f"baf run AGENT_FILE --log=sqlite:///shop.db --session=s@{holding} (the .py or .yaml file that defines"
    assert f"{hint} agent 'shop')" in forked.stdout
    assert f"await agent.continue_session('s@{holding}') (an Agent with log='sqlite:///shop.db')" in forked.stdout
    assert "agent.py" not in forked.stdout
    assert f"it holds message #{holding}" in forked.stdout
    # Another agent loading the log leaves it alone ...
    async with load() as agent:
        await agent.wait_idle()
    assert (await records_of(f"s@{holding}"))[-1].kind == "forked_from"
    # ... and naming it in `baf run` continues it, then chats on.
    done = baf("run", "shop_agent.py", "--session", f"s@{holding}", cwd=shop, stdin="price of fig\n")
    assert done.returncode == 0, done.stderr
    assert "handling it now" in done.stdout and "kiwi: 4 euros" in done.stdout and "fig: 3 euros" in done.stdout
    kinds = [r.kind for r in await records_of(f"s@{holding}")]
    assert kinds[holding : holding + 3] == ["forked_from", "fork_continued", "step_started"]
    rerun_cli(shop, f"s@{holding}")


async def test_the_fork_hint_names_the_postgresql_log_and_baf_run_continues_the_fork_there(
    shop: Path, postgres_dsn: str
) -> None:
    """The agent's file names another log (shop.db): the hint's ``--log`` is what finds the fork."""
    asked = baf("run", "shop_agent.py", "--log", postgres_dsn, cwd=shop, stdin="price of apple\nprice of kiwi\n")
    assert asked.returncode == 0 and "kiwi: 4 euros" in asked.stdout, asked.stderr
    async with PostgresLog(postgres_dsn, read_only=True) as log:
        holding = [r for r in await log.read("terminal") if r.kind == "message_received"][1].seq
    forked = baf("replay", postgres_dsn, "terminal", "--fork-at", str(holding), cwd=shop)
    assert forked.returncode == 0, forked.stderr
    (hint,) = [line for line in forked.stdout.splitlines() if line.startswith("continue it in the terminal: ")]
    command = hint.removeprefix("continue it in the terminal: ").split(" (the .py")[0]
    assert command == f"baf run AGENT_FILE --log={shlex.quote(postgres_dsn)} --session=terminal@{holding}"
    assert f"(an Agent with log={postgres_dsn!r})" in forked.stdout
    # The command as printed, with the agent's file named, continues the fork (its held question first)
    argv = shlex.split(command.replace("AGENT_FILE", "shop_agent.py"))[2:]
    done = baf("run", *argv, cwd=shop, stdin="price of fig\n")
    assert done.returncode == 0, done.stderr
    assert "handling it now" in done.stdout and "kiwi: 4 euros" in done.stdout and "fig: 3 euros" in done.stdout
    async with PostgresLog(postgres_dsn, read_only=True) as log:
        kinds = [r.kind for r in await log.read(f"terminal@{holding}")]
    assert kinds[holding : holding + 2] == ["forked_from", "fork_continued"]
    assert not (shop / "shop.db").exists()  # the file's own log was never opened
