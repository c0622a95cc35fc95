"""``baf serve``: N worker processes for the agent in a Python file, over one PostgreSQL log.

The parent starts each worker as ``python -m baf.serve.process worker ...`` and forwards SIGINT/SIGTERM to
them; each worker runs :class:`~baf.serve.worker.Worker` until it is told to stop, then stops cleanly
(steps finish, leases are given up). A second signal kills them at once. ``baf serve`` on several hosts
against one database needs nothing more: the workers find each other through the database.

The first worker starts alone, and the others once it is ready: what would stop every worker (the agent
file, the database) is then said once, by the first, and no other is started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from baf.serve.parent_death import stop_when_parent_dies
from baf.wording import agreeing, counted

if TYPE_CHECKING:
    from baf.serve.worker import Worker

__all__ = ["INDEX_VARIABLE", "LOG_VARIABLE", "READY_FD_VARIABLE", "check_connections", "main", "serve"]

#: The environment variable a worker process reads its log URL from (``baf serve`` sets it).
LOG_VARIABLE = "BAF_SERVE_LOG"
#: The environment variable that names the pipe the first worker says it is ready on (see :func:`serve`).
READY_FD_VARIABLE = "BAF_SERVE_READY_FD"
#: The environment variable that numbers ``baf serve``'s workers from 0: only worker 0 shows what the agent
#: file prints as it loads (a banner, say), so it shows once, not once per worker.
INDEX_VARIABLE = "BAF_SERVE_WORKER_INDEX"


def serve(
    path: str, dsn: str, workers: int, lease_ttl: float, poll_interval: float, keepalive: float | None = 30.0
) -> int:
    """Run ``workers`` worker processes until they end or a signal stops them; their worst exit status.
    ``keepalive``: see ``Worker`` (``None``: the operating system's settings).

    The database is asked first: more workers than its ``max_connections`` can ever serve are refused
    (a mistyped ``--workers 2000`` would otherwise start that many processes, nearly all failing). The
    first worker then starts alone, and the others once it serves: what would stop them all (an agent file
    that fails to load, a database out of reach) is said once, by the first."""
    try:
        asyncio.run(check_connections(dsn, workers))
    except KeyboardInterrupt:  # Ctrl-C while the database was asked: nothing was started
        return 128 + signal.SIGINT
    command = [sys.executable, "-m", "baf.serve.process", "worker", path,
               "--lease-ttl", str(lease_ttl), "--poll-interval", str(poll_interval),
               "--keepalive", str(keepalive or 0)]  # fmt: skip
    # The URL goes to the workers in their environment, not on their command lines: any user of the host
    # can read a process's arguments (ps), and the URL may hold the database password.
    environment = {**os.environ, LOG_VARIABLE: dsn}
    environment.pop(READY_FD_VARIABLE, None)  # set for a first worker only, by us
    stopping = _Stopping([], lease_ttl)
    previous = {s: signal.signal(s, stopping.on_signal) for s in _STOP_SIGNALS}
    try:
        if _started_first(command, environment, stopping):
            stopping.adopt([_start_worker(command, env={**environment, INDEX_VARIABLE: str(i)})
                            for i in range(1, workers)])  # fmt: skip
        codes = _wait_reporting_deaths(stopping.children, lease_ttl, stopping)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if stopping.killed:
        return 128 + stopping.signals[-1]  # as a shell reports a command a signal ended (130: Ctrl-C)
    if stopping.signals and codes and not any(codes):
        # The stop asked for is over: say so, or the last line would still be "stopping ...".
        _say(f"baf serve: stopped; {agreeing(len(codes), 'the worker', f'all {len(codes)} workers')} ended cleanly\n")
    # A worker a signal ended (a negative code) counts as a shell reports it: 128 + the signal (130: Ctrl-C).
    return max((128 - code if code < 0 else code for code in codes), default=0)


def _started_first(command: list[str], environment: dict[str, str], stopping: _Stopping) -> bool:
    """Start the first worker and wait until it is ready (True), or has stopped or a signal came (False).

    It says it is ready by writing to a pipe of its own (``READY_FD_VARIABLE``) once it serves; one that
    stops first has written nothing. Its stdout stays ``baf serve``'s, as the others' do."""
    read_end, write_end = _pipe()
    try:
        environment = {**environment, INDEX_VARIABLE: "0", READY_FD_VARIABLE: str(write_end)}
        first = _start_worker(command, env=environment, pass_fds=(write_end,))
        stopping.adopt([first])
        os.close(write_end)
        write_end = -1
        while not stopping.signals:
            # Once it ended, one last look (it may have said so just before) rather than a wait for the
            # pipe's end: a process it started may hold that open.
            ended = first.poll() is not None
            if select.select([read_end], [], [], 0 if ended else 0.1)[0]:
                return os.read(read_end, 1) == b"1" and not stopping.signals
            if ended:
                return False
        return False
    finally:
        os.close(read_end)
        if write_end >= 0:  # the worker did not start
            os.close(write_end)


#: What stops ``baf serve`` and its workers: Ctrl-C, SIGTERM, and SIGHUP (the terminal closed: sent to the
#: whole process group, workers included, whose default would end them without giving their leases up).
#: Blocked in a worker from its start until its ``main`` has a handler for them.
_STOP_SIGNALS: Final = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def _start_worker(command: list[str], **options: Any) -> subprocess.Popen[bytes]:
    """Start a worker process with SIGINT and SIGTERM blocked (a process inherits the signal mask): one
    that comes while its interpreter starts and imports stays pending until ``main`` handles it, where it
    would otherwise be delivered then, and a Ctrl-C in a worker's first milliseconds would print a
    ``KeyboardInterrupt`` traceback from inside Python's own start-up. A worker is sent SIGTERM if
    ``baf serve`` dies (on Linux, see :mod:`baf.serve.parent_death`): it does not go on serving alone."""
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        return subprocess.Popen(command, preexec_fn=stop_when_parent_dies(), **options)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


def _pipe() -> tuple[int, int]:
    """A pipe (read end, write end) on descriptors above stderr, closed on exec: with stdin or stdout closed,
    ``os.pipe`` would hand out 0 or 1, and the first worker would take the pipe for its stdout."""
    import fcntl

    ends = os.pipe()
    try:
        moved = [fcntl.fcntl(end, fcntl.F_DUPFD_CLOEXEC, 3) for end in ends]
    finally:
        for end in ends:
            os.close(end)
    return moved[0], moved[1]


class _Stopping:
    """What Ctrl-C and SIGTERM do to ``baf serve``: the first is passed on to the workers, which stop after
    their running steps (up to ``STOP_GRACE_PERIOD`` seconds), the next kills them at once, as a user
    pressing Ctrl-C again expects of a server. (The worker processes cannot tell a second press from the
    first one reaching them twice: from the terminal, which signals the whole process group, and from here.)"""

    def __init__(self, children: list[subprocess.Popen[bytes]], lease_ttl: float) -> None:
        self.children = children
        self.lease_ttl = lease_ttl
        self.signals: list[int] = []
        #: The pids of the workers killed here (their deaths are not reported as a surprise).
        self.killed: set[int] = set()

    def adopt(self, started: list[subprocess.Popen[bytes]]) -> None:
        """Count ``started`` among the workers, and give them what a signal that came before they existed
        would have given them: the first stops them, a second kills them."""
        self.children.extend(started)
        if self.signals:
            self._pass_on(started)

    def _pass_on(self, children: list[subprocess.Popen[bytes]]) -> None:
        """What the signals so far ask of ``children``: the first is passed on, a second kills them."""
        if len(self.signals) == 1:
            for child in children:
                child.send_signal(self.signals[0])
            return
        for child in children:
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                child.kill()
            self.killed.add(child.pid)

    def on_signal(self, signum: int, _frame: object) -> None:
        from baf.core.runtime import STOP_GRACE_PERIOD

        self.signals.append(signum)
        running = [child for child in self.children if child.poll() is None]
        name = _signal_name(signum)
        said = bool(self.killed)
        self._pass_on(running)
        count = len(running)
        their = agreeing(count, "its", "their")
        if len(self.signals) == 1:
            again = "press Ctrl-C again" if signum == signal.SIGINT else f"send {name} again"
            _say(
                f"baf serve: stopping {counted(count, 'worker')} after {their} running steps (up to "
                f"{STOP_GRACE_PERIOD:g} s); {again} to stop {agreeing(count, 'it', 'them')} now\n"
            )
            return
        if said or not running:  # a third press, or nothing left to stop
            return
        first = _signal_name(self.signals[0])
        how = f"a second {name}" if first == name else f"{name} after {first}"
        whose = agreeing(count, "the killed worker's", "their")
        _say(
            f"baf serve: {how}: killed {counted(count, 'worker')} without waiting for {their} running steps; a "
            f"worker started on this database takes {whose} sessions over once {their} leases expire, "
            f"{self.lease_ttl:g} s after {their} last heartbeat, and resumes those steps from the log\n"
        )


def _signal_name(signum: int) -> str:
    """A signal as the user knows it: Ctrl-C sends SIGINT; SIGTERM comes from kill, systemd, docker ..."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def _say(text: str) -> None:
    """Write ``text`` on stderr from a signal handler: one unbuffered write (the handler may interrupt a
    write of the main thread's to the buffered ``sys.stderr``), nothing if stderr is gone."""
    with contextlib.suppress(OSError, ValueError):
        os.write(sys.stderr.fileno(), text.encode())


async def check_connections(dsn: str, workers: int) -> None:
    """Raise ``ConfigurationError`` if ``workers`` workers would need more connections than the database
    at ``dsn`` lets them open at all: ``max_connections`` less the connections it keeps for superusers and
    for roles granted ``pg_use_reserved_connections`` (PostgreSQL 16 or newer), and the ``CONNECTION
    LIMIT`` of the role and of the database, which bind every role but a superuser. A database that
    cannot be reached is left to the workers, which say so (after what is wrong with the agent file, if
    anything). ``MissingExtraError`` without asyncpg: said here once, not by each worker."""
    from baf.errors import ConfigurationError, MissingExtraError
    from baf.log.postgres import redact_dsn
    from baf.serve.worker import POOL_SIZE, connections_per_worker

    try:
        import asyncpg
    except ImportError as exc:  # as the log says it (baf.log.postgres), before the workers would, each
        raise MissingExtraError("a postgresql:// log (asyncpg)", "postgres") from exc
    try:
        connection = await asyncpg.connect(dsn, timeout=10)
    except Exception:  # anything: the workers connect on their own and report it
        return
    try:
        limits = await connection.fetchrow(_LIMITS)
    finally:
        await connection.close()
    each = connections_per_worker()
    needed = workers * each
    usable, why, remedy = _usable_connections(limits)
    if needed > usable:
        raise ConfigurationError(
            f"{counted(workers, 'worker')} {agreeing(workers, 'needs', 'need')} up to "
            f"{counted(needed, 'database connection')} ({each} each: a reading pool of {POOL_SIZE}, a writer and "
            f"two listeners), and the server at {redact_dsn(dsn)} lets them open {usable:,} ({why}): start at "
            f"most {usable // each:,}, or {remedy}"
        )


# The limits on the connections the role connecting may open, in one row (reserved_connections: PostgreSQL
# 16 or newer; NULL before).
_LIMITS: Final = """
SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int,
    coalesce(current_setting('reserved_connections', true)::int, 0), r.rolsuper, r.rolconnlimit, r.rolname,
    d.datconnlimit, d.datname
FROM pg_roles r, pg_database d WHERE r.rolname = current_user AND d.datname = current_database()
"""


def _usable_connections(limits: Any) -> tuple[int, str, str]:
    """How many connections the role may open, what limits it (said with the numbers) and how to raise it."""
    max_connections, for_superusers, reserved, superuser, role_limit, role, database_limit, database = limits
    # Kept for the administrator's connections even when the role is a superuser: workers that took them
    # would leave nobody a way in to a full server.
    usable = max_connections - for_superusers - reserved
    why = f"max_connections {max_connections:,}, less {for_superusers} kept for superusers"
    why += " by superuser_reserved_connections"
    if reserved:
        why += f" and {reserved} for pg_use_reserved_connections by reserved_connections"
    if superuser:
        why += f"; role {role!r} is a superuser and may use them, but baf serve leaves them for an administrator"
    remedy = "raise max_connections"
    if not superuser:
        if 0 <= database_limit < usable:
            usable = database_limit
            why = f"the CONNECTION LIMIT of database {database!r}"
            remedy = "raise it (ALTER DATABASE ... CONNECTION LIMIT)"
        if 0 <= role_limit < usable:
            usable = role_limit
            why = f"the CONNECTION LIMIT of role {role!r}"
            remedy = "raise it (ALTER ROLE ... CONNECTION LIMIT)"
    return max(usable, 0), why, remedy


def _wait_reporting_deaths(children: list[subprocess.Popen[bytes]], lease_ttl: float, stopping: _Stopping) -> list[int]:
    """Wait for every worker; one killed by a signal (kill -9, the OOM killer) is reported at once, as the
    other workers keep serving and take its sessions over when its leases expire. One ``stopping`` killed
    was reported when it was killed."""
    codes: dict[int, int] = {}
    pauses = _Pauses()
    while len(codes) < len(children):
        for child in children:
            code = child.poll()
            if code is None:
                notice = pauses.check(child.pid)
                if notice is not None:
                    sys.stderr.write(notice)
                    sys.stderr.flush()
                continue
            if child.pid in codes:
                continue
            codes[child.pid] = code
            if code < 0 and -code not in (signal.SIGTERM, signal.SIGINT) and child.pid not in stopping.killed:
                running = sum(1 for other in children if other.poll() is None)
                sys.stderr.write(_death_notice(child.pid, -code, running, lease_ttl))
                sys.stderr.flush()
        time.sleep(0.1)
    return [codes[child.pid] for child in children]


#: How long (seconds) a worker stays stopped before ``baf serve`` says so: Ctrl-Z stops every process of the
#: terminal, ``baf serve`` with them, and ``fg`` continues them all; that is not worth a word.
PAUSE_NOTICE_SECONDS: Final = 1.0


class _Pauses:
    """Says when a worker has been stopped for a while (SIGSTOP, a debugger), and when it runs again. The
    kernel keeps handing a stopped process its share of new connections to the port the workers share, and
    they wait unanswered: nothing else would tell. Linux (``/proc``); elsewhere it says nothing."""

    def __init__(self) -> None:
        self._since: dict[int, float] = {}
        self._said: set[int] = set()

    def check(self, pid: int) -> str | None:
        """What to say of worker ``pid`` now, if anything."""
        if _stopped(pid):
            since = self._since.setdefault(pid, time.monotonic())
            if pid in self._said or time.monotonic() - since < PAUSE_NOTICE_SECONDS:
                return None
            self._said.add(pid)
            return (
                f"baf serve: worker {pid} is stopped (SIGSTOP, or a debugger): the kernel still hands it its share "
                f"of new connections to the agent's port, which wait until it runs again (kill -CONT {pid}) or is "
                "killed\n"
            )
        self._since.pop(pid, None)
        if pid not in self._said:
            return None
        self._said.discard(pid)
        return f"baf serve: worker {pid} runs again\n"


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped: by a signal (state T) or at a debugger's breakpoint (t)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()  # after the name, which may hold anything
    except OSError:  # no /proc (not Linux), or the process is gone
        return False
    return bool(fields) and fields[0] in (b"T", b"t")


def _death_notice(pid: int, signum: int, running: int, lease_ttl: float) -> str:
    """What ``baf serve`` says when worker ``pid`` was killed by ``signum`` and ``running`` workers are left."""
    if running == 0:
        after = "none still running: a worker started on this database takes its sessions over once"
    else:
        after = f"{running} still running: {agreeing(running, 'it takes', 'they take')} its sessions over once"
    expiry = f"its leases expire, {lease_ttl:g} s after its last heartbeat"
    return f"baf serve: worker {pid} was killed by signal {signum}; {after} {expiry}\n"


async def _run_worker(
    path: str, dsn: str, lease_ttl: float, poll_interval: float, keepalive: float | None, ready_pipe: int | None
) -> int:
    """Load the agent and serve it until SIGINT, SIGTERM or SIGHUP; the process's exit status."""
    from baf.cli import load_agent_file  # the loader baf run uses: Python or YAML agents
    from baf.core.agent import _show_baf_log_lines
    from baf.serve.worker import Worker

    # As under agent.run(): without this a worker would not say where its platforms listen (INFO lines).
    _show_baf_log_lines()

    # Every worker loads the same file: what it prints as it loads would show once per worker.
    first = os.environ.get(INDEX_VARIABLE, "0") == "0"
    with contextlib.nullcontext() if first else contextlib.redirect_stdout(io.StringIO()):
        agent = load_agent_file(path)
    if not agent.platforms and first:  # said once, not by every worker
        # Legitimate (workers that only take over sessions and forwarded messages), but a new user serving
        # an agent written for baf run, which adds the terminal, would otherwise wait for nothing.
        logging.getLogger("baf.serve").warning(
            "agent %r has no platform, so no client can reach this worker: it runs only what reaches it through "
            "the database (messages forwarded to it, sessions it takes over); to serve clients, give the agent "
            "one (agent.use_websocket_platform(port=8765), or platforms: in a YAML agent)",
            agent.name,
        )
    worker = Worker(agent, dsn, lease_ttl=lease_ttl, poll_interval=poll_interval, keepalive=keepalive)
    stopping = asyncio.Event()
    asked: list[int] = []

    def ask_to_stop(signum: int) -> None:
        asked.append(signum)
        stopping.set()

    loop = asyncio.get_running_loop()
    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, ask_to_stop, signum)
    if not await _started_unless_stopped(worker, stopping):
        return 128 + asked[0]  # as a shell reports a command the signal ended
    # One write, so that the lines of workers sharing the parent's stdout never interleave (a pipe write
    # under PIPE_BUF is atomic; print writes the text and the newline apart when stdout is unbuffered).
    if sys.stdout is not None:  # None: started with stdout closed
        sys.stdout.write(f"READY {worker.worker_id}\n")
        sys.stdout.flush()
    if ready_pipe is not None:
        _say_ready_to_serve(ready_pipe)
    try:
        await stopping.wait()
    finally:
        await worker.stop()
    return 0


