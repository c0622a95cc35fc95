"""The ``baf`` command end to end: run an agent in the terminal, then read its log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from baf_test_helpers import baf

from baf.cli import __file__ as cli_file
from baf.cli import main, user_traceback

EXAMPLE = Path(__file__).parent.parent / "examples" / "greetings_agent.py"


def test_run_chats_in_the_terminal_and_resumes_after_restart(tmp_path: Path) -> None:
    first = baf("run", str(EXAMPLE), cwd=tmp_path, stdin="hello\nI am fine\nexit\n")
    assert first.returncode == 0, first.stderr
    assert "Say hello when you want to chat" in first.stdout
    assert "greeting number 1" in first.stdout
    assert "Glad to hear it" in first.stdout

    # Same log, new process: the history is shown again and the variables carried on.
    second = baf("run", str(EXAMPLE), cwd=tmp_path, stdin="hi\nsad today\n")
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("Say hello when you want to chat") == 1  # from history; not re-run
    assert "greeting number 2" in second.stdout
    assert "Sorry to hear that" in second.stdout

    listing = baf("sessions", "greetings.db", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if "terminal" in line)
    assert "greetings_agent" in row and "greeting" in row

    dump = baf("log", "greetings.db", "terminal", "--json", cwd=tmp_path)
    assert dump.returncode == 0, dump.stderr
    records = [json.loads(line) for line in dump.stdout.splitlines()]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    texts = [r["data"]["text"] for r in records if r["kind"] == "message_received"]
    assert texts == ["hello", "I am fine", "hi", "sad today"]
    last_greetings = [r["data"]["value"] for r in records if r["kind"] == "variable_set"
                      and r["data"]["name"] == "greetings"]  # fmt: skip
    assert last_greetings == [1, 2]

    table = baf("log", "greetings.db", "terminal", cwd=tmp_path)
    assert table.returncode == 0 and "message_received" in table.stdout


def test_run_refuses_a_file_that_runs_its_agent_as_it_is_imported(tmp_path: Path) -> None:
    """A file written for ``python FILE`` that calls ``agent.run()`` at its top level: imported by ``baf
    run`` it would run the agent once before the command's own run; it is refused instead, naming the
    line, and nothing runs (no log is opened). Under the ``__main__`` guard the same file runs."""
    module = tmp_path / "greeter.py"
    body = (
        "from baf import Agent\n"
        f"agent = Agent('greeter', log='sqlite:///{tmp_path / 'greeter.db'}')\n"
        "agent.new_state('idle', initial=True)\n"
        "agent.use_terminal_platform()\n"
    )
    module.write_text(body + "agent.run()\n")
    result = baf("run", str(module), cwd=tmp_path, stdin="")
    assert result.returncode == 2, result.stderr
    assert "greeter.py line 5 calls agent.run() while baf loads the file" in result.stderr
    assert 'put the call under `if __name__ == "__main__":`' in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "greeter.db").exists()

    module.write_text(body + 'if __name__ == "__main__":\n    agent.run()\n')
    guarded = baf("run", str(module), cwd=tmp_path, stdin="")
    assert guarded.returncode == 0, guarded.stderr
    assert (tmp_path / "greeter.db").exists()


def test_reading_a_missing_log_fails_clearly(tmp_path: Path) -> None:
    result = baf("sessions", "nope.db", cwd=tmp_path)
    assert result.returncode == 2
    assert "no such log file: nope.db" in result.stderr
    assert not (tmp_path / "nope.db").exists()
    unknown = baf("log", str(tmp_path / "nope.db"), "s", cwd=tmp_path)
    assert unknown.returncode == 2


def test_run_refuses_a_file_without_an_agent(tmp_path: Path) -> None:
    module = tmp_path / "empty.py"
    module.write_text("x = 1\n")
    result = baf("run", str(module), cwd=tmp_path)
    assert result.returncode == 2
    assert "empty.py must define one Agent at module level" in result.stderr
    # Built under __main__ (as for python FILE), the agent is not there to find: the message says why.
    assert "if __name__ == '__main__':, is not seen" in result.stderr
    module.write_text("from baf import Agent\nshop = Agent('shop')\nbank = Agent('bank')\nalso_shop = shop\n")
    two = baf("run", str(module), cwd=tmp_path)
    assert two.returncode == 2
    assert "empty.py must define one Agent (or name the one to run 'agent'); it defines 2: bank, shop" in two.stderr


def test_ctrl_c_stops_cleanly_and_keeps_the_log(tmp_path: Path) -> None:
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "run", str(EXAMPLE)],
        cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("hello\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    seen = ""
    while "greeting number 1" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    assert "greeting number 1" in seen
    proc.send_signal(signal.SIGINT)  # stdin stays open: the prompt is still waiting for a line
    proc.wait(timeout=30)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    dump = baf("log", "greetings.db", "terminal", "--json", cwd=tmp_path)
    kinds = [json.loads(line)["kind"] for line in dump.stdout.splitlines()]
    assert kinds.count("reply") == 2 and kinds[-1] == "step_finished"


CONFIGURATION_ERRORS = {
    "no_key.py": (
        "from baf import Agent\nfrom baf.llm import LLMOpenAI\n"
        "agent = Agent('a', log='memory://')\nllm = LLMOpenAI('gpt-4o-mini')\n",
        "LLMOpenAI('gpt-4o-mini') has no API key",
    ),
    "no_root.py": (
        "from baf import Agent\nagent = Agent('a', log='memory://')\nagent.new_workspace('./missing', name='docs')\n",
        "root folder './missing' not found",
    ),
    "clash.py": (
        "from baf import Agent\nagent = Agent('a', log='memory://')\n"
        "def add(a: int) -> int:\n    'Add.'\n    return a\n"
        "agent.tool(add)\nagent.tool(name='add')(add)\n",
        "already has a tool named 'add'",
    ),
    # Raised by agent.run() rather than while the file is imported.
    "no_initial_state.py": ("from baf import Agent\nagent = Agent('a', log='memory://')\n", "initial"),
}


def test_run_reports_configuration_errors_in_one_line(tmp_path: Path) -> None:
    for name, (source, message) in CONFIGURATION_ERRORS.items():
        (tmp_path / name).write_text(source)
        result = baf("run", name, cwd=tmp_path)
        assert result.returncode == 2, (name, result.stderr)
        assert "Traceback" not in result.stderr, name
        assert result.stderr.startswith("baf run: ") and message in result.stderr, (name, result.stderr)


def test_run_keeps_the_traceback_of_errors_in_user_code(tmp_path: Path) -> None:
    # A ValueError or LookupError is also what baf's own usage errors are, and a BrokenPipeError what a
    # closed stdout raises: from the user's file each is a bug of theirs.
    for error in ("ValueError('bad value')", "KeyError('missing')", "BrokenPipeError(32, 'their socket')"):
        (tmp_path / "buggy.py").write_text(f"def setup():\n    raise {error}\nsetup()\n")
        result = baf("run", "buggy.py", cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert "Traceback" in result.stderr and 'buggy.py", line 2, in setup' in result.stderr


def test_the_load_traceback_keeps_the_users_frames_in_a_folder_named_like_bafs_own() -> None:
    # A folder beside baf's whose name starts the same (``.../baf_agents/``) is the user's, not baf's.
    baf_folder = str(Path(cli_file).resolve().parent)
    agent_file = os.path.join(baf_folder + "_agents", "agent.py")
    user_code = compile("def setup():\n    raise ValueError('boom')\nsetup()\n", agent_file, "exec")
    loader = compile("exec(user_code, {})\n", os.path.join(baf_folder, "loader.py"), "exec")
    try:
        exec(loader, {"user_code": user_code})
    except ValueError as exc:
        assert exc.__traceback__ is not None
        exc.__traceback__ = exc.__traceback__.tb_next  # from baf's (stand-in) loader on, as under baf run
        shown = user_traceback(exc)
    assert "loader.py" not in shown
    assert f'File "{agent_file}", line 3, in <module>' in shown
    assert f'File "{agent_file}", line 2, in setup' in shown


def test_a_file_that_fails_to_load_shows_its_traceback_from_the_users_code_on(tmp_path: Path) -> None:
    # As `python buggy.py` would show it: baf's loader, importlib and the CLI are not the user's bug.
    (tmp_path / "helper.py").write_text("def setup():\n    raise RuntimeError('boom at import')\n")
    (tmp_path / "buggy.py").write_text("from helper import setup\n\nsetup()\n")
    result = baf("run", "buggy.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):", result.stderr
    assert lines[1].endswith('buggy.py", line 3, in <module>'), result.stderr
    assert 'helper.py", line 2, in setup' in result.stderr and lines[-1] == "RuntimeError: boom at import"
    assert "baf/cli.py" not in result.stderr and "<frozen" not in result.stderr
    (tmp_path / "typo.py").write_text("from baf import Agent\nagent = Agent('x', log='memory://'\n")
    result = baf("run", "typo.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and 'typo.py", line 2' in result.stderr
    assert result.stderr.rstrip().endswith("SyntaxError: '(' was never closed"), result.stderr


def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    golden = Path(__file__).parent / "fixtures" / "golden" / "golden.db"
    db = tmp_path / "golden.db"
    db.write_bytes(golden.read_bytes())
    for command in (["log", str(db), "golden-1", "--json"], ["export", str(db), "golden-1", "--format", "jsonl"],
                    ["replay", str(db), "golden-1", "--json"], ["replay", str(db), "golden-1"]):  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", "baf.cli", *command], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # like `| head` that has read what it wanted, before baf has written a line
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
        proc.stderr.close()
        assert proc.returncode == 141, (command, err)
        assert err == "", (command, err)


def test_log_redacts_the_environments_secrets_as_replay_does(tmp_path: Path) -> None:
    # A log written before the key was known (or by another program) still holds it: `baf log`, like
    # replay and export, must not print it.
    import asyncio

    from baf.log import Record, SQLiteLog

    key = "sk-canary-log-2c9e77d0a1"

    async def write() -> None:
        async with SQLiteLog(tmp_path / "old.db") as log:
            await log.append([Record("s", 1, "reply", {"text": f"the key is {key}"})])

    asyncio.run(write())
    for extra in ([], ["--json"]):
        result = baf("log", "old.db", "s", *extra, cwd=tmp_path, env={"OPENAI_API_KEY": key})
        assert result.returncode == 0, result.stderr
        assert key not in result.stdout and "the key is" in result.stdout, (extra, result.stdout)


CHATTY_AGENT = """
from baf import Agent, ReceiveTextEvent, Session
from baf.core.session import runtime_side

