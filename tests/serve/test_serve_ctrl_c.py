"""Ctrl-C on ``baf serve`` while a step runs: the first lets the workers finish their steps (and says how
to stop now), the second kills them at once and says so. Real worker processes, real signals."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from baf.log.postgres import PostgresLog
from baf.log.postgres_inbox import Inbox

from .helpers import eventually, message, ready_worker_pids

pytestmark = pytest.mark.slow

# A body that says it started (a file: the test waits for it), then runs far longer than the stop's grace.
SLOW_AGENT = """
import asyncio, os, pathlib
from baf import Agent

agent = Agent("slow", log="memory://")
idle = agent.new_state("idle", initial=True)

async def slow(session):
    if session.event is not None:
        pathlib.Path(os.environ["BODY_STARTED"]).touch()
        await asyncio.sleep(600)

idle.set_body(slow)
idle.when_event().go_to(idle)
"""


def start_serve(dsn: str, cwd: Path, started: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "serve", "slow.py", "--log", dsn, "--workers", "2"],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "BODY_STARTED": str(started)},
    )  # fmt: skip


async def test_a_second_ctrl_c_kills_the_workers_at_once_and_says_so(postgres_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW_AGENT)
    started = tmp_path / "body-started"
    serve = start_serve(postgres_dsn, tmp_path, started)
    assert serve.stdout is not None and serve.stderr is not None
    try:
        workers = await ready_worker_pids(serve)
        async with PostgresLog(postgres_dsn, worker_id="forwarder") as log:  # a worker elsewhere, forwarding
            await Inbox(log).post("s", message("s", "take your time"))
        await eventually(started.exists, "a worker started the slow step")
        serve.send_signal(signal.SIGINT)
        first = await _said(serve, "baf serve:")
        assert first == (
            "baf serve: stopping 2 workers after their running steps (up to 10 s); press Ctrl-C again to stop them now"
        )
        serve.send_signal(signal.SIGINT)
        second = await _said(serve, "baf serve:")
        # The worker running the step, at least: the other one may have stopped already, having none.
        one = (
            "killed 1 worker without waiting for its running steps; a worker started on this database takes the "
            "killed worker's sessions over once its leases expire, 10 s after its last heartbeat"
        )
        two = (
            "killed 2 workers without waiting for their running steps; a worker started on this database takes "
            "their sessions over once their leases expire, 10 s after their last heartbeat"
        )
        assert second.startswith("baf serve: a second Ctrl-C: ") and (one in second or two in second), second
        code = await asyncio.to_thread(serve.wait, 30)
        rest = serve.stderr.read()
    finally:
        if serve.poll() is None:
            serve.kill()
            await asyncio.to_thread(serve.wait, 30)
        serve.stdout.close()
        serve.stderr.close()
    assert code == 130, rest  # ended by Ctrl-C, as a shell reports it
    assert "was killed by signal" not in rest  # said once, above: not reported as a surprise death
    for pid in workers:
        with pytest.raises(ProcessLookupError):  # killed, and reaped by baf serve
            os.kill(pid, 0)


async def _said(process: subprocess.Popen[str], prefix: str) -> str:
    """The next line of ``process``'s stderr that starts with ``prefix`` (the workers' log lines may come first)."""
    assert process.stderr is not None
    while True:
        line = await asyncio.wait_for(asyncio.to_thread(process.stderr.readline), 30)
        assert line, "stderr ended"
        if line.startswith(prefix):
            return line.rstrip("\n")


def test_one_worker_is_spoken_of_in_the_singular(capfd: pytest.CaptureFixture[str]) -> None:
    from baf.serve.process import _Stopping

    # A worker that lets its running step finish on the first Ctrl-C (here: ignores it), so the second kills it.
    ignoring = (
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", ignoring], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        stopping = _Stopping([child], 10.0)  # type: ignore[list-item]
        stopping.on_signal(signal.SIGINT, None)
        stopping.on_signal(signal.SIGINT, None)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    said = capfd.readouterr().err.splitlines()
    assert said == [
        "baf serve: stopping 1 worker after its running steps (up to 10 s); press Ctrl-C again to stop it now",
        "baf serve: a second Ctrl-C: killed 1 worker without waiting for its running steps; a worker started on "
        "this database takes the killed worker's sessions over once its leases expire, 10 s after its last "
        "heartbeat, and resumes those steps from the log",
    ]


def _children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            return listing.read().split()
    except OSError:  # gone already
        return []


@pytest.mark.parametrize("after", [0.0, 0.01, 0.03, 0.06, 0.1])
def test_ctrl_c_while_a_worker_starts_stops_quietly(postgres_dsn: str, tmp_path: Path, after: float) -> None:
    """The terminal signals the whole process group: a worker still starting its interpreter and importing
    gets the Ctrl-C too, and must stop without a KeyboardInterrupt traceback, whenever it comes."""
    (tmp_path / "agent.py").write_text(
        "from baf import Agent\nagent = Agent('quiet', log='memory://')\nagent.new_state('idle', initial=True)\n"
    )
    serve = subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "serve", "agent.py", "--log", postgres_dsn, "--workers", "2"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        while not _children(serve.pid) and serve.poll() is None:  # the first worker is being started
            time.sleep(0.001)
        time.sleep(after)  # somewhere in its start-up
        os.killpg(serve.pid, signal.SIGINT)  # as Ctrl-C in a terminal: every process of the group
        _, errors = serve.communicate(timeout=60)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.communicate(timeout=30)
    assert "Traceback" not in errors and "KeyboardInterrupt" not in errors, errors
    assert serve.returncode == 130, errors