async def _started_unless_stopped(worker: Worker, stopping: asyncio.Event) -> bool:
    """Start ``worker``, or raise what its start raised; False if ``stopping`` came first (a database that
    does not answer, a slow platform): the start is then cancelled, and leaves nothing open behind it."""
    starting = asyncio.ensure_future(worker.start())
    waiting = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((starting, waiting), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if starting.done():
        starting.result()
        return True
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    return False


def _ready_pipe() -> int | None:
    """The pipe ``baf serve`` gave this worker to say it is ready on, if it is the first; taken out of the
    environment and made not inheritable at once, so that no process the agent starts holds it open."""
    value = os.environ.pop(READY_FD_VARIABLE, None)
    if value is None:
        return None
    try:
        fd = int(value)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        os.set_inheritable(fd, False)
    except (OSError, ValueError):  # not a pipe of ours: say nothing on it
        return None
    return fd


def _say_ready_to_serve(fd: int) -> None:
    """Tell ``baf serve`` on the pipe ``fd`` that this worker serves, so that it starts the others."""
    with contextlib.suppress(OSError):  # baf serve is gone: nobody to tell
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)


def _end_at_once(signum: int, _frame: object) -> None:
    """End this process now, with the status a shell gives a command the signal ended (130: Ctrl-C); the
    agent file's own clean-up (``finally``, ``atexit``) still runs."""
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of a worker process (``python -m baf.serve.process worker PATH [--log DSN]``; without
    ``--log``, the URL in ``$BAF_SERVE_LOG``)."""
    # Until the worker serves (its own handlers then stop it cleanly), Ctrl-C ends it at once: nothing is
    # started yet, and a KeyboardInterrupt traceback from each worker still loading would say nothing.
    signal.signal(signal.SIGINT, _end_at_once)
    # baf serve started this process with both blocked (``_start_worker``): one that came meanwhile is
    # delivered now, to the handler above (SIGTERM's default ends the process as quietly).
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    ready_pipe = _ready_pipe()  # before anything can start a process that would inherit it
    parser = argparse.ArgumentParser(prog="baf.serve.process")
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker")
    worker.add_argument("path")
    worker.add_argument(
        "--log", default=os.environ.get(LOG_VARIABLE), help=f"the PostgreSQL log (default: ${LOG_VARIABLE})"
    )
    worker.add_argument("--lease-ttl", type=float, default=10.0)
    worker.add_argument("--poll-interval", type=float, default=2.0)
    worker.add_argument("--keepalive", type=float, default=30.0, help="seconds; 0: the operating system's settings")
    args = parser.parse_args(argv)
    if not args.log:
        parser.error(f"the PostgreSQL log is needed: --log URL, or ${LOG_VARIABLE}")
    from baf.errors import ConfigurationError, LogError

    try:
        try:
            return asyncio.run(_run_worker(args.path, args.log, args.lease_ttl, args.poll_interval,
                                           args.keepalive or None, ready_pipe))  # fmt: skip
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopped: a late Ctrl-C has nothing left to stop
    except (ConfigurationError, LogError) as exc:
        # baf's own errors name the problem and its fix (a port in use, a file without an agent, a
        # database it cannot reach): one line, as `baf run` prints them; a traceback would point into baf.
        # One write, as READY above: with PYTHONUNBUFFERED, print writes the newline apart and two workers'
        # lines could interleave on the shared stderr.
        sys.stderr.write(f"baf serve: worker {os.getpid()} stopped: {exc}\n")
        sys.stderr.flush()
        return 2
    except Exception as exc:
        from baf.cli import from_user_code, user_traceback

        if not from_user_code(exc):
            raise
        # The agent file failed to load (a bug of the user's): its traceback from their code on, as
        # `baf run` shows it, after a line that says which worker stopped; one write, as above.
        sys.stderr.write(
            f"baf serve: worker {os.getpid()} stopped: the agent file failed to load:\n{user_traceback(exc)}"
        )
        sys.stderr.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main())
