"""``baf serve`` and the reading commands on a PostgreSQL log."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from baf_test_helpers import baf

from baf.library.demo import OFFLINE_BANNER
from baf.log.postgres import PostgresLog
from baf.log.postgres_inbox import Inbox

from .helpers import (
    FIXTURE,
    assert_each_question_answered_once,
    free_port,
    message,
    ready_worker_pids,
    stop_processes,
    wait_for_answers,
)


def start_serve(dsn: str, own_group: bool = False, **env: str) -> subprocess.Popen[str]:
    """``baf serve`` of the fixture agent, two workers; ``own_group``: as the leader of a process group of its
    own, as a terminal starts it (its workers join the group)."""
    return subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "serve", str(FIXTURE), "--log", dsn, "--workers", "2",
         "--lease-ttl", "2", "--poll-interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=own_group,
        env={**os.environ, "BAF_SERVE_DELAY": "0.01", **env},
    )  # fmt: skip


@pytest.mark.slow
async def test_baf_serve_runs_workers_that_answer_and_stop_on_sigterm(postgres_dsn: str, tmp_path: Path) -> None:
    serve = start_serve(postgres_dsn)
    try:
        assert serve.stdout is not None
        await ready_worker_pids(serve)
        expected = {f"c{i}": [f"c{i}-hello"] for i in range(6)}
        async with PostgresLog(postgres_dsn, worker_id="forwarder") as log:  # a worker elsewhere, forwarding
            for session_id, (question,) in expected.items():
                await Inbox(log).post(session_id, message(session_id, question))
        records = await wait_for_answers(postgres_dsn, expected, within=30)
        assert_each_question_answered_once(records, expected)
    finally:
        serve.send_signal(signal.SIGTERM)  # as the last steps end: sessions are being given up as it comes
        code = await asyncio.to_thread(serve.wait, 30)
        serve.stdout.close()  # type: ignore[union-attr]
        said = serve.stderr.read()  # type: ignore[union-attr]
        serve.stderr.close()  # type: ignore[union-attr]
    assert code == 0
    assert "failed" not in said and "Traceback" not in said, said  # a clean stop says nothing alarming
    assert said.count("has no platform") == 1, said  # the fixture has none: said by the first worker only
    # Stopped cleanly: every lease given up, so other workers could take the sessions at once.
    connection = await asyncpg.connect(postgres_dsn)
    try:
        assert await connection.fetch("SELECT session_id FROM baf_leases WHERE expires_at >= now()") == []
        assert await connection.fetch("SELECT worker_id FROM baf_workers") == []
    finally:
        await connection.close()
    sessions = baf("sessions", postgres_dsn, cwd=tmp_path)
    assert sessions.returncode == 0, sessions.stderr
    assert all(session_id in sessions.stdout for session_id in expected)
    shown = baf("log", postgres_dsn, "c0", cwd=tmp_path)
    assert shown.returncode == 0 and "answer to c0-hello" in shown.stdout
    replayed = baf("replay", postgres_dsn, "c0", cwd=tmp_path)
    assert replayed.returncode == 0 and "c0-hello" in replayed.stdout


@pytest.mark.slow
async def test_closing_the_terminal_stops_baf_serve_and_its_workers_cleanly(postgres_dsn: str) -> None:
    """SIGHUP reaches the terminal's whole process group, workers included: each stops as on SIGTERM."""
    serve = start_serve(postgres_dsn, own_group=True)
    try:
        await ready_worker_pids(serve)
        async with PostgresLog(postgres_dsn, worker_id="forwarder") as log:
            await Inbox(log).post("hup", message("hup", "hup-hello"))
        await wait_for_answers(postgres_dsn, {"hup": ["hup-hello"]}, within=30)
        os.killpg(serve.pid, signal.SIGHUP)  # the terminal closed
        code = await asyncio.to_thread(serve.wait, 30)
    finally:
        if serve.poll() is None:
            serve.kill()
        said = serve.stderr.read()  # type: ignore[union-attr]
        serve.stdout.close()  # type: ignore[union-attr]
        serve.stderr.close()  # type: ignore[union-attr]
    assert code == 0, said
    assert "stopping 2 workers after their running steps" in said and "Traceback" not in said, said
    assert said.rstrip().endswith("baf serve: stopped; all 2 workers ended cleanly"), said
    connection = await asyncpg.connect(postgres_dsn)
    try:  # stopped cleanly: leases given up, workers' rows removed
        assert await connection.fetch("SELECT session_id FROM baf_leases WHERE expires_at >= now()") == []
        assert await connection.fetch("SELECT worker_id FROM baf_workers") == []
    finally:
        await connection.close()


