"""One writing process per SQLite log: a second process opening it for writing is refused, naming the
file and the holder; the reading commands keep working while the writer runs."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from baf_test_helpers import baf

from baf.cli import main
from baf.errors import LogError, LogInUseError
from baf.log import Record, SQLiteLog

STARTED = {"agent": "holder", "platform": None, "initial_state": "start"}

# A second process: opens the log for writing, appends a record, says so, and holds the log until stdin closes.
HOLDER = """
import asyncio, sys
from baf.log import Record, SQLiteLog

async def main():
    async with SQLiteLog(sys.argv[1]) as log:
        started = {"agent": "holder", "platform": None, "initial_state": "start"}
        await log.append([Record(session_id="held", seq=1, kind="session_started", data=started)])
        print("HOLDING", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def start_holder(db: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "HOLDING"
    return holder


def stop(holder: subprocess.Popen[str]) -> None:
    if holder.stdin is not None:
        holder.stdin.close()
    holder.wait(20)
    if holder.stdout is not None:
        holder.stdout.close()


@pytest.mark.slow
async def test_a_second_writing_process_is_refused_naming_the_file_and_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "baf.db"
    holder = start_holder(db)
    try:
        log = SQLiteLog(db)
        with pytest.raises(LogInUseError) as refused:
            await log.start()
        error = refused.value
        assert isinstance(error, LogError)
        assert error.path == db and str(db) in str(error)
        assert error.holder is not None and f"pid {holder.pid}" in error.holder
        assert (tmp_path / "baf.db.writer-lock").exists()
        assert f"pid {holder.pid}" in str(error) and "PostgreSQL" in str(error)
        with pytest.raises(LogInUseError):  # an append opens the store too: refused the same way
            await log.append([Record(session_id="x", seq=1, kind="session_started", data=STARTED)])
        # Reading is not refused, in this process or in the reading commands
        async with SQLiteLog(db, read_only=True) as reader:
            assert [r.kind for r in await reader.read("held")] == ["session_started"]
        for command in (["sessions", str(db)], ["log", str(db), "held"], ["replay", str(db), "held"],
                        ["check", str(db)]):  # fmt: skip
            shown = baf(*command, cwd=tmp_path)
            assert shown.returncode == 0, (command, shown.stderr)
        assert "held" in baf("sessions", str(db), cwd=tmp_path).stdout
        # Nothing was written by the refused store
        async with SQLiteLog(db, read_only=True) as reader:
            assert await reader.sessions() == ["held"]
    finally:
        stop(holder)
    # The holder is gone: the log opens for writing again
    async with SQLiteLog(db) as log:
        await log.append([Record(session_id="after", seq=1, kind="session_started", data=STARTED)])
        assert await log.sessions() == ["held", "after"]


@pytest.mark.slow
def test_a_fork_refused_while_another_process_writes_says_to_stop_it_not_to_open_the_log_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "baf.db"
    holder = start_holder(db)
    try:
        assert main(["replay", str(db), "held", "--fork-at", "1"]) == 2
    finally:
        stop(holder)
    said = capsys.readouterr().err
    assert f"a fork appends its new session to this log, which pid {holder.pid}" in said, said
    assert "is writing now: stop that process, fork, then start it again; nothing was written" in said
    assert "open the log read-only" not in said
    assert main(["replay", str(db), "held", "--fork-at", "1"]) == 0  # the holder is gone: it forks


@pytest.mark.slow
async def test_a_killed_writer_leaves_no_lock_behind(tmp_path: Path) -> None:
    db = tmp_path / "baf.db"
    holder = start_holder(db)
    holder.send_signal(signal.SIGKILL)
    await asyncio.to_thread(holder.wait, 20)
    stop(holder)
    async with SQLiteLog(db) as log:  # the kernel released the lock with the process
        assert await log.sessions() == ["held"]


# Opens the log for writing in another process: prints the error's name if refused.
OPENER = """
import asyncio, sys
from baf.log import SQLiteLog

async def main():
    async with SQLiteLog(sys.argv[1]):
        pass

try:
    asyncio.run(main())
except Exception as exc:
    print(type(exc).__name__)
"""


def open_elsewhere(db: Path) -> str:
    result = subprocess.run([sys.executable, "-c", OPENER, str(db)], capture_output=True, text=True, timeout=60)
    return result.stdout.strip() + result.stderr


async def test_stores_of_one_process_share_the_lock(tmp_path: Path) -> None:
    db = tmp_path / "baf.db"
    first, second = SQLiteLog(db), SQLiteLog(db)
    await first.start()
    await second.start()  # one process, one runtime per log: not refused
    await first.close()
    await second.append([Record(session_id="s", seq=1, kind="session_started", data=STARTED)])
    # ...and the lock is still the process's after the first store closed
    assert await asyncio.to_thread(open_elsewhere, db) == "LogInUseError"
    await second.close()
    assert await asyncio.to_thread(open_elsewhere, db) == ""
    assert not (tmp_path / "baf.db.writer-lock").exists()  # removed by the last holder
