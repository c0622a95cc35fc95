"""``baf replay`` and ``baf export`` on the golden log, through ``baf.cli.main``."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from baf.cli import main
from baf.log import open_log
from baf.log.record import Record
from baf.replay.commands import ReplayOptions, replay
from baf.replay.reading import follow

from .helpers import GOLDEN_SESSION, copy_golden


@pytest.fixture(autouse=True)
def _output_to_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    # Output captured by pytest reads as a pipe, whose lines are never cut, unless COLUMNS is set (a
    # terminal's width, which pytest-xdist's workers and some shells export): then the timeline fits it.
    monkeypatch.delenv("COLUMNS", raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_replay_without_session_lists_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "replay", str(copy_golden(tmp_path)))
    assert GOLDEN_SESSION in out and "golden" in out and "farewell" in out


def test_replay_shows_the_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION)
    assert "reasoning" in out and "multiply(" in out and "Goodbye." in out


def test_replay_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, "--limit", "3")
    assert "--from" in out and "Goodbye." not in out


def test_replay_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(copy_golden(tmp_path))
    out = run(capsys, "replay", db, GOLDEN_SESSION, "--kind", "error")
    assert "tax service unavailable" in out and "Goodbye." not in out
    out = run(capsys, "replay", db, GOLDEN_SESSION, "--grep", "goodbye")
    assert "Goodbye." in out and "multiply" not in out
    out = run(capsys, "replay", db, GOLDEN_SESSION, "--from", "55", "--to", "60")
    assert "bye" in out and "welcome" not in out


def test_replay_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, "--json", "--kind", "tool_result")
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 5 and {line["kind"] for line in lines} == {"tool_result"}


def test_replay_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, "--at", "4")
    assert "state: welcome" in out and "visits = 1" in out and "Welcome!" in out
    assert "reasoning_scratchpad" not in out


def test_replay_at_beyond_the_end_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, "--at", "999"]) == 2
    assert "no record 999" in capsys.readouterr().err


def test_replay_unknown_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(copy_golden(tmp_path)), "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_interactive_with_piped_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = "n\nn 3\np\njump 28\nopen\nexpand\nstate\nlist 1\nj 9999\nbogus\nh\nq\nn\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(commands))
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, "--interactive")
    assert "[2/" in out and "[5/" in out and "[4/" in out
    assert "LLM request #28" in out and '"role": "system"' not in out  # system is a field, not a message
    assert '"system":' in out and "Added tasks" in out  # the full request, rebuilt from deltas
    assert "state: reasoning_state" in out
    assert "no entry at or after #9999" in out and "unknown command 'bogus'" in out
    assert "jump to the entry" in out.lower() or "j / jump" in out


def test_export_jsonl_and_otel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(copy_golden(tmp_path))
    out = run(capsys, "export", db, GOLDEN_SESSION, "--format", "jsonl")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    target = tmp_path / "trace.json"
    run(capsys, "export", db, GOLDEN_SESSION, "--format", "otel", "-o", str(target))
    document = json.loads(target.read_text())
    assert document["resourceSpans"][0]["scopeSpans"][0]["spans"]


async def test_follow_prints_records_as_they_land(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    console = Console(file=io.StringIO(), width=200)
    polls = 0

    def stop() -> bool:
        nonlocal polls
        polls += 1
        return polls >= 4

    async with open_log(f"sqlite:///{path}") as writer, open_log(f"sqlite:///{path}") as reader:
        await writer.append([Record("live", 1, "message_received", {"event": {}, "text": "first"})])

        async def write_more() -> None:
            await asyncio.sleep(0.02)
            await writer.append([
                Record("live", 2, "reasoning_step", {"kind": "reasoning_started", "step": 0, "summary": "",
                                                     "details": {"request": "first"}}),
                Record("live", 3, "reply", {"text": "second"}),
            ])  # fmt: skip

        more = asyncio.ensure_future(write_more())
        last = await follow(reader, "live", console, poll=0.02, stop=stop)
        await more
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert last == 3 and "first" in out and "second" in out and "reasoning" in out


async def test_follow_shows_a_finished_groups_summary_without_acting_on_its_control_characters(
    tmp_path: Path,
) -> None:
    # The group is printed open, then its end when it finishes: that line comes from the log too.
    path = tmp_path / "live.db"
    console = Console(file=io.StringIO(), width=200)
    more: asyncio.Future[None] | None = None
    polls_after = 0

    def stop() -> bool:  # two polls after the last record landed, however slow the machine
        nonlocal polls_after
        if more is not None and more.done():
            polls_after += 1
        return polls_after >= 2

    started = {"kind": "reasoning_started", "step": 0, "summary": "", "details": {"request": "q"}}
    finished = {"kind": "reasoning_finished", "step": 1, "summary": "done\x1b]0;pwned\x07\x1b[2J", "details": {}}
    async with open_log(f"sqlite:///{path}") as writer, open_log(f"sqlite:///{path}") as reader:
        await writer.append([Record("live", 1, "message_received", {"event": {}, "text": "q"}),
                             Record("live", 2, "reasoning_step", started)])  # fmt: skip

        async def finish() -> None:
            await asyncio.sleep(0.03)
            await writer.append([Record("live", 3, "reasoning_step", finished)])

        more = asyncio.ensure_future(finish())
        await follow(reader, "live", console, poll=0.02, stop=stop)
        await more
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "└ done\\x1b]0;pwned\\x07\\x1b[2J" in out and "\x1b" not in out, out


@pytest.mark.parametrize("argv", [
    ["--limit", "-1"], ["--width", "-5"], ["--limit", "x"], ["--at", "0"], ["--at", "-1"], ["--from", "0"],
    ["--to", "-3"], ["--fork-at", "0"],
])  # fmt: skip
def test_replay_refuses_numbers_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, *argv])
    assert exit_.value.code == 2
    assert f"argument {argv[0]}" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--follow"], ["--at", "5"], ["--rerun", "agent.py"], ["--fork-at", "3"],
                                  ["--json"], ["--kind", "reply"], ["--limit", "3"]])  # fmt: skip
def test_session_options_without_a_session_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["replay", str(copy_golden(tmp_path)), *argv])
    assert exit_.value.code == 2
    assert f"{argv[0]} needs a SESSION" in capsys.readouterr().err


async def test_follow_waits_for_a_session_that_has_not_started(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    console = Console(file=io.StringIO(), width=200)
    out = console.file

    async def printed(text: str) -> None:
        # The console writes to a StringIO: there is no event to wait on, only its text.
        while text not in out.getvalue():  # type: ignore[attr-defined]  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    async with open_log(f"sqlite:///{path}") as writer, open_log(f"sqlite:///{path}") as reader:
        await writer.append([Record("other", 1, "message_received", {"event": {}, "text": "elsewhere"})])
        following = asyncio.ensure_future(replay(reader, ReplayOptions(session="later", follow=True, poll=0.01),
                                                 console))  # fmt: skip
        await asyncio.wait_for(printed("waiting for session 'later'"), 10)
        await writer.append([Record("later", 1, "message_received", {"event": {}, "text": "here at last"})])
        await asyncio.wait_for(printed("here at last"), 10)
        assert not following.done()
        following.cancel()
        with pytest.raises(asyncio.CancelledError):
            await following


def test_export_to_a_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(copy_golden(tmp_path)), GOLDEN_SESSION, "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write -o {tmp_path}" in err and "Is a directory" in err and "Traceback" not in err


def test_interactive_stops_at_the_ends_and_explains_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("n 2\np 100\nn 1000\nj abc\nn x\nq\n"))
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, "--interactive")
    lines = out.splitlines()
    total = lines[1].split("/")[1].split("]")[0]
    assert lines[3:5] == ["(at the start)", lines[1]]  # back at the first entry
    assert lines[5] == "(at the end)" and lines[6].startswith(f"[{total}/{total}]") and "Goodbye." in lines[6]
    assert "j takes a record number, e.g. j 28" in out and "n takes a number of entries" in out
    assert "invalid literal" not in out


def test_a_filtered_reasoning_group_reports_the_runs_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(copy_golden(tmp_path))
    whole = run(capsys, "replay", db, GOLDEN_SESSION)
    header = next(line for line in whole.splitlines() if "What is 6 times 7" in line and "reasoning" in line)
    assert "[answered, 5 LLM calls, 1,408 tokens]" in header
    for argv in (["--kind", "tool_result"], ["--from", "40"], ["--grep", "multiply"]):
        assert "[answered, 5 LLM calls, 1,408 tokens]" in run(capsys, "replay", db, GOLDEN_SESSION, *argv), argv


def test_replay_at_separates_a_task_from_its_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, "--at", "50")
    assert "[x] 1. multiply — 42" in out and "[-] 2. add tax — the tax service is down" in out


def test_a_reasoning_run_of_one_model_call_is_counted_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION)
    assert "┌ reasoning    hi  [answered, 1 LLM call, 128 tokens]" in out
    assert "[answered, 5 LLM calls, 1,408 tokens]" in out


def test_the_session_start_step_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "replay", str(copy_golden(tmp_path)), GOLDEN_SESSION, "--kind", "step_started")
    assert "step started (session start)" in out and "step started (event #5)" in out
    assert "None" not in out


def test_a_fork_inside_a_step_reads_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(copy_golden(tmp_path))
    run(capsys, "replay", db, GOLDEN_SESSION, "--fork-at", "30")  # inside the reasoning run's step
    lines = run(capsys, "replay", db, f"{GOLDEN_SESSION}@30", "--limit", "0").splitlines()
    header = next(line for line in lines if "What is 6 times 7" in line and "reasoning" in line)
    assert "[cut short, 2 LLM calls" in header  # not "in flight": its step was closed
    closed = next(line for line in lines if "step finished (event #17)" in line)
    assert "closed by the fork" in closed and "crash" not in closed
    assert lines[-1].endswith(f"● session      forked from session {GOLDEN_SESSION} after #30 (inside a step)")
    assert "│" not in lines[-1] and "│" not in closed  # after the run, not in it


def test_a_failed_export_leaves_no_file_and_an_earlier_export_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(copy_golden(tmp_path))
    (tmp_path / "empty.db").touch()  # not a baf log: fails once the export has started
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "s.jsonl"
    for log, session in ((db, "no-such-session"), (str(tmp_path / "empty.db"), GOLDEN_SESSION)):
        assert main(["export", log, session, "-o", str(target)]) == 2
        assert list(out_dir.iterdir()) == []  # neither the file nor a temporary one

    target.write_text("earlier export\n")
    target.chmod(0o640)
    assert main(["export", db, "no-such-session", "-o", str(target)]) == 2
    assert target.read_text() == "earlier export\n"
    assert "no-such-session" in capsys.readouterr().err

    assert main(["export", db, GOLDEN_SESSION, "-o", str(target)]) == 0
    assert json.loads(target.read_text().splitlines()[0])["seq"] == 1
    assert target.stat().st_mode & 0o777 == 0o640  # replaced, with the permissions it had
    assert list(out_dir.iterdir()) == [target]
    assert main(["export", db, GOLDEN_SESSION, "-o", "/dev/null"]) == 0  # not a file: written as it is


def test_a_session_id_starting_with_a_dash_goes_after_double_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "dash.db"

    async def write() -> None:
        log = open_log(f"sqlite:///{db}")
        data = {"event": {"type": "text", "message": "hello"}, "text": "hello"}
        await log.append([Record("-h", 1, "message_received", data)])
        await log.close()

    asyncio.run(write())
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert "LOG -- -id" in " ".join(capsys.readouterr().out.split())  # the help says how
    assert "hello" in run(capsys, "replay", str(db), "--", "-h")
    assert "hello" in run(capsys, "log", str(db), "--", "-h")
    assert '"session_id": "-h"' in run(capsys, "export", str(db), "--", "-h")