def test_baf_serve_refuses_a_sqlite_log(tmp_path: Path) -> None:
    result = baf("serve", str(FIXTURE), "--log", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert result.returncode == 2
    assert "PostgreSQL log" in result.stderr and "baf run" in result.stderr


def test_a_worker_that_cannot_start_says_why_in_one_line_and_no_other_starts(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("x = 1\n")  # no Agent: refused before any database is reached
    result = baf("serve", "empty.py", "--log", "postgresql://baf@127.0.0.1:9/none", "--workers", "3", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "baf serve: worker" in lines[0] and "must define one Agent" in lines[0], lines


def test_an_unreachable_database_is_said_once_not_by_each_worker(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(
        'from baf import Agent\n\nagent = Agent("a", log="memory://")\nagent.new_state("idle", initial=True)\n'
    )
    port = free_port()  # nothing listens there
    result = baf("serve", "agent.py", "--log", f"postgresql://baf@127.0.0.1:{port}/none", "--workers", "3",
                 cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    said = result.stderr
    assert said.count("cannot open the PostgreSQL log") == 1, said
    assert "is the PostgreSQL server running" in said, said
    assert said.count("has no platform") == 1, said  # the warning every worker would give: once too


def test_a_worker_whose_agent_file_raises_shows_the_users_traceback_only(tmp_path: Path) -> None:
    (tmp_path / "buggy.py").write_text("from baf import Agent\n\nraise RuntimeError('boom at import')\n")
    result = baf("serve", "buggy.py", "--log", "postgresql://baf@127.0.0.1:9/none", "--workers", "2", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    said = result.stderr
    assert said.count("stopped: the agent file failed to load:\nTraceback (most recent call last):\n") == 1, said
    assert said.count('buggy.py", line 3, in <module>') == 1 and said.count("RuntimeError: boom at import") == 1
    assert "baf/serve/process.py" not in said and "asyncio" not in said and "<frozen" not in said, said


SPAWNING_AGENT = """
import subprocess, sys
from pathlib import Path
from baf import Agent

# A helper process the agent starts as it loads, keeping every descriptor it may inherit (but the output
# pipes of the test, which waits for them to close).
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], close_fds=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
Path("helper.pid").write_text(str(helper.pid))
agent = Agent("a", log="memory://")
agent.new_state("idle", initial=True)
"""


def test_a_process_the_agent_file_starts_does_not_keep_baf_serve_waiting(tmp_path: Path) -> None:
    # The first worker fails (no database there); the helper it started lives on. Had it inherited the pipe
    # the first worker says it is ready on, baf serve would wait for the helper's end to know.
    (tmp_path / "spawner.py").write_text(SPAWNING_AGENT)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "baf.cli", "serve", "spawner.py", "--log",
             f"postgresql://baf@127.0.0.1:{free_port()}/none", "--workers", "2"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            os.kill(int((tmp_path / "helper.pid").read_text()), signal.SIGKILL)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("cannot open the PostgreSQL log") == 1, result.stderr


@pytest.mark.slow
async def test_a_ready_pipe_named_in_baf_serves_environment_does_not_reach_its_workers(postgres_dsn: str) -> None:
    # Only the first worker is given a pipe to say it is ready on; a variable of that name coming from
    # elsewhere would have the others write to and close a descriptor of their own.
    serve = start_serve(postgres_dsn, BAF_SERVE_READY_FD="3")
    assert serve.stdout is not None and serve.stderr is not None
    try:
        await ready_worker_pids(serve)
        await asyncio.sleep(0.5)
        assert serve.poll() is None
    finally:
        serve.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(serve.wait, 30)
        said = serve.stderr.read()
        serve.stdout.close()
        serve.stderr.close()
    assert code == 0 and "Traceback" not in said and "Bad file descriptor" not in said, said


def start_serve_with_stdin_and_stdout_closed(dsn: str) -> subprocess.Popen[str]:
    # A lease_ttl of 3 s: each worker heartbeats every second once it serves (see the test below).
    command = shlex.join([sys.executable, "-m", "baf.cli", "serve", str(FIXTURE), "--log", dsn,
                          "--workers", "2", "--poll-interval", "1", "--lease-ttl", "3"])  # fmt: skip
    return subprocess.Popen(["bash", "-c", f"exec {command} <&- >&-"], stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
async def test_baf_serve_started_with_stdin_and_stdout_closed_starts_every_worker(postgres_dsn: str) -> None:
    # A daemon's stdout may be closed: the pipe the first worker says it is ready on must not land on
    # descriptor 1 (then its READY line would go there), and nobody may write to a stdout that is None.
    serve = start_serve_with_stdin_and_stdout_closed(postgres_dsn)
    # Serving, not only registered: a worker registers before its start is over, and one that SIGTERM
    # reaches then ends with 143 (its start cancelled), as documented. Its heartbeats begin once it serves,
    # and with no READY line to read (stdout is closed) the first one is what says so.
    serving = "SELECT count(*) FROM baf_workers WHERE heartbeat_at > started_at"
    connection = await asyncpg.connect(postgres_dsn)
    try:
        for _ in range(300):
            with contextlib.suppress(asyncpg.UndefinedTableError):
                if await connection.fetchval(serving) == 2:
                    break
            await asyncio.sleep(0.1)
        assert await connection.fetchval(serving) == 2
    finally:
        await connection.close()
        serve.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(serve.wait, 30)
        said = serve.stderr.read()  # type: ignore[union-attr]
        serve.stderr.close()  # type: ignore[union-attr]
    assert code == 0 and "Traceback" not in said, said


def start_worker(path: str, dsn: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "baf.serve.process", "worker", path, "--log", dsn],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


SLOW_AGENT = """
import sys, time
from baf import Agent

print("loading", flush=True)
time.sleep(60)  # a slow import, a model loaded at start ...
agent = Agent("slow", log="memory://")
"""


@pytest.mark.slow
def test_ctrl_c_while_a_worker_loads_ends_it_at_once_and_quietly(tmp_path: Path) -> None:
    # Ctrl-C reaches every worker of the terminal, some still loading: nothing is started there yet, so
    # each ends at once, with the status of a command Ctrl-C ended, and without a KeyboardInterrupt traceback.
    (tmp_path / "slow.py").write_text(SLOW_AGENT)
    worker = subprocess.Popen(
        [sys.executable, "-m", "baf.serve.process", "worker", "slow.py", "--log", "postgresql://baf@127.0.0.1:9/none"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "loading\n"
        worker.send_signal(signal.SIGINT)
        code = worker.wait(20)  # well before the agent file would have finished loading
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    said = worker.stderr.read()  # type: ignore[union-attr]
    worker.stdout.close()
    worker.stderr.close()  # type: ignore[union-attr]
    assert code == 130 and "Traceback" not in said, said


SIGNAL_DURING_START = """
import os, signal, subprocess, sys
from baf.serve import process

real = subprocess.Popen

def popen(*args, **kwargs):
    child = real(*args, **kwargs)
    if not getattr(popen, "signalled", False):
        popen.signalled = True
        os.kill(os.getpid(), signal.SIGTERM)  # handled now, before serve knows this child
    return child

process.subprocess.Popen = popen
sys.exit(process.serve(sys.argv[1], sys.argv[2], 2, 2.0, 1.0))
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_while_the_first_worker_starts_stops_it_and_starts_no_other(
    postgres_dsn: str, tmp_path: Path, signum: signal.Signals
) -> None:
    (tmp_path / "signal_during_start.py").write_text(SIGNAL_DURING_START.replace("signal.SIGTERM", str(int(signum))))
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, "signal_during_start.py", str(FIXTURE), postgres_dsn], cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    # The worker got the signal: stopped before it served (reported as a shell does: 128 + the signal) or
    # after (cleanly, 0); never 2, the status of a worker that could not start.
    assert result.returncode in (0, 128 + signum), result.stderr
    assert result.stdout.count("READY") <= 1, result.stdout
    assert "Traceback" not in result.stderr, result.stderr


@pytest.mark.slow
async def test_ctrl_c_while_a_worker_connects_ends_it_at_once(tmp_path: Path) -> None:
    # A database that takes the connection and never answers: the worker waits in its start, which the
    # first Ctrl-C must end (it holds nothing yet), not let run to its connect timeout.
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    worker = start_worker(str(FIXTURE), f"postgresql://baf@127.0.0.1:{port}/none", tmp_path)
    try:
        silent.settimeout(60)
        connection, _ = await asyncio.to_thread(silent.accept)  # the worker is connecting
        worker.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(worker.wait, 5)  # its connect timeout is longer
    finally:
        silent.close()
        if worker.poll() is None:
            worker.kill()
            await asyncio.to_thread(worker.wait)
    said = worker.stderr.read()  # type: ignore[union-attr]
    worker.stderr.close()  # type: ignore[union-attr]
    connection.close()
    assert code == 130 and "Traceback" not in said, said


def test_a_missing_postgres_extra_is_said_once_not_by_each_worker(tmp_path: Path) -> None:
    # An environment without asyncpg (a module that fails to import shadows the installed one), which the
    # workers would inherit.
    (tmp_path / "hidden" / "asyncpg").mkdir(parents=True)
    (tmp_path / "hidden" / "asyncpg" / "__init__.py").write_text("raise ImportError('no asyncpg here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "hidden")}
    result = subprocess.run(
        [sys.executable, "-m", "baf.cli", "serve", str(FIXTURE), "--log", "postgresql://baf@127.0.0.1:9/none",
         "--workers", "3"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("needs the 'postgres' extra, which is not installed") == 1, result.stderr
    assert "worker" not in result.stderr and "Traceback" not in result.stderr, result.stderr


TERMINAL_AGENT = """
from baf import Agent

agent = Agent("chat", log="memory://")
agent.new_state("idle", initial=True)
agent.use_terminal_platform()
"""


def test_an_agent_on_the_terminal_is_refused_before_any_database_is_reached(tmp_path: Path) -> None:
    # Two workers on one terminal would both read it and chat on one session only one of them runs.
    (tmp_path / "chat.py").write_text(TERMINAL_AGENT)
    result = baf("serve", "chat.py", "--log", "postgresql://baf@127.0.0.1:9/none", "--workers", "2", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()  # said by the first worker; no other was started
    assert "terminal platform cannot be shared by worker processes" in line, line
    assert "use_websocket_platform" in line and "baf run" in line, line


def start_one_worker(path: str, dsn: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "serve", path, "--log", dsn, "--workers", "1"],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
async def test_a_worker_of_an_agent_without_a_platform_says_no_client_can_reach_it(
    postgres_dsn: str, tmp_path: Path
) -> None:
    # A YAML agent without platforms: baf run would add the terminal; baf serve adds nothing.
    (tmp_path / "quiet.yaml").write_text("name: quiet\nstates:\n  - name: idle\n    initial: true\n")
    serve = start_one_worker("quiet.yaml", postgres_dsn, tmp_path)
    try:
        assert serve.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(serve.stderr.readline), 30)
        assert line.startswith("agent 'quiet' has no platform, so no client can reach this worker"), line
        assert "agent.use_websocket_platform(port=8765)" in line and "platforms:" in line
    finally:
        serve.send_signal(signal.SIGTERM)
        await asyncio.to_thread(serve.wait, 30)
        serve.stdout.close()  # type: ignore[union-attr]
        serve.stderr.close()  # type: ignore[union-attr]


def test_a_killed_worker_is_reported_with_who_takes_its_sessions_over() -> None:
    from baf.serve.process import _death_notice

    assert _death_notice(41, 9, 1, 10.0) == (
        "baf serve: worker 41 was killed by signal 9; 1 still running: it takes its sessions over once its "
        "leases expire, 10 s after its last heartbeat\n"
    )
    assert "2 still running: they take its sessions over" in _death_notice(41, 9, 2, 10.0)
    assert "none still running: a worker started on this database takes" in _death_notice(41, 9, 0, 2.5)
    assert "2.5 s after its last heartbeat" in _death_notice(41, 9, 0, 2.5)


WEB_AGENT = """
from baf import Agent

agent = Agent("web", log="memory://")
state = agent.new_state("idle", initial=True)
agent.use_websocket_platform(host="127.0.0.1", port=0)
"""


def start_web_serve(dsn: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "serve", "web_agent.py", "--log", dsn, "--workers", "1"],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
async def test_each_worker_says_where_its_platforms_listen(postgres_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "web_agent.py").write_text(WEB_AGENT)
    serve = start_web_serve(postgres_dsn, tmp_path)
    try:
        assert serve.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(serve.stderr.readline), 30)
        assert "websocket platform listening on ws://127.0.0.1:" in line and "browser UI: http://" in line, line
    finally:
        serve.send_signal(signal.SIGTERM)
        await asyncio.to_thread(serve.wait, 30)
        serve.stdout.close()  # type: ignore[union-attr]
        serve.stderr.close()  # type: ignore[union-attr]


@pytest.mark.slow
async def test_a_worker_killed_under_baf_serve_is_reported_at_once(postgres_dsn: str) -> None:
    serve = start_serve(postgres_dsn)
    assert serve.stdout is not None and serve.stderr is not None
    try:
        victim = (await ready_worker_pids(serve))[0]
        os.kill(victim, signal.SIGKILL)
        while True:  # the other worker's log lines may come first
            line = await asyncio.wait_for(asyncio.to_thread(serve.stderr.readline), 10)
            if "baf serve:" in line:
                break
        assert f"worker {victim} was killed by signal 9; 1 still running: it takes its sessions over" in line
    finally:
        serve.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(serve.wait, 30)
        serve.stdout.close()
        serve.stderr.close()
    assert code == 128 + 9  # the worst of the workers' statuses, the killed one's, as a shell reports it


@pytest.mark.slow
async def test_a_worker_stopped_under_baf_serve_is_reported_and_so_is_its_return(postgres_dsn: str) -> None:
    serve = start_serve(postgres_dsn)
    assert serve.stdout is not None and serve.stderr is not None
    try:
        paused = (await ready_worker_pids(serve))[0]
        os.kill(paused, signal.SIGSTOP)
        line = await said_by_serve(serve)
        assert line.startswith(f"baf serve: worker {paused} is stopped (SIGSTOP, or a debugger): the kernel still")
        assert f"which wait until it runs again (kill -CONT {paused}) or is killed" in line
        os.kill(paused, signal.SIGCONT)
        assert await said_by_serve(serve) == f"baf serve: worker {paused} runs again\n"
    finally:
        serve.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(serve.wait, 30)
        serve.stdout.close()
        serve.stderr.close()
    assert code == 0


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the kernel tells a child of its parent's death on Linux"
)
async def test_the_workers_of_a_baf_serve_killed_with_sigkill_stop_cleanly(postgres_dsn: str) -> None:
    # A baf serve that dies without passing a signal on (kill -9, the OOM killer) must not leave its workers
    # serving on: they would hold their sessions, and share the port with the next baf serve, unseen.
    serve = start_serve(postgres_dsn)
    assert serve.stdout is not None and serve.stderr is not None
    connection = await asyncpg.connect(postgres_dsn)
    pids: list[int] = []
    try:
        pids = await ready_worker_pids(serve)
        serve.kill()
        await asyncio.to_thread(serve.wait, 30)
        # Stopped as by baf serve's SIGTERM: a worker's row goes once it gave its leases up (a dead one's stays).
        for _ in range(300):
            if await connection.fetchval("SELECT count(*) FROM baf_workers") == 0 and not any(map(alive, pids)):
                break
            await asyncio.sleep(0.1)
        assert await connection.fetchval("SELECT count(*) FROM baf_workers") == 0
        assert not any(map(alive, pids))
    finally:
        await connection.close()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        serve.stdout.close()
        serve.stderr.close()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (one that ended but was not reaped yet, a zombie, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except FileNotFoundError:
        return False


async def said_by_serve(serve: subprocess.Popen[str]) -> str:
    """The next line ``baf serve`` itself writes on stderr (the workers' log lines may come first)."""
    assert serve.stderr is not None
    while True:
        line = await asyncio.wait_for(asyncio.to_thread(serve.stderr.readline), 30)
        assert line, "stderr ended"
        if line.startswith("baf serve:"):
            return line


WEBSOCKET_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "websocket_agent.py"


def start_example_serve(dsn: str, cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # the offline model: its banner
    return subprocess.Popen(
        [sys.executable, "-m", "baf.cli", "serve", str(WEBSOCKET_EXAMPLE), "--log", dsn, "--workers", "2"],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**env, "PORT": str(free_port())},
    )  # fmt: skip


@pytest.mark.slow
async def test_what_the_agent_file_prints_as_it_loads_shows_once_not_once_per_worker(
    postgres_dsn: str, tmp_path: Path
) -> None:
    serve = start_example_serve(postgres_dsn, tmp_path)
    assert serve.stdout is not None
    lines: list[str] = []
    try:
        while sum(line.startswith("READY ") for line in lines) < 2:  # each worker printed what it would by now
            lines.append(await asyncio.wait_for(asyncio.to_thread(serve.stdout.readline), 30))
    finally:
        await stop_processes([serve])
    assert sum(OFFLINE_BANNER in line for line in lines) == 1, lines
    assert sum("baf reasoning demo" in line for line in lines) == 1, lines  # the intro's panel, once