agent = Agent("chatty", log="sqlite:///chatty.db")
idle = agent.new_state("idle", initial=True)
talk = agent.new_state("talk")

async def body(session: Session) -> None:
    for n in range(300):
        session.reply(f"line {n}")
        await runtime_side(session).commit()  # each reply delivered as it is made

talk.set_body(body)
idle.when_event(ReceiveTextEvent).go_to(talk)
talk.go_to(idle)
"""


def test_run_whose_output_closes_ends_the_chat_and_the_log_says_why(tmp_path: Path) -> None:
    # rich used to end the process from inside the step (SystemExit): the log then showed the step
    # finished normally after two replies, and no error. Input stays open here: only the closed output
    # can end the chat.
    (tmp_path / "chatty.py").write_text(CHATTY_AGENT)
    proc = subprocess.Popen([sys.executable, "-m", "baf.cli", "run", "chatty.py"], cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(b"hello\n")
        proc.stdin.flush()
        seen = b""
        for _ in range(20):  # the header and the prompt come first; read until the replies start
            seen += proc.stdout.read1(65536)
            if b"line 0" in seen:
                break
        assert b"line 0" in seen and b"resumed" not in seen, seen
        proc.stdout.close()  # like `| head` that has read what it wanted
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
        proc.stderr.close()
    assert proc.returncode == 141, err
    assert "Traceback" not in err and "the output was closed; stopping the agent" in err, err
    log = [json.loads(line) for line in baf("log", "chatty.db", "terminal", "--json", cwd=tmp_path).stdout.splitlines()]
    errors = [r["data"] for r in log if r["kind"] == "error"]
    assert [(e["source"], e["type"]) for e in errors] == [("platform", "BrokenPipeError")]
    assert [r["data"]["text"] for r in log if r["kind"] == "reply"] == [f"line {n}" for n in range(300)]
    last = log[-1]
    assert last["kind"] == "step_finished" and "interrupted" not in last["data"], last
    assert [r["data"]["dest"] for r in log if r["kind"] == "transition"] == ["talk", "idle"]


def test_run_says_where_the_websocket_platform_listens(tmp_path: Path) -> None:
    import signal
    import threading

    (tmp_path / "web.py").write_text(
        "from baf import Agent\nfrom baf.platforms.websocket import WebSocketPlatform\n"
        "agent = Agent('web', log='memory://')\nagent.new_state('idle', initial=True)\n"
        "agent.add_platform(WebSocketPlatform(port=0))\n"
    )  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "baf.cli", "run", "web.py"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stderr is not None
    guard = threading.Timer(30, proc.kill)  # a silent start must fail the test, not hang it
    guard.start()
    line = proc.stderr.readline()  # returns once the platform has started (or the guard killed it)
    guard.cancel()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert line.startswith("websocket platform listening on ws://127.0.0.1:") and "browser UI: http://" in line
    assert ":0/" not in line  # the port it got, not the one asked for
    assert proc.returncode == 0 and "Traceback" not in err


# -- log paths with URL characters ----------------------------------------------------------------


def write_log(db: Path) -> None:
    """A log at ``db`` holding session ``s`` (one message, one reply)."""
    import asyncio

    from baf.log import Record, SQLiteLog

    async def write() -> None:
        async with SQLiteLog(db) as log:
            await log.append([Record("s", 1, "message_received", {"event": {}, "text": "hi"}),
                              Record("s", 2, "reply", {"text": "hello"})])  # fmt: skip

    asyncio.run(write())


def test_a_plain_log_path_is_the_file_name_even_with_url_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As a URL, "?" would start a query, "#" a fragment and "%" an escape: a plain path is none of these.
    db = tmp_path / "my?log#1%41.db"
    write_log(db)
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in (["sessions", str(db)], ["log", str(db), "s"], ["replay", str(db), "s"],
                 ["export", str(db), "s"], ["replay", str(db), "s", "--fork-at", "1"]):  # fmt: skip
        assert main(argv) == 0, (argv, capsys.readouterr().err)
    out = capsys.readouterr().out
    assert "hello" in out and "forked s at seq 1" in out
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == before
    # The URL form of that name, percent-encoded, opens the same file.
    assert main(["log", "sqlite:///" + str(db).replace("%", "%25").replace("?", "%3F").replace("#", "%23"), "s"]) == 0
    assert main(["log", str(tmp_path / "my"), "s"]) == 2  # what the name was cut to before
    assert "no such log file" in capsys.readouterr().err


@pytest.mark.slow
def test_the_demo_writes_a_log_whose_name_has_url_characters(tmp_path: Path) -> None:
    result = baf("demo", "--log", "a#b?c%41.db", cwd=tmp_path, stdin="exit\n")
    assert result.returncode == 0, result.stderr
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == ["a#b?c%41.db"]
    assert "recorded in a#b?c%41.db; see it again with: baf replay 'a#b?c%41.db' terminal" in result.stdout
    assert "terminal" in baf("sessions", "a#b?c%41.db", cwd=tmp_path).stdout


# -- writable opens of what is not a log ----------------------------------------------------------

AGENT_ON_NOTDB = (
    "from baf import Agent\nagent = Agent('a', log='sqlite:///notdb.db')\nagent.new_state('idle', initial=True)\n"
)


def make_newer_schema(path: Path) -> None:
    import sqlite3

    write_log(path)
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("UPDATE baf_meta SET value = '99' WHERE key = 'schema_version'")
    connection.close()


def make_foreign(path: Path) -> None:
    import sqlite3

    connection = sqlite3.connect(path)
    connection.executescript("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ann');")
    connection.close()


@pytest.mark.parametrize("command", [["replay", "notdb.db", "s", "--fork-at", "1"], ["run", "agent.py"]],
                         ids=["fork-at", "run"])  # fmt: skip
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.mkdir(), "cannot open .*notdb.db: it is a directory, not a log file"),
        (lambda path: path.write_text("hello\n"), "not a baf log: .*notdb.db is not a SQLite database"),
        (make_foreign, r"not a baf log: .*notdb.db is a database with other tables \(users\) and no baf_meta"),
        (make_newer_schema, "notdb.db has log schema version '99'"),
    ],
    ids=["directory", "text", "foreign", "newer-schema"],
)
def test_writing_to_what_is_not_a_log_is_a_one_line_error(
    tmp_path: Path, command: list[str], make: Any, message: str
) -> None:
    import re
    import sqlite3

    (tmp_path / "agent.py").write_text(AGENT_ON_NOTDB)
    make(tmp_path / "notdb.db")
    result = baf(*command, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"baf {command[0]}: ") and re.search(message, line), line
    if make is make_foreign:  # refused, and left as it was: no baf tables, no WAL
        connection = sqlite3.connect(f"file:{tmp_path / 'notdb.db'}?mode=ro", uri=True)
        assert connection.execute("SELECT name FROM sqlite_master").fetchall() == [("users",)]
        assert connection.execute("PRAGMA journal_mode").fetchall() == [("delete",)]
        connection.close()


@pytest.mark.parametrize("command", [["replay"], ["log"], ["export", "--format", "jsonl"]])
def test_a_session_not_in_the_log_points_to_the_list_of_its_sessions(tmp_path: Path, command: list[str]) -> None:
    import asyncio

    from baf.log import Record, SQLiteLog

    async def write() -> None:
        async with SQLiteLog(tmp_path / "my log.db") as log:
            await log.append([Record("s1", 1, "reply", {"text": "hi"})])

    asyncio.run(write())
    done = baf(command[0], "my log.db", "s2", *command[1:], cwd=tmp_path)
    assert done.returncode == 2
    assert "session 's2' has no records in" in done.stderr
    assert done.stderr.rstrip().endswith("; baf sessions 'my log.db' lists them"), done.stderr


def test_a_log_url_short_of_its_slashes_is_said_to_be_one(tmp_path: Path) -> None:
    for target in ("postgresql:/db.example/agents", "sqlite:/x.db"):
        done = baf("sessions", target, cwd=tmp_path)
        assert done.returncode == 2
        assert f"no such log file: {target} (a log URL: sqlite:///relative/path.db, postgresql://" in done.stderr
    plain = baf("sessions", "x.db", cwd=tmp_path)  # a plain file name gets no hint
    assert plain.stderr.strip() == "baf sessions: no such log file: x.db"


def test_a_usage_error_quotes_what_was_typed_redacted_and_with_control_characters_escaped(tmp_path: Path) -> None:
    # argparse echoes unrecognised arguments as they are: an OSC 52 sequence (sets the clipboard) and a
    # key pasted by mistake would reach the terminal.
    key = "sk-canary-usage-5f1e0c"
    result = baf("sessions", "x.db", "--bogus", "\x1b]52;c;aGk=\x07", key, cwd=tmp_path, env={"CANARY_API_KEY": key})
    assert result.returncode == 2
    assert (
        result.stderr.splitlines()[-1] == "baf: error: unrecognized arguments: --bogus \\x1b]52;c;aGk=\\x07 [REDACTED]"
    )
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr and key not in result.stderr
