"""A database password in the log URL stays out of what baf shows: the reading commands' output and
errors, and the command lines of ``baf serve``'s workers (which any user of the host can read with ps)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from baf_test_helpers import baf

from baf.log import Record
from baf.log.postgres import PostgresLog, redact_dsn

from .helpers import FIXTURE, ready_worker_pids

SECRET = "hunter2-do-not-show"


def with_password(dsn: str) -> str:
    """``dsn`` with a password (the test server trusts local connections and ignores it)."""
    return dsn.replace("postgres@", f"postgres:{SECRET}@", 1)


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:pw@h1:5432,h2:5433/db", "postgresql://u:***@h1:5432,h2:5433/db"),  # several hosts
        ("postgresql://u:pw@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
        ("postgresql://u@h/db?sslmode=require&password=pw", "postgresql://u@h/db?sslmode=require&password=***"),
        ("postgresql://u@h?sslpassword=pw#x", "postgresql://u@h?sslpassword=***#x"),
        ("postgresql://u:pw@h?password=pw", "postgresql://u:***@h?password=***"),
    ],
)
def test_redact_dsn_hides_every_password_and_keeps_the_rest(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown


async def test_the_reading_commands_do_not_print_the_password(postgres_dsn: str, tmp_path: Path) -> None:
    async with PostgresLog(postgres_dsn) as log:
        await log.append([Record("s", 1, "note", {"text": "hi"}, 1.5, 1)])
    url = with_password(postgres_dsn)
    for command in (["sessions", url], ["log", url], ["log", url, "missing"], ["check", url], ["replay", url]):
        result = baf(*command, cwd=tmp_path)
        output = result.stdout + result.stderr
        assert "postgres:***@" in output, (command, output)
        assert SECRET not in output, command
    mistyped = baf("sessions", url.replace("postgresql://", "postgresq://"), cwd=tmp_path)
    assert "unsupported log URL" in mistyped.stderr and SECRET not in mistyped.stderr


def start_serve(dsn: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "serve", str(FIXTURE), "--log", dsn, "--workers", "2",
         "--poll-interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
async def test_baf_serve_workers_do_not_carry_the_password_on_their_command_lines(postgres_dsn: str) -> None:
    serve = start_serve(with_password(postgres_dsn))
    assert serve.stdout is not None and serve.stderr is not None
    try:
        for pid in await ready_worker_pids(serve):
            command_line = await asyncio.to_thread(Path(f"/proc/{pid}/cmdline").read_text)
            assert "baf.serve.process" in command_line and SECRET not in command_line
    finally:
        serve.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(serve.wait, 30)
        output = serve.stdout.read() + serve.stderr.read()
        serve.stdout.close()
        serve.stderr.close()
    assert code == 0, output
    assert SECRET not in output
