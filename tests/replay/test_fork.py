"""Fork: a new session from any seq of an old one, continued live."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from baf import Agent, Session
from baf.core.session import runtime_side
from baf.errors import SessionNotFoundError
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLM
from baf.log import Record, open_log
from baf.log.projection import project
from baf.replay.fork import fork
from baf.replay.rerun import assert_replays
from baf.testing import ScriptedLLM


def build(url: str, llm: LLM) -> Agent:
    agent = Agent("forkable", log=url)
    asking = agent.new_state("asking", initial=True)
    reasoning = new_reasoning_state(agent, llm, initial=False, memory=None, enable_task_planning=False)

    def remember(session: Session) -> None:
        if session.event is not None:
            session.set("name", session.event.text)
            session.reply(f"hello {session.event.text}")

    named = agent.new_state("named")
    named.set_body(remember)
    asking.when_event().go_to(named)
    named.when_event().go_to(reasoning)
    reasoning.when_event().go_to(reasoning)
    return agent


async def test_fork_continues_live_from_the_cut(db_url: str) -> None:
    async with build(db_url, ScriptedLLM(["first answer", "second answer"])) as agent:
        await agent.receive_message("s", "Ada")
        await agent.receive_message("s", "question one")
        await agent.receive_message("s", "question two")
        records = await agent.log.read("s")
    # Cut right after the first answer's step.
    first_answer = next(r for r in records if r.kind == "reply" and r.data["text"] == "first answer")
    cut = next(r.seq for r in records if r.kind == "step_finished" and r.seq > first_answer.seq)

    new_id = await fork(db_url, "s", cut)
    assert new_id == f"s@{cut}"
    async with open_log(db_url) as log:
        forked = await log.read(new_id)
    assert [(r.kind, r.data) for r in forked[:-1]] == [(r.kind, r.data) for r in records if r.seq <= cut]
    assert forked[-1].kind == "forked_from" and forked[-1].data == {"session": "s", "seq": cut}

    llm = ScriptedLLM(["a different second answer"])
    async with build(db_url, llm) as agent:
        session = await agent.get_or_create_session(new_id)
        assert session.current_state.name == "reasoning_state" and session["name"] == "Ada"
        await agent.receive_message(new_id, "another question")
        original = await agent.log.read("s")
        after = await agent.log.read(new_id)
    # The model saw the fork's history (no "question two"), and the original session is untouched.
    assert [m["content"] for m in llm.requests[0].messages] == ["Ada", "hello Ada", "question one", "first answer",
                                                                 "another question"]  # fmt: skip
    assert [h.text for h in project(new_id, after).history][-1] == "a different second answer"
    assert original == records
    # A second fork of the same point gets a fresh id.
    assert await fork(db_url, "s", cut) == f"s@{cut}#2"


async def test_fork_inside_a_step_closes_it_or_refuses(db_url: str) -> None:
    async with build(db_url, ScriptedLLM(["first answer"])) as agent:
        await agent.receive_message("s", "Ada")
        await agent.receive_message("s", "question one")
        records = await agent.log.read("s")
    request = next(r for r in records if r.kind == "llm_request")
    with pytest.raises(ValueError, match=f"seq {request.seq} is inside the step"):
        await fork(db_url, "s", request.seq, inside_step="refuse")

    new_id = await fork(db_url, "s", request.seq, "mid")
    async with open_log(db_url) as log:
        forked = await log.read("mid")
    assert [r.kind for r in forked[-3:]] == ["error", "step_finished", "forked_from"]
    assert forked[-2].data["interrupted"] is True and forked[-1].data["inside_step"] is True
    assert forked[-2].data["interrupted_by"] == "fork"
    assert project("mid", forked).open_step is None
    async with build(db_url, ScriptedLLM(["answer in the fork"])) as agent:
        await agent.receive_message(new_id, "question again")
        after = await agent.log.read(new_id)
    assert after[-1].kind == "step_finished" and any(r.kind == "reply" and r.data["text"] == "answer in the fork"
                                                     for r in after)  # fmt: skip


async def test_fork_rejects_a_seq_outside_the_session(db_url: str) -> None:
    async with build(db_url, ScriptedLLM([])) as agent:
        await agent.receive_message("s", "Ada")
        last = (await agent.log.read("s"))[-1].seq
    with pytest.raises(ValueError, match=f"records 1..{last}"):
        await fork(db_url, "s", last + 1)
    with pytest.raises(SessionNotFoundError, match="session 'nobody' has no records"):
        await fork(db_url, "nobody", 1)


def test_cli_fork_at_and_rerun(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent_file = tmp_path / "agent.py"
    db = tmp_path / "cli.db"
    agent_file.write_text(
        "from baf import Agent\n"
        "from baf.library.state.reasoning_state_library import new_reasoning_state\n"
        "from baf.testing import ScriptedLLM\n"
        f"agent = Agent('cli', log='sqlite:///{db}')\n"
        "state = new_reasoning_state(agent, ScriptedLLM(['hi there']), enable_task_planning=False)\n"
        "state.when_event().go_to(state)\n"
    )
    from baf.cli import find_agent, load_agent_module, main

    async def record() -> None:
        async with find_agent(load_agent_module(str(agent_file))) as agent:
            await agent.receive_message("s", "hello")

    asyncio.run(record())
    assert main(["replay", str(db), "s", "--rerun", str(agent_file)]) == 0
    assert "identical" in capsys.readouterr().out
    assert main(["replay", str(db), "s", "--fork-at", "3"]) == 0
    assert "s@3" in capsys.readouterr().out


async def test_a_fork_holding_an_unhandled_message_waits_to_be_continued(db_url: str) -> None:
    async with build(db_url, ScriptedLLM(["first answer"])) as agent:
        await agent.receive_message("s", "Ada")
        await agent.receive_message("s", "question one")
        records = await agent.log.read("s")
    question = next(r for r in records if r.kind == "message_received" and r.data["text"] == "question one")
    new_id = await fork(db_url, "s", question.seq)  # recorded, not yet handled
    async with open_log(db_url) as log:
        forked = await log.read(new_id)
    assert forked[-1].data == {"session": "s", "seq": question.seq, "held": [question.seq]}

    # Loading the fork (a restart, any agent on the log) calls no model and runs nothing.
    llm = ScriptedLLM(["answer in the fork"])
    async with build(db_url, llm) as agent:
        session = await agent.get_or_create_session(new_id)
        await agent.wait_idle()
        assert llm.requests == [] and (await agent.log.read(new_id)) == forked
        assert runtime_side(session).projection.held and session.current_state.name == "named"
    async with build(db_url, llm) as agent:  # nor a second start
        await agent.wait_idle()
        assert llm.requests == [] and (await agent.log.read(new_id)) == forked
        # The explicit continuation handles it, live.
        await agent.continue_session(new_id)
        after = await agent.log.read(new_id)
    continued = after[len(forked)]
    assert continued.kind == "fork_continued" and continued.data == {"seqs": [question.seq]}
    assert [m["content"] for m in llm.requests[0].messages] == ["Ada", "hello Ada", "question one"]
    assert project(new_id, after).history[-1].text == "answer in the fork"


async def test_a_new_message_to_a_holding_fork_continues_it_first(db_url: str) -> None:
    async with build(db_url, ScriptedLLM(["first answer"])) as agent:
        await agent.receive_message("s", "Ada")
        await agent.receive_message("s", "question one")
        records = await agent.log.read("s")
    question = next(r for r in records if r.kind == "message_received" and r.data["text"] == "question one")
    new_id = await fork(db_url, "s", question.seq)
    llm = ScriptedLLM(["answer one", "answer two"])
    async with build(db_url, llm) as agent:
        await agent.receive_message(new_id, "question two")
        after = await agent.log.read(new_id)
    kinds = [r.kind for r in after[question.seq :]]
    assert kinds[:3] == ["forked_from", "fork_continued", "message_received"]
    assert [h.text for h in project(new_id, after).history][-4:] == ["question one", "question two", "answer one",
                                                                     "answer two"]  # fmt: skip


def greeter(url: str, greeted: list[str]) -> Agent:
    """An agent whose initial body acts (it notes the session and greets); messages are echoed."""
    agent = Agent("greeter", log=url)
    hello = agent.new_state("hello", initial=True)
    echo = agent.new_state("echo")

    def greet(session: Session) -> None:
        greeted.append(session.id)
        session.reply("welcome")

    def answer(session: Session) -> None:
        if session.event is not None:
            session.reply(f"you said {session.event.text}")

    hello.set_body(greet)
    echo.set_body(answer)
    hello.when_event().go_to(echo)
    echo.when_event().go_to(echo)
    return agent


async def test_a_fork_cut_before_the_first_step_holds_the_initial_body(db_url: str) -> None:
    greeted: list[str] = []
    async with greeter(db_url, greeted) as agent:
        await agent.receive_message("s", "hi")
        records = await agent.log.read("s")
    assert [r.kind for r in records[:2]] == ["session_started", "step_started"]
    new_id = await fork(db_url, "s", 1)  # the session started, its initial body not run yet
    async with open_log(db_url) as log:
        forked = await log.read(new_id)
    assert forked[-1].data == {"session": "s", "seq": 1, "start_held": True}

    # A faithful prefix: loading it (and starting an agent on the log) runs nothing.
    greeted.clear()
    async with greeter(db_url, greeted) as agent:
        session = await agent.get_or_create_session(new_id)
        await agent.wait_idle()
        assert greeted == [] and (await agent.log.read(new_id)) == forked
        assert runtime_side(session).projection.start_held and session.current_state.name == "hello"
    async with greeter(db_url, greeted) as agent:
        await agent.wait_idle()
        assert greeted == [] and (await agent.log.read(new_id)) == forked
        await agent.continue_session(new_id)  # now the initial body runs, once
        after = await agent.log.read(new_id)
    assert greeted == [new_id]
    assert [r.kind for r in after[len(forked) : len(forked) + 2]] == ["fork_continued", "step_started"]
    assert [h.text for h in project(new_id, after).history] == ["welcome"]
    await assert_replays(db_url, new_id, greeter("memory://", []))  # a re-run runs it where it ran


async def test_a_message_to_a_fork_cut_before_the_first_step_runs_the_initial_body_first(db_url: str) -> None:
    greeted: list[str] = []
    async with greeter(db_url, greeted) as agent:
        await agent.receive_message("s", "hi")
    new_id = await fork(db_url, "s", 1)
    async with greeter(db_url, greeted) as agent:
        await agent.receive_message(new_id, "again")
        after = await agent.log.read(new_id)
    assert greeted == ["s", new_id]
    # As in a session that starts with a message: the message is recorded, the initial body runs, then it.
    assert [h.text for h in project(new_id, after).history] == ["again", "welcome", "you said again"]
    original = [h.text for h in project("s", await read_log(db_url, "s")).history]
    assert original == ["hi", "welcome", "you said hi"]


async def read_log(url: str, session_id: str) -> list[Record]:
    async with open_log(url) as log:
        return await log.read(session_id)


@pytest.mark.parametrize("session", ["-h", "s\x1b[31m"])
def test_the_printed_continue_command_names_the_fork_when_pasted_into_a_shell(tmp_path: Path, session: str) -> None:
    """A fork of session "-h" is "-h@3": ``--session -h@3`` would be an argparse error; a session holding
    ESC was printed with ``\\x1b`` as text, which names another session when pasted."""
    import shlex
    import subprocess
    import sys

    from rich.console import Console

    from baf.replay.cli_hooks import fork_command

    agent_file, db = tmp_path / "agent.py", tmp_path / "cli.db"
    agent_file.write_text(
        "from baf import Agent\n"
        "from baf.library.state.reasoning_state_library import new_reasoning_state\n"
        "from baf.testing import ScriptedLLM\n"
        f"agent = Agent('cli', log='sqlite:///{db}')\n"
        "state = new_reasoning_state(agent, ScriptedLLM(['hi there', 'forked answer']), enable_task_planning=False)\n"
        "state.when_event().go_to(state)\n"
    )
    from baf.cli import find_agent, load_agent_module

    async def record_and_fork() -> str:
        async with find_agent(load_agent_module(str(agent_file))) as agent:
            await agent.receive_message(session, "hello")
        console = Console(record=True, width=500)
        async with open_log(f"sqlite:///{db}") as log:
            assert await fork_command(log, session, 3, console, str(db)) == 0
        return console.export_text()

    printed = asyncio.run(record_and_fork())
    assert "\x1b" not in printed
    line = next(line for line in printed.splitlines() if line.startswith("continue it in the terminal: "))
    command = line.removeprefix("continue it in the terminal: ").removesuffix(" (quoted for bash or zsh)")
    command = command.split(" (the .py or .yaml file")[0]
    baf = f"{shlex.quote(sys.executable)} -m baf.cli"
    command = command.replace("baf run AGENT_FILE", f"{baf} run {shlex.quote(str(agent_file))}", 1)
    result = subprocess.run(["bash", "-c", command], input="more\n", capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "hi there" in result.stdout  # the fork's history: the pasted command named the fork

    async def sessions() -> list[str]:
        async with open_log(f"sqlite:///{db}") as log:
            return await log.sessions()

    assert sorted(asyncio.run(sessions())) == sorted([session, f"{session}@3"])  # no other session made
